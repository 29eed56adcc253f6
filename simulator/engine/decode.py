"""GEMM operands for the compiled dot-add (:mod:`.dotadd`): narrow formats decoded to their
exact values (as ``simulator.numerics.to_float32`` widens them) with their exponents, or the
int16 codes of those exponents that the dot-add's exponent pass reads, and the largest code of
each k-step of an operand.

Importing this module imports numba; the machine code is cached on disk (``cache=True``).
"""

from __future__ import annotations

import functools

import numba
import numpy as np

from .intrinsics import bits64, float32_of
from .launch import JIT

NO_EXP = -(1 << 20)  # exponent of a zero operand: two still fit int32
# exponent of an inf / NaN operand: a product touching one has ea + eb >= SPECIAL, even with a
# zero (inf * 0 is NaN), so the largest exponent of an output flags its non-finite terms
INF_EXP = 1 << 24
SPECIAL = 1 << 23

# int16 codes of the operand exponents for the dot-add's exponent pass (16 lanes per 256-bit
# vector): the exponent (in [-1074, 1023], floored at emin), CODE_ZERO for a zero (a sum with a
# finite exponent stays below CODE_NONE), CODE_INF for inf / NaN (a sum with it, a zero's
# included, reaches CODE_SPECIAL). Sums of two codes fit int16.
CODE_ZERO = -8192
CODE_INF = 12288
CODE_SPECIAL = 4096
CODE_NONE = -4096

_JIT = JIT  # cache=True, nogil=True, under launch's cache locator


@numba.njit(inline="always")
def exponent_of(x, emin):
    """max(floor(log2|x|), emin) of a float64; NO_EXP for zeros, INF_EXP for inf / NaN (the
    exponent field, a float64 subnormal's from its value times 2^64; selects only, so that
    loops over it vectorise)."""
    ex = (bits64(x) >> 52) & 0x7FF
    sub = ((bits64(x * 18446744073709551616.0) >> 52) & 0x7FF) - 64
    e = (ex if ex != 0 else sub) - 1023
    e = e if e > emin else emin
    e = NO_EXP if x == 0.0 else e
    return INF_EXP if ex == 0x7FF else e


@numba.njit(inline="always")
def exp_or_code(x, emin, coded):
    """:func:`exponent_of`, or its int16 code when ``coded``."""
    e = exponent_of(x, emin)
    if coded:
        return CODE_ZERO if e == NO_EXP else (CODE_INF if e >= SPECIAL else e)
    return e


@numba.njit(**_JIT)
def _exponents(x, emin, coded, out):
    """:func:`exp_or_code` of a flat float64 array into ``out`` (int32, or int16 codes)."""
    for i in range(x.size):
        out[i] = exp_or_code(x[i], emin, coded)


@numba.njit(**_JIT)
def _decode_bf16(bits, emin, coded, vals, exps):
    """bf16 bit patterns (flat uint16) to ``vals`` (float32 or float64) and ``exps`` (int32 exponents, or
    int16 codes when ``coded``): the float32 of ``bits << 16``
    (``simulator.numerics.to_float32``)."""
    for i in range(bits.size):
        x = np.float64(float32_of(np.int32(np.uint32(bits[i]) << 16)))
        vals[i] = x
        exps[i] = exp_or_code(x, emin, coded)


@numba.njit(**_JIT)
def _decode_table(bits, table, emin, coded, vals, exps):
    """:func:`_decode_bf16` for the other formats: ``table`` holds the float64 of every bit
    pattern."""
    for i in range(bits.size):
        x = table[bits[i]]
        vals[i] = x
        exps[i] = exp_or_code(x, emin, coded)


@numba.njit(inline="always")
def code_max(codes, lo, hi):
    """The largest code of a nonzero finite value in ``codes[lo:hi]`` (-32768 when none)."""
    cmax = np.int16(-32768)
    for k in range(lo, hi):  # selects only: a vectorised reduction
        c = codes[k]
        cmax = max(cmax, c if c < CODE_SPECIAL else np.int16(-32768))
    return cmax


@numba.njit(**_JIT)
def step_code_max(flat, out):
    """``out[r, s]`` = the largest code of a nonzero finite value in ``flat[r, s]`` (the codes of
    one k-step of B entry r, its rows flattened); -32768 when there is none: :func:`code_max`
    per step."""
    for r in range(flat.shape[0]):
        for s in range(flat.shape[1]):
            out[r, s] = code_max(flat[r, s], 0, flat.shape[2])


def flat3(x: np.ndarray, rows: int, dtype) -> np.ndarray:
    """``x`` as a C-contiguous writable [rows, ., .] array (one compiled signature for all)."""
    x = np.ascontiguousarray(x, dtype=dtype).reshape((rows,) + x.shape[-2:])
    return x if x.flags.writeable else x.copy()


def _exps(x: np.ndarray, emin: int, coded: bool = False) -> np.ndarray:
    out = np.empty(x.shape, dtype=np.int16 if coded else np.int32)
    _exponents(x.reshape(-1), emin, coded, out.reshape(-1))
    return out


def step_maxima(hb: np.ndarray, kblock: int) -> np.ndarray:
    """:func:`step_code_max` of the codes ``hb`` [Rb, K, N] (int16, C-ordered): int32
    [Rb, K // kblock], the largest code of each ``kblock`` rows (rows past the last whole
    block are not read)."""
    rb, k, n = hb.shape
    steps = k // kblock
    out = np.empty((rb, steps), dtype=np.int32)
    step_code_max(hb[:, :steps * kblock].reshape(rb, steps, kblock * n), out)
    return out


@functools.cache
def values_table(dtype) -> np.ndarray:
    """float64 of every bit pattern of a narrow format, as ``simulator.numerics.to_float32``
    widens it."""
    from ..numerics import to_float32

    dtype = np.dtype(dtype)
    count = 1 << (8 * dtype.itemsize)
    uint = np.uint8 if dtype.itemsize == 1 else np.uint16
    table = to_float32(np.arange(count, dtype=np.int64).astype(uint).view(dtype)).astype(np.float64)
    table.setflags(write=False)
    return table


def operand(x: np.ndarray, rows: int, emin: int, coded: bool = False):
    """An operand as C-contiguous values [rows, ., .] and their int32 exponents (int16 codes
    with ``coded``): ``x`` float64 or float32 (exact values: float64 values come back) or a
    narrow format's array (decoded here, one pass: float32 values with ``coded``, which
    :func:`gemm_rows` multiplies in float32, else float64)."""
    if x.dtype in (np.float64, np.float32):
        x3 = flat3(x, rows, np.float64)
        return x3, _exps(x3, emin, coded)
    uint = np.uint8 if x.dtype.itemsize == 1 else np.uint16
    # a C-ordered copy of the bits first (a transposed operand: strided reads stop the
    # decode loop's vectorisation), then one flat pass
    bits = np.ascontiguousarray(x.view(uint)).reshape((rows,) + x.shape[-2:])
    vals = np.empty(bits.shape, dtype=np.float32 if coded else np.float64)
    exps = np.empty(bits.shape, dtype=np.int16 if coded else np.int32)
    flat = (bits.reshape(-1), emin, coded, vals.reshape(-1), exps.reshape(-1))
    if x.dtype.name == "bfloat16":
        _decode_bf16(*flat)
    else:
        _decode_table(flat[0], values_table(x.dtype), *flat[1:])
    return vals, exps
