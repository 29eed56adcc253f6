"""The probed instructions and how the emulator answers for a probe's bit-pattern operands."""

from __future__ import annotations

import numpy as np

from ..mma.fused import FusedDotAdd, fused_dot_add
from ..numerics import FORMATS, to_float32

#: probe kernel name -> (kind, M, N, K, operand format)
PROBES = {
    "mma_sync_m16n8k16_bf16": ("mma_sync", 16, 8, 16, "bf16"),
    "mma_sync_m16n8k16_f16": ("mma_sync", 16, 8, 16, "f16"),
    "mma_sync_m16n8k32_e4m3": ("mma_sync", 16, 8, 32, "e4m3"),
    "mma_sync_m16n8k32_e5m2": ("mma_sync", 16, 8, 32, "e5m2"),
    "wgmma_m64n8k16_bf16": ("wgmma", 64, 8, 16, "bf16"),
    "wgmma_m64n8k16_f16": ("wgmma", 64, 8, 16, "f16"),
    "wgmma_m64n8k32_e4m3": ("wgmma", 64, 8, 32, "e4m3"),
    "wgmma_m64n8k32_e5m2": ("wgmma", 64, 8, 32, "e5m2"),
}


def decode(bits: np.ndarray, fmt: str) -> np.ndarray:
    """Narrow-format bit patterns -> exact float64 values."""
    return to_float32(np.asarray(bits, dtype=FORMATS[fmt].uint).view(FORMATS[fmt].dtype)).astype(np.float64)


def emulate_probe(name: str, a_bits, b_bits, c_bits, params: FusedDotAdd) -> np.ndarray:
    """Emulated D bits (uint32 [T, M, N]) of probe ``name`` for operand bit patterns."""
    fmt = PROBES[name][4]
    c = np.asarray(c_bits, dtype=np.uint32).view(np.float32)
    return fused_dot_add(decode(a_bits, fmt), decode(b_bits, fmt), c, params).view(np.uint32)
