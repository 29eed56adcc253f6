"""The checks of the ladder's new rungs: a learner's function on recorded device bits.

Each check runs the function on the inputs of one recording and compares its bits (``uint32``,
``uint16`` or ``uint8`` views) with the device's, returning ``(failures, compared, cases)``
in the form :mod:`.checker` uses: a failure is ``(case label, text, where)``, ``where`` a dict
with the array, the position of the first differing element (``position``), both values in hex
and ``tile``: both arrays' bits, for :mod:`.picture`.

The recordings, all under ``simulator/data/device/`` and checked against its manifest:

* ``numerics_samples.npz`` / ``numerics_digests.npz`` (the numerics sweep, H200): the raw
  results of the first 2^16 operand triples of FFMA.FTZ's block 0 and the digest of the
  whole block; the digest of every 2^20-pattern chunk of each float32 -> bf16 / e4m3
  conversion;
* ``mufu_samples.npz`` (the MUFU calibration, H200): 2^20 inputs per form with the device's
  results, ``ex2.approx.ftz.f32`` and ``__expf`` under fast math;
* ``forward_traces.npz`` (the twin forward kernel's step traces on the H200, see
  :mod:`.recorded`);
* ``twin_backward_traces.npz`` (the twin backward kernel's step traces on the H200, three CTAs
  kept in full: P, dP, dtanh and dS of every m_block of one key block).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from ..errors import RecordedDataError
from ..flash.backward import make_backward_config, preprocess_dpsum
from ..hw import accumulator_layout, rowcol_view, thread_reduce
from ..io import read_json, read_npz
from ..mma import wgmma as mma_wgmma
from ..numerics import FORMATS, ffma
from ..replay import mma as mma_replay
from ..replay import mufu as mufu_replay
from ..replay import numerics as num_replay
from ..replay import twin_backward as tb
from ..replay.common import digest
from ..replay.mma_cases import mma_block
from ..replay.numerics_cases import arith_block
from . import recorded
from .checker import (
    _BadReturn,
    _call,
    _compare_trace,
    _cta_events,
    _float32,
    _scores_before,
    _unpack,
    bad_return,
    result,
)
from .checker import run as checker_run
from .recorded import fragment, rowcol


def _hex(bits, width: int) -> str:
    return f"0x{int(bits):0{width // 4}x}"


def _value(bits, dtype) -> str:
    return f"{_hex(bits, 8 * np.dtype(dtype).itemsize)} ({float(np.asarray(bits).view(dtype)):.9g})"


def compare_bits(label: str, array: str, got: np.ndarray, want: np.ndarray, dtype,
                 where_text=None) -> tuple | None:
    """The first divergence of two equal-shape uint arrays, as a failure tuple, or None.

    Args:
        label: the recorded case.
        array: what the values are (named in the text).
        got, want: uint arrays of the same shape (the learner's bits, the device's).
        dtype: the value type of the bits (to print values).
        where_text: optional ``f(position) -> str`` naming the position in the field's terms.
    """
    differs = got != want
    if not differs.any():
        return None
    pos = tuple(int(i) for i in np.unravel_index(int(np.argmax(differs)), got.shape))
    place = where_text(pos) if where_text else f"element {pos}"
    a, b = _value(got[pos], dtype), _value(want[pos], dtype)
    text = (f"first divergence in {array}, {place}\n  your function = {a}\n  H200          = {b}\n"
            f"  ({int(differs.sum()):,} of {differs.size:,} values of {array} differ)")
    return (label, text, {"array": array, "position": pos, "a": a, "b": b,
                          "tile": (got, want, np.dtype(dtype))})


def _typed(what: str, value, dtype, shape) -> np.ndarray:
    if not isinstance(value, np.ndarray | np.generic):
        raise _BadReturn(f"{what}: expected a {np.dtype(dtype).name} array of shape {shape}, got "
                         f"{type(value).__name__}")
    arr = np.asarray(value)
    if arr.dtype != np.dtype(dtype):
        raise _BadReturn(f"{what}: expected {np.dtype(dtype).name}, got {arr.dtype}")
    if arr.shape != shape:
        raise _BadReturn(f"{what}: expected shape {shape}, got {arr.shape}")
    return arr


# ---- one instruction: FFMA ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _ffma_block():
    _, digests, samples = num_replay.load_recorded()
    a, b, c = (o.view(np.float32) for o in arith_block("ffma", 0))
    return a, b, c, samples["arith_ffma_ftz_head"], digests["arith_ffma_ftz"][0].tobytes()


def check_fma(fn):
    """FFMA.FTZ's block 0 of the numerics sweep: its raw head, then the block's digest."""
    a, b, c, head, block_digest = _ffma_block()
    got = _float32("fma's return", _call(fn, a, b, c), a.shape).view(np.uint32)
    label = "numerics sweep, FFMA.FTZ operand block 0 (2^20 triples)"
    n = len(head)

    def where(pos):
        i = pos[0]
        return (f"triple {i}: a = {_value(a.view(np.uint32)[i], np.float32)}, b = "
                f"{_value(b.view(np.uint32)[i], np.float32)}, c = {_value(c.view(np.uint32)[i], np.float32)}")

    fail = compare_bits(label, "a*b+c", got[:n], head, np.float32, where)
    if fail is None and digest(got) != block_digest:
        ref = ffma(a, b, c, ftz=True).view(np.uint32)   # the emulator's, once its digest matches
        if digest(ref) != block_digest:
            raise RecordedDataError("numerics_digests.npz: FFMA.FTZ block 0 cannot be located")
        fail = compare_bits(label, "a*b+c", got, ref, np.float32, where)
    return [fail] if fail else [], got.size, 1


# ---- one instruction: conversions -----------------------------------------------------------------
def check_conversion(fn, fmt: str):
    """Every special chunk of the sweep's ``fmt`` conversion (digest per chunk; located with
    the emulator's conversion once its digest matches)."""
    name = {"bf16": "bf16", "e4m3": "e4m3"}[fmt]
    _, digests, _ = num_replay.load_recorded()
    recorded_digests = digests[f"conv_{name}"]
    f = FORMATS[fmt]
    failures, compared, chunks = [], 0, num_replay.special_chunks()
    for k in chunks:
        x = num_replay.conversion_inputs(k * num_replay.CHUNK, num_replay.CHUNK)
        got = _typed(f"to_{fmt}'s return", _call(fn, x), f.dtype, x.shape).view(f.uint)
        compared += got.size
        if digest(got) == recorded_digests[k].tobytes():
            continue
        ref = num_replay.emulate_conversion(name, k * num_replay.CHUNK, num_replay.CHUNK)
        if digest(ref) != recorded_digests[k].tobytes():
            raise RecordedDataError(f"numerics_digests.npz: conv_{name} chunk {k} cannot be located")
        failures.append(compare_bits(
            f"numerics sweep, cvt to {fmt}, chunk {k:#x} (inputs {k * num_replay.CHUNK:#010x}..)",
            f"cvt to {fmt}", got, ref, f.dtype,
            lambda pos, x=x: f"input {_value(x.view(np.uint32)[pos[0]], np.float32)}"))
    return failures, compared, len(chunks)


# ---- one instruction: MUFU ----------------------------------------------------------------------
def check_mufu(fn, form: str, what: str):
    """The MUFU calibration's recorded samples of ``form`` (2^20 inputs, the device's bits)."""
    samples = read_npz(mufu_replay.SAMPLES, "python -m simulator calibrate --out DIR (H200)")
    x_bits, dev = mufu_replay.decode_samples(form, samples)
    x = x_bits.view(np.float32)
    got = _float32(f"{what}'s return", _call(fn, x), x.shape).view(np.uint32)
    fail = compare_bits(f"MUFU calibration samples, {mufu_replay.FORMS[form][1]}", what, got, dev,
                        np.float32, lambda pos: f"input {_value(x_bits[pos[0]], np.float32)}")
    return [fail] if fail else [], got.size, 1


# ---- the step traces of the forward ---------------------------------------------------------------
def _thread_max(scores, prev):
    return thread_reduce(scores, prev, op="max", zero_init=prev is None)


def _rescale_outputs(fn, case, events, out):
    """rescale_o: the k-th rescale_o from the end applies the k-th max_get_scale's scale from the
    end (plain: the same block; IntraWGOverlap: one PV GEMM later; RescaleOBeforeGemm: before);
    O as the rescale finds it: the last PV GEMM's (or rescale's) output, else zeros."""
    mgs = [e for _, e in events if e.step == "max_get_scale"]
    rescales = [i for i, e in events if e.step == "rescale_o"]
    for k, i in enumerate(rescales[::-1]):
        shape = case.device.events[i].data["acc_o"].shape
        before = [e for j, e in events if j < i and "acc_o" in e.data]
        acc_o = rowcol(before[-1].data["acc_o"] if before else np.zeros(shape, np.float32))
        got = _float32("rescale_o's return", _call(fn, acc_o, mgs[-1 - k].data["scores_scale"]),
                       acc_o.shape)
        out[i] = {"acc_o": fragment(got)}


def _two_block_outputs(fn, case, cta, events, out):
    """online_softmax: the CTA's first two blocks, the reader's state carried between them."""
    mgs = [(i, e) for i, e in events if e.step == "max_get_scale"][:2]
    soft = [i for i, e in events if e.step == "online_softmax"][:2]
    blocks = [_scores_before(events, i, e.n_block) for i, e in mgs]
    res = _unpack("online_softmax's return", _call(fn, blocks, case.scale_log2[cta]), 4)
    rows = (2,) + mgs[0][1].data["row_max"].shape
    row_max, scale, p, row_sum = (
        _float32(f"{n} ({o} returned)", v, shape) for n, o, v, shape in zip(
            ("row_max", "scores_scale", "p", "row_sum"), ("1st", "2nd", "3rd", "4th"), res,
            (rows, rows, (2,) + blocks[0].shape, rows), strict=True))
    for j in range(2):
        out[mgs[j][0]] = {"row_max": row_max[j], "scores_scale": scale[j]}
        out[soft[j]] = {"acc_s": fragment(p[j]), "row_sum": row_sum[j]}


def trace_outputs(name: str, fn):
    """``outputs(case) -> {event: {array: value}}`` of rung ``name`` on a forward step trace."""
    def outputs(case):
        out = {}
        for cta, events in _cta_events(case.device).items():
            if name == "rescale_o":
                _rescale_outputs(fn, case, events, out)
                continue
            if name == "online_softmax":
                _two_block_outputs(fn, case, cta, events, out)
                continue
            prev, block_max, last_sum = None, {}, None
            for i, e in events:
                if e.step == "max_get_scale":
                    scores = _scores_before(events, i, e.n_block)
                    rows = e.data["row_max"].shape
                    if name == "quad_max":
                        got = _call(fn, _thread_max(scores, prev))
                        out[i] = {"row_max": _float32("quad_max's return", got, rows)}
                    elif name == "max_get_scale":
                        res = _unpack("max_get_scale's return", _call(fn, scores, prev,
                                                                     case.scale_log2[cta]), 2)
                        out[i] = {k: _float32(f"{k} ({n} returned)", v, rows) for k, v, n in
                                  zip(("row_max", "scores_scale"), res, ("1st", "2nd"), strict=True)}
                    prev = e.data["row_max"]
                    block_max[e.n_block] = (prev, scores)
                elif e.step == "online_softmax":
                    if name == "scale_apply_exp2":
                        rm, scores = block_max[e.n_block]
                        p = _float32("scale_apply_exp2's return",
                                     _call(fn, scores, rm, case.scale_log2[cta]), scores.shape)
                        out[i] = {"acc_s": fragment(p)}
                    last_sum = e.data["row_sum"]
                elif e.step == "finalize" and name == "quad_sum":
                    got = _float32("quad_sum's return", _call(fn, last_sum), last_sum.shape)
                    out[i] = {"row_sum": got}
        return out
    return outputs


def check_trace_rung(fn, name: str):
    """Rung ``name`` on the recorded forward step traces (scale_apply_exp2 and online_softmax:
    bf16 / f16 only, the FP8 kernels' P carries Max_offset)."""
    cases = recorded.trace_cases()
    if name in ("scale_apply_exp2", "online_softmax"):
        cases = tuple(c for c in cases if c.max_offset == 0)
    failures, compared, outputs_of = [], 0, trace_outputs(name, fn)
    for case in cases:
        outs = outputs_of(case)
        div, n = _compare_trace(case, outs)
        compared += n
        if div.found:
            where = div.to_dict()
            k, array = where["event_index"], where["array"]
            got = np.ascontiguousarray(outs[k][array], np.float32).view(np.uint32)
            want = np.ascontiguousarray(case.device.events[k].data[array], np.float32).view(np.uint32)
            where["tile"] = (got, want, np.dtype(np.float32))   # threads x registers
            failures.append((f"recorded step trace '{case.name}'", str(div), where))
    return failures, compared, len(cases)


# ---- the backward's dS ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def backward_cases() -> tuple:
    """The twin backward traces kept in full: ``(label, p, dp, dpsum, dtanh, ds)`` per m_block,
    float32 ``[rows, keys]`` (``dpsum`` ``[rows]``, ``dtanh`` None without softcap)."""
    report = read_json(tb.TRACE_REPORT, tb.REGENERATE)
    sample = read_npz(tb.TRACE_SAMPLE, tb.REGENERATE)
    out = []
    for entry in report["traces"]:
        key = entry["key"]
        if f"{key}_ds" not in sample:
            continue
        case = entry["case"]
        x = tb.inputs(case)
        cfg = make_backward_config(x["dout"], x["q"], x["k"], x["v"], x["out"], x["lse"],
                                   **tb.backward_kwargs(case))
        dpsum = preprocess_dpsum(np.swapaxes(x["out"], 1, 2), np.swapaxes(x["dout"], 1, 2),
                                 cfg.tiles.kernel_head_dim)
        b, h, n_block = entry["cta"]
        rows_per = cfg.tiles.kblock_m
        f32 = {k: sample[f"{key}_{k}"].view(np.float32) for k in ("p", "dp", "ds", "dtanh")
               if f"{key}_{k}" in sample}
        for j, mb in enumerate(sample[f"{key}_m_blocks"]):
            r = np.arange(mb * rows_per, (mb + 1) * rows_per)
            row_sum = np.where(r < dpsum.shape[-1], dpsum[b, h, np.minimum(r, dpsum.shape[-1] - 1)],
                               np.float32(0)).astype(np.float32)
            out.append((f"backward step trace '{case['name']}' CTA {tuple(entry['cta'])} "
                        f"(n_block {n_block}), m_block {int(mb)}", f32["p"][j], f32["dp"][j],
                        row_sum, f32["dtanh"][j] if "dtanh" in f32 else None, f32["ds"][j]))
    return tuple(out)


def check_backward_ds(fn):
    """dS of every m_block of the three backward traces kept in full."""
    failures, compared = [], 0
    cases = backward_cases()
    for label, p, dp, dpsum, dtanh, ds in cases:
        got = _float32("backward_ds's return", _call(fn, p, dp, dpsum, dtanh), ds.shape)
        compared += got.size
        fail = compare_bits(label, "dS", got.view(np.uint32), ds.view(np.uint32), np.float32,
                            lambda pos: f"row {pos[0]} of the m_block, key {pos[1]} of the block")
        if fail:
            failures.append(fail)
    return failures, compared, len(cases)


# ---- one wgmma ----------------------------------------------------------------------------------
WGMMA_PROBE = "wgmma_m64n8k16_bf16"


@functools.lru_cache(maxsize=1)
def _wgmma_block():
    report, digests = mma_replay.load_recorded()
    a, b, c = mma_block("bf16", 64, 8, 16, 0, mma_replay.tiles_per_block(WGMMA_PROBE, report))
    return (a.view(ml_dtypes.bfloat16), b.view(ml_dtypes.bfloat16), c.view(np.float32),
            digests[f"{WGMMA_PROBE}_head"], digests[WGMMA_PROBE][0].tobytes())


def check_wgmma(fn):
    """Block 0 of the tensor-core probe of ``wgmma.m64n8k16.f32.bf16.bf16`` (512 instructions):
    its raw head (the first 8,192 outputs), then the block's digest; a block that differs only
    past the head is located with the emulator's bits, once they match the digest."""
    a, b, c, head, block_digest = _wgmma_block()
    got = _float32("wgmma_dot_add's return", _call(fn, a, b, c), c.shape).view(np.uint32)
    label = f"tensor-core probe {WGMMA_PROBE}, block 0 ({len(c)} instructions)"

    def where(pos):
        return f"instruction {pos[0]}, row {pos[1]} of 64, column {pos[2]} of 8"

    flat_head = head.reshape(-1, 64, 8)
    fail = compare_bits(label, "D", got[:len(flat_head)], flat_head, np.float32, where)
    if fail is None and digest(got) != block_digest:
        ref = mma_wgmma("m64n8k16.f32.bf16.bf16", a, b, c).view(np.uint32)
        if digest(ref) != block_digest:
            raise RecordedDataError(f"mma_digests.npz: {WGMMA_PROBE} block 0 cannot be located")
        fail = compare_bits(label, "D", got, ref, np.float32, where)
    return [fail] if fail else [], got.size, 1


# ---- one CTA's mainloop ---------------------------------------------------------------------------
def check_mainloop(fn):
    """Every traced bf16 / f16 CTA without softcap: O after finalize's scale (the epilogue's
    ``acc_o``, as a matrix) and the LSE (finalize's ``lse``, one per row)."""
    failures, compared = [], 0
    cases = recorded.mainloop_cases()
    for m in cases:
        events = [e for e in m.case.device.events if e.cta == m.cta]
        epilogue = events[-1].data["acc_o"]
        o_layout = accumulator_layout(f"m64n{2 * epilogue.shape[-1]}k16")
        want_o = o_layout.to_matrix(epilogue)
        fin = next(e for e in events if e.step == "finalize")
        want_lse = rowcol_view(f"m64n{m.k_blocks.shape[1]}k16").row_values(fin.data["lse"])
        res = _unpack("cta_mainloop's return", _call(fn, m.q, m.k_blocks, m.v_blocks, m.keep,
                                                     m.case.scale_log2[m.cta]), 2)
        o = _float32("o (1st returned)", res[0], want_o.shape)
        lse = _float32("lse (2nd returned)", res[1], want_lse.shape)
        compared += o.size + lse.size
        for array, got, want, text in (
                ("lse", lse, want_lse, lambda p: f"warpgroup {p[0]}, row {p[1]} of 64"),
                ("O", o, want_o, lambda p: f"warpgroup {p[0]}, row {p[1]} of 64, column {p[2]}")):
            fail = compare_bits(m.label, array, got.view(np.uint32), want.view(np.uint32),
                                np.float32, text)
            if fail:
                failures.append(fail)
                break
    return failures, compared, len(cases)


# ---- dispatch ----------------------------------------------------------------------------------
def run_rung(puzzle, fn):
    """Run ladder rung ``puzzle`` (a :class:`simulator.exercises.ladder.Puzzle`) on ``fn``."""
    kind = puzzle.kind
    if kind[0] == "legacy":
        return checker_run(kind[1], puzzle.name, fn, shown=puzzle.number)
    try:
        if kind[0] == "fma":
            failures, compared, total = check_fma(fn)
        elif kind[0] == "cvt":
            failures, compared, total = check_conversion(fn, kind[1])
        elif kind[0] == "mufu":
            failures, compared, total = check_mufu(fn, kind[1], puzzle.name)
        elif kind[0] == "trace":
            failures, compared, total = check_trace_rung(fn, kind[1])
        elif kind[0] == "wgmma":
            failures, compared, total = check_wgmma(fn)
        elif kind[0] == "mainloop":
            failures, compared, total = check_mainloop(fn)
        else:
            failures, compared, total = check_backward_ds(fn)
    except _BadReturn as exc:
        return bad_return(puzzle.number, puzzle.name, exc)
    return result(puzzle.number, puzzle.name, failures, total, compared)
