"""Benchmark: emulated sm_90 ``ex2`` (MUFU.EX2, .ftz) against ``np.exp2`` on the same 10M float32.

Inputs are uniform over the softmax range [-30, 8]. Prints the median of several runs of each,
measured side by side in one process, and their ratio. Target: ratio <= 5.
Run: ``python benchmarks/bench_mufu.py [--n N] [--repeats R]``.
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import median_time

from simulator.numerics import mufu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="elements (default 10M)")
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    x = np.random.default_rng(0).uniform(-30, 8, args.n).astype(np.float32)
    t_emu = median_time(lambda: mufu.ex2(x), args.repeats)
    t_np = median_time(lambda: np.exp2(x), args.repeats)
    print(f"ex2 (sm90, ftz) {args.n:,} float32: {t_emu * 1e3:.1f} ms; np.exp2: {t_np * 1e3:.1f} ms; "
          f"ratio {t_emu / t_np:.2f} (target <= 5)")


if __name__ == "__main__":
    main()
