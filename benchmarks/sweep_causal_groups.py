"""Sweep: where the causal forward's small groups (one m_block's CTAs each) should run with
``engine.set_threads(N)``: whole groups on task threads, or the kernels' own parallel loops.
Both rules in one process, in turns (``flash.scheduler.MAX_THREADS_PER_GROUP`` set to a huge
value: groups on task threads wherever there are more threads than one; or to 0: never), bits checked
equal to the one-thread run; 1 x L x H x 128 bf16, causal, the compiled engine, medians of
``--repeats`` timed runs after a warm-up. Writes ``--out`` (JSON, atomically) with the machine's
facts. Run: ``python benchmarks/sweep_causal_groups.py [--threads 2 4 8 16] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
from timing import code_identity, interleaved_medians, machine

from simulator import engine, flash
from simulator.io import write_json_atomic

CASES = ((1024, 4), (2048, 8), (4096, 8))
RULES = {"groups on task threads": 10**9, "parallel kernels": 0}


def _module():
    return sys.modules["simulator.flash.scheduler"]


def _forward(q, k, v, rule):
    _module().MAX_THREADS_PER_GROUP = rule
    return flash.forward(q, k, v, causal=True)


def sweep(threads_list, repeats: int) -> list[dict]:
    engine.set_engine("numba")
    rng = np.random.default_rng(0)
    rows = []
    for seqlen, heads in CASES:
        q, k, v = (rng.standard_normal((1, seqlen, heads, 128)).astype(ml_dtypes.bfloat16)
                   for _ in range(3))
        engine.set_threads(1)
        ref = flash.forward(q, k, v, causal=True)
        one = interleaved_medians([lambda q=q, k=k, v=v: flash.forward(q, k, v, causal=True)],
                                  repeats)[0]
        for threads in threads_list:
            engine.set_threads(threads)
            for rule in RULES.values():
                got = _forward(q, k, v, rule)
                assert np.array_equal(got.out.view(np.uint16), ref.out.view(np.uint16)), "O differs"
                assert np.array_equal(got.lse.view(np.uint32), ref.lse.view(np.uint32)), "LSE differs"
            times = interleaved_medians([lambda r=r, q=q, k=k, v=v: _forward(q, k, v, r)
                                         for r in RULES.values()], repeats)
            row = dict(L=seqlen, H=heads, threads=threads, one_thread_s=one,
                       **{name: t for name, t in zip(RULES, times, strict=True)})
            rows.append(row)
            print(row, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    facts = {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
             "cpus": os.cpu_count(), "repeats": args.repeats, "argv": sys.argv[1:],
             **code_identity()}
    rows = sweep(args.threads, args.repeats)
    if args.out is not None:
        write_json_atomic(args.out, {"run": facts, "rows": rows})


if __name__ == "__main__":
    main()
