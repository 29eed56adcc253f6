"""Correctly rounded float32 ex2, rcp, lg2 and tanh: the ``model="ideal"`` MUFU models.

Every result is the float32 nearest (ties to even) to the exact mathematical value. The value is
first computed in float64 with NumPy; the float32 rounding of that value can only be wrong when
it lies within a few float64 ulps of a float32 rounding midpoint, and exactly those (rare)
elements are recomputed with :mod:`decimal` at 60+ significant digits and rounded by exact
comparison with the midpoints. So the result does not depend on the platform's libm: it is the
unique correctly rounded value. That makes these functions usable as the deterministic reference
against which the calibrated sm_90 tables are stored (see :mod:`.mufu_data`).

The ``ftz`` flag applies the PTX ``.ftz`` rule around the exact function: subnormal inputs read
as zero of the same sign and subnormal results are written as zero of the same sign.
Special values follow IEEE 754 (ex2(-inf) = +0, lg2(+-0) = -inf, lg2(x<0) = NaN, rcp(+-0) =
+-inf, tanh(+-inf) = +-1); every NaN result is the canonical 0x7fffffff.
"""

from __future__ import annotations

import decimal

import numpy as np

from .bits import CANONICAL_NAN_BITS, EXP_MASK, SIGN_MASK, flush_subnormal, require_bool

# float64 results closer than this (relative) to a float32 midpoint are re-derived exactly.
_AMBIGUOUS_REL = 2.0**-44
_PREC = 70


def _exact_ex2(x: float) -> decimal.Decimal:
    return decimal.Decimal(2) ** decimal.Decimal(x)


def _exact_lg2(x: float) -> decimal.Decimal:
    return decimal.Decimal(x).ln() / decimal.Decimal(2).ln()


def _exact_rcp(x: float) -> decimal.Decimal:
    return 1 / decimal.Decimal(x)


def _exact_tanh(x: float) -> decimal.Decimal:
    d = decimal.Decimal(x)
    with decimal.localcontext() as ctx:
        ctx.prec = _PREC + 60  # e^(2x) - 1 cancels for tiny x
        e = (2 * d).exp()
        return (e - 1) / (e + 1)


def _nearest_f32(value: decimal.Decimal, guess: np.float32) -> np.uint32:
    """Bits of the float32 nearest to ``value`` (ties to even), searching around ``guess``."""
    cands = [guess]
    for _ in range(2):
        cands = [np.nextafter(cands[0], np.float32(-np.inf)), *cands,
                 np.nextafter(cands[-1], np.float32(np.inf))]
    best, best_d = None, None
    for c in cands:
        if not np.isfinite(c):
            continue
        d = abs(decimal.Decimal(float(c)) - value)
        even = (int(np.float32(c).view(np.uint32)) & 1) == 0
        if best is None or d < best_d or (d == best_d and even):
            best, best_d = c, d
    return np.float32(best).view(np.uint32)


# |y| in [2^-126, 2^127): float32 rounds y's 52-bit mantissa at its bit 29 (no subnormal, no
# overflow), so y lies within 2^k float64 ulps of a float32 rounding midpoint exactly when its 29
# low bits are within 2^k of 2^28. 2^10 ulps is over 2^-43 relative: a superset of _AMBIGUOUS_REL.
_NORMAL_LO = np.float64(2.0**-126).view(np.uint64)
_NORMAL_SPAN = np.float64(2.0**127).view(np.uint64) - _NORMAL_LO
_LOW29 = np.uint64((1 << 29) - 1)
_NEAR_MID = np.uint64((1 << 28) - (1 << 10))


def _round_to_f32(x32: np.ndarray, y64: np.ndarray, exact) -> np.ndarray:
    """float32 rounding of float64 values ``y64`` (approximations of f(x32)), made exact.

    Where ``|y|`` is in float32's normal range the test for a nearby rounding midpoint is done on
    y's bits (any y within 2^10 float64 ulps of a midpoint is re-derived); the other elements
    (zero, subnormal, overflowing or non-finite results) take :func:`_round_to_f32_general`.
    """
    x32 = np.ascontiguousarray(x32)
    y64 = np.ascontiguousarray(y64)
    with np.errstate(over="ignore", invalid="ignore"):
        r = y64.astype(np.float32)  # NaN and overflow cast silently
    yb = y64.view(np.uint64)
    t = yb & np.uint64(0x7FFF_FFFF_FFFF_FFFF)
    t -= _NORMAL_LO
    normal = t < _NORMAL_SPAN
    np.bitwise_and(yb, _LOW29, out=t)
    t -= _NEAR_MID
    amb = t <= np.uint64(1 << 11)
    amb &= normal
    out = r.reshape(-1)
    if amb.any():
        xs = x32.reshape(-1)
        with decimal.localcontext() as ctx:
            ctx.prec = _PREC
            for i in np.flatnonzero(amb.reshape(-1)):  # rare: ~2^-18 of the inputs
                out[i] = _nearest_f32(+exact(float(xs[i])), out[i]).view(np.float32)
    if not normal.all():
        rest = np.flatnonzero(~normal.reshape(-1))
        out[rest] = _round_to_f32_general(x32.reshape(-1)[rest], y64.reshape(-1)[rest], exact)
    return r


def _round_to_f32_general(x32: np.ndarray, y64: np.ndarray, exact) -> np.ndarray:
    """:func:`_round_to_f32` for any values, with the relative tolerance ``_AMBIGUOUS_REL``."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = y64.astype(np.float32)  # NaN and overflow cast silently
    fin = np.isfinite(r) & (r != 0)
    if not fin.any():
        return r
    rf = r[fin]
    yf = y64[fin]
    with np.errstate(over="ignore"):
        hi = np.nextafter(rf, np.float32(np.inf)).astype(np.float64)
        lo = np.nextafter(rf, np.float32(-np.inf)).astype(np.float64)
    r64 = rf.astype(np.float64)
    tol = np.abs(yf) * _AMBIGUOUS_REL
    amb = (np.abs(yf - (r64 + hi) / 2) <= tol) | (np.abs(yf - (r64 + lo) / 2) <= tol)
    if amb.any():
        where = np.flatnonzero(fin)[amb]
        xs = x32.reshape(-1)[where]
        out = r.reshape(-1)
        with decimal.localcontext() as ctx:
            ctx.prec = _PREC
            for i, xv in zip(where, xs, strict=True):  # rare: ~2^-40 of the inputs
                out[i] = _nearest_f32(+exact(float(xv)), out[i]).view(np.float32)
    return r


def _finish(r: np.ndarray, ftz: bool) -> np.ndarray:
    u = r.view(np.uint32)
    if ftz:
        np.putmask(u, (u & EXP_MASK) == 0, u & SIGN_MASK)
    np.putmask(u, (u & ~SIGN_MASK) > EXP_MASK, CANONICAL_NAN_BITS)
    return r


def _prep(x: np.ndarray, ftz: bool) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    return flush_subnormal(x) if require_bool("ftz", ftz) else x


def ideal_ex2(x: np.ndarray, ftz: bool = True) -> np.ndarray:
    """Correctly rounded 2**x for float32 ``x`` (any shape); float32 result of the same shape."""
    x = _prep(x, ftz)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        y = np.exp2(x.astype(np.float64))
    return _finish(_round_to_f32(x, y, _exact_ex2), ftz)


def ideal_rcp(x: np.ndarray, ftz: bool = True) -> np.ndarray:
    """Correctly rounded 1/x for float32 ``x``; +-0 gives +-inf, +-inf gives +-0."""
    x = _prep(x, ftz)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = 1.0 / x.astype(np.float64)
    return _finish(_round_to_f32(x, y, _exact_rcp), ftz)


def ideal_lg2(x: np.ndarray, ftz: bool = True) -> np.ndarray:
    """Correctly rounded log2(x) (base 2) for float32 ``x``; +-0 gives -inf, x < 0 gives NaN."""
    x = _prep(x, ftz)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log2(x.astype(np.float64))
    return _finish(_round_to_f32(x, y, _exact_lg2), ftz)


def ideal_tanh(x: np.ndarray, ftz: bool = False) -> np.ndarray:
    """Correctly rounded tanh(x) for float32 ``x``; tanh(+-0) = +-0, tanh(+-inf) = +-1."""
    x = _prep(x, ftz)
    with np.errstate(invalid="ignore"):  # signalling-NaN payloads warn in the cast
        y = np.tanh(x.astype(np.float64))
    return _finish(_round_to_f32(x, y, _exact_tanh), ftz)
