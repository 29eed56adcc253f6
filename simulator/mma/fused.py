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

from dataclasses import dataclass

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
    """

    frac_bits: int = 25
    out_bits: int = 24
    out_round: str = "rz"
    product_exponent: str = "normalized"
    c_in_sum: bool = True


def _floor_log2(x: np.ndarray) -> np.ndarray:
    """floor(log2|x|) for nonzero finite float64 x (exact, via frexp)."""
    _, e = np.frexp(x)
    return e.astype(np.int64) - 1


def _exponent_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ea + eb with each exponent floor(log2|.|) of the (nonzero) operand."""
    return _floor_log2(a) + _floor_log2(b)


def round_to_float32(x: np.ndarray, mode: str, bits: int = 24) -> np.ndarray:
    """Round float64 values to float32 keeping ``bits`` significant bits (``bits`` <= 24).

    ``mode`` is ``"rz"`` (toward zero) or ``"rn"`` (nearest even). For ``bits`` < 24 the value is
    first rounded in float64 to ``bits`` bits (below float32's normal range the float32 quantum
    applies). Overflow gives +-MAX (rz) or +-inf (rn).
    """
    x = np.asarray(x, dtype=np.float64)
    if bits < 24:
        e = np.where(x == 0, 0, _floor_log2(np.where(x == 0, 1.0, x)))
        q = np.ldexp(1.0, np.maximum(e, -126) - (bits - 1))
        with np.errstate(invalid="ignore"):
            scaled = x / q
            x = (np.trunc(scaled) if mode == "rz" else np.rint(scaled)) * q
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(np.float32)
    if mode == "rz":
        too_big = np.abs(r.astype(np.float64)) > np.abs(x)
        r = np.where(too_big, np.nextafter(r, np.float32(0)), r)
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
    prods = a[..., :, None, :] * np.swapaxes(b, -1, -2)[..., None, :, :]  # [..., M, N, K] exact
    c64 = np.asarray(c, dtype=np.float64)
    terms = np.concatenate([prods, c64[..., None]], axis=-1) if p.c_in_sum else prods
    finite = np.isfinite(terms)
    nonzero = (terms != 0) & finite
    safe = np.where(nonzero, terms, 1.0)
    if p.product_exponent == "sum":
        safe_a = np.where(a != 0, a, 1.0)
        safe_b = np.where(b != 0, b, 1.0)
        exps = _exponent_sum(safe_a[..., :, None, :], np.swapaxes(safe_b, -1, -2)[..., None, :, :])
        if p.c_in_sum:
            exps = np.concatenate([exps, _floor_log2(np.where(c64 != 0, c64, 1.0))[..., None]], -1)
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
    if not p.c_in_sum:
        d = round_to_float32(d.astype(np.float64) + c64, p.out_round, p.out_bits)
    # non-finite terms: IEEE semantics of the exact sum, NaN canonical
    special = ~finite.all(axis=-1)
    if special.any():
        with np.errstate(invalid="ignore"):
            s = np.where(finite, 0.0, terms).sum(axis=-1)
        d = np.where(special, s.astype(np.float32), d)
    nan = np.isnan(d)
    if nan.any():
        d = d.copy()
        d.view(np.uint32)[nan] = 0x7FFFFFFF
    return d
