"""Bad arguments of the inference API beyond the plain calls (``get_scheduler_metadata``,
``flash_attn_with_kvcache``'s varlen queries and rotary options) are refused with a ValueError
naming them, before any cache is written; and equivalent calls give the same bits."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import fa3

BF16 = ml_dtypes.bfloat16
SEQLENS = np.array([5], np.int32)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(BF16)


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint16) if x.dtype == BF16 else x.view(np.uint32)


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(headdim_v=64.7), "headdim_v"),
    (dict(headdim_v=True), "headdim_v"),
    (dict(num_splits=2.5), "num_splits"),
    (dict(num_splits="2"), "num_splits"),
    (dict(page_size=0), "page_size"),
    (dict(page_size=4.5), "page_size"),
    (dict(causal="no"), "causal"),
    (dict(has_softcap="no"), "has_softcap"),
    (dict(pack_gqa="no"), "pack_gqa"),
    (dict(pack_gqa=False, num_splits=4), "pack_gqa"),
    (dict(sm_margin=200), "sm_margin"),
    (dict(cache_seqlens=np.array([50], np.int32)), "cache_seqlens"),
    (dict(max_seqlen_k_new=40), "cache_seqlens"),
    (dict(cu_seqlens_q=np.array([0, 9], np.int32)), "cu_seqlens_q"),
    (dict(cache_leftpad=np.array([9], np.int32)), "cache_leftpad"),
])
def test_get_scheduler_metadata_refuses_bad_arguments(kwargs, match):
    args = dict(cache_seqlens=SEQLENS) | kwargs
    with pytest.raises(ValueError, match=match):
        fa3.get_scheduler_metadata(1, 3, 16, 2, 1, 64, **args)


def _append_call(**kwargs):
    rng = np.random.default_rng(0)
    q, kc, vc = _rand(rng, 1, 3, 2, 64), _rand(rng, 1, 16, 1, 64), _rand(rng, 1, 16, 1, 64)
    kn, vn = _rand(rng, 1, 2, 1, 64), _rand(rng, 1, 2, 1, 64)
    cos, sin = _rand(rng, 16, 32), _rand(rng, 16, 32)
    before = kc.copy(), vc.copy()
    args = dict(k=kn, v=vn, cache_seqlens=SEQLENS, rotary_cos=cos, rotary_sin=sin) | kwargs
    return (q, kc, vc), before, args


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(rotary_interleaved="yes"), "rotary_interleaved"),
    (dict(rotary_interleaved=0), "rotary_interleaved"),
    (dict(rotary_seqlens=np.array([-3], np.int32)), "rotary_seqlens"),
    (dict(max_seqlen_q=3.0), "max_seqlen_q"),
])
def test_kvcache_bad_options_refused_before_the_append(kwargs, match):
    (q, kc, vc), before, args = _append_call(**kwargs)
    with pytest.raises(ValueError, match=match):
        fa3.flash_attn_with_kvcache(q, kc, vc, **args)
    assert np.array_equal(_bits(kc), _bits(before[0])) and np.array_equal(_bits(vc), _bits(before[1]))


@pytest.mark.parametrize("opts", [dict(), dict(causal=True), dict(num_splits=3),
                                  dict(window_size=(3, 1)), dict(attention_chunk=4, causal=True)])
def test_one_packed_sequence_equals_the_unpacked_call(opts):
    """cu_seqlens_q / cu_seqlens_k_new with one sequence: the same launch (varlen through
    cache_seqlens either way), so the same bits, caches and split partials."""
    rng = np.random.default_rng(1)
    q, kc, vc = _rand(rng, 1, 5, 4, 64), _rand(rng, 1, 40, 2, 64), _rand(rng, 1, 40, 2, 64)
    kn, vn = _rand(rng, 1, 2, 2, 64), _rand(rng, 1, 2, 2, 64)
    kc1, vc1, kc2, vc2 = kc.copy(), vc.copy(), kc.copy(), vc.copy()
    a = fa3.flash_attn_with_kvcache(q, kc1, vc1, k=kn, v=vn, cache_seqlens=np.array([20], np.int32),
                                    return_softmax_lse=True, **opts)
    b = fa3.flash_attn_with_kvcache(q[0], kc2, vc2, k=kn[0], v=vn[0],
                                    cu_seqlens_q=np.array([0, 5], np.int32), max_seqlen_q=5,
                                    cu_seqlens_k_new=np.array([0, 2], np.int32),
                                    cache_seqlens=np.array([20], np.int32),
                                    return_softmax_lse=True, **opts)
    assert np.array_equal(_bits(a[0][0]), _bits(b[0])) and np.array_equal(_bits(a[1][0]), _bits(b[1]))
    assert np.array_equal(_bits(kc1), _bits(kc2)) and np.array_equal(_bits(vc1), _bits(vc2))
    if not a[2].size:
        assert b[2].shape == b[3].shape == (0,)
        return
    # the varlen accums: [num_splits, heads, total_q, dv] and [num_splits, heads, total_q]
    assert b[2].shape == a[2].shape[:1] + a[2].shape[2:] and b[3].shape == a[3].shape[:1] + a[3].shape[2:]
    assert np.array_equal(_bits(a[2][:, 0]), _bits(b[2]))
    assert np.array_equal(_bits(a[3][:, 0]), _bits(b[3]))


def test_trace_of_a_packed_gqa_launch_is_refused_before_the_append():
    """cu_seqlens_q with grouped heads runs PackGQA (get_pack_gqa), which is not traced: the
    refusal must come before the new keys land in the cache, and name trace."""
    rng = np.random.default_rng(3)
    q, kc, vc = _rand(rng, 5, 4, 64), _rand(rng, 3, 40, 2, 64), _rand(rng, 3, 40, 2, 64)
    kn, vn = _rand(rng, 4, 2, 64), _rand(rng, 4, 2, 64)
    before = kc.copy(), vc.copy()
    args = dict(k=kn, v=vn, cu_seqlens_q=np.array([0, 2, 2, 5], np.int32), max_seqlen_q=3,
                cu_seqlens_k_new=np.array([0, 1, 3, 4], np.int32),
                cache_seqlens=np.array([10, 3, 20], np.int32), num_splits=1)
    with pytest.raises(ValueError, match="trace: with cu_seqlens_q.*pack_gqa=False"):
        fa3.flash_attn_with_kvcache(q, kc, vc, trace=[(0, 0, 0)], **args)
    assert np.array_equal(_bits(kc), _bits(before[0])) and np.array_equal(_bits(vc), _bits(before[1]))
    traced = fa3.flash_attn_with_kvcache(q, kc, vc, trace=[(0, 0, 0)], pack_gqa=False, **args)
    kc2, vc2 = before[0].copy(), before[1].copy()
    plain = fa3.flash_attn_with_kvcache(q, kc2, vc2, **args)
    assert np.array_equal(_bits(traced[0]), _bits(plain)) and len(traced[1].events) > 0


def test_trace_of_a_qv_launch_records_the_qv_gemm():
    """A traced qv call (V head dim 256) records S after the qv GEMM as its own step, between
    qk_gemm and mask, and gives the untraced call's bits."""
    rng = np.random.default_rng(4)
    q, k, v, qv = _rand(rng, 1, 2, 2, 64), _rand(rng, 1, 16, 1, 64), _rand(rng, 1, 16, 1, 256), \
        _rand(rng, 1, 2, 2, 256)
    out, trace = fa3.flash_attn_func(q, k, v, qv=qv, trace=[(0, 0, 0)])
    steps = [e.step for e in trace]
    assert steps[:3] == ["qk_gemm", "qv_gemm", "mask"]
    assert np.array_equal(_bits(out), _bits(fa3.flash_attn_func(q, k, v, qv=qv)))


@pytest.mark.parametrize("dv", [512])
def test_trace_the_forward_refuses_is_refused_before_the_append(dv):
    """A V head dim over 256 with trace: refused before the cache is written (the forward
    refused it after the append)."""
    rng = np.random.default_rng(5)
    q, kc, vc = _rand(rng, 1, 2, 2, 64), _rand(rng, 1, 16, 1, 64), _rand(rng, 1, 16, 1, dv)
    kn, vn, qv = _rand(rng, 1, 1, 1, 64), _rand(rng, 1, 1, 1, dv), _rand(rng, 1, 2, 2, dv)
    before = kc.copy(), vc.copy()
    with pytest.raises(ValueError, match="trace: not recorded"):
        fa3.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, qv=qv,
                                    cache_seqlens=np.array([5], np.int32), num_splits=1,
                                    trace=[(0, 0, 0)])
    assert np.array_equal(_bits(kc), _bits(before[0])) and np.array_equal(_bits(vc), _bits(before[1]))


def test_metadata_of_a_non_varlen_causal_launch_is_checked_as_its_semaphore():
    """Without cache_seqlens a causal unsplit launch still takes scheduler_metadata as its
    tile semaphore (hopper/flash_api.cpp: scheduler_needs_semaphore, CHECK_SHAPE(
    scheduler_metadata, metadata_size) with metadata_size = 1 + b_r * (sort + swizzle)):
    get_scheduler_metadata's varlen array (1 + 4 * 4 entries for batch 1) does not fit it. A
    non-causal unsplit launch has no semaphore and never reads it."""
    rng = np.random.default_rng(6)
    q, kc, vc = _rand(rng, 1, 3, 2, 64), _rand(rng, 1, 16, 1, 64), _rand(rng, 1, 16, 1, 64)
    md = fa3.get_scheduler_metadata(1, 3, 16, 2, 1, 64, np.array([16], np.int32), causal=True)
    assert md.shape == (17,)
    with pytest.raises(ValueError, match=r"scheduler_metadata: expected int32 \[9\]"):
        fa3.flash_attn_with_kvcache(q, kc, vc, causal=True, scheduler_metadata=md)
    plain = fa3.flash_attn_with_kvcache(q, kc, vc, causal=True)
    fits = fa3.flash_attn_with_kvcache(q, kc, vc, causal=True,
                                       scheduler_metadata=np.zeros(9, np.int32))
    assert np.array_equal(_bits(plain), _bits(fits))
    ignored = fa3.flash_attn_with_kvcache(q, kc, vc, scheduler_metadata=md)
    assert np.array_equal(_bits(ignored), _bits(fa3.flash_attn_with_kvcache(q, kc, vc)))


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 3), rows=st.integers(1, 5), groups=st.sampled_from([(2, 1), (4, 2), (2, 2)]),
       cache=st.integers(8, 300), new=st.integers(0, 2), causal=st.booleans(),
       splits=st.sampled_from([0, 1, 3]), chunk=st.sampled_from([0, 8]), seed=st.integers(0, 99))
def test_packed_equal_length_sequences_equal_the_batched_call(batch, rows, groups, cache, new,
                                                              causal, splits, chunk, seed):
    """B sequences of L rows packed with cu_seqlens_q (max_seqlen_q = L) and their new keys
    packed with cu_seqlens_k_new are the [B, L] call's launch (varlen either way through
    cache_seqlens): the same bits in out, LSE, the split partials and both caches."""
    rng = np.random.default_rng(seed)
    h, hkv = groups
    q, kc, vc = _rand(rng, batch, rows, h, 64), _rand(rng, batch, cache, hkv, 64), \
        _rand(rng, batch, cache, hkv, 64)
    kn, vn = _rand(rng, batch, new, hkv, 64), _rand(rng, batch, new, hkv, 64)
    seqlens = rng.integers(0, cache - new + 1, batch).astype(np.int32)
    opts = dict(causal=causal, num_splits=splits, attention_chunk=chunk, cache_seqlens=seqlens,
                return_softmax_lse=True)
    k1, v1, k2, v2 = kc.copy(), vc.copy(), kc.copy(), vc.copy()
    a = fa3.flash_attn_with_kvcache(q, k1, v1, **(dict(k=kn, v=vn) if new else {}), **opts)
    packed_new = {} if not new else dict(
        k=kn.reshape(-1, hkv, 64), v=vn.reshape(-1, hkv, 64),
        cu_seqlens_k_new=(np.arange(batch + 1) * new).astype(np.int32))
    b = fa3.flash_attn_with_kvcache(q.reshape(-1, h, 64), k2, v2, max_seqlen_q=rows,
                                    cu_seqlens_q=(np.arange(batch + 1) * rows).astype(np.int32),
                                    **packed_new, **opts)
    assert np.array_equal(_bits(a[0].reshape(-1, h, 64)), _bits(b[0]))
    assert np.array_equal(_bits(a[1].transpose(1, 0, 2).reshape(h, -1)), _bits(b[1]))
    assert np.array_equal(_bits(k1), _bits(k2)) and np.array_equal(_bits(v1), _bits(v2))
    assert a[2].shape[:1] == b[2].shape[:1]
    if a[2].size:
        n = a[2].shape[0]
        assert np.array_equal(_bits(a[2].transpose(0, 2, 1, 3, 4).reshape(n, h, -1, 64)), _bits(b[2]))
        assert np.array_equal(_bits(a[3].transpose(0, 2, 1, 3).reshape(n, h, -1)), _bits(b[3]))
