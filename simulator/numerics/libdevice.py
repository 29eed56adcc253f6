"""CUDA's accurate single-precision ``logf`` and ``expf`` (libdevice), as nvcc inlines them
for sm_90 without ``--use_fast_math``: the instruction sequences, bit for bit.

Code compiled without fast math (PyTorch's build of FlashAttention-2: its split-KV combine
calls ``expf`` / ``logf``) gets these, not ``__expf`` / ``__logf`` (MUFU.EX2 / MUFU.LG2 of a
scaled argument). The sequences were read from ``nvcc -ptx -arch=sm_90`` (CUDA 13.0) of one-line
kernels ``o[i] = logf(a[i])`` and ``o[i] = expf(a[i])``; ``scripts/libdevice_ptx.sh``
regenerates that PTX. Every step here is one PTX instruction (``fma.rn``, ``mul``, ``add``,
integer bit operations, ``fma.rm``, ``cvt.sat``, ``ex2.approx.ftz``), none flushes subnormals
unless the PTX says ``.ftz``.

* ``logf(a)``: ``a`` below 2^-126 is scaled by 2^23 (exponent bias -23); ``a = m * 2^e`` with
  ``m`` in [2/3, 4/3) (the bit split at ``0x3F2AAAAB``); ``f = m - 1``; a degree-10 polynomial
  in Horner form by ``fma.rn``, ``log(m) = f + f^2 p(f)``; ``e * ln2`` added by one ``fma``;
  0 gives -inf, negative numbers NaN, +inf and NaN themselves.
* ``expf(x)``: ``j = round-down(x log2(e))`` via ``cvt.sat`` and ``fma.rm`` on a shifted
  constant; ``r = x log2(e) - j`` in two ``fma`` steps (log2(e) split in two); ``ex2.approx.ftz(r)``
  times ``2^j`` built from the bits of the integer.
"""

from __future__ import annotations

import numpy as np

from .float32 import fadd, ffma, fmul
from .mufu import ex2

__all__ = ["expf", "logf"]


def _f(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]


_LOG_POLY = tuple(_f(b) for b in (0x3E1039F6, 0xBDF8CDCC, 0x3E0F2955, 0xBE2AD8B9, 0x3E4CED0B,
                                  0xBE7FFF22, 0x3EAAAA78))
_LOG_LEAD = _f(0xBE055027)
_LN2 = _f(0x3F317218)
_TWO_M23 = _f(0x34000000)
_TWO_P23 = _f(0x4B000000)
_MIN_NORMAL = _f(0x00800000)


def logf(a, *, model: str = "h200") -> np.ndarray:
    """libdevice ``logf`` (natural logarithm), float32 in and out, any shape.

    Args:
        a: float32 array.
        model: unused (no MUFU instruction); kept for a uniform signature.
    Returns:
        float32 array of ``log(a)`` as the sm_90 sequence rounds it (within 1 ulp of the
        exact logarithm).
    Source: nvcc 13.0 ``-ptx -arch=sm_90`` of ``logf`` (scripts/libdevice_ptx.sh).
    """
    a = np.asarray(a, np.float32)
    tiny = a < _MIN_NORMAL
    x = np.where(tiny, fmul(a, _TWO_P23), a).astype(np.float32)
    bias = np.where(tiny, np.float32(-23.0), np.float32(0.0)).astype(np.float32)
    bits = x.view(np.uint32).astype(np.int64)
    e_bits = ((bits - 0x3F2AAAAB) & 0xFF800000) & 0xFFFFFFFF
    e_signed = np.where(e_bits >= 1 << 31, e_bits - (1 << 32), e_bits)
    m = ((bits - e_bits) & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    e = ffma(e_signed.astype(np.float32), _TWO_M23, bias)          # cvt.rn.f32.s32 is exact here
    f = fadd(m, np.float32(-1.0))
    p = ffma(np.full_like(f, _LOG_LEAD), f, _LOG_POLY[0])
    for c in _LOG_POLY[1:]:
        p = ffma(p, f, c)
    p = ffma(p, f, np.float32(-0.5))
    r = ffma(fmul(f, p), f, f)
    r = ffma(e, _LN2, r)
    special = bits >= 0x7F800000  # +inf, NaN, negative numbers: fma(x, inf, inf)
    inf = np.float32(np.inf)
    with np.errstate(invalid="ignore"):
        r = np.where(special, (x.astype(np.float64) * np.inf + np.inf).astype(np.float32), r)
    return np.where(x == 0, -inf, r).astype(np.float32)


_EXP_SCALE = _f(0x3BBB989D)   # log2(e) / 256
_EXP_SHIFT = _f(0x4B400001)   # 1.5 * 2^23 + 1
_EXP_RANGE = _f(0x437C0000)   # 252
_EXP_UNSHIFT = _f(0xCB40007F)  # -(1.5 * 2^23 + 127)
_LOG2E_HI = _f(0x3FB8AA3B)
_LOG2E_LO = _f(0x32A57060)


def _fma_rm(a: np.ndarray, b: np.float32, c: np.float32) -> np.ndarray:
    """``fma.rm.f32`` for the operands expf gives it (a in [0, 1], b = 252, c ~ 1.5 * 2^23):
    the float64 sum is exact, then rounded toward minus infinity."""
    exact = a.astype(np.float64) * np.float64(b) + np.float64(c)
    r = exact.astype(np.float32)
    return np.where(r.astype(np.float64) > exact, np.nextafter(r, np.float32(-np.inf)),
                    r).astype(np.float32)


def expf(x, *, model: str = "h200") -> np.ndarray:
    """libdevice ``expf``, float32 in and out, any shape.

    Args:
        x: float32 array.
        model: the MUFU model of its ``ex2.approx.ftz`` (a GPU key, :mod:`simulator.gpus`).
    Returns:
        float32 array of ``exp(x)`` as the sm_90 sequence rounds it.
    Source: nvcc 13.0 ``-ptx -arch=sm_90`` of ``expf`` (scripts/libdevice_ptx.sh).
    """
    x = np.asarray(x, np.float32)
    t = ffma(x, _EXP_SCALE, np.float32(0.5))
    with np.errstate(invalid="ignore"):
        t = np.clip(np.nan_to_num(t, nan=0.0), 0.0, 1.0).astype(np.float32)   # cvt.sat: NaN -> 0
    j = _fma_rm(t, _EXP_RANGE, _EXP_SHIFT)
    k = fadd(j, _EXP_UNSHIFT)
    r = ffma(x, _LOG2E_HI, -k)
    r = ffma(x, _LOG2E_LO, r)
    scale = ((j.view(np.uint32).astype(np.uint64) << np.uint64(23)) & np.uint64(0xFFFFFFFF)
             ).astype(np.uint32).view(np.float32)
    return fmul(ex2(r, model=model, ftz=True), scale)
