"""Bitwise comparison of outputs and traces: emulator against device, or any two runs.

* :func:`diff` compares two arrays of the same float format bit for bit: how many elements
  differ, a histogram of the distance in ulp (units in the last place of the format), and the
  worst elements with their indices, in hex and decimal.
* :func:`first_divergence` walks two :class:`simulator.trace.Trace` s in execution order and
  reports the first step, CTA, warpgroup, thread and register where they part.
* :func:`bits` and :func:`ulp_distance` are the two views both rest on: a float array's bit
  patterns, and the signed distance of two arrays in ulps of their format.

:func:`diff` and :func:`first_divergence` return objects with a readable ``str()`` and a
``to_dict()`` form. Both take the side under test first (usually the emulator) and the side it
is checked against second (the device, the real library, another run); ``labels=`` names the
two in what they print (``("emulator", "reference")`` unless given).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from .hw import accumulator_layout, rowcol_view
from .numerics.bits import is_int, reject_subclass

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_FLOATS = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16),
           np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)}


def _dtypes_differ(what, a: np.ndarray, b: np.ndarray) -> ValueError:
    """The error for two dtypes; where one side is float64 (``flash.reference``'s output), it
    says how to get float64 attention in the other's format (a plain ``astype`` to bfloat16
    rounds twice, through float32: ``simulator.flash.exact.round_once``)."""
    text = f"{what[0]}, {what[1]}: dtypes differ ({a.dtype} vs {b.dtype})"
    if np.float64 in (a.dtype, b.dtype):
        text += ("; diff compares two arrays of one format bit for bit: for float64 attention "
                 "rounded once to the output's format, run flash.forward(..., "
                 "exact=flash.Exactness.all(o_rounding=False))")
    return ValueError(text)


def _check_pair(a, b, what=("a", "b")) -> tuple[np.ndarray, np.ndarray]:
    for name, x in zip(what, (a, b), strict=True):
        reject_subclass(name, x, ValueError)
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        raise _dtypes_differ(what, a, b)
    if a.shape != b.shape:
        raise ValueError(f"{what[0]}, {what[1]}: shapes differ ({a.shape} vs {b.shape})")
    if a.dtype not in _FLOATS:
        raise ValueError(f"{what[0]}: expected a float32/float16/bfloat16/fp8 array, got {a.dtype}")
    return a, b


def _ordered(x: np.ndarray) -> np.ndarray:
    """Bit patterns mapped to integers whose difference counts representable steps (ulps)."""
    u = x.view(_UINT[x.dtype.itemsize]).astype(np.int64)
    sign = np.int64(1) << (8 * x.dtype.itemsize - 1)
    mag = u & (sign - 1)
    return np.where(u & sign, -mag, mag)


def _check_float(name: str, x) -> np.ndarray:
    reject_subclass(name, x, ValueError)
    a = np.asarray(x)
    if a.dtype not in _FLOATS:
        raise ValueError(f"{name}: expected a float32/float16/bfloat16/fp8 array, got {a.dtype}")
    return a


def bits(x) -> np.ndarray:
    """The bit patterns of a float array, as unsigned integers of its width.

    Args:
        x: float32, float16, bfloat16, e4m3 or e5m2 array (or NumPy scalar), any shape.
    Returns:
        a view of ``x`` as uint32 (float32), uint16 (float16, bfloat16) or uint8 (fp8), the
        same shape: what ``simulator.compare`` compares, and what exact checks assert on.
    Raises:
        ValueError: another dtype, or an ndarray subclass (a masked array).
    """
    a = _check_float("x", x)
    return a.view(_UINT[a.dtype.itemsize])


def ulp_distance(a, b) -> np.ndarray:
    """Signed distance from ``b`` to ``a`` in ulps of their float format (int64, broadcast).

    The count of representable values of the format between the two, positive when ``a`` is
    the larger: 1 for neighbours, 0 for equal values (+0 and -0 included), across zero the sum
    of both sides' distances to it. Infinities count as the step after the largest finite
    value. NaN has no position: the result for a NaN element is meaningless (test for NaN
    first, as :func:`diff` does).

    Args:
        a, b: arrays of one float dtype (float32, float16, bfloat16, e4m3, e5m2) that broadcast.
    Raises:
        ValueError: other or different dtypes, or an ndarray subclass.
    """
    a, b = _check_float("a", a), _check_float("b", b)
    if a.dtype != b.dtype:
        raise ValueError(f"a, b: dtypes differ ({a.dtype} vs {b.dtype})")
    return _ordered(a) - _ordered(b)


def _fmt(v) -> str:
    arr = np.asarray(v)
    bits = int(arr.view(_UINT[arr.dtype.itemsize]))
    return f"0x{bits:0{2 * arr.dtype.itemsize}x} ({float(arr.astype(np.float64)):.9g})"


#: what :func:`diff` and :func:`first_divergence` call their two inputs unless told otherwise:
#: the first is the one under test, the second the one it is checked against (the device, the
#: real library, or another run)
DEFAULT_LABELS = ("emulator", "reference")

#: the trace arrays that are accumulator fragments ``[W, 128, registers]`` (of ``m64n{N}k16``
#: with ``N = 2 * registers``), and their column meaning
_FRAGMENTS = {"acc_s": "column {} of the K/V block", "acc_o": "column {} of the head dim"}
#: the per-thread row state ``[W, 128, kNRows]`` (``kNRows = 2``: rows ``mi`` = 0, 1)
_ROW_STATE = ("row_max", "row_sum", "scores_scale", "lse")


def _check_labels(labels) -> tuple[str, str]:
    if (not isinstance(labels, tuple | list) or len(labels) != 2
            or not all(isinstance(x, str) and x for x in labels) or labels[0] == labels[1]):
        raise ValueError(f"labels: expected two different non-empty strings (what the first and "
                         f"the second trace are, e.g. ('emulator', 'H200')), got {labels!r}")
    return str(labels[0]), str(labels[1])


@dataclass
class DiffReport:
    """Result of :func:`diff`.

    Attributes:
        total: elements compared.
        differing: elements whose bits differ.
        nan_mismatch: elements where exactly one side is NaN.
        histogram: ulp distance bucket -> count (buckets "1", "2", "3-4", "5-8", ...).
        max_ulp: largest ulp distance among numeric pairs (0 if none).
        worst: up to ``top`` entries ``{"index", "a", "b", "ulp"}`` (``a`` the first input's
            value, ``b`` the second's).
        labels: what the first and the second input are, for ``str()``.
    """

    total: int
    differing: int
    nan_mismatch: int
    histogram: dict[str, int] = field(default_factory=dict)
    max_ulp: int = 0
    worst: list[dict] = field(default_factory=list)
    labels: tuple[str, str] = DEFAULT_LABELS

    @property
    def identical(self) -> bool:
        return self.differing == 0

    def to_dict(self) -> dict:
        return {"total": self.total, "differing": self.differing, "nan_mismatch": self.nan_mismatch,
                "histogram": dict(self.histogram), "max_ulp": self.max_ulp, "worst": list(self.worst),
                "labels": self.labels}

    def __str__(self) -> str:
        if self.identical:
            return f"identical: {self.total:,} elements, 0 differing bits"
        lines = [f"{self.differing:,} of {self.total:,} elements differ "
                 f"({100 * self.differing / max(self.total, 1):.4f}%), max {self.max_ulp} ulp"
                 + (f", {self.nan_mismatch} NaN vs number" if self.nan_mismatch else "")]
        same_value = self.differing - sum(self.histogram.values())
        if same_value:  # +0 vs -0, or two NaNs with different payloads
            lines.append(f"{same_value:,} differ only in the bits of an equal value (signed zero "
                         "or NaN payload)")
        if self.histogram:
            lines.append("ulp histogram: " + ", ".join(f"{k}: {v:,}" for k, v in self.histogram.items()))
        first, second = self.labels
        for w in self.worst:
            lines.append(f"  at {w['index']}: {first} {w['a']}, {second} {w['b']}, {w['ulp']} ulp")
        return "\n".join(lines)


def diff(a, b, *, top: int = 5, labels=DEFAULT_LABELS) -> DiffReport:
    """Compare two arrays of one float format bit for bit.

    Args:
        a, b: arrays of the same shape and dtype (float32, float16, bfloat16, e4m3, e5m2).
        top: how many of the worst elements to list (an int >= 0).
        labels: what ``a`` and ``b`` are (default ``("emulator", "reference")``), two different
            non-empty strings naming the values of the worst elements in ``str()``.
    Returns:
        :class:`DiffReport`; distances are in ulp of the format (the count of representable
        values between the two), NaN against a number is counted apart.
    Raises:
        ValueError: different shapes or dtypes, a non-float dtype, an ndarray subclass (a
            masked array, whose mask would be ignored), or ``top`` not an int >= 0.
    """
    if not is_int(top) or top < 0:
        raise ValueError(f"top: expected an int >= 0 (how many worst elements to list), got "
                         f"{top!r}")
    top = int(top)
    labels = _check_labels(labels)
    a, b = _check_pair(a, b)
    ua, ub = (x.view(_UINT[x.dtype.itemsize]) for x in (a, b))
    bad = ua != ub
    n_bad = int(np.count_nonzero(bad))
    report = DiffReport(total=int(a.size), differing=n_bad, nan_mismatch=0, labels=labels)
    if not n_bad:
        return report
    fa, fb = a[bad].astype(np.float64), b[bad].astype(np.float64)
    nan_a, nan_b = np.isnan(fa), np.isnan(fb)
    report.nan_mismatch = int(np.count_nonzero(nan_a != nan_b))
    numeric = ~(nan_a | nan_b)
    ulp = np.abs(_ordered(a[bad]) - _ordered(b[bad]))
    ulp = np.where(numeric, ulp, -1)
    if numeric.any():
        report.max_ulp = int(ulp.max())
        edges = [1, 2, 4]
        while edges[-1] < report.max_ulp:
            edges.append(edges[-1] * 2)
        lo = 1
        for hi in edges:
            count = int(np.count_nonzero((ulp >= lo) & (ulp <= hi)))
            if count:
                report.histogram[str(lo) if lo == hi else f"{lo}-{hi}"] = count
            lo = hi + 1
    if report.nan_mismatch:
        report.histogram["NaN vs number"] = report.nan_mismatch
    flat = np.flatnonzero(bad)
    order = np.argsort(-np.where(ulp < 0, np.iinfo(np.int64).max, ulp), kind="stable")[:top]
    for i in order:
        idx = tuple(int(j) for j in np.unravel_index(flat[i], a.shape))
        report.worst.append({"index": idx, "a": _fmt(a[idx]), "b": _fmt(b[idx]),
                             "ulp": "NaN" if ulp[i] < 0 else int(ulp[i])})
    return report


def _register_name(array: str, shape: tuple[int, ...], warpgroup: int, thread: int,
                   position: tuple) -> str:
    """``array[position]`` of ``thread`` named as FA3's code names it: a fragment register with
    its (mi, ni) entry of the row/column view and the tile element it holds, or a row-state
    entry ``[mi]`` with its tile row."""
    index = "[" + ", ".join(str(i) for i in position) + "]"
    try:
        if array in _FRAGMENTS and len(shape) == 3 and len(position) == 1:
            view = rowcol_view(accumulator_layout(f"m64n{2 * shape[2]}k16"))
            (reg,) = position
            mi, ni = (int(x[0]) for x in np.nonzero(view.reg == reg))
            row, col = (int(x) for x in view.layout.locate(thread, reg))
            return (f"{array}{index}, entry (mi {mi}, ni {ni}) of the row/column view: row {row} "
                    f"of the warpgroup's 64 (row {64 * warpgroup + row} of the CTA tile), "
                    + _FRAGMENTS[array].format(col))
        if array in _ROW_STATE and len(shape) == 3 and len(position) == 1 and shape[2] == 2:
            (mi,) = position
            row = int(rowcol_view(accumulator_layout("m64n8k16")).row[thread, mi])
            return (f"{array}[mi {mi}]: row {row} of the warpgroup's 64 (row {64 * warpgroup + row} "
                    "of the CTA tile)")
    except ValueError:  # a shape no accumulator has: name the index alone
        pass
    return f"{array}{index}"


@dataclass
class Divergence:
    """Where two traces first part (:func:`first_divergence`); ``None`` fields when identical.

    Numbering (one convention, printed with its meaning by ``str()``): ``warpgroup`` counts the
    CTA's warpgroups from 0 (warpgroup ``w`` owns rows ``64 w .. 64 w + 63`` of the tile);
    ``thread`` is the thread of the warpgroup (0-127), ``warp = thread // 32`` (0-3),
    ``lane = thread % 32`` (PTX ``%laneid``), ``quad = thread // 4``, the quad of the warpgroup
    (0-31; ``32 w + quad`` counts the CTA's quads), ``thread % 4`` the lane in the quad.

    Attributes:
        step, cta, n_block, array: the event and the state array that differ.
        warpgroup, thread, position: index into that array ``[W, 128, ...]``.
        warp, lane, quad: ``thread`` decomposed as above.
        register: the element named as FA3 names it (``acc_s[5], entry (mi 0, ni 2) ...``).
        a, b: the value of the first and of the second trace (hex and decimal).
        labels: what the first and the second trace are (``("emulator", "reference")`` unless
            given).
        differing: how many elements of that array differ.
        note: a structural difference (events missing or out of order), if any.
    """

    event_index: int | None = None
    step: str | None = None
    cta: tuple | None = None
    n_block: int | None = None
    array: str | None = None
    warpgroup: int | None = None
    thread: int | None = None
    position: tuple | None = None
    a: str | None = None
    b: str | None = None
    differing: int = 0
    note: str = ""
    labels: tuple[str, str] = DEFAULT_LABELS
    warp: int | None = None
    lane: int | None = None
    quad: int | None = None
    register: str | None = None
    size: int | None = None

    @property
    def found(self) -> bool:
        return self.step is not None or bool(self.note)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def _register_lines(self) -> list[str]:
        """The register line; when it would pass 99 columns, the tile element it holds goes
        on a line of its own (the text after the fragment's name)."""
        line = f"  register: {self.register}"
        name, sep, element = (self.register or "").partition(": ")
        return [line] if len(line) < 100 or not sep else [f"  register: {name}:", f"    {element}"]

    def __str__(self) -> str:
        first, second = self.labels
        if self.note:
            return textwrap.fill(f"traces differ in structure ({first} against {second}): "
                                 f"{self.note}", width=99, subsequent_indent="  ")
        if not self.found:
            return textwrap.fill(f"no divergence: every traced step and register of the {first} "
                                 f"agrees bit for bit with the {second}", width=99,
                                 subsequent_indent="  ")
        b, h, m = self.cta
        wg, t = self.warpgroup, self.thread
        width = max(len(first), len(second))
        of = f" of {self.size:,}" if self.size is not None else ""
        lines = [f"first divergence at event {self.event_index} ({self.step}, "
                 + ("after the last block" if self.n_block is None else f"K/V block {self.n_block}")
                 + f") of CTA (batch {b}, head {h}, m_block {m}), array {self.array}",
                 f"  thread: warpgroup {wg}, warp {self.warp}, lane {self.lane} (thread {t} of the "
                 f"warpgroup, 0-127; {128 * wg + t} of the CTA),",
                 f"    quad {self.quad} of the warpgroup (0-31; {32 * wg + self.quad} of the CTA), "
                 f"lane {t % 4} of the quad",
                 *self._register_lines(),
                 f"  {first:<{width}} = {self.a}", f"  {second:<{width}} = {self.b}",
                 f"  ({self.differing:,}{of} elements of {self.array} differ in this event)"]
        # under 100 columns, continuations indented past their line's own indent
        return "\n".join(textwrap.fill(line, width=99, break_long_words=False,
                                        break_on_hyphens=False,
                                        subsequent_indent=" " * (len(line) - len(line.lstrip()) + 2))
                          for line in lines)


def first_divergence(trace_a, trace_b, *, labels=DEFAULT_LABELS) -> Divergence:
    """The first step, CTA, thread and register where two traces differ.

    Events are compared in execution order; within an event the arrays are compared in a
    fixed name order and the first differing element (C order over ``[W, 128, ...]``) is
    reported, with the numbering of :class:`Divergence`.

    Args:
        trace_a: :class:`simulator.trace.Trace` under test, usually the emulator's.
        trace_b: the trace it is checked against: the device's (the twin kernel's
            ``-DFA_TRACE=1`` dump, decoded) or another run taken as the reference.
        labels: what ``trace_a`` and ``trace_b`` are, two different non-empty strings, used in
            ``str()`` and in structural notes (default ``("emulator", "reference")``).
    Returns:
        :class:`Divergence` (``found`` is False when they agree everywhere); ``a`` holds the
        value of ``trace_a``, ``b`` that of ``trace_b``.
    Raises:
        ValueError: ``labels`` not two different non-empty strings.
    """
    labels = _check_labels(labels)
    first, second = labels
    ea, eb = list(trace_a), list(trace_b)
    for i, (x, y) in enumerate(zip(ea, eb, strict=False)):
        if (x.step, x.cta, x.n_block) != (y.step, y.cta, y.n_block):
            return Divergence(event_index=i, labels=labels,
                              note=f"event {i} is {x.step} {x.cta} n_block {x.n_block} in the "
                              f"{first} but {y.step} {y.cta} n_block {y.n_block} in the {second}")
        for name in sorted(set(x.data) | set(y.data)):
            if name not in x.data or name not in y.data:
                only = first if name in x.data else second
                return Divergence(event_index=i, labels=labels,
                                  note=f"event {i} ({x.step}) has array {name!r} in the {only} "
                                  "only")
            va, vb = np.asarray(x.data[name]), np.asarray(y.data[name])
            if va.shape != vb.shape or va.dtype != vb.dtype or va.ndim < 2 \
                    or va.dtype.itemsize not in _UINT:
                return Divergence(event_index=i, labels=labels,
                                  note=f"event {i} ({x.step}) array {name!r}: {va.shape} {va.dtype} "
                                  f"in the {first}, {vb.shape} {vb.dtype} in the {second} (expected "
                                  "equal shapes [W, 128, ...] and dtypes)")
            bad = va.view(_UINT[va.dtype.itemsize]) != vb.view(_UINT[vb.dtype.itemsize])
            if bad.any():
                where = tuple(int(j) for j in np.unravel_index(np.flatnonzero(bad)[0], va.shape))
                wg, t, pos = where[0], where[1], where[2:]
                return Divergence(event_index=i, step=x.step, cta=x.cta, n_block=x.n_block,
                                  array=name, warpgroup=wg, thread=t, position=pos,
                                  a=_fmt(va[where]), b=_fmt(vb[where]),
                                  differing=int(np.count_nonzero(bad)), labels=labels,
                                  warp=t // 32, lane=t % 32, quad=t // 4,
                                  register=_register_name(name, va.shape, wg, t, pos),
                                  size=int(va.size))
    if len(ea) != len(eb):
        return Divergence(event_index=min(len(ea), len(eb)), labels=labels,
                          note=f"the {first} has {len(ea)} events, the {second} {len(eb)}")
    return Divergence(labels=labels)
