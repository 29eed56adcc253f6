"""Reference solutions of the exercises in :mod:`simulator.exercises.puzzles` (look last).

Each is written from the sequence its exercise states (docs/forward.md, docs/combine.md), with
the public float32 instructions of :mod:`simulator.numerics` and the warp model of
:mod:`simulator.hw`, and passes ``simulator.exercises.check`` against the H200's recordings.
The exercise module never imports this one.
"""

from __future__ import annotations

import numpy as np

from ..hw import shfl_xor
from ..numerics import fadd, ffma, fmax, fmul, fsub
from ..numerics.bits import flush_subnormal
from ..numerics.cvt import convert
from ..numerics.mufu import LN2_F32, LOG2E_F32, ex2, lg2, rcp

_NEG_INF = np.float32(-np.inf)
_ZERO = np.float32(0.0)


def _quad_butterfly(x: np.ndarray, op) -> np.ndarray:
    """``Allreduce<4>``: offsets 2 then 1, the own value as the first operand."""
    for lane_mask in (2, 1):
        x = op(x, shfl_xor(x, lane_mask, axis=-2), ftz=True)
    return x


def reduce_max(scores, row_max):
    """Puzzle reduce_max (see :func:`simulator.exercises.puzzles.reduce_max`)."""
    m = scores[..., 0] if row_max is None else fmax(row_max, scores[..., 0], ftz=True)
    for ni in range(1, scores.shape[-1]):  # the column order is the instruction order
        m = fmax(m, scores[..., ni], ftz=True)
    return _quad_butterfly(m, fmax)


def online_rescale(scores, row_max_prev, row_max, row_sum_prev, acc_o, scale_log2):
    """Puzzle online_rescale (see :func:`simulator.exercises.puzzles.online_rescale`)."""
    empty = row_max == _NEG_INF
    cur = np.where(empty, _ZERO, row_max)
    scores_scale = ex2(fmul(fsub(row_max_prev, cur, ftz=True), scale_log2, ftz=True))
    max_scaled = np.where(empty, _ZERO, fmul(row_max, scale_log2, ftz=True))
    p = ex2(ffma(scores, scale_log2, -max_scaled[..., None], ftz=True))
    row_sum = ffma(scores_scale, row_sum_prev, p[..., 0], ftz=True)
    for ni in range(1, p.shape[-1]):
        row_sum = fadd(row_sum, p[..., ni], ftz=True)
    return scores_scale, p, row_sum, fmul(acc_o, scores_scale[..., None], ftz=True)


def fp8_exp2(scores, row_max, scale_log2):
    """Puzzle fp8_exp2 (see :func:`simulator.exercises.puzzles.fp8_exp2`)."""
    max_scaled = ffma(row_max, scale_log2, np.float32(-8), ftz=True)
    max_scaled = np.where(row_max == _NEG_INF, _ZERO, max_scaled)
    return ex2(ffma(scores, scale_log2, -max_scaled[..., None], ftz=True))


def combine(lse, o, allreduce):
    """Puzzle combine (see :func:`simulator.exercises.puzzles.combine`)."""
    m = allreduce(lse, "max")
    cur = np.where(m == _NEG_INF, _ZERO, m)
    e = ex2(fmul(fsub(lse, cur, ftz=True), LOG2E_F32, ftz=True))
    total = allreduce(e, "sum")
    lse_out = ffma(lg2(total), LN2_F32, m, ftz=True)
    nonzero = (flush_subnormal(total) != _ZERO) & ~np.isnan(total)
    inv = np.where(nonzero, rcp(np.where(nonzero, total, np.float32(1))), _ZERO)
    w = fmul(e, inv, ftz=True)
    out = np.zeros(o.shape[1:], dtype=np.float32)
    for s in range(o.shape[0]):  # in split order: each FFMA rounds
        take = flush_subnormal(w[s]) > _ZERO
        out[take] = ffma(w[s][take, None], o[s][take], out[take], ftz=True)
    return out, lse_out


def finalize(row_max, row_sum, scale_log2, max_offset, final_scale):
    """Puzzle finalize (see :func:`simulator.exercises.puzzles.finalize`)."""
    total = _quad_butterfly(row_sum, fadd)
    empty = (total == 0) | np.isnan(total)
    inv = np.where(empty, _ZERO, rcp(np.where(empty, np.float32(1), total)))
    scores_scale = fmul(inv, final_scale, ftz=True)
    scaled = fmul(total, np.float32(2.0 ** -max_offset), ftz=True) if max_offset else total
    empty = (scaled == 0) | np.isnan(scaled)
    log_sum = fmul(lg2(np.where(empty, np.float32(1), scaled)), LN2_F32, ftz=True)
    lse = ffma(row_max, fmul(scale_log2, LN2_F32, ftz=True), log_sum, ftz=True)
    return total, scores_scale, np.where(empty, _NEG_INF, lse).astype(np.float32)


# ---- the ladder's new rungs (see simulator.exercises.stubs) ------------------------------------------
def fma(a, b, c):
    """Puzzle fma: the compiler contracts ``a * b + c`` into one FFMA.FTZ (one rounding)."""
    return ffma(a, b, c, ftz=True)


def to_bf16(x):
    """Puzzle to_bf16: ``cvt.rn.bf16.f32``, round to nearest even, NaN to the canonical NaN."""
    return convert(x, "bf16")


def to_e4m3(x):
    """Puzzle to_e4m3: ``cvt.rn.satfinite.e4m3x2.f32``: out-of-range values clamp to +-448."""
    return convert(x, "e4m3", satfinite=True)


def exp2_row(x):
    """Puzzle exp2_row: ``exp2f`` under fast math is one MUFU.EX2 with ``.ftz``."""
    return ex2(x, ftz=True)


def fast_expf(x):
    """Puzzle fast_expf: FMUL.FTZ by the float32 log2(e), then MUFU.EX2."""
    return ex2(fmul(x, LOG2E_F32, ftz=True), ftz=True)


def quad_max(m):
    """Puzzle quad_max: ``Allreduce<4>`` with max.ftz (lane masks 2 then 1)."""
    return _quad_butterfly(m, fmax)


def quad_sum(s):
    """Puzzle quad_sum: ``Allreduce<4>`` with add.ftz, lane mask 2 first: the order sets the bits."""
    return _quad_butterfly(s, fadd)


def scale_apply_exp2(scores, row_max, scale_log2):
    """Puzzle scale_apply_exp2: the max times the scale once per row (0 for -inf, Check_inf),
    then one FFMA per element into MUFU.EX2."""
    max_scaled = np.where(row_max == _NEG_INF, _ZERO, fmul(row_max, scale_log2, ftz=True))
    return ex2(ffma(scores, scale_log2, -max_scaled[..., None], ftz=True))


def max_get_scale(scores, row_max_prev, scale_log2):
    """Puzzle max_get_scale: exercise 1's reduce_max, then (later blocks) FSUB, FMUL, MUFU.EX2."""
    row_max = reduce_max(scores, row_max_prev)
    if row_max_prev is None:
        return row_max, np.ones_like(row_max)
    cur = np.where(row_max == _NEG_INF, _ZERO, row_max)
    return row_max, ex2(fmul(fsub(row_max_prev, cur, ftz=True), scale_log2, ftz=True))


def backward_ds(p, dp, dpsum, dtanh):
    """Puzzle backward_ds: FSUB then FMUL (no FFMA), then FMUL by dtanh with a softcap."""
    ds = fmul(p, fsub(dp, dpsum[..., None], ftz=True), ftz=True)
    return ds if dtanh is None else fmul(ds, dtanh, ftz=True)


def rescale_o(acc_o, scores_scale):
    """Puzzle rescale_o: one FMUL.FTZ per element of O by its row's scale."""
    return fmul(acc_o, scores_scale[..., None], ftz=True)


def _row_sum(p, scale=None, prev=None):
    """A thread's columns of P in order: from ``p[..., 0]`` on a first block, else from
    ``ffma(scale, prev, p[..., 0])`` (the rescale contracted with the first add)."""
    s = p[..., 0] if prev is None else ffma(scale, prev, p[..., 0], ftz=True)
    for ni in range(1, p.shape[-1]):  # the column order is the instruction order
        s = fadd(s, p[..., ni], ftz=True)
    return s


def online_softmax(blocks, scale_log2):
    """Puzzle online_softmax: puzzle 10 and 9 per block, the sum carried from block to block."""
    row_max, row_sum, out = None, None, []
    for scores in blocks:
        row_max, scale = max_get_scale(scores, row_max, scale_log2)
        p = scale_apply_exp2(scores, row_max, scale_log2)
        row_sum = _row_sum(p, scale, row_sum)
        out.append((row_max, scale, p, row_sum))
    return tuple(np.stack(x) for x in zip(*out, strict=True))


def wgmma_dot_add(a, b, c):
    """Puzzle wgmma_dot_add: the 16 exact products and C aligned to the largest exponent
    (a product's is the sum of its operands' exponents, a subnormal bf16 counting as 2^-126),
    each truncated to 25 bits below it, summed exactly, the sum truncated to float32."""
    a64, b64 = a.astype(np.float64), np.swapaxes(b.astype(np.float64), -1, -2)
    c64 = c.astype(np.float64)
    with np.errstate(invalid="ignore"):
        terms = np.concatenate([a64[..., :, None, :] * b64[..., None, :, :], c64[..., None]], -1)

    def expo(x):  # floor(log2 |x|) of the nonzero values, bf16 subnormals as -126
        return np.frexp(np.where(x != 0, x, 1.0))[1].astype(np.int64) - 1

    e = np.concatenate([np.maximum(expo(a64), -126)[..., :, None, :]
                        + np.maximum(expo(b64), -126)[..., None, :, :], expo(c64)[..., None]], -1)
    live = np.isfinite(terms) & (terms != 0)
    big = np.where(live, e, -(1 << 20)).max(axis=-1, keepdims=True)
    quantum = np.ldexp(1.0, np.where(big < -(1 << 19), 0, big - 25))
    with np.errstate(invalid="ignore"):
        total = (np.trunc(np.where(live, terms, 0.0) / quantum)).sum(axis=-1) * quantum[..., 0]
    neg_zero = np.all((terms == 0) & np.signbit(terms), axis=-1)   # -0 only if every term is
    total = np.where((total == 0) & neg_zero, -0.0, total)
    bits = total.view(np.uint64) & ~np.uint64((1 << 29) - 1)       # truncate to 24 bits
    tiny = np.trunc(total * 2.0**149) * 2.0**-149                     # below 2^-126: 2^-149 steps
    with np.errstate(over="ignore"):
        d = np.where(np.abs(total) < 2.0**-126, tiny, bits.view(np.float64)).astype(np.float32)
    with np.errstate(invalid="ignore"):
        special = np.where(np.isfinite(terms), 0.0, terms).sum(axis=-1)
    d = np.where(np.isfinite(terms).all(axis=-1), d, special.astype(np.float32))
    d[np.isnan(d)] = np.uint32(0x7FFFFFFF).view(np.float32)
    return d


def cta_mainloop(q, k_blocks, v_blocks, keep, scale_log2):
    """Puzzle cta_mainloop: per block QK^T from a -0 accumulator, the mask, puzzles 10, 9 and
    the carried sum, O rescaled (puzzle 11) and P V added with P converted; then finalize."""
    from ..hw import rowcol_view  # noqa: PLC0415
    from ..mma import gemm  # noqa: PLC0415

    fmt = "f16" if q.dtype == np.float16 else "bf16"
    n, dv = k_blocks.shape[1], v_blocks.shape[-1]
    view_s = rowcol_view(f"m64n{n}k16")
    ins = f"wgmma.m64n{n}k16.f32.{fmt}.{fmt}"
    acc_o = np.zeros(q.shape[:-1] + (dv,), np.float32)
    row_max = row_sum = None
    for kb, vb, ok in zip(k_blocks, v_blocks, keep, strict=True):
        s = gemm(q, kb.T, np.full(q.shape[:-1] + (n,), -0.0, np.float32), instruction=ins)
        scores = view_s.apply(view_s.layout.from_matrix(np.where(ok, s, _NEG_INF)))
        row_max, scale = max_get_scale(scores, row_max, scale_log2)
        p = scale_apply_exp2(scores, row_max, scale_log2)
        row_sum = _row_sum(p, scale, row_sum)
        acc_o = fmul(acc_o, view_s.row_values(scale)[..., None], ftz=True)   # puzzle 11, by row
        p_tile = view_s.layout.to_matrix(view_s.unapply(p))
        acc_o = gemm(convert(p_tile, fmt), vb, acc_o, instruction=f"wgmma.m64n{dv}k16.f32.{fmt}.{fmt}")
    _, final, lse = finalize(row_max, row_sum, scale_log2, 0, np.float32(1))
    return fmul(acc_o, view_s.row_values(final)[..., None], ftz=True), view_s.row_values(lse)
