"""The tensor-core arithmetic: a fused dot-add with aligned, truncated terms.

One MMA instruction computes, for every output element, ``d = sum_k a[k] * b[k] + c`` as one
fused operation (PTX ISA, "Warp-level matrix multiply-accumulate"; the arithmetic is not
specified there). The model, after MMA-Sim (arXiv 2511.10909) and Fasi et al. (2021), with its
parameters fixed by the H200 probes recorded in ``simulator/data/device/mma_*``:

1. every product ``a[k] * b[k]`` is exact (inputs are at most 11-bit significands);
2. the terms (products and ``c``) are aligned to the largest exponent ``E`` among them;
3. each term is truncated toward zero to ``frac_bits`` bits below ``2^E``;
4. the truncated terms are summed exactly;
5. the sum is rounded to float32 (toward zero, at ``out_bits`` significant bits).

Non-finite terms follow IEEE rules (inf*0 and inf-inf give NaN); every NaN result is
0x7fffffff. All of it is vectorised over leading axes: no Python loop over elements.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class FusedDotAdd:
    """Parameters of one tensor-core dot-add.

    Attributes:
        frac_bits: bits kept below the leading exponent E for each aligned term.
        out_bits: significant bits of the float32 result (24 = full float32).
        out_round: ``"rz"`` (toward zero) or ``"rn"`` (nearest even) for the final rounding.
        product_exponent: ``"normalized"`` aligns to floor(log2|a*b|); ``"sum"`` aligns to
            ea + eb (the product before its normalisation shift).
        c_in_sum: whether c joins the fused sum (else d = round(round(sum) + c)).
        emin: smallest normal exponent of the operand format; a subnormal operand's exponent
            counts as ``emin`` when ``product_exponent == "sum"`` (its significand is 0.f).
        subnormal_inputs: ``"keep"`` or ``"flush"`` (read subnormal operands as zero).
        c_round: rounding of the separate ``+ c`` when ``c_in_sum`` is False.
        k_chunk: when set, K is processed in consecutive chunks of this size, each a fused
            dot-add whose C is the previous chunk's float32 result (0 = one fused step).
        k_steps: when set, the K positions of each sequential fused step, in order (overrides
            ``k_chunk``): step s sums the products at positions ``k_steps[s]`` with the previous
            step's float32 result as its accumulator. FP8 mma.sync m16n8k32 on sm_90 is two
            steps, k % 4 in {0, 1} then k % 4 in {2, 3} (docs/mma.md).
        operand_bits: significant bits of every operand value (bf16 8, f16 11, e4m3 4,
            e5m2 3; 0 = unknown). When known, :mod:`simulator.mma.fast` computes the same
            arithmetic with BLAS for the outputs whose terms lose no bit to the alignment.
    """

    frac_bits: int = 25
    out_bits: int = 24
    out_round: str = "rz"
    product_exponent: str = "normalized"
    c_in_sum: bool = True
    emin: int = -126
    subnormal_inputs: str = "keep"
    k_chunk: int = 0
    c_round: str = "rn"
    k_steps: tuple[tuple[int, ...], ...] = ()
    operand_bits: int = 0


def _floor_log2(x: np.ndarray) -> np.ndarray:
    """floor(log2|x|) for nonzero finite float64 x (exact, via frexp)."""
    _, e = np.frexp(x)
    return e.astype(np.int64) - 1


def _exponent_sum(a: np.ndarray, b: np.ndarray, emin: int) -> np.ndarray:
    """ea + eb with each exponent max(floor(log2|.|), emin) of the (nonzero) operand."""
    return np.maximum(_floor_log2(a), emin) + np.maximum(_floor_log2(b), emin)


def round_to_float32(x: np.ndarray, mode: str, bits: int = 24) -> np.ndarray:
    """Round float64 values to float32 keeping ``bits`` significant bits (``bits`` <= 24).

    ``mode`` is ``"rz"`` (toward zero) or ``"rn"`` (nearest even). For ``bits`` < 24 the value is
    first rounded in float64 to ``bits`` bits (below float32's normal range the float32 quantum
    applies). Magnitudes of 2^128 and above give +-inf in both modes.
    """
    x = np.asarray(x, dtype=np.float64)
    if mode == "rz":
        return _rz_to_float32(x, bits)
    if bits < 24:
        e = np.where(x == 0, 0, _floor_log2(np.where(x == 0, 1.0, x)))
        q = np.ldexp(1.0, np.maximum(e, -126) - (bits - 1))
        with np.errstate(invalid="ignore"):
            scaled = x / q
            x = np.rint(scaled) * q
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float32)  # nearest even; 2^128 and above overflow to +-inf


def _rz_to_float32(x: np.ndarray, bits: int) -> np.ndarray:
    """Round toward zero to ``bits`` significant bits, as float32 (see round_to_float32).

    Inside float32's normal range, truncation is clearing the low 53 - bits significand bits of
    the float64 (the cast to float32 is then exact); a cleared value of 2^128 or more casts to
    +-inf (measured: bf16 dot products beyond float32's range give +-inf on the H200). Values
    below 2^-126 are cut at the quantum 2^(-126 - (bits - 1)) (2^-149 for 24 bits). NaN and inf pass
    through (their payload is made canonical by the callers).
    """
    cleared = (x.view(np.uint64) & np.uint64(~((1 << (53 - bits)) - 1) & 0xFFFFFFFFFFFFFFFF))
    with np.errstate(over="ignore"):
        r = np.where(np.isfinite(x), cleared.view(np.float64), x).astype(np.float32)
    tiny = (np.abs(x) < 2.0**-126) & (x != 0)
    if tiny.any():
        q = 2.0 ** (-126 - (bits - 1))
        r[tiny] = (np.trunc(x[tiny] / q) * q).astype(np.float32)  # exact: a multiple of q
    return r


def fused_dot_add(a: np.ndarray, b: np.ndarray, c: np.ndarray, p: FusedDotAdd) -> np.ndarray:
    """``d[..., m, n] = fused(sum_k a[..., m, k] * b[..., k, n] + c[..., m, n])``.

    Args:
        a: float64 array [..., M, K] holding the exact values of the narrow A operands.
        b: float64 array [..., K, N].
        c: float32 array [..., M, N].
        p: the arithmetic parameters.
    Returns:
        float32 array [..., M, N].
    """
    if not p.c_in_sum:
        # products first (from a zero accumulator), then a separate float32 add of c
        zero = np.zeros(np.broadcast_shapes(a.shape[:-1] + (b.shape[-1],), np.shape(c)), np.float32)
        s = fused_dot_add(a, b, zero, replace(p, c_in_sum=True))
        with np.errstate(invalid="ignore"):
            d = round_to_float32(s.astype(np.float64) + np.asarray(c, dtype=np.float64), p.c_round)
        return _canonical_nan(d)
    k = a.shape[-1]
    steps = _k_steps(p, k)
    if len(steps) > 1:
        d = np.asarray(c, dtype=np.float32)
        for idx in steps:  # the hardware's sequential steps, a handful
            d = _one_step(a[..., idx], b[..., idx, :], d, p)
        return d
    return _one_step(a, b, c, p)


def _k_steps(p: FusedDotAdd, k: int) -> list:
    """Index lists (or slices) of K positions, one per sequential fused step."""
    if p.k_steps:
        if sorted(i for step in p.k_steps for i in step) != list(range(k)):
            raise ValueError(f"k_steps {p.k_steps} do not cover K = {k} positions exactly once")
        return [list(step) for step in p.k_steps]
    if p.k_chunk and p.k_chunk < k:
        return [slice(k0, k0 + p.k_chunk) for k0 in range(0, k, p.k_chunk)]
    return [slice(0, k)]


def _one_step(a: np.ndarray, b: np.ndarray, c: np.ndarray, p: FusedDotAdd) -> np.ndarray:
    from . import fast  # BLAS for the clean outputs; it calls back into this module's model

    if fast.preferred(p):
        return fast.fused_step(a, b, c, p)
    if p.product_exponent == "sum" and p.subnormal_inputs == "keep":
        return _fused_step_fast(a, b, c, p)
    return _fused_step(a, b, c, p)


_NO_EXP = -16000  # exponent given to zero operands: never the largest (two still fit int16)


def _operand_exponents(x: np.ndarray, emin: int) -> np.ndarray:
    """max(floor(log2|x|), emin) per element as int16; zeros and non-finite get _NO_EXP."""
    ok = (x != 0) & np.isfinite(x)
    e = np.maximum(_floor_log2(np.where(ok, x, 1.0)), emin)
    return np.where(ok, e, _NO_EXP).astype(np.int16)


# Outputs per tile of the term loop: the tile's float64 working arrays (a few times 256 KiB)
# stay in the L2 cache, where each NumPy pass runs about 4x faster than on arrays streamed
# from memory (measured on a 2-core Xeon VM, 2026-12-01: 0.28 vs 1.07 ns per element for a
# multiply-truncate-add chain on 2^15 vs 2^20 elements; benchmarks/bench_mma.py times the GEMM).
_TILE_OUTPUTS = 1 << 15


def _fused_step_fast(a: np.ndarray, b: np.ndarray, c: np.ndarray, p: FusedDotAdd) -> np.ndarray:
    """The same arithmetic as :func:`_fused_step` for ``product_exponent="sum"``, organised as
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
        total[r0:r1, m0:m1] = _tile_sum(a0[r0:r1, m0:m1], b0[r0:r1], ea[r0:r1, m0:m1], eb[r0:r1],
                                        c3[r0:r1, m0:m1].astype(np.float64), p.frac_bits)
    d = round_to_float32(total, p.out_round, p.out_bits)
    d = _fix_special(d, total, a3, b3, c3, fin_a, fin_b)
    return _canonical_nan(d).reshape(lead + (m, n))


def _tile_sum(a: np.ndarray, b: np.ndarray, ea: np.ndarray, eb: np.ndarray, c64: np.ndarray,
              frac_bits: int) -> np.ndarray:
    """Exact sum of the truncated terms of one tile: a [R, M, K], b [R, K, N], ea/eb their
    int16 exponents, c64 [R, M, N] finite-or-not accumulator; returns float64 [R, M, N]."""
    # K terms whose products are all zero in this tile add nothing to E or to the sum: skip
    # them (FlashAttention's P V has whole zero columns of P beyond seqlen_k or under masks)
    live = np.flatnonzero((a != 0).any(axis=-2).any(axis=0) & (b != 0).any(axis=-1).any(axis=0))
    c_ok = (c64 != 0) & np.isfinite(c64)
    big_e = np.where(c_ok, _floor_log2(np.where(c_ok, c64, 1.0)), _NO_EXP).astype(np.int16)
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


def _fix_special(d, total, a, b, c, fin_a, fin_b):
    """Outputs of the fast path that need IEEE rules rather than the fixed-point sum.

    a [R, M, K], b [R, K, N] float64, c [R, M, N] float32, d the fast-path result. An output
    whose products or accumulator include inf or NaN is the IEEE value of the exact sum (in
    float64 the finite terms can never overflow: |a*b| < 2^256, 33 terms), and an exact zero
    sum is -0 only when every term is -0 (IEEE sums of signed zeros).
    """
    special = ~fin_a.all(axis=-1)[:, :, None] | ~fin_b.all(axis=-2)[:, None, :] | ~np.isfinite(c)
    neg_zero_c = (total == 0) & (c == 0) & np.signbit(c) & ~special
    if neg_zero_c.any():
        d = np.where(neg_zero_c & _all_products_neg_zero(a, b), np.float32(-0.0), d)
    if special.any():
        r, i, j = np.nonzero(special)
        with np.errstate(invalid="ignore"):  # inf * 0 and inf - inf give NaN, as on the device
            prods = a[r, i, :] * b[r, :, j]                      # [S, K] exact products
            ieee = (prods.sum(axis=-1) + c[r, i, j].astype(np.float64)).astype(np.float32)
        d = d.copy()
        d[r, i, j] = ieee
    return d


def _all_products_neg_zero(a: np.ndarray, b: np.ndarray) -> np.ndarray:
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


def _fused_step(a: np.ndarray, b: np.ndarray, c: np.ndarray, p: FusedDotAdd) -> np.ndarray:
    """One fused dot-add step (see :func:`fused_dot_add`)."""
    if p.subnormal_inputs == "flush":
        tiny = 2.0**p.emin
        a = np.where(np.abs(a) < tiny, np.copysign(0.0, a), a)
        b = np.where(np.abs(b) < tiny, np.copysign(0.0, b), b)
    with np.errstate(invalid="ignore"):  # inf * 0 -> NaN, handled with the other specials
        prods = a[..., :, None, :] * np.swapaxes(b, -1, -2)[..., None, :, :]  # [M, N, K] exact
    c64 = np.asarray(c, dtype=np.float64)
    terms = np.concatenate([prods, np.broadcast_to(c64, prods.shape[:-1])[..., None]], axis=-1)
    finite = np.isfinite(terms)
    nonzero = (terms != 0) & finite
    safe = np.where(nonzero, terms, 1.0)
    if p.product_exponent == "sum":
        safe_a = np.where(a != 0, a, 1.0)
        safe_b = np.where(b != 0, b, 1.0)
        exps = _exponent_sum(safe_a[..., :, None, :], np.swapaxes(safe_b, -1, -2)[..., None, :, :],
                             p.emin)
        c_exp = _floor_log2(np.where(c64 != 0, c64, 1.0))
        exps = np.concatenate([exps, np.broadcast_to(c_exp, exps.shape[:-1])[..., None]], -1)
    else:
        exps = _floor_log2(safe)
    exps = np.where(nonzero, exps, np.iinfo(np.int64).min // 2)
    big_e = exps.max(axis=-1, keepdims=True)
    big_e = np.where(big_e < -(1 << 40), 0, big_e)
    scale = np.ldexp(1.0, (p.frac_bits - big_e).astype(np.int64))
    with np.errstate(over="ignore", invalid="ignore"):
        fixed = np.trunc(np.where(nonzero, terms, 0.0) * scale)
        total = fixed.sum(axis=-1) / scale[..., 0]
    # zero results: +0 unless every term is -0 (IEEE sum of signed zeros)
    all_neg_zero = np.all(np.signbit(terms) & (terms == 0), axis=-1)
    total = np.where((total == 0) & all_neg_zero, -0.0, total)
    d = round_to_float32(total, p.out_round, p.out_bits)
    # non-finite terms: IEEE semantics of the exact sum, NaN canonical
    special = ~finite.all(axis=-1)
    if special.any():
        with np.errstate(invalid="ignore"):
            s = np.where(finite, 0.0, terms).sum(axis=-1)
        d = np.where(special, s.astype(np.float32), d)
    return _canonical_nan(d)


def _canonical_nan(d: np.ndarray) -> np.ndarray:
    nan = np.isnan(d)
    if nan.any():
        d = d.copy()
        d.view(np.uint32)[nan] = 0x7FFFFFFF
    return d
