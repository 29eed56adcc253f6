"""A/B of two source trees on one machine: the exact forward on the compiled engine, 1 thread,
each tree in its own process, the trees in turns for ``--rounds`` rounds (so a shared
machine's load falls on both). Per process: bf16 1 x 1024 x 4 x 128 causal and not, and
1 x 4096 x 8 x 128 causal, each the median of a few runs after a warm-up (its compile included
in the warm-up); with ``--backward`` the 1 x 1024 x 4 x 128 backward, causal and not. Prints
one JSON row per process and, with ``--out``, writes them all with the run's facts
(atomically). A tree is a directory holding the ``simulator`` package (a checkout, or
``git archive <commit> simulator ':!simulator/data/device' | tar -x -C DIR``).
Run: ``python benchmarks/ab_trees.py BASE_TREE NEW_TREE [--rounds 3] [--backward] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from timing import machine  # (puts the repository root on sys.path)

from simulator.io import write_json_atomic

CASES = ((1024, 4, True, 5), (1024, 4, False, 5), (4096, 8, True, 3))
BACKWARD_CASES = ((1024, 4, False, 5), (1024, 4, True, 5))

_CHILD = """
import json, statistics, sys, time
import ml_dtypes, numpy as np
import simulator
if not simulator.__file__.startswith(sys.argv[1]):
    sys.exit(f"tree {sys.argv[1]}: imported {simulator.__file__} instead")
from simulator import engine, flash
engine.set_threads(1)
rng = np.random.default_rng(0)
row = {"tree": sys.argv[1], "package": simulator.__file__}
for seqlen, heads, causal, runs in json.loads(sys.argv[2]):
    q, k, v = (rng.standard_normal((1, seqlen, heads, 128)).astype(ml_dtypes.bfloat16)
               for _ in range(3))
    with engine.use_engine("numba"):
        run = lambda: flash.forward(q, k, v, causal=causal)
        if sys.argv[3] == "backward":
            do = rng.standard_normal(q.shape).astype(ml_dtypes.bfloat16)
            fw = flash.forward(q, k, v, causal=causal)
            run = lambda: flash.backward(do, q, k, v, fw.out, fw.lse, causal=causal)
        run()
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    row[f"{sys.argv[3]} {seqlen}x{heads} causal={causal}"] = statistics.median(times)
print(json.dumps(row))
"""


def _one(tree: Path, backward: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cases, kind = (BACKWARD_CASES, "backward") if backward else (CASES, "forward")
    # run from the tree: "-c" puts the working directory first on sys.path
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tree), json.dumps(cases), kind],
                          env=env, capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backward", action="store_true",
                    help="time the backward (1 x 1024 x 4 x 128 bf16, causal and not) instead")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    for tree in (args.base, args.new):
        if not (tree / "simulator" / "__init__.py").is_file():
            ap.error(f"{tree}: expected a directory holding the simulator package")
    rows = []
    for _ in range(args.rounds):
        for tree in (args.base, args.new):
            rows.append(_one(tree.resolve(), args.backward))
            print(json.dumps(rows[-1]), flush=True)
    if args.out is not None:
        facts = {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "machine": machine(), "cpus": os.cpu_count(), "argv": sys.argv[1:]}
        write_json_atomic(args.out, {"run": facts, "rows": rows})


if __name__ == "__main__":
    main()
