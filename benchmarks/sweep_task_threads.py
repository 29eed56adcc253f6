"""Sweep: the forward (1 x 1024 x 4 x 128 and 1 x 4096 x 8 x 128 bf16) and the backward (1024
rows) through the compiled engine at numba pool sizes 1 to 16, causal and not: the rows of
``benchmarks/results/task_threads_sweep.json``. Each figure is the minimum of 3 runs after a
warm-up (4096 rows: one run). Run: ``python benchmarks/sweep_task_threads.py LABEL OUT.json``
(LABEL names the tree measured; run it on each tree in turns on one machine).
"""

import json
import sys
import time
from functools import partial

import ml_dtypes
import numpy as np

from simulator import engine
from simulator.flash import backward, forward

CASES = ((1024, 4, (1, 2, 4, 8, 16)), (4096, 8, (4, 16)))


def _min_seconds(call, runs: int) -> float:
    call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def sweep(label: str) -> list[dict]:
    engine.set_engine("numba")
    rng = np.random.default_rng(0)
    rows = []
    for seqlen, heads, pools in CASES:
        q, k, v, do = (rng.standard_normal((1, seqlen, heads, 128)).astype(ml_dtypes.bfloat16)
                       for _ in range(4))
        for causal in (False, True):
            engine.set_threads(1)
            f = forward(q, k, v, causal=causal)
            for threads in pools:
                engine.set_threads(threads)
                fwd = _min_seconds(partial(forward, q, k, v, causal=causal),
                                   3 if seqlen == 1024 else 1)
                bwd = (_min_seconds(partial(backward, do, q, k, v, f.out, f.lse, causal=causal), 3)
                       if seqlen == 1024 else None)
                rows.append(dict(tree=label, L=seqlen, H=heads, causal=causal, threads=threads,
                                 fwd=fwd, bwd=bwd))
                print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    with open(sys.argv[2], "w") as fh:
        json.dump(sweep(sys.argv[1]), fh, indent=1)
