"""Replay of the recorded H200 warpgroup probes (``simulator/data/device/hw_*``) for
``python -m simulator verify --topic hw``: accumulator layouts of every wgmma shape, shuffles
with partial masks, and softmax.h's reductions (fast-math and no-ftz builds)."""

from __future__ import annotations

import numpy as np

from .. import hw
from ..io import read_npz
from . import hw_probe
from .numerics_evidence import DATA_DIR, row

REGEN = "python -m simulator.device.hw_probe --out DIR` on a GPU, then copy DIR's hw_* files"


def check_layouts(rec: dict) -> list[dict]:
    bad = total = 0
    for fmt, k in (("bf16", 16), ("e4m3", 32)):
        for n in range(8, 257, 8):
            lay = hw.accumulator_layout(f"m64n{n}k{k}")
            rows, cols = rec[f"ss_{fmt}_n{n}_row"], rec[f"ss_{fmt}_n{n}_col"]
            bad += np.count_nonzero((rows != lay.row) | (cols != lay.col))
            total += rows.size
    return [row("wgmma accumulator layouts, 64 shapes (thread, register)", total, bad)]


def check_shuffles(rec: dict) -> list[dict]:
    rows = []
    for mode in hw.shuffle.MODES:
        b, c, m = rec[f"{mode}_b"], rec[f"{mode}_c"], rec[f"{mode}_mask"]
        de, pe, _ = hw_probe.emulate_shuffles(mode, b, c, m)
        active = ((m[:, None].astype(np.int64) >> np.arange(32)) & 1).astype(bool)
        for variant in ("", "_diverged"):
            d, p = rec[f"{mode}{variant}_d"], rec[f"{mode}{variant}_p"]
            bad = np.count_nonzero((d != de) & active) + np.count_nonzero((p != pe) & active)
            rows.append(row(f"shfl.sync.{mode}{variant} (active lanes, value + predicate)",
                             2 * np.count_nonzero(active), bad))
    return rows


def check_reductions(rec: dict) -> list[dict]:
    bad = total = 0
    for sname in sorted(hw_probe.REDUCE_SHAPES):
        frag, init = hw_probe.reduce_inputs(hw_probe.REDUCE_SHAPES[sname])
        for build, ftz in sorted(hw_probe.REDUCE_BUILDS.items()):
            for op in ("sum", "max"):
                for zi in (True, False):
                    key = f"reduce_{op}_{sname}_{'zi' if zi else 'acc'}_{build}"
                    thread, quad = hw_probe.emulate_reduce(op, zi, frag, init, ftz)
                    for stage, got in (("thread", thread), ("quad", quad)):
                        digests = rec[f"{key}_{stage}_digest"]
                        per_block = got.size // len(digests)
                        bad += per_block * int(np.count_nonzero(
                            np.any(hw_probe.block_digests(got) != digests, axis=-1)))
                        total += got.size
    return [row("thread_reduce + quad allreduce (sum, max; ftz and not), by digest", total,
                 bad)]


def check_all(quick: bool = False) -> list[dict]:
    """Rows for ``verify``; ``quick`` skips the reductions."""
    rows = check_layouts(read_npz(DATA_DIR / "hw_layouts.npz", REGEN))
    rows += check_shuffles(read_npz(DATA_DIR / "hw_shuffle.npz", REGEN))
    if not quick:
        rows += check_reductions(read_npz(DATA_DIR / "hw_reduce.npz", REGEN))
    return rows
