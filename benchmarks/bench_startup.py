"""Benchmark: the default job from the command line, cold and warm, with its peak memory.

``python -m simulator run`` (the README's first command, the embedded MiniLM input) is run as a
fresh process, in turns: *cold* with an empty MUFU table cache (``FA3SIM_CACHE`` pointed at a new
folder: the first run in a fresh environment, which decodes ex2, rcp and lg2 and writes the
cache) and *warm* right after, on the cache the cold run wrote. Each figure is the median wall
time over the rounds, and the largest peak RSS of the run's process (``ru_maxrss`` of a
wrapper's only child). No anchor: these are absolute targets (cold under 3 s, peak at most
300 MB), so the figures depend on the machine; the header names it.
With ``--engine`` also the compiled engine's first use (one bf16 GEMM and a small forward with
``engine="numba"``) in a fresh process, cold (numba's cache empty) and warm.
Run: ``python benchmarks/bench_startup.py [--repeats 5] [--engine]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import ROOT, add_common_args, emit, machine

# a wrapper process per run, so that ru_maxrss of its children is this run's alone
_WRAPPER = """
import json, os, resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE).returncode
t = time.perf_counter() - t0
print(json.dumps({"rc": rc, "s": t, "rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def _run_once(cache: Path, out: Path) -> dict:
    env_cmd = [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "simulator", "run",
               "--out", str(out)]
    env = {**__import__("os").environ, "FA3SIM_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    res = subprocess.run(env_cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    row = json.loads(res.stdout)
    if row["rc"] != 0:
        raise SystemExit(f"python -m simulator run exited {row['rc']}")
    return row


def measure(repeats: int = 5) -> list[dict]:
    cold, warm = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(max(1, repeats)):
            cache = Path(tmp) / f"cache{r}"  # empty: the first run in a fresh environment
            cold.append(_run_once(cache, Path(tmp) / "run.npz"))
            warm.append(_run_once(cache, Path(tmp) / "run.npz"))
    rows = []
    for label, runs, target in (("cold (empty MUFU cache)", cold, "< 3 s"),
                                ("warm (cached tables)", warm, "-")):
        rows.append({"script": "bench_startup.py",
                     "measures": f"`python -m simulator run`, {label}, wall time and peak RSS",
                     "ours_s": statistics.median(r["s"] for r in runs),
                     "spread_s": [min(r["s"] for r in runs), max(r["s"] for r in runs)],
                     "peak_mb": max(r["rss_kb"] for r in runs) / 1024, "anchor": None,
                     "ratio": None, "faster": False, "target": target,
                     "peak_target_mb": 300 if label.startswith("warm") else None})
    return rows


# the compiled engine's first use: one bf16 GEMM and one small forward with engine "numba"
_ENGINE_JOB = """
import numpy as np, ml_dtypes
from simulator import engine, flash, mma
engine.set_engine("numba")
rng = np.random.default_rng(0)
mma.gemm(*(rng.standard_normal((128, 128)).astype(ml_dtypes.bfloat16) for _ in range(2)))
flash.forward(*(rng.standard_normal((1, 256, 1, 128)).astype(ml_dtypes.bfloat16) for _ in range(3)))
"""


def measure_engine(repeats: int = 1) -> list[dict]:
    """The compiled engine's cold compile (numba's cache in an empty folder through
    ``NUMBA_CACHE_DIR``: every kernel the job uses is compiled) and its warm start (the cache
    that run wrote): wall time and peak RSS of a fresh process running ``_ENGINE_JOB``."""
    import os

    cold, warm = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(max(1, repeats)):
            env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": f"{tmp}/numba{r}",
                   "FA3SIM_CACHE": f"{tmp}/tables"}
            cmd = [sys.executable, "-c", _WRAPPER, sys.executable, "-c", _ENGINE_JOB]
            for runs in (cold, warm):
                res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT,
                                     check=True)
                runs.append(json.loads(res.stdout))
                if runs[-1]["rc"] != 0:
                    raise SystemExit(f"the engine job exited {runs[-1]['rc']}")
    return [{"script": "bench_startup.py",
             "measures": f"engine numba, first bf16 GEMM + small forward, {label}, wall time "
                         "and peak RSS",
             "ours_s": statistics.median(r["s"] for r in runs),
             "spread_s": [min(r["s"] for r in runs), max(r["s"] for r in runs)],
             "peak_mb": max(r["rss_kb"] for r in runs) / 1024, "anchor": None, "ratio": None,
             "faster": False, "target": "-"}
            for label, runs in (("cold compile (empty numba cache)", cold),
                                ("warm (numba cache)", warm))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap)
    ap.add_argument("--engine", action="store_true",
                    help="also the compiled engine's cold compile and warm start (about a minute)")
    args = ap.parse_args()
    print(machine())
    rows = measure(args.repeats or 5)
    if args.engine:
        rows += measure_engine(1)
    for r in rows:
        lo, hi = r["spread_s"]
        print(f"{r['measures']}: median {r['ours_s']:.2f} s ({lo:.2f}-{hi:.2f}), "
              f"peak {r['peak_mb']:.0f} MB")
    emit(rows, args.json)


if __name__ == "__main__":
    main()
