"""What the numerics device sweep measures, in a form CI can replay without a GPU.

The sweep (:mod:`simulator.measure.numerics_sweep`, run on the H200) and the CI tests share this
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

import numpy as np

from ..numerics import FORMATS, convert, fadd, ffma, fmax, fmin, fmul, fsub
from .common import DATA_DIR, digest, row
from .numerics_cases import BLOCK_SIZE, OPS, arith_block

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


# ---- replaying the recorded device truth (CI, `python -m simulator verify`) ----------------
def load_recorded() -> tuple[dict, dict, dict]:
    """Return ``(report, digests, samples)`` from ``simulator/data/device``.

    Raises:
        RecordedDataError: a recorded file is missing or unreadable; the message names the
            file and the command that regenerates it.
    """
    from ..io import read_json, read_npz

    regen = "python -m simulator sweep numerics --out DIR` on a GPU, then copy DIR's files here"
    return read_json(REPORT, regen), read_npz(DIGESTS, regen), read_npz(SAMPLES, regen)


def check_widen_and_pack(samples: dict) -> list[dict]:
    """Every 16-bit pattern widened to float32, and the x2 packing probe, against the emulator."""
    from ..numerics import convert_x2, to_float32

    rows = []
    codes = np.arange(1 << 16, dtype=np.uint16)
    for fmt in ("bf16", "f16"):
        emu = to_float32(codes.view(FORMATS[fmt].dtype)).view(np.uint32)
        rows.append(row(f"cvt.f32.{fmt} (all 2^16)", len(codes),
                         np.count_nonzero(emu != samples[f"widen_{fmt}"])))
    for fmt in ("e4m3", "e5m2"):
        hi = to_float32((codes >> 8).astype(np.uint8).view(FORMATS[fmt].dtype)).view(np.uint32)
        lo = to_float32((codes & 0xFF).astype(np.uint8).view(FORMATS[fmt].dtype)).view(np.uint32)
        bad = (hi != samples[f"widen_{fmt}_hi"]) | (lo != samples[f"widen_{fmt}_lo"])
        rows.append(row(f"cvt.rn.f16x2.{fmt}x2 -> f32 (all 2^16)", len(codes), np.count_nonzero(bad)))
    for fmt in ("bf16", "f16", "e4m3", "e5m2"):
        emu = convert_x2(samples["pack_a"], samples["pack_b"], fmt).astype(np.uint32)
        rows.append(row(f"{fmt}x2 packing order", len(emu),
                         np.count_nonzero(emu != samples[f"pack_{fmt}x2"])))
    return rows


def check_arithmetic(digests: dict, samples: dict, blocks: int = 4) -> list[dict]:
    """Each arithmetic variant: raw head of block 0 and the digests of the first ``blocks``."""
    rows = []
    for variant in VARIANTS:
        recorded = digests[f"arith_{variant}"]
        n = min(blocks, len(recorded))
        emu0 = emulate_variant(variant, 0)
        head = samples[f"arith_{variant}_head"]
        raw_bad = np.count_nonzero(emu0[: len(head)] != head)
        bad_blocks = [b for b in range(n)
                      if digest(emu0 if b == 0 else emulate_variant(variant, b)) != recorded[b].tobytes()]
        detail = (f"blocks with differing digest: {bad_blocks} (if simulator/replay/numerics_cases.py "
                  "changed, the recorded blocks no longer match it)") if bad_blocks else ""
        rows.append(row(f"{variant} raw head of block 0", len(head), raw_bad))
        rows.append(row(f"{variant} digests of {n} block{'s' if n != 1 else ''} x 2^20", n * BLOCK_SIZE,
                         len(bad_blocks) * BLOCK_SIZE, detail))
    return rows


def check_conversions(digests: dict, chunks: list[int]) -> list[dict]:
    """Each conversion over the given 2^20-input chunks, by digest of the device's bits."""
    rows = []
    for name in CONVERSIONS:
        recorded = digests[f"conv_{name}"]
        bad = [k for k in chunks
               if digest(emulate_conversion(name, k * CHUNK, CHUNK)) != recorded[k].tobytes()]
        detail = f"chunks with differing digest: {[hex(k * CHUNK) for k in bad]}" if bad else ""
        rows.append(row(f"cvt {name} over {len(chunks)} chunks x 2^20", len(chunks) * CHUNK,
                         len(bad) * CHUNK, detail))
    return rows


def ci_chunks(extra_random: int = 16, seed: int = 2026) -> list[int]:
    """The special chunks plus ``extra_random`` others drawn reproducibly."""
    rng = np.random.default_rng(seed)
    chunks = set(special_chunks()) | set(int(k) for k in rng.choice(N_CHUNKS, extra_random, replace=False))
    return sorted(chunks)


def check_all(quick: bool = False) -> list[dict]:
    """All numerics checks against the recorded H200 outputs; rows of check/cases/mismatches."""
    report, digests, samples = load_recorded()
    rows = check_widen_and_pack(samples)
    rows += check_arithmetic(digests, samples, blocks=1 if quick else 4)
    rows += check_conversions(digests, special_chunks() if quick else ci_chunks())
    return rows
