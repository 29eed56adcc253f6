"""The peak of traced memory during a call (tracemalloc: every thread's NumPy allocations
count), shared by the memory-budget tests."""

from __future__ import annotations

import tracemalloc


def traced_peak(call):
    """(call's result, the peak of traced memory during it, bytes)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
