"""Merge deep-run folders of ``python -m simulator measure hypothesis_replay`` into the recorded
files under ``simulator/data/device/``: one report listing every run with their totals, and one
sample of agreeing cases (every ``--keep-every``-th sampled case of each run, to keep the
repository small; the bits are copied unchanged). Runs against the twin kernel (``--target
twin``, the default) become ``hypothesis_replay_*``; runs against the real FA3 library
(``--target library``) become ``fa3_library_hypothesis_*``; runs of both kinds are not mixed.

    python scripts/merge_hypothesis_runs.py RUN_DIR [RUN_DIR ...] [--keep-every 2]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from simulator.io import save_npz_atomic, write_json_atomic
from simulator.replay import hypothesis as hr
from simulator.replay.common import DATA_DIR


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--keep-every", type=int, default=2)
    args = ap.parse_args()
    if len(set(map(Path.resolve, args.runs))) != len(args.runs):
        raise SystemExit("a run folder is given twice")
    reports, sample, seeds = [], [], set()
    for run in args.runs:
        rep = json.loads((run / "replay_report.json").read_text())
        problems = [why for why, bad in (
            ("not a deep run", rep.get("mode") != "deep"),
            ("has disagreements: record them as goldens first",
             rep["disagreements"] or (run / "replay_disagreements.json").exists()),
            ("has shard errors", bool(rep["shard_errors"])),
            ("is incomplete", bool(rep.get("stopped")) or rep["cases"] < rep["cases_asked"])) if bad]
        if problems:
            raise SystemExit(f"{run}: {'; '.join(problems)}")
        run_seeds = set(range(rep["seeds"][0], rep["seeds"][1] + 1))
        if run_seeds & seeds:
            raise SystemExit(f"{run}: seeds {rep['seeds']} overlap another run's: the same cases twice")
        seeds |= run_seeds
        reports.append(rep)
        if not (run / "replay_sample.json").exists():
            continue
        meta = json.loads((run / "replay_sample.json").read_text())
        cases = hr.unpack_cases(np.load(run / "replay_sample.npz"), meta)
        for j in range(0, len(cases), args.keep_every):
            c = cases[j]
            sample.append({"q": c["q"], "k": c["k"], "v": c["v"], "kwargs": c["kwargs"],
                           "out": c["out_bits"], "lse": c["lse_bits"],
                           **{k: meta[j][k] for k in ("shard", "index", "seed", "input_digest")}})
    # one record per distinct input (every shard's first drawn case is hypothesis's simplest)
    distinct = {}
    for c in sample:
        distinct.setdefault(c["input_digest"], c)
    sample = list(distinct.values())
    targets = {r.get("target", "twin") for r in reports}
    if len(targets) != 1:
        raise SystemExit(f"runs against different targets: {targets}")
    target = targets.pop()
    if target == "twin":
        versions = {r["kernel_sha256"] for r in reports}
        what, prefix = "kernel_sha256", "hypothesis_replay"
    else:
        versions = {r["library"]["extension_sha256"] for r in reports}
        what, prefix = "library_extension_sha256", "fa3_library_hypothesis"
    if len(versions) != 1:
        raise SystemExit(f"runs of different {target} builds: {versions}")
    arrays, meta = hr.pack_cases(sample)
    save_npz_atomic(DATA_DIR / f"{prefix}_sample.npz", **arrays)
    write_json_atomic(DATA_DIR / f"{prefix}_sample.json", meta)
    write_json_atomic(DATA_DIR / f"{prefix}_report.json", {
        "target": target, "cases": sum(r["cases"] for r in reports),
        "distinct_cases": sum(r["distinct_cases"] for r in reports),
        "disagreements": sum(r["disagreements"] for r in reports),
        what: versions.pop(), "device": reports[0]["device"],
        **({"library": reports[0]["library"]} if target == "library" else {}),
        "sampled_cases_recorded": len(sample), "runs": reports})
    total = sum(r["cases"] for r in reports)
    print(f"{total} cases in {len(reports)} runs; {len(sample)} sampled cases kept")


if __name__ == "__main__":
    main()
