"""Bit-level helpers for IEEE binary32 values: views, checks, flushing, canonical NaN.

Everything here works on NumPy arrays of any shape and never copies more than it must.
The rules these helpers encode come from the PTX ISA ("Floating Point Instructions":
`.ftz` flushes subnormal inputs and results to sign-preserving zero) and from the H200
measurements recorded in ``simulator/data/device/numerics_report.json``.
"""

from __future__ import annotations

import numpy as np

#: Bit pattern of every NaN that an sm_90 float32 instruction produces (measured: see
#: ``simulator/data/device/numerics_report.json``; PTX ISA calls it the canonical NaN).
CANONICAL_NAN_BITS = np.uint32(0x7FFFFFFF)

SIGN_MASK = np.uint32(0x80000000)
EXP_MASK = np.uint32(0x7F800000)
MANT_MASK = np.uint32(0x007FFFFF)


def require_float32(name: str, x) -> np.ndarray:
    """Return ``x`` as a float32 ndarray, or raise if it is anything else.

    Accepts a ``numpy.ndarray`` of dtype float32 or a ``numpy.float32`` scalar (returned as a
    0-d array). Nothing is cast: a float64 array or a Python float is an error, because a silent
    cast would round before the emulated instruction sees the value.

    Raises:
        TypeError: naming ``name``, the expected dtype and what was given.
    """
    if isinstance(x, np.ndarray):
        if type(x) is not np.ndarray:  # masked arrays, matrices: their extra meaning would be lost
            raise TypeError(f"{name}: expected a plain numpy float32 array, got {type(x).__name__} "
                            "(convert explicitly, e.g. np.asarray(x) or x.filled(...))")
        if x.dtype != np.float32:
            raise TypeError(f"{name}: expected a float32 array, got dtype {x.dtype}")
        return x
    if isinstance(x, np.float32):
        return np.asarray(x)
    raise TypeError(
        f"{name}: expected a numpy float32 array or numpy.float32 scalar, got "
        f"{type(x).__name__}; convert explicitly, e.g. np.float32(value)"
    )


def require_bool(name: str, value) -> bool:
    """``value`` as a bool (Python or NumPy bool only).

    Raises:
        TypeError: anything else, naming ``name``.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name}: expected True or False, got {value!r}")


def is_int(value) -> bool:
    """Whether ``value`` is a Python or NumPy integer scalar (a bool is not)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def reject_subclass(name: str, x, error: type[Exception] = TypeError) -> None:
    """Refuse masked arrays, matrices and other ndarray subclasses (their meaning would be lost
    when NumPy operations return plain arrays); plain arrays and non-arrays pass.

    Raises:
        ``error`` (TypeError by default): naming ``name`` and the type given.
    """
    if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
        raise error(f"{name}: expected a plain numpy array, got {type(x).__name__} "
                    "(a mask or subclass meaning would be lost)")


def to_bits(x: np.ndarray) -> np.ndarray:
    """View a float32 array as uint32 bit patterns (no copy when contiguous).

    Raises:
        TypeError: ``x`` is not a native float32 array or scalar.
    """
    return np.asarray(require_float32("x", x), order="C").view(np.uint32)


def from_bits(u: np.ndarray) -> np.ndarray:
    """View a uint32 array as float32 values (no copy when contiguous).

    Raises:
        TypeError: ``u`` is not an unsigned 32-bit integer array or scalar.
    """
    arr = np.asarray(u)
    if arr.dtype != np.uint32:
        raise TypeError(f"u: expected a uint32 array, got dtype {arr.dtype}")
    return np.asarray(arr, order="C").view(np.float32)


def flush_subnormal(x: np.ndarray) -> np.ndarray:
    """Replace subnormal float32 values by zero of the same sign (the `.ftz` rule).

    Shape and dtype are kept; a new array is returned.

    Raises:
        TypeError: ``x`` is not float32.
    """
    out = np.array(require_float32("x", x), copy=True)
    u = out.view(np.uint32)
    np.putmask(u, (u & EXP_MASK) == 0, u & SIGN_MASK)
    return out


def canonicalize_nan(x: np.ndarray) -> np.ndarray:
    """Replace every NaN (any payload, any sign) by the canonical 0x7fffffff.

    Raises:
        TypeError: ``x`` is not float32.
    """
    out = np.array(require_float32("x", x), copy=True)
    u = out.view(np.uint32)
    np.putmask(u, (u & ~SIGN_MASK) > EXP_MASK, CANONICAL_NAN_BITS)
    return out


def hexbits(x) -> str:
    """Readable hex of one float32 value, e.g. ``'0x3f800000'``."""
    return f"0x{int(np.asarray(x, dtype=np.float32).view(np.uint32)):08x}"
