"""What any arrival order of float32 reduce-adds can give: FA3's default backward.

FA3 accumulates dQ across key blocks (and, with GQA, dK / dV across the query heads of a kv
head) with float32 reduce-adds into a zeroed buffer, round to nearest: ``SM90_BULK_REDUCE_ADD``
(``cp.reduce.async.bulk``, UBLKRED.ADD.F32.RN: subnormals kept) for dQ below head dim 256 and
for GQA's dK / dV, ``atomicAdd`` (REDG.ADD.F32.FTZ.RN: subnormals flushed) for dQ at head dim
256 (measured: ``simulator/measure/reduce_add_probe.py``, ``reduce_add_probe.json``).
Without ``deterministic`` the partials arrive in the order the CTAs finish, so every order
is possible: the result is ``fl(...fl(fl(0 + x_a) + x_b)...)`` for some permutation of the
partials.

:func:`ordered_sum` is one order; :func:`sum_bounds` the smallest and largest result over all
orders: exact (every permutation evaluated) up to ``EXACT_UP_TO`` partials; beyond, a rigorous
bound from the exact sum and the rounding errors an order can make (each of the n - 1 adds
errs by at most half an ulp of its result, and every partial sum lies between minus the sum of
the negative partials and the sum of the positive ones; flushed subnormals add at most 2^-126
each). Two partials give one result in either order (the adds commute).

Non-finite results: a NaN partial, or +inf with -inf, gives NaN in every order (lo = hi =
NaN). Where some orders can overflow or give NaN and others not, the bounds are
``(-inf, +inf)``: any value, NaN included (:func:`contains` says so). A +-inf partial with no
partial sum able to overflow the other way gives that infinity in every order.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..numerics import fadd

#: partial counts whose every permutation is evaluated (5! = 120 orders)
EXACT_UP_TO = 5
_TINY = 2.0**-126
#: the smallest magnitude that rounds to infinity in float32: max + half an ulp (2^128 - 2^103)
_OVERFLOW = 2.0**128 - 2.0**103


def ordered_sum(parts: np.ndarray, ftz: bool = True) -> np.ndarray:
    """float32 ``[...]``: ``parts[0], parts[1], ...`` (axis 0) reduce-added in that order into
    a zeroed float32 accumulator, round to nearest; ``ftz``: subnormal operands and results
    flushed (``red.global.add.f32``), else kept (the TMA bulk reduce)."""
    acc = np.zeros(parts.shape[1:], np.float32)
    for x in parts:
        acc = fadd(acc, x, ftz=ftz)
    return acc


def sum_bounds(parts: np.ndarray, ftz: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi), float32 ``[...]``: the smallest and largest float32 results of
    :func:`ordered_sum` (with ``ftz``) over every order of ``parts`` along axis 0 (exact up to
    ``EXACT_UP_TO`` partials, a rigorous enclosure beyond); NaN where every order gives NaN,
    ``(-inf, +inf)`` where only some do (see the module docstring)."""
    n = parts.shape[0]
    if n <= 2:
        r = ordered_sum(parts, ftz)
        return r, r.copy()
    if n <= EXACT_UP_TO:
        lo = hi = None
        some_nan = np.zeros(parts.shape[1:], bool)
        all_nan = np.ones(parts.shape[1:], bool)
        for perm in itertools.permutations(range(n)):
            if perm[0] > perm[1]:  # the first two adds commute: 0 + a + b == 0 + b + a
                continue
            r = ordered_sum(parts[list(perm)], ftz)
            lo = r if lo is None else np.fmin(lo, r)
            hi = r if hi is None else np.fmax(hi, r)
            some_nan |= np.isnan(r)
            all_nan &= np.isnan(r)
        return _any_where(lo, hi, some_nan & ~all_nan)
    return _enclosure(parts, ftz)


def contains(lo, hi, values) -> np.ndarray:
    """Whether each of ``values`` is a result the spread ``(lo, hi)`` allows: ``lo <= v <= hi``,
    the same bits as a one-value spread (signed zeros, NaN), or NaN where the spread is
    ``(-inf, +inf)``. Arrays of one float dtype (float32, bfloat16, float16), any shape."""
    lo, hi, v = (np.asarray(a).astype(np.float32) for a in (lo, hi, values))
    with np.errstate(invalid="ignore"):
        inside = (lo <= v) & (v <= hi)
    same = (lo.view(np.uint32) == v.view(np.uint32)) | (np.isnan(lo) & np.isnan(v))
    anything = np.isnan(v) & (lo == -np.inf) & (hi == np.inf)
    return inside | same | anything


def _any_where(lo, hi, mask):
    """``(lo, hi)`` with ``(-inf, +inf)`` where ``mask``."""
    return (np.where(mask, np.float32(-np.inf), lo).astype(np.float32),
            np.where(mask, np.float32(np.inf), hi).astype(np.float32))


def _enclosure(parts: np.ndarray, ftz: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A rigorous float32 enclosure of every order's result (see the module docstring)."""
    n = parts.shape[0]
    x = parts.astype(np.float64)
    finite = np.isfinite(x).all(axis=0)
    x = np.where(np.isfinite(x), x, 0.0)
    exact = x.sum(axis=0)
    pos = np.maximum(x, 0).sum(axis=0)
    neg = np.maximum(-x, 0).sum(axis=0)
    reach = np.maximum(pos, neg) * (1 + 2.0**-23) ** n       # bound on |every partial sum|
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(reach > 0, reach, 1.0)))
    half_ulp = np.where(reach > 0, np.ldexp(1.0, (e - 24).astype(np.int64)), 0.0)
    # every add's rounding, every flushed subnormal, and the float64 sum's own error
    err = (n - 1) * half_ulp + np.where(reach > 0, n * _TINY, 0.0) + (n + 1) * 2.0**-52 * (pos + neg)
    lo = _round_f32(exact - err, up=True)
    hi = _round_f32(exact + err, up=False)
    # all partials zero: +0 in every order (the accumulator starts at +0, round to nearest);
    # non-finite partials: NaN, or the one infinity, in every order unless a partial sum can
    # overflow the other way (below)
    r = ordered_sum(parts, ftz)
    zero = finite & (reach == 0)
    lo, hi = np.where(finite & ~zero, lo, r), np.where(finite & ~zero, hi, r)
    # a partial sum that can round to +-inf: some orders overflow (or meet an infinity of the
    # other sign: NaN), others may not
    grow = (1 + 2.0**-23) ** n
    over_pos, over_neg = pos * grow >= _OVERFLOW, neg * grow >= _OVERFLOW
    pinf, ninf = (parts == np.inf).any(axis=0), (parts == -np.inf).any(axis=0)
    nan = np.isnan(parts).any(axis=0) | (pinf & ninf)
    lo = np.where(nan, np.float32(np.nan), lo)
    hi = np.where(nan, np.float32(np.nan), hi)
    mixed = ~nan & ((pinf & over_neg) | (ninf & over_pos) | (~pinf & ~ninf & (over_pos | over_neg)))
    return _any_where(lo, hi, mixed)


def _round_f32(v: np.ndarray, up: bool) -> np.ndarray:
    """float64 -> the nearest float32 on one side (>= v with ``up``, else <= v)."""
    with np.errstate(over="ignore"):
        f = v.astype(np.float32)
    f64 = f.astype(np.float64)
    step = np.float32(np.inf) if up else np.float32(-np.inf)
    fix = (f64 < v) if up else (f64 > v)
    return np.where(fix, np.nextafter(f, step), f).astype(np.float32)
