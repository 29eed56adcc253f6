"""What the numerics device sweep measures, in a form CI can replay without a GPU.

The sweep (:mod:`simulator.device.numerics_sweep`, run on the H200) and the CI tests share this
module: the list of checked instructions, how the emulator's answer for an input range or case
block is computed, and how device outputs are digested. Recorded device truth lives in
``simulator/data/device/``:

* ``numerics_report.json``: provenance (GPU, driver, toolkit, date, kernel hash) and mismatch
  counts of the last sweep.
* ``numerics_digests.npz``: BLAKE2b-128 digests of the device's output bits, per chunk of
  2^20 consecutive float32 bit patterns for each conversion (4096 chunks cover all 2^32 inputs),
  and per case block of 2^20 operand tuples for each arithmetic variant.
* ``numerics_samples.npz``: raw device bits: every 16-bit input widened to float32, the x2
  packing probe, and the first 2^16 results of block 0 of each arithmetic variant.

A digest is compared with the digest of the emulator's bits for the same inputs, so a CI test
checks millions of device results exactly while the repository stores a few hundred kilobytes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ..numerics import FORMATS, convert, ffma, fadd, fmax, fmin, fmul, fsub
from ..numerics.cases import BLOCK_SIZE, OPS, arith_block

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "device"
REPORT = DATA_DIR / "numerics_report.json"
DIGESTS = DATA_DIR / "numerics_digests.npz"
SAMPLES = DATA_DIR / "numerics_samples.npz"
KERNEL = "probes/numerics.cu"

CHUNK = 1 << 20  # float32 bit patterns per conversion digest
N_CHUNKS = (1 << 32) // CHUNK
SAMPLE_HEAD = 1 << 16  # raw results kept from block 0 of each arithmetic variant

#: conversion name -> (format, satfinite, device kernel)
CONVERSIONS = {
    "bf16": ("bf16", False, "cvt_bf16"),
    "bf16_satfinite": ("bf16", True, "cvt_bf16_satfinite"),
    "f16": ("f16", False, "cvt_f16"),
    "f16_satfinite": ("f16", True, "cvt_f16_satfinite"),
    "e4m3": ("e4m3", True, "cvt_e4m3"),
    "e5m2": ("e5m2", True, "cvt_e5m2"),
}

_EMULATED = {"fadd": fadd, "fsub": fsub, "fmul": fmul, "ffma": ffma, "fmax": fmax, "fmin": fmin}

#: arithmetic variant name -> (op, ftz); the device kernel is ``probe_<variant>``
VARIANTS = {f"{op}{'_ftz' if ftz else ''}": (op, ftz) for op in OPS for ftz in (False, True)}


def digest(bits: np.ndarray) -> bytes:
    """BLAKE2b-128 of an unsigned-integer array's little-endian bytes."""
    return hashlib.blake2b(np.ascontiguousarray(bits).astype(bits.dtype.newbyteorder("<")).tobytes(),
                           digest_size=16).digest()


def conversion_inputs(start: int, count: int) -> np.ndarray:
    """float32 values whose bit patterns are ``start .. start+count-1``."""
    return np.arange(start, start + count, dtype=np.uint64).astype(np.uint32).view(np.float32)


def emulate_conversion(name: str, start: int, count: int) -> np.ndarray:
    """Emulator output bits (uint16 or uint8) of conversion ``name`` over a bit-pattern range."""
    fmt, sat, _ = CONVERSIONS[name]
    out = convert(conversion_inputs(start, count), fmt, satfinite=sat)
    return out.view(FORMATS[fmt].uint)


def emulate_variant(variant: str, block: int, size: int = BLOCK_SIZE) -> np.ndarray:
    """Emulator result bits (uint32) of arithmetic ``variant`` on case block ``block``."""
    op, ftz = VARIANTS[variant]
    operands = [o.view(np.float32) for o in arith_block(op, block, size)]
    return _EMULATED[op](*operands, ftz=ftz).view(np.uint32)


def special_chunks() -> list[int]:
    """Conversion chunks holding the values where conversions have edges, for CI to check.

    Zero and subnormals, each format's smallest subnormal and normal, MAX_NORM and the
    rounding/saturation boundary above it, infinity and the NaN range, both signs.
    """
    edges = [0.0, 2.0**-149, 2.0**-126, 2.0**-24, 2.0**-14, 2.0**-9, 2.0**-6, 2.0**-16,
             1.0, 240.0, 448.0, 464.0, 480.0, 57344.0, 61440.0, 65504.0, 65520.0,
             3.3895313892515355e38, np.inf]
    chunks = set()
    for v in edges:
        for s in (1.0, -1.0):
            u = int(np.float32(s * v).view(np.uint32))
            chunks.add(u // CHUNK)
    chunks |= {0x7FC00000 // CHUNK, 0xFFFFFFFF // CHUNK, 0x7F800001 // CHUNK}
    return sorted(chunks)


