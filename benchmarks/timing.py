"""Shared timing helper of the benchmark scripts (run them as ``python benchmarks/bench_*.py``)."""

from __future__ import annotations

import statistics
import time


def median_time(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, after one warm-up call (first touch
    of output pages, table loads)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
