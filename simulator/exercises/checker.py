"""Run a reader's step in place of the emulator's on recorded H200 cases; say where it diverges.

:func:`check` takes an exercise number and a function with the signature of its stub in
:mod:`simulator.exercises.puzzles`. For every recorded case (:mod:`.recorded`) it feeds the
function the device's own inputs to that step (the H200's state just before it, so one wrong
step does not drag the next along), compares the returned bits with the H200's bits of the
step's outputs (``uint32`` views; ``uint16`` for a bf16 / f16 combine output) and returns a
:class:`CheckResult`: passed, or the first divergence with the case, the step, the thread
(warpgroup, warp, lane, quad) or row, the tile row and column, and both values in hex.

Trace cases are compared with :func:`simulator.compare.first_divergence` on a trace holding
only the exercise's outputs at the device's events, so event numbers are the recording's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import fa3
from ..compare import first_divergence
from ..errors import RecordedDataError
from ..fa3.combine import combine_kernel
from ..hw import accumulator_layout, allreduce, rowcol_view
from ..numerics import fadd, fmax
from ..numerics.cvt import convert
from ..replay.common import digest
from ..replay.hw import block_digests
from ..trace import Event, Trace
from . import recorded
from .recorded import fragment, rowcol

LABELS = ("your function", "H200")
_SCORE_STEPS = ("qk_gemm", "softcap", "mask")


@dataclass
class CheckResult:
    """What :func:`check` found.

    Attributes:
        exercise, name: which exercise.
        passed: every recorded case agrees bit for bit.
        cases: recorded cases run; ``failing``: how many of them diverge.
        compared: output values compared.
        message: ``PASS ...`` or the first divergence, readable (also ``str()``).
        where: the first divergence as a dict (case, step, position, expected and got), or None.
        tile: for a failed check of a ladder rung, ``(got, want, dtype)``: the bits of the
            array holding the first divergence (uint views, the same shape), for
            :func:`simulator.exercises.picture.draw`; None otherwise.
    """

    exercise: int
    name: str
    passed: bool
    cases: int
    failing: int
    compared: int
    message: str
    where: dict | None = None
    tile: tuple | None = None

    def __str__(self) -> str:
        return self.message


class _BadReturn(Exception):
    """The reader's function returned something of the wrong type or shape."""


def _float32(what: str, value, shape: tuple[int, ...]) -> np.ndarray:
    if not isinstance(value, np.ndarray | np.generic):
        raise _BadReturn(f"{what}: expected a float32 array of shape {shape}, got "
                         f"{type(value).__name__}")
    arr = np.asarray(value)
    if arr.dtype != np.float32:
        raise _BadReturn(f"{what}: expected float32 (the H200 computes in float32), got {arr.dtype}; "
                         "use simulator.numerics' instructions, which return float32")
    if arr.shape != shape:
        raise _BadReturn(f"{what}: expected shape {shape}, got {arr.shape}")
    return arr


def _call(fn, *args):
    """``fn`` on copies of the array arguments: the recordings are cached, and a function that
    works in place must not change what the next case (or the next check) is given."""
    return fn(*(a.copy() if isinstance(a, np.ndarray) else a for a in args))


def _unpack(what: str, value, count: int) -> tuple:
    if not isinstance(value, tuple | list) or len(value) != count:
        raise _BadReturn(f"{what}: expected a tuple of {count} arrays, got {type(value).__name__}"
                         + (f" of {len(value)}" if isinstance(value, tuple | list) else ""))
    return tuple(value)


# ---- trace cases ------------------------------------------------------------------------------------
def _cta_events(trace: Trace) -> dict[tuple, list[tuple[int, Event]]]:
    out: dict[tuple, list[tuple[int, Event]]] = {}
    for i, e in enumerate(trace.events):
        out.setdefault(e.cta, []).append((i, e))
    return out


def _scores_before(events: list[tuple[int, Event]], index: int, n_block: int) -> np.ndarray:
    """The masked scores a ``max_get_scale`` at ``index`` reads: the last ``acc_s`` of its block."""
    acc = [e for i, e in events if i < index and e.n_block == n_block and e.step in _SCORE_STEPS]
    return rowcol(acc[-1].data["acc_s"])


def _compare_trace(case: recorded.TraceCase, outputs: dict[int, dict]) -> tuple:
    """(divergence, values compared) of the reader's ``outputs`` {event: {array: value}}."""
    got, want, compared = Trace(), Trace(), 0
    for i, e in enumerate(case.device.events):
        mine = outputs.get(i, {})
        got.events.append(Event(e.step, e.cta, e.n_block, mine))
        want.events.append(Event(e.step, e.cta, e.n_block, {k: e.data[k] for k in mine}))
        compared += sum(int(v.size) for v in mine.values())
    div = first_divergence(got, want, labels=LABELS)
    if div.step is not None:
        # first_divergence reads an event's arrays by name; name the first one the step
        # computes instead (finalize: row_sum before the lse made from it)
        k = div.event_index
        for name in outputs[k]:
            got.events[k].data, want.events[k].data = (
                {name: outputs[k][name]}, {name: case.device.events[k].data[name]})
            one = first_divergence(got, want, labels=LABELS)
            if one.found:
                return one, compared
    return div, compared


def _run_traces(cases, outputs_of) -> tuple[list, int]:
    """[(case label, divergence text, where dict)] of the failing trace cases; values compared."""
    failures, compared = [], 0
    for case in cases:
        div, n = _compare_trace(case, outputs_of(case))
        compared += n
        if div.found:
            failures.append((f"recorded step trace '{case.name}'", str(div), div.to_dict()))
    return failures, compared


def _ex1_trace_outputs(fn):
    def outputs(case):
        out = {}
        for events in _cta_events(case.device).values():
            prev = None
            for i, e in events:
                if e.step == "max_get_scale":
                    scores = _scores_before(events, i, e.n_block)
                    got = _float32("reduce_max's return", _call(fn, scores, prev),
                                   e.data["row_max"].shape)
                    out[i] = {"row_max": got}
                    prev = e.data["row_max"]
        return out
    return outputs


def _ex2_outputs(fn):
    def outputs(case):
        out = {}
        for cta, events in _cta_events(case.device).items():
            mgs = [(i, e) for i, e in events if e.step == "max_get_scale"]
            soft = [(i, e) for i, e in events if e.step == "online_softmax"]
            rescale = [(i, e) for i, e in events if e.step == "rescale_o"]
            # the k-th rescale_o from the end applies the k-th max_get_scale's scale from the end
            # (plain: the same block; IntraWGOverlap one PV GEMM later; RescaleOBeforeGemm before)
            paired = dict(zip([i for i, _ in mgs][::-1], [i for i, _ in rescale][::-1], strict=False))
            for j in range(1, len(mgs)):
                (im, em), (io, eo) = mgs[j], soft[j]
                ir = paired.get(im)
                if ir is None:
                    raise RecordedDataError(f"trace '{case.name}', CTA {cta}: no rescale_o applies "
                                            f"the scale of K/V block {em.n_block}")
                # O as the rescale finds it: the last PV GEMM's (or rescale's) output, else zeros
                o_events = [e for i, e in events if i < ir and "acc_o" in e.data]
                shape = case.device.events[ir].data["acc_o"].shape
                acc_o = rowcol(o_events[-1].data["acc_o"] if o_events else np.zeros(shape, np.float32))
                res = _unpack("online_rescale's return", _call(
                    fn, _scores_before(events, im, em.n_block), mgs[j - 1][1].data["row_max"],
                    em.data["row_max"], soft[j - 1][1].data["row_sum"], acc_o,
                    case.scale_log2[cta]), 4)
                rows = em.data["row_max"].shape
                scale = _float32("scores_scale (1st returned)", res[0], rows)
                p = _float32("p (2nd returned)", res[1], rowcol(eo.data["acc_s"]).shape)
                out[im] = {"scores_scale": scale}
                out[io] = {"acc_s": fragment(p),
                           "row_sum": _float32("row_sum (3rd returned)", res[2], rows)}
                out[ir] = {"acc_o": fragment(_float32("acc_o (4th returned)", res[3], acc_o.shape))}
        return out
    return outputs


def _ex3_outputs(fn):
    def outputs(case):
        out = {}
        for cta, events in _cta_events(case.device).items():
            row_max = {}
            for i, e in events:
                if e.step == "max_get_scale":
                    row_max[e.n_block] = (e.data["row_max"], _scores_before(events, i, e.n_block))
                elif e.step == "online_softmax":
                    rm, scores = row_max[e.n_block]
                    p = _float32("fp8_exp2's return", _call(fn, scores, rm, case.scale_log2[cta]),
                                 scores.shape)
                    out[i] = {"acc_s": fragment(p)}
        return out
    return outputs


def _ex5_outputs(fn):
    def outputs(case):
        out = {}
        for cta, events in _cta_events(case.device).items():
            for i, e in events:
                if e.step != "finalize":
                    continue
                last_max = [x for k, x in events if k < i and x.step == "max_get_scale"][-1]
                last_sum = [x for k, x in events if k < i and x.step == "online_softmax"][-1]
                rows = e.data["row_sum"].shape
                res = _unpack("finalize's return", _call(
                    fn, last_max.data["row_max"], last_sum.data["row_sum"], case.scale_log2[cta],
                    case.max_offset, case.final_scale[cta]), 3)
                names = ("row_sum", "scores_scale", "lse")
                out[i] = {name: _float32(f"{name} ({('1st', '2nd', '3rd')[k]} returned)", res[k], rows)
                          for k, name in enumerate(names)}
        return out
    return outputs


# ---- the reduction probe (exercise 1) ----------------------------------------------------------
def _thread_text(thread: int, mi: int) -> str:
    row = int(rowcol_view(accumulator_layout("m64n8k16")).row[thread, mi])
    return (f"thread {thread} (warp {thread // 32}, lane {thread % 32}, quad {thread // 4}, "
            f"lane {thread % 4} of the quad), row mi {mi} (row {row} of the warpgroup's 64)")


def _fmt(bits: int) -> str:
    return f"0x{bits:08x} ({float(np.uint32(bits).view(np.float32)):.9g})"


def _run_probe(fn) -> tuple[list, int]:
    from ..hw import reduce_max as emulated  # noqa: PLC0415 - only to locate a digest mismatch

    failures, compared = [], 0
    for case in recorded.probe_cases("max"):
        got = _float32("reduce_max's return", _call(fn, case.scores, case.summary),
                       case.scores.shape[:-1])
        compared += got.size
        bits = got.view(np.uint32)
        heads = len(case.head)
        bad = [b for b in range(heads) if not np.array_equal(bits[b], case.head[b])]
        bad += [int(b) for b in np.flatnonzero(np.any(block_digests(got) != case.digests, axis=-1))
                if b >= heads]
        if not bad:
            continue
        block = bad[0]
        if block < heads:
            want = case.head[block]
        else:  # only a digest is recorded: the emulator's bits, once they match that digest
            ref = emulated(case.scores, case.summary, zero_init=case.summary is None)
            if not np.array_equal(block_digests(ref[block:block + 1])[0], case.digests[block]):
                raise RecordedDataError(f"{case.label}: block {block} cannot be located (the "
                                        "emulator's bits do not match the recorded digest)")
            want = ref[block].view(np.uint32)
        t, mi = (int(x[0]) for x in np.nonzero(bits[block] != want))
        text = (f"first divergence in block {block} of {len(bits)} (thread_reduce_ + "
                f"quad_allreduce_ on the H200, fast-math build)\n  {_thread_text(t, mi)}\n"
                f"  your function = {_fmt(int(bits[block, t, mi]))}\n"
                f"  H200          = {_fmt(int(want[t, mi]))}\n"
                f"  ({len(bad)} of {len(bits)} blocks differ)")
        failures.append((f"reduction probe '{case.label}'", text,
                         {"block": block, "thread": t, "mi": mi,
                          "a": _fmt(int(bits[block, t, mi])), "b": _fmt(int(want[t, mi]))}))
    return failures, compared


# ---- split-KV combine (exercise 4) ------------------------------------------------------------------
def split_allreduce(num_splits: int, head_dim_v: int) -> Callable:
    """The combine kernel's reduction over a row's splits, as exercise 4 hands it to the reader.

    Returns ``allreduce(x, op)``: ``x`` float32 ``[num_splits, R]``, ``op`` "max" or "sum";
    each of the row's ``T`` threads (32, or 16 for ``head_dim_v <= 64``) folds its splits
    ``lane + T j`` in ``j`` order (``max.ftz``; ``add.ftz`` from ``+0``), then
    ``Allreduce<T>`` (docs/combine.md, "Which splits each thread holds"); float32 ``[R]``.
    Splits past ``num_splits`` read as -inf (max) or +0 (their ``e``, sum).

    Raises:
        ValueError: ``op`` not "max" / "sum", ``x`` not float32 ``[num_splits, R]``.
    """
    kernel = combine_kernel(num_splits, head_dim_v)
    T, J = kernel.threads_per_row, kernel.splits_per_thread

    def split_reduce(x, op):
        if op not in ("max", "sum"):
            raise ValueError(f"op: expected 'max' or 'sum', got {op!r}")
        x = np.asarray(x)
        if x.dtype != np.float32 or x.ndim != 2 or x.shape[0] != num_splits:
            raise ValueError(f"x: expected float32 [{num_splits}, rows] (one value per split and "
                             f"row), got {x.dtype} {x.shape}")
        rows = x.shape[1]
        full = np.full((kernel.max_splits, rows), -np.inf if op == "max" else 0.0, np.float32)
        full[:num_splits] = x
        regs = full.reshape(J, T, rows).transpose(0, 2, 1)          # [j, row, lane]
        fn = fmax if op == "max" else fadd
        acc = regs[0] if op == "max" else fadd(np.float32(0), regs[0], ftz=True)
        for j in range(1, J):
            acc = fn(acc, regs[j], ftz=True)
        if T == 16:  # two rows per warp: lanes 0-15 and 16-31, which the butterfly never mixes
            acc = np.concatenate([acc, np.zeros((rows % 2, 16), np.float32)]).reshape(-1, 32)
        acc = allreduce(acc, op, T, axis=-1, ftz=True).reshape(-1, T)[:rows]
        return np.ascontiguousarray(acc[:, 0])

    return split_reduce


def _run_combine(fn) -> tuple[list, int]:
    failures, compared = [], 0
    for case in recorded.combine_cases():
        rows, dv = case.o.shape[1:]
        res = _unpack("combine's return", _call(fn, case.lse, case.o,
                                             split_allreduce(case.num_splits, case.head_dim_v)), 2)
        o = _float32("out (1st returned)", res[0], (rows, dv))
        lse = _float32("lse (2nd returned)", res[1], (rows,))
        out = o if case.out_format == "f32" else convert(o, case.out_format)
        uint = np.uint32 if case.out_format == "f32" else np.uint16
        got = (out.view(uint), lse.view(np.uint32))
        compared += o.size + lse.size
        if case.out is not None:
            want = (case.out, case.lse_out)
        else:
            call = [np.ascontiguousarray(a).view(a.dtype) for a in case.to_call(*got)]
            if (digest(call[0]).hex(), digest(call[1]).hex()) == case.digests:
                continue
            want = _combine_reference(case)
        for name, g, w in (("lse", got[1], want[1]), ("out", got[0], want[0])):
            if np.array_equal(g, w):
                continue
            where = tuple(int(x[0]) for x in np.nonzero(g != w))
            fmt = "f32" if name == "lse" else case.out_format
            text = (f"first divergence in {name}, query row {where[0]} of {rows} (rows are batch, "
                    f"seqlen, head flattened)" + (f", column {where[1]} of {dv}" if name == "out" else "")
                    + f"\n  your function = {_bits_text(g[where], fmt)}\n"
                    f"  H200          = {_bits_text(w[where], fmt)}\n"
                    f"  ({int(np.count_nonzero(g != w)):,} of {g.size:,} values of {name} differ)")
            failures.append((case.label, text, {"array": name,
                                                "position": where, "a": _bits_text(g[where], fmt),
                                                "b": _bits_text(w[where], fmt)}))
            break
    return failures, compared


def _bits_text(bits, fmt: str) -> str:
    b = int(bits)
    if fmt == "f32":
        return _fmt(b)
    import ml_dtypes  # noqa: PLC0415

    dtype = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}[fmt]
    return f"0x{b:04x} ({float(np.uint16(b).view(dtype)):.6g}, {fmt})"


def _combine_reference(case) -> tuple[np.ndarray, np.ndarray]:
    """The H200's bits of a digest-only call: the emulator's, checked against the digest."""
    out, lse = fa3.flash_attn_combine(**case.call)[:2]
    call = (np.ascontiguousarray(out), np.ascontiguousarray(lse))
    uint = np.uint32 if case.out_format == "f32" else np.uint16
    if (digest(call[0].view(uint)).hex(), digest(call[1].view(np.uint32)).hex()) != case.digests:
        raise RecordedDataError(f"{case.label}: cannot locate the divergence (the emulator's bits "
                                "do not match the recorded digest)")
    rows, dv = case.o.shape[1:]
    return call[0].view(uint).reshape(rows, dv), call[1].view(np.uint32).reshape(rows)


# ---- the entry point ------------------------------------------------------------------------------
def run(number: int, name: str, fn, shown: int | None = None) -> CheckResult:
    """Run exercise ``number``'s cases on ``fn`` (see :func:`simulator.exercises.check`);
    ``shown``: the number the result names (the puzzle's place on the ladder)."""
    cases = recorded.trace_cases()
    try:
        if number == 1:
            failures, compared = _run_traces(cases, _ex1_trace_outputs(fn))
            more, n = _run_probe(fn)
            failures, compared, total = failures + more, compared + n, len(cases) + len(
                recorded.PROBE_VARIANTS)
        elif number == 4:
            failures, compared = _run_combine(fn)
            total = len(recorded.combine_cases())
        else:
            picked = {2: [c for c in cases if c.max_offset == 0],
                      3: [c for c in cases if c.max_offset], 5: list(cases)}[number]
            outputs = {2: _ex2_outputs, 3: _ex3_outputs, 5: _ex5_outputs}[number](fn)
            failures, compared = _run_traces(picked, outputs)
            total = len(picked)
    except _BadReturn as exc:
        return bad_return(shown or number, name, exc)
    return result(shown or number, name, failures, total, compared)


def bad_return(number: int, name: str, exc: Exception) -> CheckResult:
    """The failed result of a function that returned the wrong type or shape."""
    return CheckResult(number, name, False, 0, 0, 0,
                       f"puzzle {number} ({name}): FAIL, your function returned the wrong "
                       f"thing: {exc}")


def result(number: int, name: str, failures: list, total: int, compared: int) -> CheckResult:
    """PASS, or the first of ``failures`` ``[(case label, text, where)]``, as a result."""
    if not failures:
        return CheckResult(number, name, True, total, 0, compared,
                           f"puzzle {number} ({name}): PASS: {compared:,} values of {total} "
                           "recorded H200 cases, 0 differing bits")
    label, text, where = failures[0]
    where = dict(where)
    tile = where.pop("tile", None)
    return CheckResult(number, name, False, total, len(failures), compared,
                       f"puzzle {number} ({name}): FAIL on {label} ({len(failures)} of {total} "
                       f"recorded cases diverge)\n{text}", {"case": label, **where}, tile)
