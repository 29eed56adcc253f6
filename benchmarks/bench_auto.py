"""The default engine ("auto") against the compiled engine forced ("numba"), one tree, one
process, in turns: ``flash.forward`` and ``flash.backward`` on bf16 1 x L x H x 128, causal and
not, at ``--threads`` (numba's pool; task threads where the call takes them). "auto" decides
once per launch by its whole work (``engine.launching``), so the two should match wherever a
launch reaches ``engine.AUTO_MIN_WORK`` products; before that rule, "auto" judged each kernel
call alone and ran these launches on NumPy. Bits are checked equal first; each figure is the
median of ``--repeats`` timed runs after a warm-up, BLAS at ``--threads`` on both sides.

    python benchmarks/bench_auto.py --threads 16 --repeats 3 [--long] --out auto.json
"""

from __future__ import annotations

import argparse
import json

import ml_dtypes
import numpy as np
from timing import blas_threads, interleaved_medians

from simulator import engine, flash
from simulator.io import write_json_atomic

SHORT = ((1024, 4),)
LONG = ((1024, 4), (2048, 8))


def _same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8)), "bits differ"


def _case(seqlen: int, heads: int, causal: bool, repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((1, seqlen, heads, 128)).astype(ml_dtypes.bfloat16)
                   for _ in range(4))

    def fwd(name):
        with engine.use_engine(name):
            r = flash.forward(q, k, v, causal=causal)
            return r.out, r.lse

    out, lse = fwd("numba")

    def bwd(name):
        with engine.use_engine(name):
            r = flash.backward(do, q, k, v, out, lse, causal=causal)
            return r.dq, r.dk, r.dv

    rows = []
    for step, call in (("forward", fwd), ("backward", bwd)):
        _same(call("auto"), call("numba"))
        t_auto, t_numba = interleaved_medians([lambda c=call: c("auto"), lambda c=call: c("numba")],
                                              repeats)
        rows.append(dict(step=step, seqlen=seqlen, heads=heads, causal=causal, auto_s=t_auto,
                         numba_s=t_numba, ratio=t_auto / t_numba))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description="The default engine ('auto') against the compiled "
                                 "engine forced ('numba'), forward and backward, in turns.")
    ap.add_argument("--threads", type=int, default=1, help="numba's pool and BLAS (default 1)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per figure (default 3)")
    ap.add_argument("--long", action="store_true", help="also 1 x 2048 x 8 x 128")
    ap.add_argument("--out", default=None, help="write the rows here (JSON)")
    args = ap.parse_args()
    if not engine.available():
        raise SystemExit("bench_auto: numba is not installed")
    engine.set_threads(args.threads)
    rows = []
    with blas_threads(args.threads):
        for seqlen, heads in LONG if args.long else SHORT:
            for causal in (False, True):
                rows += _case(seqlen, heads, causal, args.repeats)
    if args.out:
        write_json_atomic(args.out, {"threads": args.threads, "auto_min_work": engine.AUTO_MIN_WORK,
                              "rows": rows})


if __name__ == "__main__":
    main()
