"""The tensor-core arithmetic as a readable specification: a fused dot-add of aligned,
truncated terms.

One MMA instruction computes, for every output element, ``d = sum_k a[k] * b[k] + c`` as one
fused operation (PTX ISA, "Warp-level matrix multiply-accumulate"; the arithmetic is not
specified there). The model, after MMA-Sim (arXiv 2511.10909) and Fasi et al. (2021), with its
parameters fixed by the H200 probes recorded in ``simulator/data/device/mma_*``
(``simulator/mma/instructions.py`` lists them per instruction family):

1. every product ``a[k] * b[k]`` is exact (inputs are at most 11-bit significands);
2. each term's exponent is ``ea + eb`` for a product (the operands' exponents, a subnormal
   operand counting as the format's ``emin``: the product before its normalisation shift) and
   ``ec`` for C; the terms are aligned to the largest of them, ``E``;
3. each term is truncated toward zero to ``frac_bits`` bits below ``2^E``;
4. the truncated terms are summed exactly;
5. the sum is rounded to float32 (toward zero, at ``out_bits`` significant bits).

Non-finite terms follow IEEE rules (inf*0 and inf-inf give NaN); every NaN result is
0x7fffffff. :func:`spec_dot_add` is this list written out over a ``[..., M, N, K + 1]`` term
tensor; :mod:`simulator.mma.termloop` and :mod:`simulator.mma.fast` compute the same bits in
less memory and time, and :func:`simulator.mma.fused.fused_dot_add` picks between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FusedDotAdd:
    """Parameters of one tensor-core dot-add (only those the H200 probes fixed).

    Attributes:
        frac_bits: bits kept below the leading exponent E for each aligned term.
        out_bits: significant bits of the float32 result (24 = full float32).
        out_round: ``"rz"`` (toward zero) or ``"rn"`` (nearest even) for the final rounding.
        c_in_sum: whether c joins the fused sum (else d = round(round(sum) + c)).
        emin: smallest normal exponent of the operand format; a subnormal operand's exponent
            counts as ``emin`` (its significand is 0.f).
        c_round: rounding of the separate ``+ c`` when ``c_in_sum`` is False.
        k_steps: when set, the K positions of each sequential fused step, in order: step s sums
            the products at positions ``k_steps[s]`` with the previous step's float32 result as
            its accumulator. FP8 mma.sync m16n8k32 on sm_90 is two steps, k % 4 in {0, 1} then
            k % 4 in {2, 3} (docs/mma.md).
        operand_bits: significant bits of every operand value (bf16 8, f16 11, e4m3 4,
            e5m2 3; 0 = unknown). When known, :mod:`simulator.mma.fast` computes the same
            arithmetic with BLAS for the outputs whose terms lose no bit to the alignment.
    """

    frac_bits: int = 25
    out_bits: int = 24
    out_round: str = "rz"
    c_in_sum: bool = True
    emin: int = -126
    c_round: str = "rn"
    k_steps: tuple[tuple[int, ...], ...] = ()
    operand_bits: int = 0


def floor_log2(x: np.ndarray) -> np.ndarray:
    """floor(log2|x|) for nonzero finite float64 x (exact, via frexp), int64."""
    _, e = np.frexp(x)
    return e.astype(np.int64) - 1


def round_to_float32(x: np.ndarray, mode: str, bits: int = 24) -> np.ndarray:
    """Round float64 values to float32 keeping ``bits`` significant bits (``bits`` <= 24).

    ``mode`` is ``"rz"`` (toward zero) or ``"rn"`` (nearest even). For ``bits`` < 24 the value is
    first rounded in float64 to ``bits`` bits (below float32's normal range the float32 quantum
    applies). Magnitudes of 2^128 and above give +-inf in both modes.
    """
    x = np.asarray(x, dtype=np.float64)
    if mode == "rz":
        return rz_to_float32(x, bits)
    if bits < 24:
        e = np.where(x == 0, 0, floor_log2(np.where(x == 0, 1.0, x)))
        q = np.ldexp(1.0, np.maximum(e, -126) - (bits - 1))
        with np.errstate(invalid="ignore"):
            scaled = x / q
            x = np.rint(scaled) * q
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float32)  # nearest even; 2^128 and above overflow to +-inf


def rz_to_float32(x: np.ndarray, bits: int) -> np.ndarray:
    """Round toward zero to ``bits`` significant bits, as float32 (see round_to_float32).

    Inside float32's normal range, truncation is clearing the low 53 - bits significand bits of
    the float64 (the cast to float32 is then exact); a cleared value of 2^128 or more casts to
    +-inf (measured: bf16 dot products beyond float32's range give +-inf on the H200). Values
    below 2^-126 are cut at the quantum 2^(-126 - (bits - 1)) (2^-149 for 24 bits). NaN and inf
    pass through (their payload is made canonical by the callers).
    """
    cleared = (x.view(np.uint64) & np.uint64(~((1 << (53 - bits)) - 1) & 0xFFFFFFFFFFFFFFFF))
    with np.errstate(over="ignore"):
        r = np.where(np.isfinite(x), cleared.view(np.float64), x).astype(np.float32)
    tiny = (np.abs(x) < 2.0**-126) & (x != 0)
    if tiny.any():
        q = 2.0 ** (-126 - (bits - 1))
        r[tiny] = (np.trunc(x[tiny] / q) * q).astype(np.float32)  # exact: a multiple of q
    return r


def canonical_nan(d: np.ndarray) -> np.ndarray:
    """``d`` with every NaN as 0x7fffffff (the device's canonical NaN), copied if changed."""
    nan = np.isnan(d)
    if nan.any():
        d = d.copy()
        d.view(np.uint32)[nan] = 0x7FFFFFFF
    return d


def k_step_positions(p: FusedDotAdd, k: int) -> list:
    """Index lists (or one slice) of K positions, one per sequential fused step.

    Raises:
        ValueError: ``p.k_steps`` does not cover the K positions exactly once.
    """
    if p.k_steps:
        if sorted(i for step in p.k_steps for i in step) != list(range(k)):
            raise ValueError(f"k_steps {p.k_steps} do not cover K = {k} positions exactly once")
        return [list(step) for step in p.k_steps]
    return [slice(0, k)]


def spec_dot_add(a: np.ndarray, b: np.ndarray, c: np.ndarray, p: FusedDotAdd) -> np.ndarray:
    """``d[..., m, n] = fused(sum_k a[..., m, k] * b[..., k, n] + c[..., m, n])``, by the list
    in this module's docstring, with ``p.k_steps`` and ``p.c_in_sum`` applied.

    Args:
        a: float64 [..., M, K] exact values of the narrow A operands.
        b: float64 [..., K, N].
        c: float32 [..., M, N].
        p: the arithmetic parameters.
    Returns:
        float32 [..., M, N].
    Cost:
        memory of ``M N (K + 1)`` float64 terms per batch entry: the reference, not the path
        the emulator runs (``simulator.mma.fused.fused_dot_add``).
    """
    return dot_add_by_steps(a, b, c, p, spec_step)


def dot_add_by_steps(a: np.ndarray, b: np.ndarray, c: np.ndarray, p: FusedDotAdd, step) -> np.ndarray:
    """``p.k_steps`` and ``p.c_in_sum`` around one fused step: ``step(a, b, c, p)`` (C inside
    the sum) runs on each sequential group of K positions, the previous group's float32 result
    its accumulator; with ``c_in_sum`` False the products start from a zero accumulator and C
    is added after them by a float32 add rounded by ``p.c_round``. Shared by the spec and
    :func:`simulator.mma.fused.fused_dot_add`, which differ only in ``step``."""
    if not p.c_in_sum:  # products from a zero accumulator, then a separate float32 add of c
        zero = np.zeros(np.broadcast_shapes(a.shape[:-1] + (b.shape[-1],), np.shape(c)), np.float32)
        s = dot_add_by_steps(a, b, zero, FusedDotAdd(**{**vars(p), "c_in_sum": True}), step)
        with np.errstate(invalid="ignore"):
            d = round_to_float32(s.astype(np.float64) + np.asarray(c, dtype=np.float64), p.c_round)
        return canonical_nan(d)
    d = np.asarray(c, dtype=np.float32)
    for idx in k_step_positions(p, a.shape[-1]):  # the hardware's sequential steps, 1 or 2
        d = step(a[..., idx], b[..., idx, :], d, p)
    return d


def spec_step(a: np.ndarray, b: np.ndarray, c: np.ndarray, p: FusedDotAdd) -> np.ndarray:
    """One fused step, c inside the sum: a [..., M, K], b [..., K, N] float64, c float32."""
    with np.errstate(invalid="ignore"):  # inf * 0 -> NaN, handled with the other specials
        prods = a[..., :, None, :] * np.swapaxes(b, -1, -2)[..., None, :, :]  # [M, N, K] exact
    c64 = np.asarray(c, dtype=np.float64)
    terms = np.concatenate([prods, np.broadcast_to(c64, prods.shape[:-1])[..., None]], axis=-1)
    finite = np.isfinite(terms)
    nonzero = (terms != 0) & finite
    # step 2: exponents ea + eb of the products, ec of C
    ea = np.maximum(floor_log2(np.where(a != 0, a, 1.0)), p.emin)
    eb = np.maximum(floor_log2(np.where(b != 0, b, 1.0)), p.emin)
    exps = ea[..., :, None, :] + np.swapaxes(eb, -1, -2)[..., None, :, :]
    c_exp = floor_log2(np.where(c64 != 0, c64, 1.0))
    exps = np.concatenate([exps, np.broadcast_to(c_exp, exps.shape[:-1])[..., None]], -1)
    exps = np.where(nonzero, exps, np.iinfo(np.int64).min // 2)
    big_e = exps.max(axis=-1, keepdims=True)
    big_e = np.where(big_e < -(1 << 40), 0, big_e)
    # steps 3 and 4: truncate to frac_bits below 2^E, sum exactly (integers below 2^40)
    scale = np.ldexp(1.0, (p.frac_bits - big_e).astype(np.int64))
    with np.errstate(over="ignore", invalid="ignore"):
        fixed = np.trunc(np.where(nonzero, terms, 0.0) * scale)
        total = fixed.sum(axis=-1) / scale[..., 0]
    # an exact zero is +0 unless every term is -0 (IEEE sum of signed zeros)
    all_neg_zero = np.all(np.signbit(terms) & (terms == 0), axis=-1)
    total = np.where((total == 0) & all_neg_zero, -0.0, total)
    # step 5
    d = round_to_float32(total, p.out_round, p.out_bits)
    special = ~finite.all(axis=-1)  # non-finite terms: the IEEE value of the exact sum
    if special.any():
        with np.errstate(invalid="ignore"):
            s = np.where(finite, 0.0, terms).sum(axis=-1)
        d = np.where(special, s.astype(np.float32), d)
    return canonical_nan(d)
