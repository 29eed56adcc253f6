"""Replay of the recorded H200 tensor-core outputs (``simulator/data/device/mma_*``).

``mma_report.json`` holds provenance and the mismatch counts of the last validation
(``python -m simulator measure mma_probe validate``: 40 blocks x 262,144 outputs per probed
instruction); ``mma_digests.npz`` holds, per instruction, the BLAKE2b-128 digest of the
device's output bits of each block and the raw bits of the first 8,192 outputs of block 0.
FP8 mma.sync also has two targeted recordings: ``mma_fp8_probe.npz`` (384,000 outputs with 2-3
products each, raw bits) and ``mma_fp8_sweep_<fmt>.npz`` (1,280,000 outputs per format: every
ordered K pair, triples, signed zeros; digests and raw parts).
"""

from __future__ import annotations

import numpy as np

from ..mma.instructions import EXACT, params_for
from ..mma.spec import spec_dot_add
from . import mma_fp8
from .common import DATA_DIR, digest, row
from .mma_cases import mma_block
from .mma_probes import PROBES, decode, emulate_probe

REPORT = DATA_DIR / "mma_report.json"
DIGESTS = DATA_DIR / "mma_digests.npz"
KERNEL = "probes/mma.cu"
REGENERATE = ("python -m simulator measure mma_probe validate --out DIR` on a GPU, then copy "
              "DIR/mma_digests.npz and DIR/mma_validate_report.json (as mma_report.json)")


def load_recorded() -> tuple[dict, dict]:
    """Return ``(report, digests)``.

    Raises:
        RecordedDataError: a recorded file is missing or unreadable, naming the command that
            regenerates it.
    """
    from ..io import read_json, read_npz

    return read_json(REPORT, REGENERATE), read_npz(DIGESTS, REGENERATE)


def tiles_per_block(name: str, report: dict) -> int:
    return int(report[name]["tiles_per_block"])


def check_probe(name: str, report: dict, digests: dict, blocks: int) -> list[dict]:
    """Digest rows for ``blocks`` blocks and the raw head of block 0 of one instruction."""
    kind, m, n, k, fmt = PROBES[name]
    tiles = tiles_per_block(name, report)
    params = params_for(kind, fmt)
    bad_blocks, spec_bad = [], []
    head_bad = 0
    for blk in range(blocks):
        operands = mma_block(fmt, m, n, k, blk, tiles)  # generated once, replayed by both
        emu = emulate_probe(name, *operands, params)
        if blk == 0:
            head = digests[f"{name}_head"]
            head_bad = int(np.count_nonzero(emu.reshape(-1)[: head.size] != head))
        want = digests[name][blk].tobytes()
        if digest(emu) != want:
            bad_blocks.append(blk)
        if digest(spec_probe(name, *operands, params)) != want:
            spec_bad.append(blk)
    note = "" if (kind, fmt) in EXACT else " [model known inexact]"
    plural = "s" if blocks != 1 else ""

    def digest_row(check: str, bad: list[int]) -> dict:
        return row(f"{name} {check}{note}", blocks * tiles * m * n, len(bad) * tiles * m * n,
                   f"blocks with differing digest: {bad}" if bad else "")

    return [row(f"{name} raw head{note}", digests[f"{name}_head"].size, head_bad),
            digest_row(f"readable spec (simulator/mma/spec.py), {blocks} block{plural}", spec_bad),
            digest_row(f"digests of {blocks} block{plural}", bad_blocks)]


_SPEC_TERMS = 1 << 22  # terms per chunk of the specification's [T, M, N, K + 1] tensor


def spec_probe(name: str, a_bits, b_bits, c_bits, params) -> np.ndarray:
    """D bits (uint32 [T, M, N]) of probe ``name`` by :func:`simulator.mma.spec.spec_dot_add`
    (the readable model, not the path the emulator runs), in chunks of tiles."""
    fmt = PROBES[name][4]
    a, b = decode(a_bits, fmt), decode(b_bits, fmt)
    c = np.asarray(c_bits, dtype=np.uint32).view(np.float32)
    t, m, k = a.shape
    step = max(1, _SPEC_TERMS // (m * b.shape[-1] * (k + 1)))
    return np.concatenate([spec_dot_add(a[i:i + step], b[i:i + step], c[i:i + step], params)
                           for i in range(0, t, step)]).view(np.uint32)


def check_fp8_mma_sync(quick: bool = False) -> list[dict]:
    """Rows for the targeted FP8 mma.sync recordings (the probe, and the sweep per format)."""
    from ..io import read_json, read_npz

    probe = read_npz(DATA_DIR / "mma_fp8_probe.npz", "python -m simulator measure mma_fp8_probe --out DIR")
    emu = emulate_probe(FP8_PROBE, probe["A"], probe["B"], probe["C"], params_for("mma_sync", "e4m3"))
    rows = [row(f"{FP8_PROBE} targeted probe (2-3 products)", emu.size,
                np.count_nonzero(emu != probe["D"]))]
    for fmt in ("e4m3",) if quick else ("e4m3", "e5m2"):
        regen = f"python -m simulator measure mma_fp8_sweep --out DIR --fmt {fmt}"
        rows += mma_fp8.check(fmt, read_npz(DATA_DIR / f"mma_fp8_sweep_{fmt}.npz", regen),
                                    read_json(DATA_DIR / f"mma_fp8_sweep_{fmt}.json", regen))
    return rows


FP8_PROBE = "mma_sync_m16n8k32_e4m3"


def check_all(quick: bool = False) -> list[dict]:
    """Rows for every probed instruction (1 block each when ``quick``, else 3) and the
    targeted FP8 mma.sync recordings."""
    report, digests = load_recorded()
    rows = []
    for name in PROBES:
        rows += check_probe(name, report, digests, blocks=1 if quick else 3)
    return rows + check_fp8_mma_sync(quick)
