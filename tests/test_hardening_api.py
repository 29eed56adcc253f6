"""The FA3 API under stress: memory budgets measured with tracemalloc, Ctrl-C during the KV
cache append, and refusals that say what to do instead."""

from __future__ import annotations

import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest

from simulator import fa3, flash
from simulator.flash.forward import memory_needed

BF16 = ml_dtypes.bfloat16


def _peak(call):
    """(call's result, the peak of traced memory during it, bytes): every thread's NumPy
    allocations count."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _bf16(rng, *shapes):
    return [rng.standard_normal(s).astype(BF16) for s in shapes]


# ---- memory_budget with a thread pool: the workers share it --------------------------------------
@pytest.mark.parametrize("num_splits", [1, 2])
def test_a_thread_pool_keeps_a_launch_within_its_memory_budget(num_splits):
    rng = np.random.default_rng(0)
    q, k, v = _bf16(rng, (1, 2048, 4, 64), (1, 384, 4, 64), (1, 384, 4, 64))
    want = fa3.flash_attn_func(q, k, v, num_splits=num_splits)  # also loads the MUFU tables
    cfg = flash.make_config(q, k, v, num_splits=None if num_splits == 1 else num_splits)
    fixed, per_cta = memory_needed(cfg, q.dtype)
    budget = fixed + 16 * per_cta  # 4 CTAs per worker: a chunk of 16 would overshoot 2.5x
    with ThreadPoolExecutor(4) as pool:
        got, peak = _peak(lambda: fa3.flash_attn_func(q, k, v, num_splits=num_splits,
                                                      memory_budget=budget, executor=pool))
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    assert peak <= budget, f"peak {peak / budget:.2f} x the budget"
