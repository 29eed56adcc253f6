"""Conversions between float32 and the narrow formats of sm_90: bf16, f16, e4m3, e5m2.

PTX ISA section "cvt" defines the instructions modelled here:

* ``cvt.rn{.satfinite}.bf16.f32`` and ``cvt.rn{.satfinite}.f16.f32``: round to nearest even,
  subnormal results kept; without ``.satfinite`` an overflow gives +-inf, with it +-MAX_NORM.
* ``cvt.rn.satfinite.e4m3x2.f32`` and ``cvt.rn.satfinite.e5m2x2.f32``: the only f32 -> fp8 forms
  PTX has (``.satfinite`` is mandatory): round to nearest even, clamp to +-MAX_NORM.
* ``*x2`` forms pack two results in one register: the value converted from the first source
  operand ``a`` goes to the upper half, ``b`` to the lower half (:func:`convert_x2`).
* Back to float32 (:func:`to_float32`): ``cvt.f32.bf16``, ``cvt.f32.f16``, and for fp8
  ``cvt.rn.f16x2.e4m3x2`` / ``.e5m2x2`` followed by ``cvt.f32.f16``; all exact for numbers.

Rounding of numbers is delegated to ml_dtypes, whose casts from float32 are single
round-to-nearest-even roundings; what the hardware adds on top (clamping, NaN bit patterns) is
written here and measured over all 2^32 float32 inputs on the H200 by
``python -m simulator measure numerics_sweep`` (report: ``simulator/data/device/numerics_report.json``).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .bits import SIGN_MASK, reject_subclass, require_float32, to_bits


@dataclass(frozen=True)
class Format:
    """A narrow floating-point format as the sm_90 cvt instructions see it.

    Attributes:
        name: short PTX-style name (``bf16``, ``f16``, ``e4m3``, ``e5m2``).
        dtype: the ml_dtypes / NumPy dtype holding values of the format.
        uint: unsigned integer dtype of the same width (for bit views).
        max_finite: MAX_NORM, the largest finite magnitude.
        nan_bits: bit pattern cvt writes for a NaN float32 input.
        plain: whether PTX has a non-saturating cvt from f32 to this format.
        ptx: the instruction modelled.
    """

    name: str
    dtype: np.dtype
    uint: type
    max_finite: float
    nan_bits: int
    plain: bool
    ptx: str


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("bf16", np.dtype(ml_dtypes.bfloat16), np.uint16,
               float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 0x7FFF, True,
               "cvt.rn{.satfinite}.bf16.f32"),
        Format("f16", np.dtype(np.float16), np.uint16, 65504.0, 0x7FFF, True,
               "cvt.rn{.satfinite}.f16.f32"),
        Format("e4m3", np.dtype(ml_dtypes.float8_e4m3fn), np.uint8, 448.0, 0x7F, False,
               "cvt.rn.satfinite.e4m3x2.f32"),
        Format("e5m2", np.dtype(ml_dtypes.float8_e5m2), np.uint8, 57344.0, 0x7F, False,
               "cvt.rn.satfinite.e5m2x2.f32"),
    )
}


def get_format(fmt: str) -> Format:
    """Look a format up by name.

    Raises:
        ValueError: unknown name, listing the supported ones.
    """
    try:
        return FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(
            f"fmt: unknown format {fmt!r}; supported: {', '.join(FORMATS)}"
        ) from None


def _resolve_satfinite(f: Format, satfinite: bool | None) -> bool:
    if satfinite is None:
        return not f.plain
    if not isinstance(satfinite, (bool, np.bool_)):
        raise TypeError(f"satfinite: expected True, False or None, got {satfinite!r}")
    satfinite = bool(satfinite)
    if not satfinite and not f.plain:
        raise ValueError(
            f"satfinite: PTX has no non-saturating cvt from f32 to {f.name} "
            f"(only {f.ptx}); pass satfinite=True or leave it None"
        )
    return satfinite


def convert(x, fmt: str, *, satfinite: bool | None = None) -> np.ndarray:
    """Convert float32 values to a narrow format as ``cvt.rn[.satfinite].<fmt>.f32`` does.

    Args:
        x: float32 array, any shape.
        fmt: ``"bf16"``, ``"f16"``, ``"e4m3"`` or ``"e5m2"``.
        satfinite: clamp out-of-range numbers and infinities to +-MAX_NORM. ``None`` (default)
            means the plain form for bf16/f16 and the mandatory ``.satfinite`` form for fp8.
    Returns:
        Array of the same shape with dtype ``FORMATS[fmt].dtype`` (ml_dtypes.bfloat16,
        numpy.float16, ml_dtypes.float8_e4m3fn or ml_dtypes.float8_e5m2). A NaN input gives
        ``FORMATS[fmt].nan_bits``.
    Raises:
        TypeError: ``x`` is not float32.
        ValueError: unknown ``fmt``, or ``satfinite=False`` for an fp8 format.
    """
    x = require_float32("x", x)
    f = get_format(fmt)
    sat = _resolve_satfinite(f, satfinite)
    src = np.clip(x, -f.max_finite, f.max_finite) if sat else x
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.asarray(src.astype(f.dtype))
    nan = np.isnan(x)
    if nan.any():
        bits = out.view(f.uint)
        bits[nan] = f.nan_bits
    return out


def convert_x2(a, b, fmt: str, *, satfinite: bool | None = None) -> np.ndarray:
    """``cvt.rn[.satfinite].<fmt>x2.f32 d, a, b``: two conversions packed in one register.

    Args:
        a, b: float32 arrays (broadcast together).
        fmt, satfinite: as for :func:`convert`.
    Returns:
        uint32 (bf16x2, f16x2) or uint16 (e4m3x2, e5m2x2) bit patterns, with the value
        converted from ``a`` in the upper half and from ``b`` in the lower half (PTX ISA, cvt).
    Raises:
        TypeError, ValueError: as for :func:`convert` (naming ``a`` or ``b``).
    """
    a = require_float32("a", a)
    b = require_float32("b", b)
    f = get_format(fmt)
    hi = convert(a, fmt, satfinite=satfinite).view(f.uint)
    lo = convert(b, fmt, satfinite=satfinite).view(f.uint)
    wide = np.uint32 if f.uint is np.uint16 else np.uint16
    shift = wide(np.dtype(f.uint).itemsize * 8)
    return np.asarray((hi.astype(wide) << shift) | lo.astype(wide))


_BY_DTYPE = {f.dtype: f for f in FORMATS.values()}


def format_of(dtype) -> Format:
    """The :class:`Format` of a NumPy / ml_dtypes dtype (``ml_dtypes.bfloat16`` -> bf16, ...).

    Raises:
        ValueError: not one of the four narrow formats, naming the dtype.
    """
    try:
        return _BY_DTYPE[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise ValueError(f"dtype: expected one of {', '.join(str(f.dtype) for f in FORMATS.values())}, "
                         f"got {dtype!r}") from None


def to_float32(x) -> np.ndarray:
    """Widen bf16 / f16 / e4m3 / e5m2 values to float32 as the hardware does.

    Every number (subnormals included) converts exactly. NaN inputs give the canonical
    float32 NaN 0x7fffffff (``cvt.f32.f16`` and the fp8 path through f16x2 canonicalize;
    bf16 -> f32 is a 16-bit shift and keeps the sign and payload).

    Args:
        x: array with dtype ml_dtypes.bfloat16, numpy.float16, ml_dtypes.float8_e4m3fn or
            ml_dtypes.float8_e5m2.
    Returns:
        float32 array of the same shape.
    Raises:
        TypeError: any other dtype, or an ndarray subclass (a masked array, whose mask would
            be lost).
    """
    reject_subclass("x", x)
    if not isinstance(x, np.ndarray) or x.dtype not in _BY_DTYPE:
        got = x.dtype if isinstance(x, np.ndarray) else type(x).__name__
        raise TypeError(
            f"x: expected an array of dtype {', '.join(str(d) for d in _BY_DTYPE)}; got {got}"
        )
    f = _BY_DTYPE[x.dtype]
    if f.name == "bf16":
        wide = np.asarray(np.asarray(x, order="C").view(np.uint16).astype(np.uint32) << 16)
        return wide.view(np.float32)
    out = x.astype(np.float32)
    bits = to_bits(out)
    nan = (bits & ~SIGN_MASK) > 0x7F800000
    if nan.any():
        bits = bits.copy()
        bits[nan] = 0x7FFFFFFF
        out = bits.view(np.float32)
    return out
