"""The FA3 API under stress: memory budgets measured with tracemalloc, Ctrl-C during the KV
cache append, and refusals that say what to do instead."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest
from memory_peak import traced_peak

from simulator import fa3, flash
from simulator.flash.forward import memory_needed

BF16 = ml_dtypes.bfloat16


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
        got, peak = traced_peak(lambda: fa3.flash_attn_func(q, k, v, num_splits=num_splits,
                                                      memory_budget=budget, executor=pool))
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    assert peak <= budget, f"peak {peak / budget:.2f} x the budget"


# ---- Ctrl-C during the KV cache append: unchanged or fully appended ------------------------------
def _strided_torch_caches(torch):
    """k_cache, v_cache as non-contiguous torch views (every other kv head of a larger tensor),
    so that the emulator computes on copies and writes them back into the caller's tensors."""
    g = torch.Generator().manual_seed(7)
    big = [torch.randn(4, 32, 2, 64, generator=g).to(torch.bfloat16) for _ in range(2)]
    return big, [b[:, :, ::2] for b in big]


def _kv_args(torch):
    g = torch.Generator().manual_seed(8)
    q = torch.randn(4, 1, 2, 64, generator=g).to(torch.bfloat16)
    kn, vn = (torch.randn(4, 2, 1, 64, generator=g).to(torch.bfloat16) for _ in range(2))
    return q, dict(k=kn, v=vn, cache_seqlens=torch.tensor([3, 9, 0, 20], dtype=torch.int32))


def test_ctrl_c_pressed_twice_during_the_write_back_leaves_the_caches_whole(monkeypatch):
    """SIGINT arriving at every write-back but the first (Ctrl-C held down): the caches are
    fully appended, then KeyboardInterrupt propagates."""
    torch = pytest.importorskip("torch", reason="torch is optional")
    import sys
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("Python runs signal handlers in the main thread only")
    q, kw = _kv_args(torch)
    _, (kc_want, vc_want) = _strided_torch_caches(torch)
    fa3.flash_attn_with_kvcache(q, kc_want, vc_want, **kw)
    _, (kc, vc) = _strided_torch_caches(torch)
    before = kc.clone(), vc.clone()
    module = sys.modules[fa3.kvcache.append_kv.__module__]  # where the write-back is called
    real, calls = module.write_back, []

    def interrupted_write_back(orig, arr):
        calls.append(1)
        if len(calls) > 1:
            signal.raise_signal(signal.SIGINT)
        real(orig, arr)

    monkeypatch.setattr(module, "write_back", interrupted_write_back)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            fa3.flash_attn_with_kvcache(q, kc, vc, **kw)
    finally:
        signal.signal(signal.SIGINT, previous)
    same = [torch.equal(a.view(torch.int16), b.view(torch.int16))
            for a, b in zip((kc, vc), (kc_want, vc_want), strict=True)]
    unchanged = [torch.equal(a.view(torch.int16), b.view(torch.int16))
                 for a, b in zip((kc, vc), before, strict=True)]
    assert all(same) or all(unchanged), f"k_cache, v_cache appended: {same}"


# ---- refusals say what to do instead -----------------------------------------------------------
def test_an_append_with_a_narrower_v_says_what_to_do_instead():
    """FA3's AppendKV spills past V rows narrower than K's (not emulated); the refusal says how
    to attend to the new keys anyway, and that way works."""
    rng = np.random.default_rng(9)
    q, kc, vc, kn, vn = _bf16(rng, (2, 1, 2, 64), (2, 16, 1, 64), (2, 16, 1, 32), (2, 1, 1, 64),
                              (2, 1, 1, 32))
    seqlens = np.array([3, 7], np.int32)
    with pytest.raises(ValueError, match=r"v: appending new values with head_dim_v 32 < head_dim 64 "
                                         r"is not emulated: .*; to attend to them without that "
                                         r"spill, write k, v into the caches yourself and call "
                                         r"without k, v, with cache_seqlens \+ seqlen_new"):
        fa3.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=seqlens)
    kc[np.arange(2), seqlens], vc[np.arange(2), seqlens] = kn[:, 0], vn[:, 0]
    out = fa3.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens + 1)
    for b in range(2):
        keys = slice(0, int(seqlens[b]) + 1)
        one = fa3.flash_attn_func(q[b:b + 1], kc[b:b + 1, keys], vc[b:b + 1, keys])
        assert np.array_equal(out[b].view(np.uint16), one[0].view(np.uint16))


def _guarded() -> str:
    from simulator.fa3.append import sigint_deferred

    with sigint_deferred():
        return "ran"


def test_the_append_guard_leaves_the_sigint_handler_and_works_off_the_main_thread():
    rng = np.random.default_rng(10)
    q, kc, vc, kn, vn = _bf16(rng, (2, 1, 2, 64), (2, 16, 1, 64), (2, 16, 1, 64), (2, 1, 1, 64),
                              (2, 1, 1, 64))
    kw = dict(k=kn, v=vn, cache_seqlens=np.array([3, 7], np.int32))
    handler = signal.getsignal(signal.SIGINT)
    main = kc.copy(), vc.copy()
    fa3.flash_attn_with_kvcache(q, *main, **kw)
    assert signal.getsignal(signal.SIGINT) is handler
    with ThreadPoolExecutor(1) as pool:  # signal.signal would raise ValueError in this thread
        other = kc.copy(), vc.copy()
        pool.submit(fa3.flash_attn_with_kvcache, q, *other, **kw).result()
        assert pool.submit(_guarded).result() == "ran"
    for a, b in zip(main, other, strict=True):
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    assert not np.array_equal(main[0].view(np.uint16), kc.view(np.uint16))
