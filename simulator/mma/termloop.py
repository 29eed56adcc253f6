"""The fused dot-add of :mod:`simulator.mma.spec`, one K term at a time.

The specification materialises every output's K + 1 terms at once; here a step loops over the
K terms (16 or 32) and vectorises over a cache-sized tile of outputs, so the working set is a
few arrays of one tile's outputs. Same bits as :func:`simulator.mma.spec.spec_step`
(``tests/test_mma.py`` checks it on random and special-value operands; ``verify --topic mma``
on every recorded probe tile).
"""

from __future__ import annotations

import numpy as np

from .spec import FusedDotAdd, canonical_nan, floor_log2, round_to_float32

_NO_EXP = -16000  # exponent given to zero operands: never the largest (two still fit int16)


def _operand_exponents(x: np.ndarray, emin: int) -> np.ndarray:
    """max(floor(log2|x|), emin) per element as int16; zeros and non-finite get _NO_EXP."""
    ok = (x != 0) & np.isfinite(x)
    e = np.maximum(floor_log2(np.where(ok, x, 1.0)), emin)
    return np.where(ok, e, _NO_EXP).astype(np.int16)


# Outputs per tile of the term loop: the tile's float64 working arrays (a few times 256 KiB)
# stay in the L2 cache, where each NumPy pass runs about 4x faster than on arrays streamed
# from memory (measured on a 2-core Xeon VM, 2026-12-01: 0.28 vs 1.07 ns per element for a
# multiply-truncate-add chain on 2^15 vs 2^20 elements; benchmarks/bench_mma.py times the GEMM).
_TILE_OUTPUTS = 1 << 15


def term_loop_step(a: np.ndarray, b: np.ndarray, c: np.ndarray, p: FusedDotAdd) -> np.ndarray:
    """The arithmetic of :func:`simulator.mma.spec.spec_step`, organised as
    a loop over the K terms (16 or 32) vectorised over a cache-sized tile of outputs: exponents
    are summed in int16, products formed, scaled to the common fixed point 2^(F - E), truncated,
    and summed in float64 (exact: every partial sum is an integer below 2^40). Outputs touching
    a non-finite value, or an exact zero with a -0 accumulator, are fixed by :func:`_fix_special`.
    """
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], np.shape(c)[:-2])
    m, k = a.shape[-2:]
    n = b.shape[-1]
    rows = int(np.prod(lead, dtype=np.int64))
    if rows * m * n == 0:  # no output at all
        return np.zeros(lead + (m, n), dtype=np.float32)
    a3 = np.broadcast_to(a, lead + (m, k)).reshape(rows, m, k)
    b3 = np.broadcast_to(b, lead + (k, n)).reshape(rows, k, n)
    c3 = np.broadcast_to(np.asarray(c, dtype=np.float32), lead + (m, n)).reshape(rows, m, n)
    fin_a, fin_b = np.isfinite(a3), np.isfinite(b3)
    ea = _operand_exponents(a3, p.emin)
    eb = _operand_exponents(b3, p.emin)
    # non-finite operands read as 0 here (their outputs are replaced by _fix_special)
    a0 = np.where(fin_a, a3, 0.0)
    b0 = np.where(fin_b, b3, 0.0)
    total = np.empty((rows, m, n), dtype=np.float64)
    # tiles of whole batch entries when one entry is small, else of rows of one entry
    per_entry = m * n
    if per_entry >= _TILE_OUTPUTS:
        step_m = max(1, _TILE_OUTPUTS // n)
        tiles = [(r, r + 1, m0, min(m, m0 + step_m)) for r in range(rows) for m0 in range(0, m, step_m)]
    else:
        step_r = max(1, _TILE_OUTPUTS // per_entry)
        tiles = [(r0, min(rows, r0 + step_r), 0, m) for r0 in range(0, rows, step_r)]
    for r0, r1, m0, m1 in tiles:  # a handful of cache-sized tiles, each fully vectorised
        total[r0:r1, m0:m1] = tile_sum(a0[r0:r1, m0:m1], b0[r0:r1], ea[r0:r1, m0:m1], eb[r0:r1],
                                        c3[r0:r1, m0:m1].astype(np.float64), p.frac_bits)
    d = round_to_float32(total, p.out_round, p.out_bits)
    d = fix_special(d, total, a3, b3, c3, fin_a, fin_b)
    return canonical_nan(d).reshape(lead + (m, n))


def tile_sum(a: np.ndarray, b: np.ndarray, ea: np.ndarray, eb: np.ndarray, c64: np.ndarray,
              frac_bits: int) -> np.ndarray:
    """Exact sum of the truncated terms of one tile: a [R, M, K], b [R, K, N], ea/eb their
    int16 exponents, c64 [R, M, N] finite-or-not accumulator; returns float64 [R, M, N]."""
    # K terms whose products are all zero in this tile add nothing to E or to the sum: skip
    # them (FlashAttention's P V has whole zero columns of P beyond seqlen_k or under masks)
    live = np.flatnonzero((a != 0).any(axis=-2).any(axis=0) & (b != 0).any(axis=-1).any(axis=0))
    c_ok = (c64 != 0) & np.isfinite(c64)
    big_e = np.where(c_ok, floor_log2(np.where(c_ok, c64, 1.0)), _NO_EXP).astype(np.int16)
    tmp_e = np.empty_like(big_e)
    for kk in live:  # at most K = 16 or 32: the terms of one fused step
        np.add(ea[..., :, kk, None], eb[..., kk, None, :], out=tmp_e)
        np.maximum(big_e, tmp_e, out=big_e)
    big_e[big_e < _NO_EXP // 2] = 0  # no nonzero finite term at all: any scale works
    # 2^(F - E) built from its bits: F - E stays inside float64's normal exponents
    scale = ((frac_bits + 1023 - big_e.astype(np.int64)) << 52).view(np.float64)
    total = np.where(c_ok, c64, 0.0)
    total *= scale
    np.trunc(total, out=total)
    term = np.empty_like(total)
    for kk in live:
        np.multiply(a[..., :, kk, None], b[..., kk, None, :], out=term)  # exact product
        term *= scale
        np.trunc(term, out=term)
        total += term
    total /= scale
    return total


def fix_special(d, total, a, b, c, fin_a, fin_b):
    """Outputs of the fast path that need IEEE rules rather than the fixed-point sum.

    a [R, M, K], b [R, K, N] float64, c [R, M, N] float32, d the fast-path result. An output
    whose products or accumulator include inf or NaN is the IEEE value of the exact sum (in
    float64 the finite terms can never overflow: |a*b| < 2^256, 33 terms), and an exact zero
    sum is -0 only when every term is -0 (IEEE sums of signed zeros).
    """
    special = ~fin_a.all(axis=-1)[:, :, None] | ~fin_b.all(axis=-2)[:, None, :] | ~np.isfinite(c)
    neg_zero_c = (total == 0) & (c == 0) & np.signbit(c) & ~special
    if neg_zero_c.any():
        d = np.where(neg_zero_c & all_products_neg_zero(a, b), np.float32(-0.0), d)
    if special.any():
        r, i, j = np.nonzero(special)
        with np.errstate(invalid="ignore"):  # inf * 0 and inf - inf give NaN, as on the device
            prods = a[r, i, :] * b[r, :, j]                      # [S, K] exact products
            ieee = (prods.sum(axis=-1) + c[r, i, j].astype(np.float64)).astype(np.float32)
        d = d.copy()
        d[r, i, j] = ieee
    return d


def all_products_neg_zero(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """bool [R, M, N]: every product a[r, m, k] * b[r, k, n] (finite operands) is -0.

    That is: no product is nonzero, and no k has operands of the same sign bit. Both counts are
    matrix products of 0/1 indicators (exact in float32: at most 2 K), so this costs three small
    BLAS calls rather than a pass per K term.
    """
    f32 = np.float32
    sa, sb = np.signbit(a), np.signbit(b)
    count = np.matmul((a != 0).astype(f32), (b != 0).astype(f32))
    count += np.matmul(sa.astype(f32), sb.astype(f32))
    count += np.matmul((~sa).astype(f32), (~sb).astype(f32))
    return count == 0
