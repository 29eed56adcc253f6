"""A paged KV cache (``page_table``) in ``flash_attn_with_kvcache``: the recorded calls of the
real library (flash-attn3-jax 0.2.3 on the H200, ``fa3_paged_*``) replay bit for bit, FA3's
host rules for paged launches (hopper/flash_api.cpp, hopper/tile_size.h), and bad page tables.
The full replay of every recorded call: ``python -m simulator verify --topic paged``."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import fa3
from simulator.fa3 import paged
from simulator.io import read_json, read_npz
from simulator.replay import fa3_paged, paged_cases
from simulator.replay.common import digest

REPORT = read_json(fa3_paged.REPORT, fa3_paged.REGENERATE)
BY_NAME = {e["case"]["name"]: e for e in REPORT["cases"]}
BF16 = ml_dtypes.bfloat16


def _cheap(pred, n=1):
    """The ``n`` cheapest recorded entries (cache keys x query rows x heads) matching ``pred``."""
    def size(e):
        c = e["case"]
        return c["batch"] * c["seqlen_q"] * c["heads"] * c["pages_per_seq"] * c["page_size"]
    return sorted((e for e in fa3_paged.entries(REPORT) if pred(e["case"])), key=size)[:n]


def _kind(c):
    launch = paged.paged_launch(c["dtype"], 128, 128, c["causal"], c["window"], c["seqlen_q"],
                                c["pages_per_seq"] * c["page_size"], 0.0, c["heads"],
                                c["heads_kv"], c["page_size"], c["leftpad"] is not None,
                                c["seqlen_new"] > 0)
    return launch


SELECTED = (_cheap(lambda c: _kind(c).tma and _kind(c).kblock_n == 176)
            + _cheap(lambda c: _kind(c).tma and _kind(c).kblock_n == 128)
            + _cheap(lambda c: c["seqlen_new"] > 0 and c["num_splits"] > 1)
            + _cheap(lambda c: c["leftpad"] is not None)
            + _cheap(lambda c: c["cache_batch_idx"] is not None)
            + _cheap(lambda c: c["seqlen_q"] == 1 and c["causal"] and c["heads"] > c["heads_kv"])
            + _cheap(lambda c: c["dtype"] == "f16" and c["window"][0] >= 0))


def test_the_recording_covers_what_it_claims():
    cases = [e["case"] for e in REPORT["cases"]]
    assert len(cases) >= 100 and not any("error" in e for e in REPORT["cases"])
    assert all(e["identical"] for e in REPORT["cases"])
    kinds = {(_kind(c).tma, _kind(c).kblock_n) for c in cases}
    assert kinds == {(False, 128), (True, 128), (True, 176)}
    assert {c["page_size"] for c in cases} >= {16, 32, 48, 64, 100, 128, 176, 256, 352, 512}
    assert sum(e["cache_written"] for e in REPORT["cases"]) >= 50
    assert len(SELECTED) == 7


@pytest.mark.parametrize("entry", SELECTED, ids=[e["case"]["name"] for e in SELECTED])
def test_recorded_paged_calls_replay_bit_for_bit(entry):
    assert fa3_paged.check(entry)["mismatches"] == []


def test_sampled_full_bits():
    sample = read_npz(fa3_paged.SAMPLE, fa3_paged.REGENERATE)
    key = sorted({k.rsplit("_", 1)[0] for k in sample})[0]
    entry = next(e for e in REPORT["cases"] if e["key"] == key)
    got = fa3_paged.emulate(entry["case"])
    for n in ("out", "lse"):
        assert np.array_equal(fa3_paged.bits(got[n]), sample[f"{key}_{n}"])


def test_the_paged_tile_is_what_the_library_computes():
    """A non-TMA paged call runs kBlockN 128 (hdim 128, no mask): the same call on the gathered
    contiguous cache (kBlockN 176) gives other bits than the library's."""
    entry = _cheap(lambda c: not _kind(c).tma and not c["causal"] and c["window"] == [-1, -1]
                   and c["seqlen_new"] == 0 and c["cache_seqlens"] is not None
                   and max(c["cache_seqlens"]) > 400)[0]
    x = paged_cases.case_inputs(entry["case"])
    t = x["page_table"]
    kc = x["k_cache"][t].reshape((t.shape[0], -1) + x["k_cache"].shape[2:])
    vc = x["v_cache"][t].reshape((t.shape[0], -1) + x["v_cache"].shape[2:])
    out = fa3.flash_attn_with_kvcache(x["q"], kc, vc, cache_seqlens=x["cache_seqlens"],
                                      cache_batch_idx=x["cache_batch_idx"], causal=x["causal"],
                                      window_size=x["window_size"], num_splits=x["num_splits"])
    assert digest(fa3_paged.bits(out)).hex() != entry["out"]
    assert fa3_paged.check(entry)["mismatches"] == []


def test_paged_launch_rules():
    """hopper/flash_api.cpp get_pagedkv_tma, the seqlen_q == 1 rule, tile_size_fwd_sm90."""
    kw = dict(softcap=0.0, leftpad=False, append=False)
    tma = paged.paged_launch("bf16", 128, 128, False, (-1, -1), 200, 4096, heads=8, heads_kv=8,
                             page_size=352, **kw)
    assert (tma.tma, tma.kblock_n, tma.pack_gqa_forced) == (True, 176, False)
    non = paged.paged_launch("bf16", 128, 128, False, (-1, -1), 200, 4096, heads=8, heads_kv=8,
                             page_size=256, **kw)  # 256 % 176 != 0
    assert (non.tma, non.kblock_n, non.pack_gqa_forced) == (False, 128, True)
    few_rows = paged.paged_launch("bf16", 128, 128, True, (-1, -1), 16, 4096, heads=8,
                                  heads_kv=1, page_size=256, **kw)  # 16 * 8 rows <= kBlockM 128
    assert not few_rows.tma
    dec = {d: paged.paged_launch("bf16", d, d, True, (-1, -1), 1, 4096, heads=8, heads_kv=1,
                                 page_size=64, **kw) for d in (64, 128, 256)}
    assert dec[128].is_causal and not dec[64].is_causal and not dec[256].is_causal
    appended = paged.paged_launch("bf16", 128, 128, True, (-1, -1), 300, 4096, heads=8,
                                  heads_kv=8, page_size=256, softcap=0.0, leftpad=False,
                                  append=True)
    assert not appended.tma
    fp8 = {tma: paged.paged_launch("e4m3", 256, 256, False, (-1, -1), 300, 4096, heads=8,
                                   heads_kv=8, page_size=ps, **kw) for tma, ps in ((True, 128),
                                                                                   (False, 64))}
    assert fp8[True].tma and fp8[True].overlap and not fp8[False].tma
    assert not fp8[False].overlap  # FP8 hdim 256 PagedKV: IntraWGOverlap off (tile_size.h)


def _pool(pages=6, ps=16, hk=1, d=64, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((pages, ps, hk, d)).astype(BF16) for _ in range(2))


def test_appends_land_in_the_pages_and_match_a_contiguous_cache():
    kp, vp = _pool()
    table = np.array([[4, 1, 3], [0, 5, 2]], np.int32)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 1, 2, 64)).astype(BF16)
    kn = rng.standard_normal((2, 3, 1, 64)).astype(BF16)
    vn = rng.standard_normal((2, 3, 1, 64)).astype(BF16)
    lens = np.array([14, 30], np.int32)
    fa3.flash_attn_with_kvcache(q, kp, vp, k=kn, v=vn, cache_seqlens=lens, page_table=table)
    # batch 0: keys 14, 15 in page 4 rows 14, 15, key 16 in page 1 row 0; batch 1: 30, 31, 32
    assert np.array_equal(kp[4, 14:16].view(np.uint16), kn[0, :2].view(np.uint16))
    assert np.array_equal(kp[1, 0].view(np.uint16), kn[0, 2].view(np.uint16))
    assert np.array_equal(vp[5, 14:16].view(np.uint16), vn[1, :2].view(np.uint16))
    assert np.array_equal(vp[2, 0].view(np.uint16), vn[1, 2].view(np.uint16))


@pytest.mark.parametrize("table, message", [
    (np.array([[0, 1]], np.int64), "int32"),
    (np.array([0, 1], np.int32), "max_num_pages_per_seq"),
    (np.array([[0, 9]], np.int32), r"page_table\[0, 1\] = 9"),
    (np.array([[0, 1], [2, 3]], np.int32), "batch_size must be equal"),
])
def test_bad_page_tables_are_refused_naming_page_table(table, message):
    kp, vp = _pool()
    q = np.zeros((1, 1, 2, 64), BF16)
    with pytest.raises(ValueError, match=message) as err:
        fa3.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=np.array([20], np.int32),
                                    page_table=table)
    assert str(err.value).startswith("page_table")


def test_unused_page_entries_may_hold_anything():
    kp, vp = _pool()
    q = np.random.default_rng(2).standard_normal((1, 1, 2, 64)).astype(BF16)
    lens = np.array([20], np.int32)
    a = fa3.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens,
                                    page_table=np.array([[3, 0, 5]], np.int32))
    b = fa3.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens,
                                    page_table=np.array([[3, 0, -7]], np.int32))
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))


def test_a_trace_of_a_packed_paged_launch_is_refused_before_the_append():
    kp, vp = _pool(hk=1)
    k0 = kp.copy()
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 1, 2, 64)).astype(BF16)  # 2 query heads on 1 kv head
    kn, vn = (rng.standard_normal((1, 1, 1, 64)).astype(BF16) for _ in range(2))
    with pytest.raises(ValueError, match="trace: not recorded for this paged launch"):
        fa3.flash_attn_with_kvcache(q, kp, vp, kn, vn, page_table=np.array([[0, 1]], np.int32),
                                    cache_seqlens=np.array([3], np.int32), num_splits=1,
                                    trace=[(0, 0, 0)])
    assert np.array_equal(kp.view(np.uint16), k0.view(np.uint16))


def test_an_empty_pool_is_refused_naming_k_cache():
    kp = np.zeros((0, 4, 1, 64), BF16)
    with pytest.raises(ValueError, match="k_cache: a paged cache needs a pool of at least one"):
        fa3.flash_attn_with_kvcache(np.zeros((1, 1, 1, 64), BF16), kp, kp,
                                    page_table=np.array([[0]], np.int32))
