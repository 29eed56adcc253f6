"""Benchmark: emulated sm_90 ``ex2`` (MUFU.EX2, .ftz) against ``np.exp2`` on the same 10M float32.

Inputs are uniform over the softmax range [-30, 8]. Both warmed up (the emulator's warm-up
loads the MUFU tables), then the median of several runs of each, measured side by side in one
process, and their ratio. Target: ratio <= 5.
Run: ``python benchmarks/bench_mufu.py [--n N] [--repeats R]``.
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import add_common_args, blas_threads, emit, interleaved_medians, machine, ratio_row

from simulator.numerics import mufu


def measure(n=10_000_000, threads=1, repeats=9) -> list[dict]:
    x = np.random.default_rng(0).uniform(-30, 8, n).astype(np.float32)
    with blas_threads(threads):
        t_emu, t_np = interleaved_medians([lambda: mufu.ex2(x), lambda: np.exp2(x)], repeats)
    return [ratio_row("bench_mufu.py", f"ex2 vs np.exp2, {n / 1e6:g}M elements", t_emu, t_np,
                      "np.exp2", "<= 5x")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="elements (default 10M)")
    add_common_args(ap)
    args = ap.parse_args()
    print(machine())
    (r,) = rows = measure(args.n, args.threads, args.repeats or 9)
    print(f"ex2 (sm90, ftz) {args.n:,} float32: {r['ours_s'] * 1e3:.1f} ms; np.exp2: "
          f"{r['anchor_s'] * 1e3:.1f} ms; ratio {r['ratio']:.2f} (target <= 5): "
          f"{'MET' if r['ratio'] <= 5 else 'MISSED'}")
    emit(rows, args.json)


if __name__ == "__main__":
    main()
