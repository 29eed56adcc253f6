"""memory_budget across engines and executors: small chunks on the NumPy engine, process pools
(what the calling process holds: stored results, pickled inputs of queued tasks), a user's
thread pool through the KV cache's up-front check, and the engine an executor task runs on."""

from __future__ import annotations

import importlib
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from simulator import engine, fa3, flash
from simulator.flash import chunks

sys.path.insert(0, str(Path(__file__).parent))
from memory_peak import traced_peak  # noqa: E402

BF16 = ml_dtypes.bfloat16
fwd_memory = importlib.import_module("simulator.flash.forward_memory")
bwd_mainloop = importlib.import_module("simulator.flash.mainloop_bwd_sm90")
bwd_module = importlib.import_module("simulator.flash.backward")


def _u16(x):
    return np.asarray(x).view(np.uint16)


def _engines():
    return ["numpy"] + (["numba"] if engine.available() else [])


@pytest.mark.parametrize("name", _engines())
@pytest.mark.parametrize("kwargs", [dict(), dict(causal=True)])
def test_forward_chunks_of_one_cta_stay_within_the_budget(name, kwargs):
    """Head dim 256 (the NumPy engine's largest GEMM per CTA: 2.6x the compiled estimate in
    chunks of one CTA before it was priced) at the fixed arrays plus one CTA, on each engine:
    the traced peak stays under the budget, with the unchunked bits."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 300, 2, 256)).astype(BF16) for _ in range(3))
    with engine.use_engine(name):
        whole = flash.forward(q, k, v, **kwargs)  # also compiles what the call needs
        fixed, per_cta = fwd_memory.memory_needed(flash.make_config(q, k, v, **kwargs), q.dtype)
        budget = fixed + per_cta
        got, peak = traced_peak(lambda: flash.forward(q, k, v, memory_budget=budget, **kwargs))
    assert np.array_equal(_u16(got.out), _u16(whole.out))
    assert peak <= budget, f"peak {peak / budget:.2f} x the budget"


def test_a_process_pool_keeps_the_calling_process_within_the_budget():
    """With a process pool the calling process holds the fixed arrays, the pickled inputs of
    the tasks queued for its workers (``chunks.shipped_bytes``) and each result until it is
    stored; the forward's and the backward's traced peaks there stay under a budget of those
    plus two chunks (1.97x and 1.35x before results were dropped once stored and the queued
    inputs priced)."""
    rng = np.random.default_rng(1)
    q, k, v, do = (rng.standard_normal((2, 512, 4, 128)).astype(BF16) for _ in range(4))
    cfg = flash.make_config(q, k, v)
    with ProcessPoolExecutor(2) as ex:
        fixed, per_cta = fwd_memory.memory_needed(cfg, q.dtype)
        budget = fixed + chunks.shipped_bytes(ex, fwd_memory._input_bytes(cfg, q.dtype)) + 2 * per_cta
        want = flash.forward(q, k, v)
        flash.forward(q, k, v, executor=ex, memory_budget=budget)  # starts the workers
        got, peak = traced_peak(lambda: flash.forward(q, k, v, executor=ex, memory_budget=budget))
        assert np.array_equal(_u16(got.out), _u16(want.out))
        assert peak <= budget, f"forward: peak {peak / budget:.2f} x the budget"

        bcfg = bwd_module.make_backward_config(do, q, k, v, want.out, want.lse)
        fixed, per_row = bwd_mainloop.memory_needed(bcfg, False)
        t = bcfg.tiles
        padded = 2 * 2 * bcfg.batch * t.kernel_head_dim * (
            bcfg.m_blocks * t.kblock_m * bcfg.heads + bcfg.n_blocks * t.kblock_n * bcfg.heads_kv)
        budget = fixed + chunks.shipped_bytes(ex, padded) + 2 * per_row
        bwant = flash.backward(do, q, k, v, want.out, want.lse)
        bgot, peak = traced_peak(lambda: flash.backward(do, q, k, v, want.out, want.lse,
                                                        executor=ex, memory_budget=budget))
    for name in ("dq", "dk", "dv"):
        assert np.array_equal(_u16(getattr(bgot, name)), _u16(getattr(bwant, name)))
    assert peak <= budget, f"backward: peak {peak / budget:.2f} x the budget"


def test_the_kv_cache_check_counts_a_thread_pool_as_the_forward_does():
    """A thread pool of 8 runs as many chunks at once as the budget affords, so the KV cache's
    up-front check (before AppendKV writes the cache) accepts a budget the forward accepts
    (it counted all 8 threads and refused every budget tried)."""
    rng = np.random.default_rng(2)
    q, k_new, v_new = (rng.standard_normal((1, 64, 4, 64)).astype(BF16) for _ in range(3))
    k_cache, v_cache = (np.zeros((1, 512, 4, 64), BF16) for _ in range(2))
    seqlens = np.array([200], np.int32)
    kw = dict(cache_seqlens=seqlens, causal=True)
    serial = fa3.flash_attn_with_kvcache(q, k_cache.copy(), v_cache.copy(), k_new, v_new, **kw)
    cfg = flash.make_config(q, k_cache[:, :264], v_cache[:, :264], causal=True)
    fixed, per_cta = fwd_memory.memory_needed(cfg, q.dtype)
    with ThreadPoolExecutor(8) as ex:
        pooled = fa3.flash_attn_with_kvcache(q, k_cache.copy(), v_cache.copy(), k_new, v_new,
                                             executor=ex, memory_budget=fixed + 2 * per_cta, **kw)
    assert np.array_equal(_u16(pooled), _u16(serial))


@pytest.mark.parametrize("name", ["numpy", "numba"])
def test_an_executor_task_runs_on_the_calling_threads_engine(name, monkeypatch):
    """``engine.carry``: a task runs on the caller's engine whatever the worker's own setting
    (a pool started before ``set_engine``, spawned workers, dask's): with the caller on
    "numba" a worker left on "auto" still takes every call compiled; on "numpy", none."""
    if name == "numba" and not engine.available():
        pytest.skip("numba is not installed")
    with engine.use_engine(name):
        task = engine.carry(engine.wants_numba)
    with engine.use_engine("auto"):  # the worker's own setting
        assert task("dotadd", 0) is (name == "numba")
        assert engine.wants_numba("dotadd", 0) is False  # reset after the task


def test_an_explicit_engine_replaces_a_bad_environment_setting(monkeypatch):
    """A bad SIMULATOR_ENGINE is named when read, and ``set_engine`` can still replace it."""
    state = importlib.import_module("simulator.engine")._state
    monkeypatch.setitem(state, "engine", None)
    monkeypatch.setenv("SIMULATOR_ENGINE", "bogus")
    with pytest.raises(ValueError, match="SIMULATOR_ENGINE: expected one of"):
        engine.get_engine()
    assert engine.set_engine("numpy") == "auto"
    assert engine.get_engine() == "numpy"


@pytest.mark.skipif(not engine.available(), reason="numba is not installed")
def test_the_kv_cache_check_prices_ctas_on_the_engine_its_calls_run(monkeypatch):
    """Under "auto" the KV cache's call decides its engine once (``engine.launching``) and
    its up-front check (before AppendKV writes the cache) runs inside that decision: a budget
    its compiled calls fit is not refused by a NumPy-engine estimate."""
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 64, 2, 64)).astype(BF16)
    k_cache, v_cache = (rng.standard_normal((1, 512, 2, 64)).astype(BF16) for _ in range(2))
    k_new, v_new = (rng.standard_normal((1, 8, 2, 64)).astype(BF16) for _ in range(2))
    seqlens = np.array([300], np.int32)
    monkeypatch.setattr(engine, "AUTO_MIN_WORK", 1)  # every launch compiled under "auto"
    cfg = flash.make_config(q, k_cache[:, :308], v_cache[:, :308], causal=True)
    with engine.use_engine("auto"):
        with engine.launching(1):
            fixed, per_cta = fwd_memory.memory_needed(cfg, q.dtype)
        want = fa3.flash_attn_with_kvcache(q, k_cache.copy(), v_cache.copy(), k_new, v_new,
                                           cache_seqlens=seqlens, causal=True)
        got = fa3.flash_attn_with_kvcache(q, k_cache.copy(), v_cache.copy(), k_new, v_new,
                                          cache_seqlens=seqlens, causal=True,
                                          memory_budget=fixed + per_cta)
    assert np.array_equal(_u16(got), _u16(want))


def test_a_varlen_backward_without_keys_takes_max_seqlen_k_zero():
    """Zero keys in all (the forward takes ``max_seqlen_k=0`` and gives LSE +inf): the
    backward's gradients are zero, not a refusal of a length no sequence has."""
    rng = np.random.default_rng(4)
    q = rng.standard_normal((70, 2, 64)).astype(BF16)
    k = np.zeros((0, 2, 64), BF16)
    cq, ck = np.array([0, 50, 70], np.int32), np.zeros(3, np.int32)
    out, lse = fa3.flash_attn_varlen_func(q, k, k, cq, ck, 50, 0, causal=True,
                                          return_attn_probs=True)[:2]
    dq, dk, dv = fa3.flash_attn_backward(q, q, k, k, out, lse, causal=True, cu_seqlens_q=cq,
                                         cu_seqlens_k=ck, max_seqlen_q=50, max_seqlen_k=0)
    assert not np.asarray(dq, np.float32).any() and dk.shape == dv.shape == (0, 2, 64)
