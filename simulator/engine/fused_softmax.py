"""The forward's softmax step of one K/V block as one compiled call: from the scores S in
matrix order to P converted to the input format and decoded for the P V GEMM.

It evaluates, with the bits of :class:`simulator.flash.softmax.Softmax` and the kernels of
:mod:`.softmax`, in this order per warpgroup (hopper/softmax.h; docs/forward.md, steps 4-5):

1. ``max_get_scale``: each thread's row maximum over its columns in register order (max.ftz,
   the previous maximum first unless it is the first block), the quad butterfly (lane ^ 2,
   then lane ^ 1), and ``scores_scale = MUFU.EX2((prev - cur) * scale_log2)`` (FADD.FTZ of the
   negated maximum, FMUL.FTZ; ``cur`` read as 0 where it is -inf under Check_inf; 1 for the
   first block);
2. ``online_softmax``: ``max_scaled`` (FMUL.FTZ, or FFMA.FTZ with -Max_offset; 0 for a -inf
   maximum under Check_inf), ``P = MUFU.EX2(FFMA.FTZ(s, scale_log2, -max_scaled))`` and the
   thread-local row sum (``FFMA.FTZ(scores_scale, row_sum, p0)`` then FADD.FTZ in register
   order; a plain sum for the first block);
3. P's ``cvt.rn[.satfinite]`` to the input format (round to nearest even; bf16 / f16 overflow
   to inf, FP8 clamped to MAX_NORM; NaN to the format's NaN, :mod:`simulator.numerics.cvt`),
   written in matrix order as the dot-add's decoded operand (the value the format's bits widen
   to, and its int16 exponent code, :func:`.decode.exp_or_code`).

Reading S through the layout's positions and writing P through them replaces the two takes
between matrix and row / column order, P's conversion and its decode, and the NumPy of the row
state between the kernels. MUFU.EX2 reads the packed table (:func:`.ex2_packed.pack`).

Importing this module imports numba; the machine code is cached on disk (``cache=True``).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numba
import numpy as np
from numba import prange

from ..numerics.cvt import get_format
from . import ex2_packed
from . import intrinsics as ix
from .arguments import require_float32_shape
from .decode import CODE_INF, CODE_ZERO, operand
from .launch import JIT, parallel_kernel
from .operands import Decoded
from .softmax import (
    _CANONICAL_NAN,
    _FLT_MIN,
    fadd_ftz,
    ffma_ftz,
    ffma_ftz_fast,
    fmax_ftz,
    fmul_ftz,
)

_JIT = JIT  # cache=True, nogil=True, under launch's cache locator
_NEG_INF = np.float32(-np.inf)


@numba.njit(inline="always", **_JIT)
def narrow_bits(x, shift, sub_min, sub_big, max_finite, sat, nan_bits):
    """``cvt.rn[.satfinite]`` of the float32 ``x`` to a narrow format, as the int32 bits of the
    float32 its result widens to (``simulator.numerics.to_float32``), with selects only (a
    loop over it vectorises). The format: ``shift`` = 23 - its fraction bits, ``sub_min`` its
    least normal magnitude, ``sub_big`` = 2^23 times its least subnormal, ``max_finite``.
    Round to nearest even: from ``sub_min`` up on float32's bits (the ``shift`` low bits
    rounded off, ties to an even result); below it by float32's own rounding of
    ``(|x| + sub_big) - sub_big``, whose quantum is the format's least subnormal. Beyond
    ``max_finite``: inf, or ``max_finite`` with ``sat`` (infinities too, before rounding);
    NaN gives ``nan_bits``."""
    u = ix.bits32(x)
    sign = ix.and_int32(u, np.int32(-0x80000000))
    a = ix.float32_of(ix.and_int32(u, np.int32(0x7FFFFFFF)))
    a = min(a, max_finite) if sat else a
    ua = ix.bits32(a)
    odd = ix.and_int32(ix.shr_int32(ua, shift), np.int32(1))
    half = ix.sub_int32(ix.shl_int32(np.int32(1), ix.sub_int32(shift, np.int32(1))), np.int32(1))
    up = ix.and_int32(ix.add_int32(ua, ix.add_int32(half, odd)), ix.shl_int32(np.int32(-1), shift))
    low = ix.bits32((a + sub_big) - sub_big)
    r = low if a < sub_min else up
    r = np.int32(0x7F800000) if ix.float32_of(r) > max_finite else r
    r = ix.or_int32(r, sign)
    return nan_bits if x != x else r


@numba.njit(inline="always", **_JIT)
def code_of_bits(v, code_emin):
    """:func:`.decode.exp_or_code` (coded) of the float32 bits ``v``, for ``code_emin`` >=
    -126: the exponent floored at ``code_emin`` (a float32 subnormal's is below it), the zero
    code for +-0, the inf / NaN code for those."""
    ex = ix.and_int32(ix.shr_int32(v, np.int32(23)), np.int32(0xFF))
    e = ix.sub_int32(ex, np.int32(127))
    e = e if e > code_emin else code_emin
    e = np.int32(CODE_ZERO) if ix.and_int32(v, np.int32(0x7FFFFFFF)) == np.int32(0) else e
    return np.int16(np.int32(CODE_INF) if ex == np.int32(0xFF) else e)


@parallel_kernel
def softmax_step(s, pos, scale, max_offset, first, check_inf, row_max, row_sum, scores_scale,
                 bits, centres, shift, sub_min, sub_big, max_finite, sat, nan_bits, code_emin,
                 p_vals, p_codes):
    """One block's softmax step for R warpgroups (see the module docstring).

    s float32 [R, E] (each warpgroup's 64 x N scores, matrix order, E = 64 N); pos uint32
    [T * nrow * ncol] the position in E of each thread's register (row / column order,
    flattened), with ``T, nrow = row_max.shape[1:]``; scale float32 [R] (scale_log2);
    max_offset 0 or 8; row_max, row_sum float32 [R, T, nrow] (read, then overwritten with
    the new state); scores_scale float32 [R, T, nrow] (written); bits, centres the packed
    MUFU.EX2 table (:func:`.ex2_packed.pack`); P's format as :func:`narrow_bits` takes it;
    writes ``p_vals`` float32 and ``p_codes`` int16 [R, E] (:func:`code_of_bits` at
    ``code_emin``, the P V instruction's exponent floor). Every NaN of the row state is 0x7fffffff.
    Per warpgroup: S gathered into row / column order, the passes over it contiguous
    (vectorised where the operations allow), P scattered back to matrix order."""
    ix.prefer_512_bit_vectors()
    rows, threads, nrow = row_max.shape
    per = pos.size
    ncol = per // (threads * nrow)
    for r in prange(rows):
        # the scratch rows as [T, nrow, ncol]: indices that are loop counters carry no
        # negative-index select (a flat index computed from them does: 3x slower)
        sv = np.empty((threads, nrow, ncol), dtype=np.float32)
        x = np.empty((threads, nrow, ncol), dtype=np.float32)
        sv1, x1 = sv.reshape(per), x.reshape(per)
        xbits, ubits = x1.view(np.int32), x1.view(np.uint32)
        code = np.empty(per, dtype=np.int16)
        acc = np.empty(threads, dtype=np.float32)
        neg = np.empty((threads, nrow), dtype=np.float32)
        sc = scale[r]
        sr = s[r]
        for e in range(per):  # unsigned positions: no negative-index select either
            sv1[e] = sr[pos[e]]
        for mi in range(nrow):
            _thread_maxima(sv, mi, row_max[r], first, acc)
            _new_max(acc, mi, first, check_inf, max_offset, sc, row_max[r], scores_scale[r],
                     neg, bits, centres)
        _scaled(sv, neg, sc, x)
        ex2_packed.lookup(x1, ubits, bits, centres)
        for mi in range(nrow):
            _sums(x, mi, scores_scale[r], row_sum[r], first, acc)
            for t in range(threads):
                row_sum[r, t, mi] = _f32(_CANONICAL_NAN) if acc[t] != acc[t] else acc[t]
        for e in range(per):
            v = narrow_bits(x1[e], shift, sub_min, sub_big, max_finite, sat, nan_bits)
            xbits[e] = v
            code[e] = code_of_bits(v, code_emin)
        pv, pc = p_vals[r], p_codes[r]
        for e in range(per):
            pv[pos[e]] = x1[e]
            pc[pos[e]] = code[e]


@numba.njit(inline="always", **_JIT)
def _f32(bits):
    """The float32 of ``bits`` (uint32 below 2^31: a NaN's canonical pattern, an ex2 result)."""
    return ix.float32_of(np.int32(bits))


@numba.njit(inline="always", **_JIT)
def _thread_maxima(sv, mi, prev, first, acc):
    """Each thread's maximum of its row ``mi`` of the scores ``sv`` [T, nrow, ncol] (max.ftz
    over its registers in order, after ``prev`` [T, nrow] unless ``first``) into ``acc`` [T];
    the threads' chains side by side."""
    threads, _, ncol = sv.shape
    for t in range(threads):
        v = sv[t, mi, 0]
        acc[t] = v if first else fmax_ftz(prev[t, mi], v)
    for ni in range(1, ncol):
        for t in range(threads):
            acc[t] = fmax_ftz(acc[t], sv[t, mi, ni])


@numba.njit(inline="always", **_JIT)
def _new_max(acc, mi, first, check_inf, max_offset, sc, row_max, scores_scale, neg, bits,
             centres):
    """Row ``mi``'s quad butterfly of the thread maxima ``acc`` (lane ^ 2, then lane ^ 1, the
    own value first), then per thread: scores_scale (MUFU.EX2 of ``(prev - cur) *
    scale_log2``, 1 when ``first``), the new maximum into ``row_max`` [T, nrow] and
    ``-max_scaled`` into ``neg`` [T, nrow]."""
    threads = acc.size
    w = np.empty(threads, dtype=np.float32)
    for t in range(threads):
        w[t] = fmax_ftz(acc[t], acc[t ^ 2])
    for t in range(threads):
        cur = fmax_ftz(w[t], w[t ^ 1])
        ss = np.float32(1.0)
        if not first:
            c = np.float32(0.0) if check_inf and cur == _NEG_INF else cur
            ss = _f32(ex2_packed.ex2_bits(fmul_ftz(fadd_ftz(row_max[t, mi], -c), sc), bits,
                                          centres))
        scores_scale[t, mi] = ss
        row_max[t, mi] = _f32(_CANONICAL_NAN) if cur != cur else cur
        m = ffma_ftz(cur, sc, np.float32(-max_offset)) if max_offset else fmul_ftz(cur, sc)
        neg[t, mi] = np.float32(0.0) if check_inf and cur == _NEG_INF else -m


@numba.njit(inline="always", **_JIT)
def _scaled(sv, neg, sc, x):
    """FFMA.FTZ(sv, sc, neg[t, mi]) of every register of the scores ``sv`` [T, nrow, ncol]
    into ``x`` (same shape): the fma path (:func:`.softmax.ffma_ftz_fast`), its flagged
    results again by the exact one."""
    threads, nrow, ncol = sv.shape
    flagged = 0
    for t in range(threads):
        for mi in range(nrow):
            nm = neg[t, mi]
            for ni in range(ncol):
                y, flag = ffma_ftz_fast(sv[t, mi, ni], sc, nm)
                x[t, mi, ni] = y
                flagged += flag
    if flagged:  # rare: results of magnitude 2^-126
        for t in range(threads):
            for mi in range(nrow):
                for ni in range(ncol):
                    if abs(x[t, mi, ni]) == _FLT_MIN:
                        x[t, mi, ni] = ffma_ftz(sv[t, mi, ni], sc, neg[t, mi])


@numba.njit(inline="always", **_JIT)
def _sums(x, mi, sum_scale, prev, first, acc):
    """The thread-local row sums of row ``mi`` of P ``x`` [T, nrow, ncol] into ``acc``:
    FADD.FTZ in register order after the first register (``FFMA.FTZ(sum_scale, prev, p0)``
    unless ``first``)."""
    threads, _, ncol = x.shape
    for t in range(threads):
        acc[t] = x[t, mi, 0] if first else ffma_ftz(sum_scale[t, mi], prev[t, mi], x[t, mi, 0])
    for ni in range(1, ncol):
        for t in range(threads):
            acc[t] = fadd_ftz(acc[t], x[t, mi, ni])


def format_args(fmt: str, emin: int) -> tuple:
    """The arguments of :func:`narrow_bits` for P's format ``fmt`` (``convert``'s default
    form: ``.satfinite`` where PTX has no other) and of :func:`code_of_bits` for the P V
    instruction's exponent floor ``emin``: ``(shift, sub_min, sub_big, max_finite, sat,
    nan_bits, code_emin)``; ``nan_bits`` the widened bits of the format's NaN, as
    :func:`.decode.operand` gives them.

    Raises:
        ValueError: an unknown format, or ``emin`` not an int in [-126, 127].
    """
    if isinstance(emin, bool) or not isinstance(emin, (int, np.integer)) or \
            not -126 <= emin <= 127:
        raise ValueError(f"emin: expected an int exponent floor in [-126, 127], got {emin!r}")
    return _format_args(fmt, int(emin))


@functools.lru_cache(maxsize=32)
def _format_args(fmt: str, emin: int) -> tuple:
    f = get_format(fmt)
    info = ml_dtypes.finfo(f.dtype)
    nan = np.array([f.nan_bits], dtype=f.uint).view(f.dtype).reshape(1, 1, 1)
    nan_bits = operand(nan, 1, emin, coded=True)[0].reshape(-1).view(np.int32)[0]
    return (np.int32(23 - info.nmant), np.float32(2.0**info.minexp),
            np.float32(2.0**(info.minexp - info.nmant + 23)), np.float32(f.max_finite),
            not f.plain, np.int32(nan_bits), np.int32(emin))


def block_step(s, positions, scale, row_max, row_sum, first, check_inf, max_offset, fmt, emin,
               packed):
    """:func:`softmax_step` on a forward's group (``simulator.engine.softmax_step``, which
    documents the arguments; ``packed`` the packed MUFU.EX2 table): returns ``(row_max,
    row_sum, scores_scale, p)``, p an :class:`.operands.Decoded` [G, W * M, N].

    Raises:
        ValueError: arguments of the wrong kind or shape, positions that are not each
            position of the M x N tile once, a thread count not a multiple of 4 (the quad),
            a Max_offset other than 0 or 8; :func:`format_args`' errors.
    """
    require_float32_shape("s", s, (None,) * 4, "scores [G, W, M, N]")
    g, w, m, n = s.shape
    pos = _checked_positions(positions, m * n)
    threads, nrow, _ = np.shape(positions)
    for name, x in (("row_max", row_max), ("row_sum", row_sum)):
        require_float32_shape(name, x, (g, w, threads, nrow))
    if isinstance(max_offset, bool) or max_offset not in (0, 8):
        raise ValueError(f"max_offset: expected 0 or 8, got {max_offset!r}")
    fmt_args = format_args(fmt, emin)
    try:
        scale_r = np.ascontiguousarray(np.broadcast_to(np.asarray(scale, dtype=np.float32),
                                                       (g, w))).reshape(g * w)
    except ValueError:
        raise ValueError(f"scale: expected float32 values broadcasting against {(g, w)}, got "
                         f"shape {np.shape(scale)}") from None
    rows = g * w
    new_max = row_max.reshape(rows, threads, nrow).copy()
    new_sum = row_sum.reshape(rows, threads, nrow).copy()
    scores_scale = np.empty_like(new_max)
    vals = np.empty((rows, m * n), dtype=np.float32)
    codes = np.empty((rows, m * n), dtype=np.int16)
    softmax_step(np.ascontiguousarray(s).reshape(rows, m * n), pos, scale_r, int(max_offset),
                 bool(first), bool(check_inf), new_max, new_sum, scores_scale, *packed,
                 *fmt_args, vals, codes)
    state = tuple(x.reshape(g, w, threads, nrow) for x in (new_max, new_sum, scores_scale))
    p = Decoded(vals.reshape(g, w * m, n), codes.reshape(g, w * m, n),
                np.arange(g, dtype=np.int64))
    return state + (p,)


_POSITIONS: dict[int, tuple] = {}  # id -> (read-only positions, their uint32 form): checked once


def _checked_positions(positions, size: int) -> np.ndarray:
    """``positions`` [T, nrow, ncol] (T a multiple of 4) as flat uint32, after checking that
    they name each of the tile's ``size`` positions once (the kernel reads and writes
    through them unchecked). A read-only array is checked once and remembered.

    Raises:
        ValueError: not a 3-dimensional integer array of that kind.
    """
    hit = _POSITIONS.get(id(positions))
    if hit is not None and hit[0] is positions and hit[1].size == size:
        return hit[1]
    p = positions if isinstance(positions, np.ndarray) else None
    ok = p is not None and p.ndim == 3 and p.dtype.kind in "iu" and p.size == size and \
        p.shape[0] % 4 == 0
    if ok:
        flat = p.reshape(-1)
        ok = bool(flat.min() >= 0 and flat.max() < size and
                  (np.bincount(flat.astype(np.int64), minlength=size) == 1).all())
    if not ok:
        raise ValueError(f"positions: expected integers [T, nrow, ncol] (T a multiple of 4) "
                         f"naming each of the {size} tile positions once, got "
                         f"{getattr(positions, 'dtype', type(positions).__name__)} "
                         f"{np.shape(positions)}")
    out = np.ascontiguousarray(p, dtype=np.uint32).reshape(-1)
    if not p.flags.writeable:
        if len(_POSITIONS) >= 16:
            _POSITIONS.clear()
        _POSITIONS[id(p)] = (p, out)
    return out
