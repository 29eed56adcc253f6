"""Bitwise comparison of outputs and traces: emulator against device, or any two runs.

* :func:`diff` compares two arrays of the same float format bit for bit: how many elements
  differ, a histogram of the distance in ulp (units in the last place of the format), and the
  worst elements with their indices, in hex and decimal.
* :func:`first_divergence` walks two :class:`simulator.trace.Trace` s in execution order and
  reports the first step, CTA, warpgroup, thread and register where they part.

Both return objects with a readable ``str()`` and a ``to_dict()`` form.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from .numerics.bits import is_int, reject_subclass

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_FLOATS = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16),
           np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)}


def _check_pair(a, b, what=("a", "b")) -> tuple[np.ndarray, np.ndarray]:
    for name, x in zip(what, (a, b), strict=True):
        reject_subclass(name, x, ValueError)
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        raise ValueError(f"{what[0]}, {what[1]}: dtypes differ ({a.dtype} vs {b.dtype})")
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


def _fmt(v) -> str:
    arr = np.asarray(v)
    bits = int(arr.view(_UINT[arr.dtype.itemsize]))
    return f"0x{bits:0{2 * arr.dtype.itemsize}x} ({float(arr.astype(np.float64)):.9g})"


@dataclass
class DiffReport:
    """Result of :func:`diff`.

    Attributes:
        total: elements compared.
        differing: elements whose bits differ.
        nan_mismatch: elements where exactly one side is NaN.
        histogram: ulp distance bucket -> count (buckets "1", "2", "3-4", "5-8", ...).
        max_ulp: largest ulp distance among numeric pairs (0 if none).
        worst: up to ``top`` entries ``{"index", "a", "b", "ulp"}``.
    """

    total: int
    differing: int
    nan_mismatch: int
    histogram: dict[str, int] = field(default_factory=dict)
    max_ulp: int = 0
    worst: list[dict] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.differing == 0

    def to_dict(self) -> dict:
        return {"total": self.total, "differing": self.differing, "nan_mismatch": self.nan_mismatch,
                "histogram": dict(self.histogram), "max_ulp": self.max_ulp, "worst": list(self.worst)}

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
        for w in self.worst:
            lines.append(f"  at {w['index']}: a = {w['a']}, b = {w['b']}, {w['ulp']} ulp")
        return "\n".join(lines)


def diff(a, b, *, top: int = 5) -> DiffReport:
    """Compare two arrays of one float format bit for bit.

    Args:
        a, b: arrays of the same shape and dtype (float32, float16, bfloat16, e4m3, e5m2).
        top: how many of the worst elements to list (an int >= 0).
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
    a, b = _check_pair(a, b)
    ua, ub = (x.view(_UINT[x.dtype.itemsize]) for x in (a, b))
    bad = ua != ub
    n_bad = int(np.count_nonzero(bad))
    report = DiffReport(total=int(a.size), differing=n_bad, nan_mismatch=0)
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


@dataclass
class Divergence:
    """Where two traces first part (:func:`first_divergence`); ``None`` fields when identical.

    Attributes:
        step, cta, n_block, array: the event and the state array that differ.
        warpgroup, thread, position: index into that array ``[W, 128, ...]``.
        a, b: both values (hex and decimal).
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

    @property
    def found(self) -> bool:
        return self.step is not None or bool(self.note)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def __str__(self) -> str:
        if self.note:
            return f"traces differ in structure: {self.note}"
        if not self.found:
            return "no divergence: every traced step and register agrees bit for bit"
        lane, quad = self.thread % 32, (self.thread % 32) // 4
        return (f"first divergence at event {self.event_index}: step {self.step}, CTA "
                f"(batch, head, m_block) = {self.cta}, n_block {self.n_block}, array {self.array}\n"
                f"  warpgroup {self.warpgroup}, thread {self.thread} (warp {self.thread // 32}, "
                f"lane {lane}, quad {quad}), register/row {self.position}\n"
                f"  a = {self.a}\n  b = {self.b}\n"
                f"  ({self.differing} element(s) of {self.array} differ in this event)")


def first_divergence(trace_a, trace_b) -> Divergence:
    """The first step, CTA, thread and register where two traces differ.

    Events are compared in execution order; within an event the arrays are compared in a
    fixed name order and the first differing element (C order over ``[W, 128, ...]``) is
    reported.

    Args:
        trace_a, trace_b: :class:`simulator.trace.Trace` (e.g. emulator and device).
    Returns:
        :class:`Divergence` (``found`` is False when they agree everywhere).
    """
    ea, eb = list(trace_a), list(trace_b)
    for i, (x, y) in enumerate(zip(ea, eb, strict=False)):
        if (x.step, x.cta, x.n_block) != (y.step, y.cta, y.n_block):
            return Divergence(event_index=i, note=f"event {i} is {x.step} {x.cta} n_block "
                              f"{x.n_block} in a but {y.step} {y.cta} n_block {y.n_block} in b")
        for name in sorted(set(x.data) | set(y.data)):
            if name not in x.data or name not in y.data:
                return Divergence(event_index=i, note=f"event {i} ({x.step}) has array {name!r} "
                                  f"on one side only")
            va, vb = np.asarray(x.data[name]), np.asarray(y.data[name])
            if va.shape != vb.shape or va.dtype != vb.dtype or va.ndim < 2 \
                    or va.dtype.itemsize not in _UINT:
                return Divergence(event_index=i, note=f"event {i} ({x.step}) array {name!r}: "
                                  f"{va.shape} {va.dtype} vs {vb.shape} {vb.dtype} (expected "
                                  "equal shapes [W, 128, ...] and dtypes)")
            bad = va.view(_UINT[va.dtype.itemsize]) != vb.view(_UINT[vb.dtype.itemsize])
            if bad.any():
                first = tuple(int(j) for j in np.unravel_index(np.flatnonzero(bad)[0], va.shape))
                return Divergence(event_index=i, step=x.step, cta=x.cta, n_block=x.n_block,
                                  array=name, warpgroup=first[0], thread=first[1],
                                  position=first[2:], a=_fmt(va[first]), b=_fmt(vb[first]),
                                  differing=int(np.count_nonzero(bad)))
    if len(ea) != len(eb):
        return Divergence(event_index=min(len(ea), len(eb)),
                          note=f"a has {len(ea)} events, b has {len(eb)}")
    return Divergence()
