"""The tensor-core fused dot-add compiled with numba: the arithmetic of
:func:`simulator.mma.spec.spec_step` (and its per-term evaluation ``termloop``), one output
element at a time, every k-step of a GEMM fused in one call.

Per output and sequential fused step: E = the largest exponent among the nonzero finite terms
(``max(floor(log2|a|), emin) + max(floor(log2|b|), emin)`` for a product, ``floor(log2|c|)``
for C); every term is scaled by 2^(F - E), truncated toward zero and summed exactly (the
products' terms in int32 or float64, C's in int32 or float64: integers below 2^40); the sum is
rounded to float32 (``out_round`` at ``out_bits`` bits).
Outputs touching inf or NaN are the IEEE value of the exact sum; an exact zero sum is -0 only
when C and every product are -0; NaN results are 0x7fffffff. ``k_steps`` and ``c_in_sum``
(FP8 mma.sync) as :func:`simulator.mma.spec.dot_add_by_steps` applies them.

Importing this module imports numba; the machine code is cached on disk (``cache=True``).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from . import decode
from . import intrinsics as ix
from .decode import CODE_NONE, CODE_SPECIAL, INF_EXP, NO_EXP, SPECIAL, code_max
from .intrinsics import bits64, float32_of, float64_of, prefer_512_bit_vectors
from .launch import JIT, parallel_kernel

# marks of the outputs the vector path leaves to _fix: NaN, and -NaN for an exact zero sum
_MARK = np.float32(np.nan)
_ZERO_MARK = np.float32(-np.nan)
_CANONICAL_NAN = 0x7FFFFFFF
_NO_EXP32, _INF_EXP32 = np.int32(NO_EXP), np.int32(INF_EXP)
_RZ, _RN = 0, 1

_JIT = JIT  # cache=True, nogil=True, under launch's cache locator


@numba.njit(**_JIT)
def _rz(x, bits):
    """Finite float64 ``x`` toward zero to ``bits`` significant bits, as float32 (below 2^-126
    at float32's quantum 2^(-126 - (bits - 1))); 2^128 and above give +-inf."""
    if x == 0.0:
        return np.float32(x)
    m, e = math.frexp(x)
    if e - 1 >= -126:
        return np.float32(math.ldexp(np.trunc(math.ldexp(m, bits)), e - bits))
    q = -126 - (bits - 1)
    return np.float32(math.ldexp(np.trunc(math.ldexp(x, -q)), q))


@numba.njit(**_JIT)
def _round(x, mode, bits):
    """``simulator.mma.spec.round_to_float32`` of one float64 value (non-finite passes)."""
    if not math.isfinite(x):
        return np.float32(x)
    if mode == _RZ:
        return _rz(x, bits)
    if bits >= 24 or x == 0.0:
        return np.float32(x)
    e = math.frexp(x)[1] - 1
    q = (e if e > -126 else -126) - (bits - 1)
    return np.float32(math.ldexp(np.rint(math.ldexp(x, -q)), q))


@numba.njit(**_JIT)
def _step(a, ea, bt, ebt, pos, k0, c, frac_bits, out_round, out_bits):
    """One fused step over the K positions ``k0 + pos`` of A row ``a`` / B column ``bt`` (float64
    values, int32 exponents), C = float32 ``c`` inside the sum. Returns float32 (NaN with any
    payload: the caller writes the canonical one)."""
    c64 = np.float64(c)
    special = not math.isfinite(c64)
    big_e = NO_EXP
    if c64 != 0.0 and not special:
        big_e = math.frexp(c64)[1] - 1
    for t in range(pos.size):
        k = k0 + pos[t]
        if not (math.isfinite(a[k]) and math.isfinite(bt[k])):
            special = True
        e = ea[k] + ebt[k]
        if e > big_e:
            big_e = e
    if special:  # the IEEE value of the exact sum (finite terms cannot overflow float64)
        s = c64
        for t in range(pos.size):
            s += a[k0 + pos[t]] * bt[k0 + pos[t]]
        return np.float32(s)
    if big_e < NO_EXP // 2:
        big_e = 0
    scale = math.ldexp(1.0, frac_bits - big_e)
    total = np.trunc(c64 * scale)
    for t in range(pos.size):
        k = k0 + pos[t]
        total += np.trunc(a[k] * bt[k] * scale)
    if total == 0.0:
        return _signed_zero(a, bt, pos, k0, c)
    return _round(total / scale, out_round, out_bits)


@numba.njit(**_JIT)
def _signed_zero(a, bt, pos, k0, c):
    """The zero of an exact zero sum: -0 when C and every product are -0, else +0."""
    if c != 0.0 or math.copysign(1.0, c) > 0:
        return np.float32(0.0)
    for t in range(pos.size):
        p = a[k0 + pos[t]] * bt[k0 + pos[t]]
        if p != 0.0 or math.copysign(1.0, p) > 0:
            return np.float32(0.0)
    return np.float32(-0.0)


@numba.njit(**_JIT)
def _column(arow, erow, b2, eb2, j, k0, k1, c, frac_bits, out_round, out_bits):
    """One output of a fused step, every case (the path of the outputs :func:`_block16` /
    :func:`_block32` flag): A row ``arow`` / ``erow``, B column ``j`` of ``b2`` / ``eb2``, K
    positions k0..k1 - 1, float32 C ``c``. Returns float32 (NaN with any payload). The
    exponents may be int32 or the int16 codes of :func:`exp_or_code`: the exponent pass runs
    only when some term is nonzero and every one finite, where both give the same maximum."""
    c64 = np.float64(c)
    finite = math.isfinite(c64)
    zero = c64 == 0.0  # every term zero (then -0 only when every one is -0)
    neg_zero = zero and math.copysign(1.0, c64) < 0
    for k in range(k0, k1):  # one pass: the common flagged case is an all-zero column
        p = np.float64(arow[k]) * np.float64(b2[k, j])
        if not (math.isfinite(arow[k]) and math.isfinite(b2[k, j])):
            finite = False
        if p != 0.0:
            zero = False
        elif math.copysign(1.0, p) > 0:
            neg_zero = False
    if not finite:  # the IEEE value of the exact sum (finite terms cannot overflow float64)
        s = c64
        for k in range(k0, k1):
            s += np.float64(arow[k]) * np.float64(b2[k, j])
        return np.float32(s)
    if zero:
        return np.float32(-0.0) if neg_zero else np.float32(0.0)
    big_e = NO_EXP if c64 == 0.0 else math.frexp(c64)[1] - 1
    for k in range(k0, k1):
        big_e = max(big_e, erow[k] + eb2[k, j])
    scale = math.ldexp(1.0, frac_bits - big_e)  # some term is nonzero: big_e is finite
    total = np.trunc(c64 * scale)
    for k in range(k0, k1):
        total += np.trunc(np.float64(arow[k]) * np.float64(b2[k, j]) * scale)
    if total == 0.0:  # exact cancellation of nonzero terms
        return np.float32(0.0)
    return _round(total / scale, out_round, out_bits)


# The vector path below, per k-step and tile of rows of outputs, in two loops over the N
# columns of each row that LLVM vectorises over the columns (one array written per loop: more
# stores stop its vectoriser), both in :func:`_step_rows`:
# 1. the exponent pass over the int16 codes into ``emax`` [rows, N];
# 2. the sum and finish: each product term ``a * b * 2^(F - E)`` in float32,
#    truncated toward zero by its conversion to int32, summed in int32. Exact where the
#    operands are narrow values (at most 12 significant bits, so a product has at most 24) and
#    no product overflows float32 (checked per k-step and row from the codes,
#    :func:`_products_fit`; else the row's step takes the float64 pass of :func:`_block16`):
#    scaling by a power of two is then exact down to 2^-126, and a term below that truncates
#    to 0 whatever its rounding. A term is below 2^(F + 2) (2^27 for the 16-bit formats,
#    F = 25: 16 of them stay below 2^31; 2^15 for FP8's 32, F = 13). Then C's term joins in
#    int32 and the total is cut to ``out_bits`` and scaled back in float32
#    (:func:`_finish32`), or a NaN mark for the outputs this does not give (inf / NaN terms,
#    a total that wraps int32, exact zero sums, results below 2^-126, a 2^(F - E) outside
#    float32), -NaN for an exact zero sum of finite terms, which :func:`_fix` settles by
#    :func:`_column` / :func:`_zero_sum`.
# Every value of loop 2 is int32 or float32 (numba's int64 arithmetic goes through the int32
# intrinsics), so with ``prefer_512_bit_vectors`` it runs 16 lanes per 512-bit vector:
# 1.25x on a 1024 x 1024 x 128 bf16 GEMM against a finish in float64 as a third loop (2-core
# development VM, Xeon with AVX-512, in turns). Operands given as float64 values run the same loop
# with float64 products, without the range check.


@numba.njit(inline="always")
def _c_term(cv):
    """C as float64 and its exponent floor(log2|c|) (exact for float32 subnormals, NO_EXP
    for zeros; inf / NaN give 1024 and are flagged by :func:`_finish`)."""
    c64 = np.float64(cv)
    e = ((bits64(c64) >> 52) & 0x7FF) - 1023
    return c64, (NO_EXP if cv == 0.0 else e)


@numba.njit(inline="always")
def _scale(e, frac_bits):
    """The largest exponent (0 when no term is nonzero) and 2^(frac_bits - E)."""
    e = 0 if e < NO_EXP // 2 else e
    return e, float64_of((frac_bits - e + 1023) << 52)


@numba.njit(inline="always")
def _finish(tot, e, c64, frac_bits, keep, tiny):
    """The float32 of the fixed-point sum ``tot`` (int64, units 2^(E - frac_bits)), its low
    bits cleared by ``keep`` (RZ), or NaN when the output needs :func:`_column`; and that
    flag."""
    x = float64_of(bits64(np.float64(tot) * float64_of((e - frac_bits + 1023) << 52)) & keep)
    special = (e >= np.int32(SPECIAL)) | (((bits64(c64) >> 52) & 0x7FF) == 0x7FF)
    zero = (tot == 0) & ~special  # an exact zero sum of finite terms: -NaN marks it
    flag = special | (tot == 0) | (((bits64(x) >> 52) & 0x7FF) < tiny)
    mark = _ZERO_MARK if zero else _MARK
    return flag, (mark if flag else np.float32(x))


@numba.njit(inline="always")
def _largest(code, c_exp):
    """E of an output: its products' largest code sum (as an exponent, NO_EXP or INF_EXP)
    and C's exponent (int32 where ``c_exp`` is)."""
    e = np.int32(code)
    e = _NO_EXP32 if e < np.int32(CODE_NONE) else (_INF_EXP32 if e >= np.int32(CODE_SPECIAL)
                                                   else e)
    return max(e, c_exp)


@numba.njit(inline="always")
def _term_scale(code, cbits, frac_bits):
    """(E, f = frac_bits - E, 2^f as float32) of an output, all int32 (so that the loop
    over outputs keeps 16 lanes): E from its products' largest code sum and the float32 bits
    of C, 0 when no term is nonzero (a subnormal C's exponent is taken as -127: where it is
    the largest, f > 126 and :func:`_finish32` flags the output). 2^f is clamped into
    float32."""
    biased = ix.and_int32(ix.shr_int32(cbits, np.int32(23)), np.int32(0xFF))
    ec = _NO_EXP32 if ix.and_int32(cbits, np.int32(0x7FFFFFFF)) == np.int32(0) else \
        ix.sub_int32(biased, np.int32(127))
    e = _largest(code, ec)
    e = np.int32(0) if e < np.int32(NO_EXP // 2) else e
    f = ix.sub_int32(frac_bits, e)
    fc = min(max(f, np.int32(-126)), np.int32(127))
    return e, f, float32_of(ix.shl_int32(ix.add_int32(fc, np.int32(127)), np.int32(23)))


@numba.njit(inline="always")
def _finish32(acc, cv, cbits, e, f, s, keep_bits, tiny_exp):
    """One output of a fused step from the int32 sum ``acc`` of its product terms (units
    2^-f): C's term ``trunc(c * 2^f)`` added in int32, the total's magnitude cut to
    ``keep_bits`` significant bits (RZ; 32 keeps every bit and the conversion to float32
    rounds to nearest even), scaled by 2^-f. Returns (flag, float32): the flag, with a NaN
    mark (-NaN for an exact zero sum of finite terms), where this int32 path does not give
    the result: inf / NaN terms, a total that overflows int32, an exact zero sum, f outside
    [-126, 126], a result below 2^(tiny_exp) (2^-126, or every result with a larger
    ``tiny_exp``). Where not flagged every step is exact: c * 2^f is a float32 scaled within
    range (or below 1 in magnitude, truncating to 0 whatever its rounding), the total has at
    most ``keep_bits`` <= 24 significant bits after the cut (RZ), and the final scaling lands
    at or above 2^-126."""
    cterm = ix.trunc_int32(cv * s)
    tot = ix.add_int32(acc, cterm)
    ovf = ix.and_int32(ix.xor_int32(acc, tot), ix.xor_int32(cterm, tot)) < np.int32(0)
    neg = tot < np.int32(0)
    mag = ix.sub_int32(np.int32(0), tot) if neg else tot  # -2^31 reads as 2^31 unsigned
    lz = ix.clz_uint32(mag)
    cut = ix.sub_int32(ix.sub_int32(np.int32(32), lz), keep_bits)
    cut = cut if cut > np.int32(0) else np.int32(0)
    mag = ix.and_int32(mag, ix.shl_int32(np.int32(-1), cut))
    down = float32_of(ix.shl_int32(ix.sub_int32(np.int32(127), f), np.int32(23)))  # 2^-f
    r = ix.float32_of_uint32(mag) * down
    special = (e >= np.int32(SPECIAL)) | (ix.and_int32(cbits, np.int32(0x7F800000)) == np.int32(0x7F800000))
    off = (f < np.int32(-126)) | (f > np.int32(126))
    zero = tot == np.int32(0)
    tiny = ix.sub_int32(ix.sub_int32(np.int32(31), lz), f) < tiny_exp
    flag = special | off | ovf | zero | tiny
    mark = _MARK if special | off else (_ZERO_MARK if zero else _MARK)
    return flag, (mark if flag else (-r if neg else r))


@numba.njit(inline="always")
def _add_terms(acc, a2, i, k0, bk, j, s):
    """``acc`` plus the 16 product terms ``trunc(a2[i, k0 + t] * bk[t, j] * s)``, in int32."""
    for t in range(16):
        acc = ix.add_int32(acc, ix.trunc_int32(a2[i, k0 + t] * bk[t, j] * s))
    return acc


@numba.njit(**_JIT)
def _step_rows(a2, h2, i0, b2, hb2, k0, kblock, bstep, narrow, emax, fits, d2, dn2, flags,
               frac_bits, keep_bits, tiny_exp):
    """One fused step of the ``kblock`` (16 or 32: two unrolled sums of 16, a loop of 32 is
    not vectorised) positions from k0 for the rows ``i0 + ii`` of a tile (A values ``a2``,
    codes ``h2``): per row the exponent pass into ``emax[ii]``, whether its products fit
    float32 into ``fits[ii]`` (:func:`_products_fit` with ``bstep``, always for operands that
    are not ``narrow``), and where they do the int32 sum pass, then :func:`_finish32`: C
    ``d2[ii]``, results into ``dn2[ii]`` (NaN marks where flagged), ``flags[ii]`` the count
    of flagged outputs (0 for a row it does not sum)."""
    prefer_512_bit_vectors()
    bk, bk2 = b2[k0:k0 + 16], b2[k0 + 16:k0 + kblock]
    hbk, hbk2 = hb2[k0:k0 + 16], hb2[k0 + 16:k0 + kblock]
    cbits2 = d2.view(np.int32)
    n = d2.shape[1]
    for ii in range(d2.shape[0]):  # 2-D indexing: a slice per row costs its reference counts
        i = i0 + ii
        for j in range(n):
            e = np.int16(h2[i, k0] + hbk[0, j])
            for t in range(1, 16):
                e = max(e, np.int16(h2[i, k0 + t] + hbk[t, j]))
            emax[ii, j] = e
        for j in range(n if kblock == 32 else 0):
            e = emax[ii, j]
            for t in range(16):
                e = max(e, np.int16(h2[i, k0 + 16 + t] + hbk2[t, j]))
            emax[ii, j] = e
        fits[ii] = not narrow or _products_fit(h2[i], k0, kblock, bstep)
        flagged = np.int32(0)
        if fits[ii] and kblock == 16:
            for j in range(n):
                e, f, s = _term_scale(emax[ii, j], cbits2[ii, j], frac_bits)
                acc = _add_terms(np.int32(0), a2, i, k0, bk, j, s)
                flag, dn2[ii, j] = _finish32(acc, d2[ii, j], cbits2[ii, j], e, f, s, keep_bits,
                                             tiny_exp)
                flagged = ix.add_int32(flagged, np.int32(flag))
        elif fits[ii]:
            for j in range(n):
                e, f, s = _term_scale(emax[ii, j], cbits2[ii, j], frac_bits)
                acc = _add_terms(_add_terms(np.int32(0), a2, i, k0, bk, j, s), a2, i, k0 + 16,
                                 bk2, j, s)
                flag, dn2[ii, j] = _finish32(acc, d2[ii, j], cbits2[ii, j], e, f, s, keep_bits,
                                             tiny_exp)
                flagged = ix.add_int32(flagged, np.int32(flag))
        flags[ii] = flagged


@numba.njit(inline="always")
def _products_fit(hrow, k0, kblock, bmax):
    """Whether every product of this k-step of A row ``hrow`` and a B step whose largest code
    is ``bmax`` is finite in float32: a product is below 2^(ea + eb + 2), so ea + eb <= 126.
    Small products need no check: a narrow product has at most 22 significant bits, so one
    that loses bits in float32 is below 2^-127, and the sum pass's results are used only
    where 2^(F - E) is a float32 (E >= F - 126, :func:`_finish32`), where a term below
    2^-127 * 2^(F - E) <= 1 truncates to 0 whatever its float32 rounding."""
    return code_max(hrow, k0, k0 + kblock) + bmax <= 126


@numba.njit(**_JIT)
def _block16(arow, b2, k0, emax, d, dn, frac_bits, keep, tiny):
    """One fused step of K = 16 positions from k0 for a row of outputs in float64 (the path of
    the steps whose products do not fit float32; their exponents in ``emax``, from
    :func:`_step_rows`): C ``d``, result into ``dn`` (NaN where flagged); returns the count
    of flagged outputs."""
    ak, bk = arow[k0:k0 + 16], b2[k0:k0 + 16]
    flagged = 0
    for j in range(d.size):
        c64, ec = _c_term(d[j])
        e, scale = _scale(_largest(emax[j], ec), frac_bits)
        tot = np.int64(c64 * scale)
        for t in range(16):
            tot += np.int64(np.float64(ak[t]) * np.float64(bk[t, j]) * scale)
        flag, r = _finish(tot, e, c64, frac_bits, keep, tiny)
        dn[j] = r
        flagged += flag
    return flagged


@numba.njit(**_JIT)
def _block32(arow, b2, k0, emax, d, dn, frac_bits, keep, tiny):
    """:func:`_block16` for K = 32 positions (FP8 wgmma), two unrolled loops of 16."""
    ak, bk = arow[k0:k0 + 16], b2[k0:k0 + 16]
    ak2, bk2 = arow[k0 + 16:k0 + 32], b2[k0 + 16:k0 + 32]
    flagged = 0
    for j in range(d.size):
        c64, ec = _c_term(d[j])
        e, scale = _scale(_largest(emax[j], ec), frac_bits)
        tot = np.int64(c64 * scale)
        for t in range(16):
            tot += np.int64(np.float64(ak[t]) * np.float64(bk[t, j]) * scale)
        for t in range(16):
            tot += np.int64(np.float64(ak2[t]) * np.float64(bk2[t, j]) * scale)
        flag, r = _finish(tot, e, c64, frac_bits, keep, tiny)
        dn[j] = r
        flagged += flag
    return flagged


@numba.njit(**_JIT)
def _fix(arow, erow, b2, eb2, k0, k1, d, dn, frac_bits, out_round, out_bits):
    """The flagged (NaN) outputs of ``dn`` by :func:`_column` (-NaN: :func:`_zero_sum`),
    from their C in ``d``."""
    for j in range(d.size):
        if dn[j] != dn[j]:
            if math.copysign(1.0, dn[j]) < 0:
                dn[j] = _zero_sum(arow, b2, j, k0, k1, d[j])
            else:
                dn[j] = _column(arow, erow, b2, eb2, j, k0, k1, d[j], frac_bits, out_round,
                                out_bits)


@numba.njit(**_JIT)
def _zero_sum(arow, b2, j, k0, k1, c):
    """The zero of an exact zero sum of finite terms: -0 when C and every product are -0."""
    if c != 0.0 or math.copysign(1.0, c) > 0:
        return np.float32(0.0)
    for k in range(k0, k1):
        p = np.float64(arow[k]) * np.float64(b2[k, j])
        if p != 0.0 or math.copysign(1.0, p) > 0:
            return np.float32(0.0)
    return np.float32(-0.0)


# rows of outputs per parallel item of gemm_rows: each k-step runs its passes over the tile's
# rows in one call (per-row calls cost about a third of a 64 x 128 wgmma, 2-core VM)
_ROW_TILE = 32


@parallel_kernel
def gemm_rows(a, ha, ia, b, hb, ib, bmax, c, ic, kblock, frac_bits, out_round, out_bits,
              out, out_bits_view):
    """D[r, i, :] of a chained GEMM, one row of outputs at a time: a [Ra, M, K] float32 (narrow
    values) or float64 / ha the int16 codes of their exponents (:func:`exp_or_code`), b
    [Rb, K, N] / hb, ``bmax`` [Rb, K / 16] the largest code of each 16 K positions of B
    (:func:`step_code_max`), c [Rc, M, N] float32; ia / ib / ic map each output batch entry r to
    its operand entries. K runs in blocks of ``kblock`` (16 or 32), each one fused step with C
    inside the sum. Writes float32 ``out`` [R, M, N] (``out_bits_view`` its uint32 view, for
    the canonical NaN)."""
    rows, m, n = out.shape
    nblk = a.shape[2] // kblock
    narrow = a.itemsize == 4  # float32 values: products in float32, checked per step
    # RZ clears the float64 bits below the kept ones (the cast to float32 is then exact)
    keep = -(1 << (53 - out_bits)) if out_round == _RZ else -1
    # results below 2^-126 take _column; every output when the cast is not the rounding
    tiny = 1023 - 126 if out_round == _RZ or out_bits >= 24 else 4096
    # the same for the int32 path (_finish32): bits kept, least result exponent not flagged
    keep_bits = np.int32(out_bits if out_round == _RZ else 32)
    frac32 = np.int32(frac_bits)
    tiny_exp = np.int32(-126 if out_round == _RZ or out_bits >= 24 else 1 << 20)
    tiles = (m + _ROW_TILE - 1) // _ROW_TILE
    for item in prange(rows * tiles):
        r = item // tiles
        i0 = (item - r * tiles) * _ROW_TILE
        i1 = min(i0 + _ROW_TILE, m)
        ar, br = ia[r], ib[r]
        a2, h2, b2, hb2 = a[ar], ha[ar], b[br], hb[br]
        d = c[ic[r], i0:i1].copy()
        dn = np.empty_like(d)
        emax = np.empty((i1 - i0, n), dtype=np.int16)
        fits = np.empty(i1 - i0, dtype=np.bool_)
        flags = np.empty(i1 - i0, dtype=np.int32)
        for blk in range(nblk):
            k0 = blk * kblock
            bstep = bmax[br, k0 // 16] if kblock == 16 else max(bmax[br, k0 // 16],
                                                                 bmax[br, k0 // 16 + 1])
            _step_rows(a2, h2, i0, b2, hb2, k0, kblock, bstep, narrow, emax, fits, d, dn,
                       flags, frac32, keep_bits, tiny_exp)
            for ii in range(i1 - i0):
                arow = a2[i0 + ii]
                if not fits[ii] and kblock == 16:
                    flags[ii] = _block16(arow, b2, k0, emax[ii], d[ii], dn[ii], frac_bits,
                                         keep, tiny)
                elif not fits[ii]:
                    flags[ii] = _block32(arow, b2, k0, emax[ii], d[ii], dn[ii], frac_bits,
                                         keep, tiny)
                if flags[ii]:
                    _fix(arow, h2[i0 + ii], b2, hb2, k0, k0 + kblock, d[ii], dn[ii],
                         frac_bits, out_round, out_bits)
            d, dn = dn, d
        for ii in range(i1 - i0):
            for j in range(n):
                if d[ii, j] != d[ii, j]:
                    out_bits_view[r, i0 + ii, j] = _CANONICAL_NAN
                else:
                    out[r, i0 + ii, j] = d[ii, j]


@parallel_kernel
def gemm_steps(a, ea, ia, bt, ebt, ib, c, ic, kblock, steps, frac_bits, out_round, out_bits,
               c_in_sum, c_round, out, out_bits_view):
    """:func:`gemm_rows` for instructions of several sequential fused steps per block (FP8
    mma.sync), one output at a time: bt [Rb, N, K] is B transposed, ``steps`` [S, L] the
    positions (inside a block) of each step; with ``c_in_sum`` False the steps start from +0
    and C is added after them (float32 add rounded by ``c_round``)."""
    rows, m, n = out.shape
    nblk = a.shape[2] // kblock
    for ri in prange(rows * m):
        r = ri // m
        i = ri - r * m
        ar, br, cr = ia[r], ib[r], ic[r]
        arow, erow = a[ar, i], ea[ar, i]
        for j in range(n):
            bcol, ecol = bt[br, j], ebt[br, j]
            d = c[cr, i, j]
            for blk in range(nblk):
                k0 = blk * kblock
                acc = d if c_in_sum else np.float32(0.0)
                for s in range(steps.shape[0]):
                    acc = _step(arow, erow, bcol, ecol, steps[s], k0, acc, frac_bits,
                                out_round, out_bits)
                if c_in_sum:
                    d = acc
                else:
                    d = _round(np.float64(acc) + np.float64(d), c_round, 24)
            if d != d:
                out_bits_view[r, i, j] = _CANONICAL_NAN
            else:
                out[r, i, j] = d


def _batch_index(shape: tuple, lead: tuple) -> np.ndarray:
    """For each entry of the broadcast leading shape ``lead``, the flat entry of an operand
    whose leading shape is ``shape``."""
    if tuple(shape) == tuple(lead):  # no broadcast (a single instruction: both ())
        return np.arange(math.prod(lead), dtype=np.int64)
    count = math.prod(shape)
    idx = np.arange(count, dtype=np.int64).reshape(shape)
    return np.broadcast_to(idx, lead).reshape(-1).copy()


def same_width(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two decoded operands' values in one float type for :func:`gemm_rows` (float32 from
    narrow formats, float64 from float64 values): float64 for both where either is."""
    if a.dtype == b.dtype:
        return a, b
    return a.astype(np.float64), b.astype(np.float64)


def steps_array(k_steps, kblock: int) -> np.ndarray:
    """``FusedDotAdd.k_steps`` as an int64 array [S, L] (S = 0: one step over the whole block).

    Raises:
        ValueError: the steps do not cover ``kblock`` positions exactly once, or differ in
            length.
    """
    if not k_steps:
        return np.zeros((0, 0), dtype=np.int64)
    flat = sorted(i for step in k_steps for i in step)
    if flat != list(range(kblock)) or len({len(s) for s in k_steps}) != 1:
        raise ValueError(f"k_steps: {k_steps} do not cover K = {kblock} positions exactly once "
                         "in steps of one length")
    return np.array(k_steps, dtype=np.int64)


def gemm(a64: np.ndarray, b64: np.ndarray, c: np.ndarray, p, kblock: int) -> np.ndarray:
    """``simulator.mma.gemm``'s chained fused dot-add, compiled: D = (A B + C) with K in
    sequential blocks of ``kblock`` (each block's result the next block's C).

    Args:
        a64: [..., M, K]: float64, the exact operand values (as ``simulator.mma`` decodes
            them), or the narrow operands themselves (bf16, f16, e4m3, e5m2 arrays, decoded
            here as ``simulator.numerics.to_float32`` does).
        b64: [..., K, N], float64 or narrow likewise.
        c: float32 [..., M, N]; leading axes of the three broadcast.
        p: a :class:`simulator.mma.spec.FusedDotAdd` (frac_bits, out_bits, out_round,
            c_in_sum, c_round, emin, k_steps).
        kblock: the instruction's k (K must be a multiple of it).
    Returns:
        float32 [broadcast leading axes..., M, N], the bits of ``simulator.mma.gemm``.
    Raises:
        ValueError: leading shapes that do not broadcast, K not a multiple of ``kblock``,
            ``k_steps`` that do not cover a block.
    """
    m, k = a64.shape[-2:]
    n = b64.shape[-1]
    try:
        lead = np.broadcast_shapes(a64.shape[:-2], b64.shape[:-2], c.shape[:-2])
    except ValueError:
        raise ValueError(f"A, B, C: leading (batch) shapes {a64.shape[:-2]}, {b64.shape[:-2]}, "
                         f"{c.shape[:-2]} do not broadcast") from None
    if b64.shape[-2] != k or c.shape[-2:] != (m, n):
        raise ValueError(f"A, B, C: shapes {a64.shape}, {b64.shape}, {c.shape} do not chain")
    if kblock < 1 or k % kblock:
        raise ValueError(f"kblock: K = {k} is not a multiple of {kblock}")
    rows = math.prod(lead)
    out = np.empty(lead + (m, n), dtype=np.float32)
    if rows * m * n == 0:
        return out
    if k == 0:
        out[...] = c
        return out
    steps = steps_array(p.k_steps, kblock)
    ra, rb, rc = (math.prod(x.shape[:-2]) for x in (a64, b64, c))
    c3 = decode.flat3(c, rc, np.float32)
    ia = _batch_index(a64.shape[:-2], lead)
    ib = _batch_index(b64.shape[:-2], lead)
    ic = _batch_index(c.shape[:-2], lead)
    o3 = out.reshape(rows, m, n)
    out_round = _RZ if p.out_round == "rz" else _RN
    if steps.shape[0] == 0 and p.c_in_sum and kblock in (16, 32):
        a3, ha3 = decode.operand(a64, ra, p.emin, coded=True)
        b3, hb3 = decode.operand(b64, rb, p.emin, coded=True)
        a3, b3 = same_width(a3, b3)
        gemm_rows(a3, ha3, ia, b3, hb3, ib, decode.step_maxima(hb3, 16), c3, ic, kblock, p.frac_bits,
                  out_round, p.out_bits, o3, o3.view(np.uint32))
        return out
    a3, ea3 = decode.operand(a64, ra, p.emin)
    b3, eb3 = decode.operand(b64, rb, p.emin)
    if steps.shape[0] == 0:
        steps = np.arange(kblock, dtype=np.int64)[None, :]
    bt = np.ascontiguousarray(np.swapaxes(b3, 1, 2))
    gemm_steps(a3, ea3, ia, bt, np.ascontiguousarray(np.swapaxes(eb3, 1, 2)), ib, c3, ic,
               kblock, steps, p.frac_bits, out_round, p.out_bits, p.c_in_sum,
               _RZ if p.c_round == "rz" else _RN, o3, o3.view(np.uint32))
    return out


def supports(p) -> bool:
    """Whether :func:`gemm` evaluates the parameters ``p`` (every family of
    ``simulator.mma.instructions``; k_steps of equal lengths)."""
    return (p.out_round in ("rz", "rn") and p.c_round in ("rz", "rn") and 1 <= p.out_bits <= 24
            and 0 <= p.frac_bits <= 48 and len({len(s) for s in p.k_steps}) <= 1)
