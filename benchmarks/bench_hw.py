"""Benchmark: emulated quad allreduce (shfl.sync.bfly + add.ftz, FA3's Allreduce<4>) against a
plain NumPy reshape-and-sum over the same quads.

Data: ``--n`` float32 values (default 1M = 4096 warpgroups x 128 threads x 2 rows, the shape of
FA3's row_sum), random magnitudes. Prints the median of several runs of each (after a warm-up
run), measured side by side in one process, and their ratio. Run: ``python benchmarks/bench_hw.py``.
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import add_common_args, blas_threads, emit, interleaved_medians, median_time, ratio_row

from simulator import hw


def measure(n=1 << 20, threads=1, repeats=7) -> tuple[list[dict], list[tuple[str, float]]]:
    rng = np.random.default_rng(0)
    ctas = n // (128 * 2)
    x = (np.exp2(rng.uniform(-20, 20, (ctas, 128, 2)))
         * rng.choice([-1, 1], (ctas, 128, 2))).astype(np.float32)

    def numpy_quads():
        s = x.reshape(ctas, 32, 4, 2).sum(axis=2, keepdims=True)
        return np.broadcast_to(s, (ctas, 32, 4, 2)).reshape(ctas, 128, 2)

    with blas_threads(threads):
        t_sum, t_np = interleaved_medians([lambda: hw.quad_allreduce(x, "sum"), numpy_quads], repeats)
        times = [
            ("numpy reshape(…, 32, 4, 2).sum", t_np),
            ("hw.quad_allreduce(x, 'sum')  [2 x shfl.bfly + add.ftz]", t_sum),
            ("hw.quad_allreduce(x, 'max')  [2 x shfl.bfly + max.ftz]",
             median_time(lambda: hw.quad_allreduce(x, "max"), repeats)),
        ]
    row = ratio_row("bench_hw.py", f"quad allreduce (sum) vs NumPy reshape-and-sum, {n / 2**20:g}M values",
                    times[1][1], times[0][1], "numpy reshape-and-sum")
    return [row], times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 20, help="values (default 1M), multiple of 256")
    add_common_args(ap)
    args = ap.parse_args()
    rows, times = measure(args.n, args.threads, args.repeats or 7)
    print(f"quad allreduce over {args.n:,} float32 values "
          f"({args.n // 256} warpgroups x 128 threads x 2 rows)")
    for name, t in times:
        print(f"  {name:58s} {t * 1e3:8.2f} ms")
    print(f"ratio sum (emulated / numpy): {times[1][1] / times[0][1]:.1f}")
    print(f"ratio max (emulated / numpy): {times[2][1] / times[0][1]:.1f}")
    emit(rows, args.json)


if __name__ == "__main__":
    main()
