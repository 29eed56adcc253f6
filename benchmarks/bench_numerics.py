"""Benchmark: emulated FFMA against plain NumPy ``a*b+c`` on the same 10M float32 elements.

Prints the median of several runs of each (after a warm-up run), measured side by side in one
process, and their ratio. Target: ratio <= 10. Run: ``python benchmarks/bench_numerics.py``.
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import add_common_args, blas_threads, emit, interleaved_medians, machine, median_time, ratio_row

from simulator import numerics as nm


def measure(n=10_000_000, threads=1, repeats=7) -> tuple[list[dict], list[tuple[str, float]]]:
    """The FFMA ratio row, and the time of every variant."""
    rng = np.random.default_rng(0)
    # log-uniform magnitudes over a wide range, random signs: a realistic mix of exponents
    a, b, c = ((np.exp2(rng.uniform(-40, 40, n)) * rng.choice([-1, 1], n)).astype(np.float32)
               for _ in range(3))
    relu = np.where(rng.random(n) < 0.5, np.float32(0), a).astype(np.float32)
    with blas_threads(threads):
        t_ffma, t_np = interleaved_medians([lambda: nm.ffma(a, b, c), lambda: a * b + c], repeats)
        times = [
            ("numpy a*b+c (float32)", t_np),
            ("simulator ffma", t_ffma),
            ("simulator ffma ftz", median_time(lambda: nm.ffma(a, b, c, ftz=True), repeats)),
            ("simulator ffma, half zeros", median_time(lambda: nm.ffma(relu, b, relu), repeats)),
            ("simulator fadd", median_time(lambda: nm.fadd(a, b), repeats)),
            ("simulator fmax", median_time(lambda: nm.fmax(a, b), repeats)),
        ]
    row = ratio_row("bench_numerics.py", f"emulated FFMA vs NumPy a*b+c, {n / 1e6:g}M elements",
                    times[1][1], times[0][1], "numpy a*b+c", "<= 10x")
    return [row], times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="elements (default 10M)")
    add_common_args(ap)
    args = ap.parse_args()
    print(machine())
    rows, times = measure(args.n, args.threads, args.repeats or 7)
    base = times[0][1]
    print(f"{'operation':28s} {'median s':>10s} {'ratio':>8s}   (n={args.n:,})")
    for name, t in times:
        print(f"{name:28s} {t:10.4f} {t / base:8.1f}x")
    ratio = rows[0]["ratio"]
    print(f"ffma / numpy ratio: {ratio:.1f}x (target <= 10x): {'MET' if ratio <= 10 else 'MISSED'}")
    emit(rows, args.json)


if __name__ == "__main__":
    main()
