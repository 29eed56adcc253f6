"""Merge deep-run folders of ``python -m simulator.device.hypothesis_replay`` into the recorded
files under ``simulator/data/device/``: one report listing every run with their totals, and one
sample of agreeing cases (every ``--keep-every``-th sampled case of each run, to keep the
repository small; the bits are copied unchanged).

    python scripts/merge_hypothesis_runs.py RUN_DIR [RUN_DIR ...] [--keep-every 2]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from simulator.device import replay_record as hr
from simulator.device.numerics_evidence import DATA_DIR
from simulator.io import save_npz_atomic, write_json_atomic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--keep-every", type=int, default=2)
    args = ap.parse_args()
    reports, sample = [], []
    for run in args.runs:
        rep = json.loads((run / "replay_report.json").read_text())
        if (run / "replay_disagreements.json").exists():
            raise SystemExit(f"{run}: has disagreements; record them as goldens first")
        reports.append(rep)
        meta = json.loads((run / "replay_sample.json").read_text())
        cases = hr.unpack_cases(np.load(run / "replay_sample.npz"), meta)
        for j in range(0, len(cases), args.keep_every):
            c = cases[j]
            sample.append({"q": c["q"], "k": c["k"], "v": c["v"], "kwargs": c["kwargs"],
                           "out": c["out_bits"], "lse": c["lse_bits"],
                           **{k: meta[j][k] for k in ("shard", "index", "seed", "input_digest")}})
    kernels = {r["kernel_sha256"] for r in reports}
    if len(kernels) != 1:
        raise SystemExit(f"runs of different kernels: {kernels}")
    arrays, meta = hr.pack_cases(sample)
    save_npz_atomic(DATA_DIR / "hypothesis_replay_sample.npz", **arrays)
    write_json_atomic(DATA_DIR / "hypothesis_replay_sample.json", meta)
    write_json_atomic(DATA_DIR / "hypothesis_replay_report.json", {
        "cases": sum(r["cases"] for r in reports),
        "disagreements": sum(r["disagreements"] for r in reports),
        "kernel_sha256": kernels.pop(), "device": reports[0]["device"],
        "sampled_cases_recorded": len(sample), "runs": reports})
    total = sum(r["cases"] for r in reports)
    print(f"{total} cases in {len(reports)} runs; {len(sample)} sampled cases kept")


if __name__ == "__main__":
    main()
