"""The forward's softmax steps compiled with numba: the arithmetic of
:class:`simulator.flash.softmax.Softmax` (``max_get_scale``'s row maximum, ``online_softmax``'s
FFMA + MUFU.EX2 and thread-local row_sum) and of :func:`simulator.flash.softmax.rescale_o`,
one element at a time with the NumPy model's float32 rules.

Every operation is the ``.ftz`` one of :mod:`simulator.numerics.float32`, replicated on the
bits: inputs and results below 2^-126 flush to zero of the same sign; FMUL and FFMA flush
results that are tiny after rounding (``_finish``'s ``tiny``); FFMA is the float64 sum of the
exact product and the addend, with the round-to-odd repair of ``_fix_double_rounding`` on the
same candidates (float32 midpoints, sums below 2^-125); max takes the non-NaN operand and +0
over -0. The row maximum is ``thread_reduce_`` (columns in order, the first one copied when
``zero_init``) followed by the quad butterfly of ``quad_allreduce_`` (lane ^ 2, then lane ^ 1,
the own value first); row_sum is thread-local (hopper/softmax.h). MUFU.EX2 is
``MufuModel._ex2_core`` on the table that :func:`simulator.numerics.mufu_data.ex2_table`
verified, passed in by the caller. Every NaN written is 0x7fffffff.

Arrays: scores and P ``[R, T, nrow, ncol]`` (R batch entries, T threads, a multiple of 4), row
state ``[R, T, nrow]``, all C-contiguous float32; results are written into ``out`` arrays.
Importing this module imports numba; the machine code is cached on disk (``cache=True``).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from . import ex2_packed
from .intrinsics import and_int32 as _and_int32
from .intrinsics import bits32 as _bits32
from .intrinsics import bits64 as _bits64
from .intrinsics import float32_of as _float32_of
from .intrinsics import float64_of as _float64
from .intrinsics import fma_float32 as _fma_float32
from .intrinsics import prefer_512_bit_vectors as _prefer_512
from .intrinsics import prefetch as _prefetch
from .launch import JIT, parallel_kernel

_JIT = JIT  # cache=True, nogil=True, under launch's cache locator
_CANONICAL_NAN = np.uint32(0x7FFFFFFF)
_FLT_MIN = np.float32(2.0**-126)
_LOW29 = (1 << 29) - 1
_HALF29 = 1 << 28
_ABS64 = 0x7FFF_FFFF_FFFF_FFFF
_TINY_BITS64 = (1023 - 125) << 52  # magnitude bits of 2^-125
_F32_TINY = 2.0**-126 * (1.0 - 2.0**-25)


@numba.njit(inline="always", **_JIT)
def _signed_zero(x):
    """+0 or -0 with the sign of the float32 ``x`` (bit operations: a vector select)."""
    return _float32_of(_and_int32(_bits32(x), np.int32(-0x80000000)))


# The operations below are written with selects only (no branch), so that loops over them
# vectorise; each gives the bits of its simulator.numerics.float32 counterpart.
@numba.njit(inline="always", **_JIT)
def _ftz(x):
    """.ftz input rule: a float32 below 2^-126 in magnitude reads as zero of its sign."""
    return _signed_zero(x) if abs(x) < _FLT_MIN else x


@numba.njit(inline="always", **_JIT)
def fmax_ftz(a, b):
    """``max.ftz.f32``: subnormals read as zero; a NaN operand loses (b when both are NaN);
    +0 over -0. Equal operands give the AND of their bits: the operand itself, or -0 only
    for two -0."""
    a = _ftz(a)
    b = _ftz(b)
    equal = _float32_of(_and_int32(_bits32(a), _bits32(b)))
    r = a if a > b else (b if b > a else equal)
    r = a if b != b else r
    return b if a != a else r


@numba.njit(inline="always", **_JIT)
def fadd_ftz(a, b):
    """``add.rn.ftz.f32``: the IEEE float32 sum of the flushed operands (one rounding), a
    result below 2^-126 flushed (such a sum is exact, so tininess before or after rounding
    is the same)."""
    return _ftz(_ftz(a) + _ftz(b))


@numba.njit(inline="always", **_JIT)
def fmul_ftz(a, b):
    """``mul.rn.ftz.f32``: the exact float64 product cast once; tiny-after-rounding flushed
    (an exact product below 2^-126 (1 - 2^-25) rounds to 24 bits below 2^-126)."""
    p = np.float64(_ftz(a)) * np.float64(_ftz(b))
    r = np.float32(p)
    return _signed_zero(r) if abs(p) < _F32_TINY else r


@numba.njit(inline="always", **_JIT)
def ffma_ftz(a, b, c):
    """``fma.rn.ftz.f32`` (FFMA.FTZ): ``simulator.numerics.float32.ffma`` on one element."""
    a = _ftz(a)
    b = _ftz(b)
    c = _ftz(c)
    ps = np.float64(a) * np.float64(b)  # exact: 48 significant bits
    cs = np.float64(c)
    s = ps + cs
    bits = _bits64(s)
    mag_bits = bits & _ABS64
    tiny = False
    if (bits & _LOW29) == _HALF29 or (mag_bits != 0 and mag_bits < _TINY_BITS64):
        bv = s - ps  # TwoSum: s + err == ps + cs exactly
        err = (ps - (s - bv)) + (cs - bv)
        mag = abs(s)
        tiny = mag < _F32_TINY or (mag == _F32_TINY and err != 0.0 and (err > 0.0) != (s > 0.0))
        if err != 0.0 and (bits & 1) == 0 and math.isfinite(s):
            s = _float64(bits + (1 if (err > 0.0) == (s > 0.0) else -1))
    r = np.float32(s)
    if tiny:
        return np.float32(math.copysign(0.0, r))
    return _ftz(r)


@numba.njit(inline="always", **_JIT)
def _ex2_split(x):
    """MUFU.EX2's fixed-point split of one float32 (``MufuModel._ex2_core``): (table index,
    exponent increment); index -1 for NaN."""
    if x != x:
        return -1, 0
    g = x
    if g > np.float32(128.0):  # +inf and huge: clamped (128 gives exactly +inf)
        g = np.float32(128.0)
    if g < np.float32(-130.0):
        g = np.float32(-130.0)
    f = np.int64(np.int32(g * np.float32(2.0**23)))  # float32 product, truncated
    hi = f & ~0x7FFFFF  # floor(f / 2^23) << 23
    return ((hi >> 8) & 0x800000) | (f ^ hi), hi


@numba.njit(inline="always", **_JIT)
def _ex2_bits(idx, hi, table):
    """The uint32 result of MUFU.EX2 from :func:`_ex2_split`'s pair: ``table[idx] + hi``,
    flushed below 2^-126; the canonical NaN for index -1."""
    if idx < 0:
        return _CANONICAL_NAN
    r = np.int64(table[idx]) + hi  # exponent field += floor(f / 2^23)
    if r < 0x00800000:  # below 2^-126 (or below zero): flushed
        return np.uint32(0)
    return np.uint32(r)


def ex2_table_bits(x, table):
    """MUFU.EX2 (``ex2.approx.ftz.f32``) of one float32 as uint32 bits, from its int32 table
    (2^24 entries): ``simulator.numerics.mufu.MufuModel._ex2_core`` on one element."""
    idx, hi = _ex2_split(x)
    return _ex2_bits(idx, hi, table)


ex2_table_bits = numba.njit(**_JIT)(ex2_table_bits)


@parallel_kernel
def row_max(scores, prev, first, out, out_bits):
    """``quad_allreduce(thread_reduce(scores, prev, op="max", zero_init=first), "max")``.

    scores [R, T, nrow, ncol], prev [R, T, nrow] (ignored when ``first``); writes ``out``
    [R, T, nrow] (``out_bits`` its uint32 view, for the canonical NaN). The threads' column
    chains run side by side (the inner loop over threads)."""
    rows, threads, nrow, ncol = scores.shape
    for rm in prange(rows * nrow):
        r = rm // nrow
        mi = rm - r * nrow
        acc = np.empty(threads, dtype=np.float32)
        if first:
            for t in range(threads):
                acc[t] = scores[r, t, mi, 0]
        else:
            for t in range(threads):
                acc[t] = fmax_ftz(prev[r, t, mi], scores[r, t, mi, 0])
        for ni in range(1, ncol):
            for t in range(threads):
                acc[t] = fmax_ftz(acc[t], scores[r, t, mi, ni])
        w = np.empty(4, dtype=np.float32)
        for t0 in range(0, threads, 4):
            for lane in range(4):  # offset 2, then offset 1: own value first
                w[lane] = fmax_ftz(acc[t0 + lane], acc[t0 + (lane ^ 2)])
            for lane in range(4):
                x = fmax_ftz(w[lane], w[lane ^ 1])
                if x != x:
                    out_bits[r, t0 + lane, mi] = _CANONICAL_NAN
                else:
                    out[r, t0 + lane, mi] = x


# modes of scaled_exp2's MUFU.EX2: none (the FFMA only), the table, the packed table
EX2_NONE, EX2_TABLE, EX2_PACKED = 0, 1, 2


@numba.njit(inline="always", **_JIT)
def ffma_ftz_fast(a, b, c):
    """:func:`ffma_ftz` from one IEEE float32 fma, with selects only (a loop over it
    vectorises): (result, flag); where the flag is set (a result of magnitude exactly 2^-126)
    the result is not final and :func:`ffma_ftz` gives it. The fma rounds once on the
    subnormal grid; FFMA.FTZ rounds to 24 bits with an unbounded exponent and flushes a result
    below 2^-126. The two agree except at 2^-126: an fma result below it in magnitude comes
    from an exact value below 2^-126 - 2^-150 (the tie between 2^-126 and its predecessor
    goes to the even 2^-126), which rounds to 24 bits below 2^-126 too, so it is flushed (to
    the exact value's sign, which the fma's result keeps, a zero's included: both round the
    exact sum to nearest with IEEE's signed-zero rules); one above it comes from an exact value
    above 2^-126 + 2^-150, a normal number both round alike; inf and NaN alike."""
    r = _fma_float32(_ftz(a), _ftz(b), _ftz(c))
    return _ftz(r), abs(r) == _FLT_MIN


@parallel_kernel
def scaled_exp2(scores, scale, neg_max, table, bits, centres, mode, out, out_bits):
    """P = ``ex2(ffma(scores, scale, neg_max, ftz=True))``: MUFU.EX2 from ``table`` (mode
    EX2_TABLE) or from its packed form ``bits, centres`` (EX2_PACKED,
    :func:`simulator.engine.ex2_packed.pack`), or
    only the FFMA (EX2_NONE: the caller applies its MUFU model).

    scores [R, T, nrow, ncol]; scale, neg_max [R, T, nrow] (neg_max = -max_scaled); writes
    ``out`` (``out_bits`` its uint32 view) of the scores' shape. Per batch entry: the FFMAs
    in one vector loop (:func:`ffma_ftz_fast`; its flagged results again by
    :func:`ffma_ftz`), then MUFU.EX2 over them (:func:`_ex2_lookup`)."""
    rows, threads, nrow, ncol = scores.shape
    per = threads * nrow * ncol
    for r in prange(rows):
        flat = out[r].reshape(per)
        flat_bits = out_bits[r].reshape(per)
        flagged = 0
        for t in range(threads):
            for mi in range(nrow):
                sc = scale[r, t, mi]
                nm = neg_max[r, t, mi]
                base = (t * nrow + mi) * ncol
                for ni in range(ncol):
                    x, flag = ffma_ftz_fast(scores[r, t, mi, ni], sc, nm)
                    flat[base + ni] = x
                    flagged += flag
        if flagged:
            for t in range(threads):
                for mi in range(nrow):
                    base = (t * nrow + mi) * ncol
                    for ni in range(ncol):
                        if abs(flat[base + ni]) == _FLT_MIN:
                            flat[base + ni] = ffma_ftz(scores[r, t, mi, ni], scale[r, t, mi],
                                                       neg_max[r, t, mi])
        if mode == EX2_NONE:
            for e in range(per):
                if flat[e] != flat[e]:
                    flat_bits[e] = _CANONICAL_NAN
        else:
            if mode == EX2_PACKED:
                ex2_packed.lookup(flat, flat_bits, bits, centres)
            else:
                _ex2_lookup(flat, table, flat_bits)


# table reads issued this many elements ahead of their use (in the 1 x 4096 x 2 x 128 causal
# forward, 2-core VM: the P kernel 13-14 ns an element without, 4-5 ns with 48-64 ahead, 6 ns
# with 8-16, no better with 96-128); the splits are computed in spans of _EX2_SPAN elements
# (two scratch arrays of 64 kB per call, below glibc's mmap threshold)
_PREFETCH_AHEAD = 64
_EX2_SPAN = 8192


@numba.njit(inline="always", **_JIT)
def _ex2_lookup(x, table, out_bits):
    """MUFU.EX2 of the float32 ``x`` [n] into the uint32 ``out_bits`` [n] (which may be x's
    own memory) from the table itself: per span of elements, the fixed-point splits first (a
    vector loop), then the table reads (:func:`_ex2_bits`), each prefetched
    :data:`_PREFETCH_AHEAD` elements ahead: the reads are random over the table's 64 MB."""
    n = x.size
    idx = np.empty(_EX2_SPAN, dtype=np.int64)
    hi = np.empty(_EX2_SPAN, dtype=np.int64)
    for start in range(0, n, _EX2_SPAN):
        m = min(_EX2_SPAN, n - start)
        for e in range(m):
            idx[e], hi[e] = _ex2_split(x[start + e])
        for e in range(m):
            if e + _PREFETCH_AHEAD < m:
                _prefetch(table, max(idx[e + _PREFETCH_AHEAD], 0))  # a NaN's -1 reads entry 0
            out_bits[start + e] = _ex2_bits(idx[e], hi[e], table)


@parallel_kernel
def ex2_rows(x, bits, centres, out_bits):
    """MUFU.EX2 (``ex2.approx.ftz.f32``) of float32 ``x`` [R, n] from the packed table
    (:func:`simulator.engine.ex2_packed.pack`) into the uint32 ``out_bits`` [R, n]:
    ``MufuModel._ex2_core`` element by element (a subnormal x reads as 0 through the
    fixed-point split, as ``.ftz`` has it)."""
    _prefer_512()
    for r in prange(x.shape[0]):
        ex2_packed.lookup(x[r], out_bits[r], bits, centres)


_NO_TABLE = np.zeros(1, dtype=np.int32)


@parallel_kernel
def row_sums(p, sum_scale, prev, first, out, out_bits):
    """Thread-local row_sum of ``online_softmax``: ``p[0] + p[1] + ...`` (FADD.FTZ in column
    order, the first column copied) when ``first``, else ``ffma(sum_scale, prev, p[0]) + p[1]
    + ...``. p [R, T, nrow, ncol]; sum_scale, prev [R, T, nrow]; writes ``out`` [R, T, nrow].
    The threads' independent chains run side by side (the inner loop over threads), so that
    one chain's latency does not serialise the kernel."""
    rows, threads, nrow, ncol = p.shape
    for rm in prange(rows * nrow):
        r = rm // nrow
        mi = rm - r * nrow
        acc = np.empty(threads, dtype=np.float32)
        if first:
            for t in range(threads):
                acc[t] = p[r, t, mi, 0]
        else:
            for t in range(threads):
                acc[t] = ffma_ftz(sum_scale[r, t, mi], prev[r, t, mi], p[r, t, mi, 0])
        for ni in range(1, ncol):
            for t in range(threads):
                acc[t] = fadd_ftz(acc[t], p[r, t, mi, ni])
        for t in range(threads):
            if acc[t] != acc[t]:
                out_bits[r, t, mi] = _CANONICAL_NAN
            else:
                out[r, t, mi] = acc[t]


@parallel_kernel
def scale_rows(acc, scale, out, out_bits):
    """``acc[r, i, :] * scale[r, i]`` with FMUL.FTZ: acc [R, M, D], scale [R, M]; writes
    ``out`` [R, M, D] (``out_bits`` its uint32 view)."""
    rows, m, d = acc.shape
    for ri in prange(rows * m):
        r = ri // m
        i = ri - r * m
        s = scale[r, i]
        for j in range(d):
            x = fmul_ftz(acc[r, i, j], s)
            out_bits[r, i, j] = _CANONICAL_NAN if x != x else np.uint32(_bits32(x))
