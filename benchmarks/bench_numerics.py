"""Benchmark: emulated FFMA against plain NumPy ``a*b+c`` on the same 10M float32 elements.

Prints the median of several runs of each, measured side by side in one process, and their
ratio. Target: ratio <= 10. Run: ``python benchmarks/bench_numerics.py``.
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import median_time

from simulator import numerics as nm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="elements (default 10M)")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    # log-uniform magnitudes over a wide range, random signs: a realistic mix of exponents
    a, b, c = (
        (np.exp2(rng.uniform(-40, 40, args.n)) * rng.choice([-1, 1], args.n)).astype(np.float32)
        for _ in range(3)
    )
    relu = np.where(rng.random(args.n) < 0.5, np.float32(0), a).astype(np.float32)
    rows = [
        ("numpy a*b+c (float32)", median_time(lambda: a * b + c, args.repeats)),
        ("simulator ffma", median_time(lambda: nm.ffma(a, b, c), args.repeats)),
        ("simulator ffma ftz", median_time(lambda: nm.ffma(a, b, c, ftz=True), args.repeats)),
        ("simulator ffma, half zeros", median_time(lambda: nm.ffma(relu, b, relu), args.repeats)),
        ("simulator fadd", median_time(lambda: nm.fadd(a, b), args.repeats)),
        ("simulator fmax", median_time(lambda: nm.fmax(a, b), args.repeats)),
    ]
    base = rows[0][1]
    print(f"{'operation':28s} {'median s':>10s} {'ratio':>8s}   (n={args.n:,})")
    for name, t in rows:
        print(f"{name:28s} {t:10.4f} {t / base:8.1f}x")
    ratio = rows[1][1] / base
    print(f"ffma / numpy ratio: {ratio:.1f}x (target <= 10x): {'MET' if ratio <= 10 else 'MISSED'}")


if __name__ == "__main__":
    main()
