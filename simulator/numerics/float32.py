"""float32 arithmetic with PTX semantics: add/sub/mul/fma (.rn, optional .ftz), max/min.

Each function takes float32 arrays (NumPy broadcasting applies) and returns a new float32
array. The rules, by PTX ISA section "Floating Point Instructions":

* ``add.rn.f32``, ``sub.rn.f32``, ``mul.rn.f32``: IEEE 754 round-to-nearest-even of the exact
  result, subnormals supported. With ``ftz=True`` (the ``.ftz`` modifier, and what
  ``--use_fast_math`` makes of every float32 op) subnormal inputs are read as zero of the same
  sign and a subnormal result is written as zero of the same sign.
* ``fma.rn.f32``: one rounding of the exact ``a*b + c`` (FFMA).
* ``max.f32`` / ``min.f32``: a NaN operand loses to a number; both NaN gives NaN; +0 > -0.
* Every NaN result is the canonical 0x7fffffff.

All of it is checked against the H200 by ``python -m simulator measure numerics_sweep`` (report in
``simulator/data/device/numerics_report.json``, CI sample in ``simulator/data/device/``).

How the exact results are obtained without a float64 double-rounding error:
add, sub and mul go through float64, which is exact for the product and innocuous for the sum
(53 >= 2*24 + 2 bits, Figueroa 1995). For fma the float64 sum ``s = RN53(a*b + c)`` can land
exactly on a float32 rounding midpoint while the exact value does not; only then (and for results
in the float32 subnormal range, where the midpoint test differs) the error term of the sum is
computed exactly (TwoSum) and ``s`` is replaced by its round-to-odd neighbour, which float32
rounding then resolves correctly (Boldo and Melquiond 2008).
"""

from __future__ import annotations

import numpy as np

from .bits import (
    CANONICAL_NAN_BITS,
    EXP_MASK,
    SIGN_MASK,
    flush_subnormal,
    require_bool,
    require_float32,
)

# In a float64 whose value lies in float32's normal range, these are the 29 significand bits
# below float32 precision; the pattern 1000...0 marks an exact float32 rounding midpoint.
_LOW29 = np.uint64((1 << 29) - 1)
_HALF29 = np.uint64(1 << 28)
# Exact results below this are tiny after rounding to 24 bits with unbounded exponent: it is
# the midpoint between 2^-126 and 2^-126 * (1 - 2^-24), and a tie goes to the even 2^-126.
_F32_TINY = 2.0**-126 * (1.0 - 2.0**-25)
_ABS64 = np.uint64(0x7FFF_FFFF_FFFF_FFFF)
# magnitude bits of 2**-125, minus 1: sums with 0 < |s| < 2**-125 are candidates
_TINY_LIMIT64 = np.uint64(((1023 - 125) << 52) - 1)


def _prepare(ftz: bool, **operands) -> list[np.ndarray]:
    """Validate operands (by keyword name) and apply the .ftz input flush (copying only the
    operands that hold subnormals)."""
    arrays = [require_float32(name, value) for name, value in operands.items()]
    if require_bool("ftz", ftz):
        arrays = [flush_subnormal(a) if _has_subnormal(a) else a for a in arrays]
    return arrays


def _has_subnormal(a: np.ndarray) -> bool:
    u = np.asarray(a, order="C").view(np.uint32)
    return bool(np.any(((u & EXP_MASK) == 0) & ((u & ~SIGN_MASK) != 0)))


def _finish(result: np.ndarray, ftz: bool, tiny=None) -> np.ndarray:
    """Output rules, in place on a freshly computed result: .ftz flush, canonical NaN.

    ``tiny`` marks results that are tiny in the IEEE 754 "after rounding" sense: rounded to 24
    bits with an unbounded exponent they would be below 2^-126. The H200 flushes those under
    .ftz even when the real (subnormal-range) rounding carries them up to the smallest normal:
    2^-126 * (1 - 2^-24) is flushed, 2^-126 * (1 - 2^-46) gives 2^-126 (measured, see
    numerics_report.json, ffma_ftz / fmul_ftz).
    """
    result = np.asarray(result)
    u = result.view(np.uint32)
    if ftz:
        flush = (u & EXP_MASK) == 0
        if tiny is not None:
            flush |= tiny
        np.putmask(u, flush, u & SIGN_MASK)
    np.putmask(u, (u & ~SIGN_MASK) > EXP_MASK, CANONICAL_NAN_BITS)
    return result


def _tiny64(x64: np.ndarray) -> np.ndarray:
    """Tininess after rounding, for float64 values that are exact results (see _finish)."""
    return np.abs(x64) < _F32_TINY


def _round64(x64: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return x64.astype(np.float32)


def fadd(a, b, *, ftz: bool = False) -> np.ndarray:
    """``add.rn{.ftz}.f32``: a + b rounded once to nearest-even.

    Args:
        a, b: float32 arrays (broadcast together).
        ftz: flush subnormal inputs and results to sign-preserving zero.
    Returns:
        float32 array of the broadcast shape; NaN results are 0x7fffffff.
    Raises:
        TypeError: an operand is not float32.
    """
    a, b = _prepare(ftz, a=a, b=b)
    with np.errstate(invalid="ignore", over="ignore"):
        s = a.astype(np.float64) + b.astype(np.float64)
    # a sum of (flushed) float32 values is a multiple of 2^-149: below 2^-126 it is an exact
    # subnormal, which the output flush already catches; no tininess mask is needed
    return _finish(_round64(s), ftz)


def fsub(a, b, *, ftz: bool = False) -> np.ndarray:
    """``sub.rn{.ftz}.f32``: a - b rounded once to nearest-even. See :func:`fadd`."""
    a, b = _prepare(ftz, a=a, b=b)
    with np.errstate(invalid="ignore"):
        s = a.astype(np.float64) - b.astype(np.float64)
    return _finish(_round64(s), ftz)


def fmul(a, b, *, ftz: bool = False) -> np.ndarray:
    """``mul.rn{.ftz}.f32``: a * b rounded once to nearest-even. See :func:`fadd`."""
    a, b = _prepare(ftz, a=a, b=b)
    with np.errstate(invalid="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)  # exact: 48 significant bits
    return _finish(_round64(p), ftz, _tiny64(p) if ftz else None)


def fdiv(a, b, *, ftz: bool = False) -> np.ndarray:
    """``div.rn{.ftz}.f32``: a / b correctly rounded to nearest-even (IEEE 754 division; the
    float64 quotient rounded again to float32 is exact to the bit: 53 >= 2 * 24 + 2, so the
    double rounding is innocuous). See :func:`fadd`."""
    a, b = _prepare(ftz, a=a, b=b)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
        q = a.astype(np.float64) / b.astype(np.float64)
    return _finish(_round64(q), ftz, _tiny64(q) if ftz else None)


def ffma(a, b, c, *, ftz: bool = False) -> np.ndarray:
    """``fma.rn{.ftz}.f32`` (SASS FFMA): a * b + c with a single rounding to nearest-even.

    The product is not rounded or flushed on its own; with ``ftz`` only the three inputs and
    the final result are flushed.

    Args:
        a, b, c: float32 arrays (broadcast together).
        ftz: flush subnormal inputs and results to sign-preserving zero.
    Returns:
        float32 array of the broadcast shape; NaN results are 0x7fffffff.
    Raises:
        TypeError: an operand is not float32.
    """
    a, b, c = _prepare(ftz, a=a, b=b, c=c)
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    # broadcast views (no copies); 0-d operands become 1-d so that indexing below is uniform
    a, b, c = (np.broadcast_to(x, shape or (1,)) for x in (a, b, c))
    s = np.empty(shape or (1,), dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        np.multiply(a, b, out=s, dtype=np.float64)  # exact: 48 significant bits
        np.add(s, c, out=s, dtype=np.float64)
    tiny = _fix_double_rounding(a, b, c, s)
    return _finish(_round64(s), ftz, tiny).reshape(shape)


def _fix_double_rounding(a, b, c, s: np.ndarray):
    """Apply round-to-odd, in place, to the float64 sums ``s`` whose float32 rounding could err.

    Candidates are sums that sit exactly on a float32 midpoint (normal range) and sums of
    magnitude up to float32's smallest normal; everything else already rounds correctly.
    Returns a boolean mask of exact results below 2^-126 in magnitude (or None if none).
    """
    shape = s.shape
    bits = s.reshape(-1).view(np.uint64)
    scratch = np.bitwise_and(bits, _LOW29)
    candidate = scratch == _HALF29
    # 0 < |s| < 2^-125, as one unsigned compare on the magnitude bits: an exact-zero float64
    # sum is exact (RN53 gives 0 only for 0) and flushing keeps its bits, so zeros are skipped
    # (they are common in masked or ReLU data)
    np.bitwise_and(bits, _ABS64, out=scratch)
    scratch -= np.uint64(1)
    candidate |= scratch < _TINY_LIMIT64
    if not candidate.any():
        return None
    idx = np.unravel_index(np.flatnonzero(candidate), shape)
    ps = a[idx].astype(np.float64) * b[idx]
    cs = c[idx].astype(np.float64)
    ss = s[idx]
    with np.errstate(invalid="ignore", over="ignore"):
        # TwoSum: ss + err == ps + cs exactly (no overflow is possible for float32 operands).
        bv = ss - ps
        err = (ps - (ss - bv)) + (cs - bv)
    sbits = ss.view(np.int64)
    odd_needed = (err != 0) & ((sbits & 1) == 0) & np.isfinite(ss)
    step = np.where(odd_needed, np.where((err > 0) == (ss > 0), 1, -1), 0)
    s[idx] = (sbits + step).view(np.float64)
    # exact |ss + err| below the tininess threshold (which is a float64 value, so RN53 keeps
    # the comparison except when ss lands on it; then the sign of err decides)
    mag = np.abs(ss)
    tiny_sub = (mag < _F32_TINY) | ((mag == _F32_TINY) & (err != 0) & ((err > 0) != (ss > 0)))
    tiny = np.zeros(s.shape, dtype=bool)
    tiny[idx] = tiny_sub
    return tiny


def _select_extreme(a: np.ndarray, b: np.ndarray, take_max: bool) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    ua = np.asarray(a, order="C").view(np.uint32)
    ub = np.asarray(b, order="C").view(np.uint32)
    a_wins = (a > b) if take_max else (a < b)
    # Equal values differ only for +0/-0: AND of the bits picks +0 (max), OR picks -0 (min).
    tie = ua & ub if take_max else ua | ub
    out = np.where(a_wins, ua, np.where(a == b, tie, ub))
    out = np.where(np.isnan(a), ub, out)
    out = np.where(np.isnan(b), ua, out)
    return out.view(np.float32)


def fmax(a, b, *, ftz: bool = False) -> np.ndarray:
    """``max{.ftz}.f32``: the larger operand; a NaN operand loses; +0 > -0.

    Args:
        a, b: float32 arrays (broadcast together).
        ftz: read subnormal inputs as zero of the same sign.
    Returns:
        float32 array; when both operands are NaN the result is 0x7fffffff.
    Raises:
        TypeError: an operand is not float32.
    """
    a, b = _prepare(ftz, a=a, b=b)
    return _finish(_select_extreme(a, b, take_max=True), ftz)


def fmin(a, b, *, ftz: bool = False) -> np.ndarray:
    """``min{.ftz}.f32``: the smaller operand; a NaN operand loses; -0 < +0. See :func:`fmax`."""
    a, b = _prepare(ftz, a=a, b=b)
    return _finish(_select_extreme(a, b, take_max=False), ftz)
