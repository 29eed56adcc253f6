"""Benchmark: emulated quad allreduce (shfl.sync.bfly + add.ftz, FA3's Allreduce<4>) against a
plain NumPy reshape-and-sum over the same quads.

Data: ``--n`` float32 values (default 1M = 4096 warpgroups x 128 threads x 2 rows, the shape of
FA3's row_sum), random magnitudes. Prints the median of several runs of each, measured side by
side in one process, and their ratio. Run: ``python benchmarks/bench_hw.py``.
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import median_time

from simulator import hw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 20, help="values (default 1M), multiple of 256")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    ctas = args.n // (128 * 2)
    x = (np.exp2(rng.uniform(-20, 20, (ctas, 128, 2)))
         * rng.choice([-1, 1], (ctas, 128, 2))).astype(np.float32)

    def numpy_quads():
        s = x.reshape(ctas, 32, 4, 2).sum(axis=2, keepdims=True)
        return np.broadcast_to(s, (ctas, 32, 4, 2)).reshape(ctas, 128, 2)

    rows = [
        ("numpy reshape(…, 32, 4, 2).sum", median_time(numpy_quads, args.repeats)),
        ("hw.quad_allreduce(x, 'sum')  [2 x shfl.bfly + add.ftz]",
         median_time(lambda: hw.quad_allreduce(x, "sum"), args.repeats)),
        ("hw.quad_allreduce(x, 'max')  [2 x shfl.bfly + max.ftz]",
         median_time(lambda: hw.quad_allreduce(x, "max"), args.repeats)),
    ]
    print(f"quad allreduce over {x.size:,} float32 values ({ctas} warpgroups x 128 threads x 2 rows)")
    for name, t in rows:
        print(f"  {name:58s} {t * 1e3:8.2f} ms")
    print(f"ratio sum (emulated / numpy): {rows[1][1] / rows[0][1]:.1f}")
    print(f"ratio max (emulated / numpy): {rows[2][1] / rows[0][1]:.1f}")


if __name__ == "__main__":
    main()
