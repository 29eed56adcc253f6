"""FA3's inference API beyond the plain calls: ``qv`` (MLA), ``flash_attn_with_kvcache`` with
varlen queries / new keys (``cu_seqlens_q``, ``cu_seqlens_k_new``, ``max_seqlen_q``), and
``get_scheduler_metadata`` / ``scheduler_metadata=``. The real library's calls (fa3-fwd 0.0.3 on
the H200, ``fa3_ext_*``) replay bit for bit on a cheap sample here; the full replay of every
recorded call: ``python -m simulator verify --topic ext``."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import fa3
from simulator.io import read_json, read_npz
from simulator.replay import fa3_ext, fa3_ext_cases
from simulator.replay.common import digest

REPORT = read_json(fa3_ext.REPORT, fa3_ext.REGENERATE)
SAMPLE = read_npz(fa3_ext.SAMPLE, fa3_ext.REGENERATE)
RECORDS = REPORT["cases"]
BF16 = ml_dtypes.bfloat16


def _cost(c: dict) -> int:
    keys = c.get("seqlen_cache") or c.get("seqlen_k") or sum(c.get("seqlens_k", [1]))
    return c["batch"] * c["heads"] * keys * (c["head_dim"] + c.get("head_dim_v", c["head_dim"]))


def _cheapest(pred, n=1) -> list[int]:
    """Indices of the ``n`` cheapest recorded calls matching ``pred`` (the library ran them)."""
    found = [i for i, r in enumerate(RECORDS) if "error" not in r and pred(r["case"])]
    return sorted(found, key=lambda i: _cost(RECORDS[i]["case"]))[:n]


SELECTED = sorted(set(
    _cheapest(lambda c: c.get("qv") and c["api"] == "kvcache", 3)
    + _cheapest(lambda c: c.get("qv") and c["api"] == "func", 2)
    + _cheapest(lambda c: c.get("qv") and c["api"] == "varlen", 2)
    + _cheapest(lambda c: c.get("qv") and c["num_splits"] != 1 and c["api"] == "kvcache", 1)
    + _cheapest(lambda c: "lens_q" in c and "lens_new" not in c, 2)
    + _cheapest(lambda c: "lens_new" in c and "lens_q" not in c, 2)
    + _cheapest(lambda c: "lens_new" in c and "lens_q" in c, 2)
    + _cheapest(lambda c: c.get("rotary"), 2)
    + _cheapest(lambda c: "lens_q" in c and 0 in c["lens_q"] and c.get("seqlen_new", 0) > 0, 1)
    + _cheapest(lambda c: c.get("metadata") and c["num_splits"] != 1, 3)
    + _cheapest(lambda c: c["dtype"] == "e4m3" and c.get("rotary"), 1)
    + _cheapest(lambda c: c["dtype"] == "e4m3" and "lens_q" in c, 1)))


def test_the_recording_covers_what_it_claims():
    cases = [r["case"] for r in RECORDS]
    qv = [c for c in cases if c.get("qv")]
    assert len(qv) >= 40 and {c["api"] for c in qv} == {"kvcache", "func", "varlen"}
    assert max(c["heads"] for c in qv) >= 64
    assert max(c.get("seqlen_cache", 0) for c in qv) >= 8192
    assert {c["head_dim_v"] for c in qv} >= {256, 512}
    assert sum("lens_q" in c for c in cases) >= 20 and sum("lens_new" in c for c in cases) >= 20
    assert sum(bool(c.get("rotary")) for c in cases) >= 10
    assert sum(bool(c.get("metadata")) for c in cases) >= 30
    fp8 = [c for c in cases if c["dtype"] == "e4m3"]
    assert len(fp8) >= 20 and all(c["descales"] for c in fp8) and any(c.get("rotary") for c in fp8)
    assert not any("error" in r for r in RECORDS)
    assert len(SELECTED) >= 15


@pytest.mark.parametrize("index", SELECTED, ids=[str(i) for i in SELECTED])
def test_recorded_calls_replay_bit_for_bit(index):
    res = fa3_ext.check_case(index, RECORDS[index], SAMPLE)
    assert res["ok"], {k: v for k, v in res["differ"].items() if v}


def test_qv_is_a_second_gemm_into_the_same_accumulator(monkeypatch):
    """Mutation: S = q K^T + qv V^T as two GEMMs whose results are added (FADD) instead of
    the second wgmma accumulating into the first's registers differs from the library."""
    import importlib

    from simulator.numerics import fadd

    fwd = importlib.import_module("simulator.flash.mainloop_fwd_sm90")

    i = _cheapest(lambda c: c.get("qv") and c["api"] == "func")[0]
    assert fa3_ext.check_case(i, RECORDS[i], SAMPLE)["ok"]
    original = fwd._gemm_wg

    def separate(a, b, c, instruction, exact=None):
        if np.all((c == 0) & np.signbit(c)):  # the QK GEMM (zero_init): unchanged
            return original(a, b, c, instruction, exact)
        return fadd(c, original(a, b, np.full_like(c, -0.0), instruction, exact))

    monkeypatch.setattr(fwd, "_gemm_wg", separate)
    res = fa3_ext.check_case(i, RECORDS[i], SAMPLE)
    assert not res["ok"] and res["differ"]["out"]


def test_qv_default_scale_counts_head_dim_v():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 2, 8, 64)).astype(BF16)
    k = rng.standard_normal((1, 300, 1, 64)).astype(BF16)
    v = rng.standard_normal((1, 300, 1, 512)).astype(BF16)
    qv = rng.standard_normal((1, 2, 8, 512)).astype(BF16)
    default = fa3.flash_attn_func(q, k, v, qv=qv)
    explicit = fa3.flash_attn_func(q, k, v, qv=qv, softmax_scale=(64 + 512) ** -0.5)
    wrong = fa3.flash_attn_func(q, k, v, qv=qv, softmax_scale=64 ** -0.5)
    assert np.array_equal(default.view(np.uint16), explicit.view(np.uint16))
    assert not np.array_equal(default.view(np.uint16), wrong.view(np.uint16))


def test_zero_query_rows_append_nothing():
    """A varlen sequence with no query row has no CTA, and FA3's AppendKV is done by the
    attention CTAs: its new keys are not written (the library's caches on the H200)."""
    i = _cheapest(lambda c: "lens_q" in c and 0 in c["lens_q"] and c.get("seqlen_new", 0) > 0
                  and not c.get("metadata"))[0]
    case = RECORDS[i]["case"]
    assert fa3_ext.check_case(i, RECORDS[i], SAMPLE)["ok"]
    name, args = fa3_ext_cases.call_args(case)
    before = args["k_cache"].copy()
    fa3.flash_attn_with_kvcache(**args)
    b = case["lens_q"].index(0)
    row = args["cache_batch_idx"][b] if "cache_batch_idx" in args else b
    s0 = int(args["cache_seqlens"][b])
    span = slice(s0, s0 + case["seqlen_new"])
    assert np.array_equal(args["k_cache"][row, span].view(np.uint16), before[row, span].view(np.uint16))


def test_emulated_scheduler_metadata_equals_the_librarys():
    """Every recorded get_scheduler_metadata array, field by field (split counts, m blocks,
    the sorted batch order, heads per L2 share), equals the emulator's; and the library's
    calls gave the same bits with the metadata as without."""
    n = 0
    for r in RECORDS:
        if "metadata" not in r:
            continue
        name, args = fa3_ext_cases.call_args(r["case"])
        md = fa3.get_scheduler_metadata(**fa3_ext_cases.metadata_args(name, args))
        want = np.asarray(r["metadata"], dtype=np.int32)
        assert np.array_equal(md, want), (r["case"], md.tolist(), want.tolist())
        assert r["without_metadata"] == {k: r[k] for k in r["without_metadata"]}
        n += 1
    assert n >= 30


def _cache_call(batch=2, sq=3):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((batch * sq, 4, 64)).astype(BF16)
    kc = rng.standard_normal((batch, 256, 2, 64)).astype(BF16)
    vc = rng.standard_normal((batch, 256, 2, 64)).astype(BF16)
    cu = (np.arange(batch + 1) * sq).astype(np.int32)
    return q, kc, vc, cu


def test_metadata_from_other_arguments_is_refused():
    q, kc, vc, cu = _cache_call()
    seqlens = np.array([100, 200], np.int32)
    md = fa3.get_scheduler_metadata(2, 3, 256, 4, 2, 64, seqlens, cu_seqlens_q=cu, num_splits=4)
    out = fa3.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, cu_seqlens_q=cu,
                                      max_seqlen_q=3, num_splits=4, scheduler_metadata=md)
    plain = fa3.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, cu_seqlens_q=cu,
                                        max_seqlen_q=3, num_splits=4)
    assert np.array_equal(out.view(np.uint16), plain.view(np.uint16))
    with pytest.raises(ValueError, match="scheduler_metadata: expected int32"):
        fa3.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, cu_seqlens_q=cu,
                                    max_seqlen_q=3, num_splits=4, scheduler_metadata=md[:-1])
    bad = md.copy()
    bad[0] = 9
    with pytest.raises(ValueError, match="scheduler_metadata: split counts"):
        fa3.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, cu_seqlens_q=cu,
                                    max_seqlen_q=3, num_splits=4, scheduler_metadata=bad)


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(max_seqlen_q=None), "max_seqlen_q: FA3 requires it"),
    (dict(max_seqlen_q=2), "max_seqlen_q: expected an int >= every sequence's length"),
    (dict(cache_seqlens=5), "cache_seqlens: with cu_seqlens_q FA3's interface expands an int"),
    (dict(cu_seqlens_k_new=np.array([0, 1, 2], np.int32)), "cu_seqlens_k_new: given without"),
    (dict(qv=np.zeros((6, 4, 64), BF16)), "qv: FA3 takes qv only for head_dim_v >= 256"),
])
def test_varlen_cache_arguments_are_checked_before_the_append(kwargs, match):
    q, kc, vc, cu = _cache_call()
    k_new = np.ones((2, 1, 2, 64), BF16)
    args = dict(k=k_new, v=k_new, cache_seqlens=np.array([10, 20], np.int32), cu_seqlens_q=cu,
                max_seqlen_q=3)
    if "cu_seqlens_k_new" in kwargs:
        args.pop("k"), args.pop("v")
    args.update(kwargs)
    before = kc.copy()
    with pytest.raises(ValueError, match=match):
        fa3.flash_attn_with_kvcache(q, kc, vc, **args)
    assert np.array_equal(kc.view(np.uint16), before.view(np.uint16))


@pytest.mark.parametrize(("d", "dv", "dtype", "shape", "match"), [
    (256, 256, BF16, None, "qv: FA3 takes qv only for head_dim <= 64"),
    (64, 128, BF16, None, "qv: FA3 takes qv only for head_dim_v >= 256"),
    (64, 256, np.float16, (1, 2, 4, 128), "qv: expected shape"),
    (64, 256, ml_dtypes.float8_e4m3fn, None, "head_dim_v|qv: FA3 takes qv only for fp16"),
])
def test_bad_qv_is_refused_naming_it(d, dv, dtype, shape, match):
    q = np.ones((1, 2, 4, d), dtype)
    k = np.ones((1, 64, 1, d), dtype)
    v = np.ones((1, 64, 1, dv), dtype)
    qv = np.ones(shape or (1, 2, 4, dv), dtype)
    with pytest.raises(ValueError, match=match):
        fa3.flash_attn_func(q, k, v, qv=qv)


def test_qv_has_no_backward():
    torch = pytest.importorskip("torch", reason="autograd needs torch (CPU build)")
    q = torch.ones((1, 2, 4, 64), dtype=torch.bfloat16, requires_grad=True)
    k = torch.ones((1, 64, 1, 64), dtype=torch.bfloat16)
    v = torch.ones((1, 64, 1, 256), dtype=torch.bfloat16)
    qv = torch.ones((1, 2, 4, 256), dtype=torch.bfloat16)
    out = fa3.flash_attn_func(q, k, v, qv=qv)  # the forward runs, as FA3's FlashAttnFunc
    assert out.requires_grad
    with pytest.raises(ValueError, match="qv: FA3 has no backward with qv"):
        out.float().sum().backward()


DRAWN = read_json(fa3_ext.DRAWN, fa3_ext.REGENERATE)


def test_drawn_sample_replays():
    """The cheapest dozen of the hypothesis-drawn calls' sample (all of it in verify)."""
    assert DRAWN["cases"] >= 2000 and DRAWN["disagreements"] == 0 and DRAWN["refused"] == 0
    picked = sorted(DRAWN["sample"], key=lambda r: _cost(r["case"]))[:12]
    for rec in picked:
        assert fa3_ext.emulate(rec["case"]) == {k: v for k, v in rec.items() if k != "case"}


def test_no_new_key_means_no_rotary():
    """An empty k / v (0 new keys in every sequence) reaches FA3 as a null pointer: the kernel
    runs without AppendKV and so without rotating the queries. The library's digests on such
    drawn calls equal the emulator's, and the queries rotated anyway give other bits."""
    from simulator.fa3 import rotary

    rare = [r for r in DRAWN["sample"] if r["case"].get("rotary") and "lens_new" in r["case"]
            and not sum(r["case"]["lens_new"]) and "lens_q" not in r["case"]
            and not r["case"].get("metadata")]
    assert rare
    rec = min(rare, key=lambda r: _cost(r["case"]))
    assert fa3_ext.emulate(rec["case"]) == {k: v for k, v in rec.items() if k != "case"}
    name, args = fa3_ext_cases.call_args(rec["case"])
    cos, sin = args.pop("rotary_cos"), args.pop("rotary_sin")
    interleaved = args.pop("rotary_interleaved")
    per_row = rec["case"]["causal"] and args["q"].shape[1] > 1
    base = args["cache_seqlens"].astype(np.int64)[:, None]
    pos = base + (np.arange(args["q"].shape[1]) if per_row else 0)
    args["q"] = rotary.rotate(args["q"], cos, sin, np.broadcast_to(pos, args["q"].shape[:2]),
                              interleaved)
    out = fa3.flash_attn_with_kvcache(**args)[0]
    assert digest(np.ascontiguousarray(out).view(np.uint16)).hex() != rec["out"]


def test_the_drawn_plan_is_the_one_the_device_ran():
    """The committed plan (hypothesis's draws differ between environments, so the recording
    keeps what it ran) holds the drawn report's every sampled call, and as many calls."""
    import gzip
    import json

    path = fa3_ext.DRAWN.with_name("fa3_ext_drawn_plan.json.gz")
    plan = json.loads(gzip.decompress(path.read_bytes()))
    keys = {json.dumps(c, sort_keys=True) for c in plan["cases"]}
    assert len(plan["cases"]) == DRAWN["cases"] and plan["seed"] == DRAWN["seed"]
    assert all(json.dumps(r["case"], sort_keys=True) in keys for r in DRAWN["sample"])
