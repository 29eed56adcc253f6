"""MUFU.EX2's table in the compact form the compiled kernels read: 1 MB of bits and 8 kB of
segment centres in place of 2^24 int32 entries (64 MB), any entry computed with one bit read.

Two properties of the H200's table (:func:`simulator.numerics.mufu_data.ex2_table`, measured
entry by entry) make it small; :func:`pack` checks both on the table it is given and returns
None where either fails (the kernels then read the table itself):

- its x < 0 half repeats its x >= 0 half one index lower: entry ``2^23 + j`` equals entry
  ``j - 1`` for j >= 1, and entry ``2^23`` equals entry 0 (as if the fraction of a negative
  input reached the unit's interpolator one unit lower);
- within each segment of 4096 entries of the x >= 0 half, an entry's mantissa ``m(j)`` (its
  bits less ``126 << 23``, an integer in [2^23, 2^24]) and ``v(j) = 2^(j / 2^23) * 2^23``
  (:func:`ulps`) differ by amounts ``v(j) - m(j)`` that spread less than 2 units (1.29 at most
  on the H200's table): with ``c`` the middle of the segment's spread,
  ``m(j) = trunc(v(j) - c) + b(j)`` with one bit ``b(j)``.

The kernels compute ``trunc(v(j) - c)`` with the same compiled arithmetic that :func:`pack`
checked every entry against, so the bits are the table's whatever the rounding of ``v``.
"""

from __future__ import annotations

import math
import weakref

import numba
import numpy as np

from .intrinsics import fma_float64 as _fma
from .intrinsics import prefer_512_bit_vectors as _prefer_512
from .intrinsics import trunc_int32 as _trunc_int32
from .launch import JIT

_JIT = JIT  # cache=True, nogil=True, under launch's cache locator
HALF = 1 << 23  # entries per half of the table: the 23 fraction bits of the fixed-point input
SEGMENT_BITS = 12  # 4096 entries per centre
_CANONICAL_NAN = np.uint32(0x7FFFFFFF)
_MANTISSA_BASE = 126 << 23  # an entry's bits less this: its mantissa with the implicit 2^23
# 2^z for |z| <= 1/2 by its Taylor series to degree 8 (relative error below 2^-32), times
# 2^23 sqrt(2) so that v(j) = 2^(j / 2^23 - 1/2) * 2^23 sqrt(2)
_K = tuple(math.log(2.0) ** k / math.factorial(k) for k in range(9))
_K0, _K1, _K2, _K3, _K4, _K5, _K6, _K7, _K8 = _K
_SCALE = 2.0**23 * math.sqrt(2.0)
_SPAN = 1024  # elements per pass of lookup(): its four scratch rows of 4 kB stay in L1


@numba.njit(inline="always", **_JIT)
def ulps(j):
    """``2^(j / 2^23) * 2^23`` in float64 for an int ``j`` in [0, 2^23): Horner's scheme in
    fmas rounded once each (``llvm.fma.f64``), so the same bits on every machine."""
    z = np.float64(j) * (1.0 / HALF) - 0.5
    p = _fma(_K8, z, _K7)
    p = _fma(p, z, _K6)
    p = _fma(p, z, _K5)
    p = _fma(p, z, _K4)
    p = _fma(p, z, _K3)
    p = _fma(p, z, _K2)
    p = _fma(p, z, _K1)
    p = _fma(p, z, _K0)
    return p * _SCALE


@numba.njit(inline="always", **_JIT)
def _base(j, centres):
    """``trunc(v(j) - c)``: entry j's mantissa less its bit (int32)."""
    return _trunc_int32(ulps(j) - np.float64(centres[np.uint32(j) >> np.uint32(SEGMENT_BITS)]))


@numba.njit(inline="always", **_JIT)
def _bit(j, bits):
    """Entry j's bit (0 or 1, int32)."""
    uj = np.uint32(j)
    return np.int32((bits[uj >> np.uint32(5)] >> (uj & np.uint32(31))) & np.uint32(1))


@numba.njit(inline="always", **_JIT)
def _finish(m, hi):
    """The result's bits from the entry's mantissa ``m`` and the exponent increment ``hi``
    (``floor(f / 2^23) << 23``, int32): flushed below 2^-126. Never above the bits of +inf:
    ``hi`` is at most 127 << 23 where ``m`` is above 2^23, and 2^30 only with ``m`` = 2^23."""
    r = m + np.int32(_MANTISSA_BASE) + hi
    return np.uint32(0) if r < np.int32(0x00800000) else np.uint32(r)


@numba.njit(inline="always", **_JIT)
def _split(x):
    """MUFU.EX2's fixed-point split of a float32 (``MufuModel._ex2_core``) with int32 operations
    only (a loop over it vectorises): (j, hi) with j the x >= 0 half's entry (the x < 0 half's
    index moved one lower) and hi the exponent increment. NaN reads as 0 here (the caller
    writes the canonical NaN)."""
    g = np.float32(0.0) if x != x else x
    g = min(max(g, np.float32(-130.0)), np.float32(128.0))  # 128 gives exactly +inf
    f = _trunc_int32(g * np.float32(2.0**23))  # float32 product, truncated
    hi = f & np.int32(-0x800000)
    j = f ^ hi
    return (j - np.int32(1) if (hi < np.int32(0) and j > np.int32(0)) else j), hi


@numba.njit(inline="always", **_JIT)
def ex2_bits(x, bits, centres):
    """MUFU.EX2 of one float32 ``x`` as uint32 bits from the packed table ``bits, centres``
    (what :func:`lookup` gives element by element; the canonical NaN for NaN)."""
    j, hi = _split(x)
    return _CANONICAL_NAN if x != x else _finish(_base(j, centres) + _bit(j, bits), hi)


@numba.njit(inline="always", **_JIT)
def lookup(x, out_bits, bits, centres):
    """MUFU.EX2 (``ex2.approx.ftz.f32``) of the float32 ``x`` [n] into the uint32 ``out_bits``
    [n] (which may be x's own memory) from the packed table ``bits, centres``. Per span of
    :data:`_SPAN` elements: the splits (a vector loop; a NaN marked in bit 0 of its exponent
    increment), the two reads per element (a loop of loads only: LLVM does not turn them into
    gathers on the CPUs measured, so they are kept out of the vector loops), then the values
    (a vector loop that reads only the scratch rows, so that ``out_bits`` sharing x's memory
    does not keep it scalar)."""
    n = x.size
    js = np.empty(_SPAN, dtype=np.int32)
    hs = np.empty(_SPAN, dtype=np.int32)
    cs = np.empty(_SPAN, dtype=np.float32)
    ws = np.empty(_SPAN, dtype=np.uint32)
    for start in range(0, n, _SPAN):
        m = min(_SPAN, n - start)
        xs = x[start:start + m]
        for e in range(m):
            g = xs[e]
            j, hi = _split(g)
            js[e] = j
            hs[e] = hi | np.int32(g != g)
        for e in range(m):
            uj = np.uint32(js[e])
            cs[e] = centres[uj >> np.uint32(SEGMENT_BITS)]
            ws[e] = bits[uj >> np.uint32(5)]
        os = out_bits[start:start + m]
        for e in range(m):
            j, hi = js[e], hs[e]
            base = _trunc_int32(ulps(j) - np.float64(cs[e]))
            b = np.int32((ws[e] >> (np.uint32(j) & np.uint32(31))) & np.uint32(1))
            nan = (hi & np.int32(1)) != np.int32(0)
            os[e] = _CANONICAL_NAN if nan else _finish(base + b, hi & np.int32(-2))


@numba.njit(**_JIT)
def _ulps_from(start, out):
    """``out[k] = ulps(start + k)``."""
    _prefer_512()
    for k in range(out.size):
        out[k] = ulps(np.int32(start + k))


@numba.njit(**_JIT)
def _bases_from(start, centres, out):
    """``out[k] = _base(start + k, centres)``: the kernels' own arithmetic, for the check."""
    for k in range(out.size):
        out[k] = _base(np.int32(start + k), centres)


def pack(table: np.ndarray):
    """MUFU.EX2's int32 table (2^24 entries, :func:`simulator.numerics.mufu_data.ex2_table`)
    as ``(bits, centres)``: uint32 [2^18] (entry j's bit is bit ``j & 31`` of word ``j >> 5``)
    and float32 [2^11], read-only; or None when the table does not have the two properties of
    the module docstring (its halves not one index apart, or a segment whose entries lie 2
    units or more apart around :func:`ulps`). Every entry is checked as the kernels compute it.

    Raises:
        ValueError: ``table`` is not an int32 array of 2^24 entries.
    """
    if not isinstance(table, np.ndarray) or table.dtype != np.int32 or table.shape != (2 * HALF,):
        raise ValueError(f"table: expected int32 [{2 * HALF}], got "
                         f"{getattr(table, 'dtype', type(table).__name__)} "
                         f"{getattr(table, 'shape', '')}")
    pos, neg = table[:HALF], table[HALF:]
    if neg[0] != pos[0] or not np.array_equal(neg[1:], pos[:-1]):
        return None
    seg = 1 << SEGMENT_BITS
    centres = np.empty(HALF // seg, dtype=np.float32)
    words = np.empty(HALF // 32, dtype=np.uint32)
    chunk = 1 << 20
    v = np.empty(chunk, dtype=np.float64)
    base = np.empty(chunk, dtype=np.int32)
    for start in range(0, HALF, chunk):
        _ulps_from(start, v)
        m = pos[start:start + chunk].astype(np.int64) - _MANTISSA_BASE
        d = (v - m).reshape(-1, seg)
        centres[start // seg:(start + chunk) // seg] = (d.max(axis=1) + d.min(axis=1)) / 2
        _bases_from(start, centres, base)
        b = m - base
        if b.min() < 0 or b.max() > 1:
            return None
        packed = np.packbits(b.astype(np.uint8), bitorder="little")
        words[start // 32:(start + chunk) // 32] = np.frombuffer(packed.tobytes(), dtype="<u4")
    for a in (words, centres):
        a.setflags(write=False)
    return words, centres


# id(table) -> (weak reference to the table, pack(table)): a cleared model's table is not kept
_PACKED: dict[int, tuple] = {}


def for_table(table: np.ndarray):
    """:func:`pack` of ``table``, built once per table; only for a MUFU model's own table
    (``simulator.numerics.mufu.is_model_ex2_table``: verified, and read-only for good), None
    for any other (a caller's array may change between calls through memory it shares, so
    the kernels read it as it is at every call)."""
    from ..numerics.mufu import is_model_ex2_table

    if not is_model_ex2_table(table):
        return None
    hit = _PACKED.get(id(table))
    if hit is None or hit[0]() is not table:
        for key in [k for k, (ref, _) in _PACKED.items() if ref() is None]:
            del _PACKED[key]
        hit = _PACKED[id(table)] = (weakref.ref(table), pack(table))
    return hit[1]


def for_model(mufu: str):
    """:func:`for_table` of the MUFU model ``mufu``'s table (a GPU key); None where it has
    none (``"ideal"``) or it does not pack."""
    from ..numerics.mufu import model

    table = model(mufu).ex2_table()
    return None if table is None else for_table(table)
