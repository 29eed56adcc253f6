"""``simulator.fa3`` (FA3's Python API) against the real library's calls recorded on the H200.

Recorded by ``python -m simulator.device.fa3_library_record --api`` (fa3-fwd 0.0.3): 200 calls of
``flash_attn_with_kvcache`` (splits by FA3's heuristic and explicit, appended k / v,
cache_batch_idx, cache_leftpad, caches up to 16k), ``flash_attn_varlen_func`` and
``flash_attn_func`` with splits (and the Split kernel's partial outputs).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import fa3
from simulator.device import fa3_library
from simulator.device.numerics_evidence import digest
from simulator.replay import fa3_api, fa3_api_cases

REPORT, SAMPLE = fa3_api.load()
BF16 = ml_dtypes.bfloat16


def test_recorded_with_the_published_wheel_on_an_h200():
    prov = REPORT["provenance"]
    assert prov["gpu"] == "NVIDIA H200" and prov["version"] == "0.0.3"
    assert prov["extension_sha256"] == fa3_library.EXTENSION_SHA256
    assert REPORT["counts"]["refused"] == 0
    assert [r["case"] for r in REPORT["cases"]] == fa3_api_cases.matrix()


def test_the_calls_cover_what_serving_stacks_do():
    cases = [r["case"] for r in REPORT["cases"]]
    kv = [c for c in cases if c["api"] == "kvcache"]
    assert len(cases) >= 200 and len(kv) >= 80
    assert {c["batch"] for c in kv} >= {1, 2, 4, 8, 16, 32, 64}
    assert max(c["seqlen_cache"] for c in kv) >= 16384
    assert {c["heads"] // c["heads_kv"] for c in cases} >= {1, 2, 4, 8, 16}
    assert {c["num_splits"] for c in kv} >= {0, 1, 2, 3, 4, 8, 16}
    assert sum(c["seqlen_new"] > 0 for c in kv) >= 20
    assert sum(c["cache_batch_idx"] for c in kv) >= 15 and sum(c["cache_leftpad"] for c in kv) >= 15
    varlen = [c for c in cases if c["api"] == "varlen"]
    assert len(varlen) >= 60 and sum(c["seqused_k"] for c in varlen) >= 10
    assert sum(0 in c["seqlens_k"] for c in varlen) >= 10      # empty sequences
    splits = [r for r in REPORT["cases"] if "out_accum" in r]
    assert len(splits) >= 30                                     # the partials of the Split kernel


@pytest.mark.parametrize("index", range(len(REPORT["cases"])))
def test_simulator_fa3_reproduces_the_library(index):
    res = fa3_api.check_case(index, REPORT["cases"][index], SAMPLE, digest)
    assert res.ok, f"{res.label}: {res.differ}"


# ---- the import swap and FA3's argument rules ---------------------------------------------------
def _qkv(b=2, sq=5, sk=40, h=4, hkv=2, d=64, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(BF16)
                 for shape in ((b, sq, h, d), (b, sk, hkv, d), (b, sk, hkv, d)))


def test_a_user_script_runs_with_the_import_swapped():
    """The library's call conventions: out alone, or (out, lse) when asked."""
    from simulator.fa3 import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

    q, k, v = _qkv()
    out = flash_attn_func(q, k, v, causal=True)
    out2, lse = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert out.shape == (2, 5, 4, 64) and lse.shape == (2, 4, 5) and out.dtype == BF16
    assert np.array_equal(out.view(np.uint16), out2.view(np.uint16))
    cu_q, cu_k = np.array([0, 5, 10], np.int32), np.array([0, 40, 80], np.int32)
    o_var, lse_var = flash_attn_varlen_func(q.reshape(10, 4, 64), k.reshape(80, 2, 64), v.reshape(80, 2, 64),
                                            cu_q, cu_k, 5, 40, causal=True, return_attn_probs=True)
    assert lse_var.shape == (4, 10)  # varlen LSE is [heads, total_q]
    assert np.array_equal(o_var.reshape(out.shape).view(np.uint16), out.view(np.uint16))
    kc, vc = np.zeros((2, 64, 2, 64), BF16), np.zeros((2, 64, 2, 64), BF16)
    o_kv = flash_attn_with_kvcache(q, kc, vc, k=k, v=v, cache_seqlens=np.zeros(2, np.int32),
                                   causal=True, num_splits=1)
    assert np.array_equal(kc[:, :40].view(np.uint16), k.view(np.uint16))  # appended in place
    assert np.array_equal(o_kv.view(np.uint16), out.view(np.uint16))


def test_torch_cpu_tensors_come_back_as_torch_tensors():
    torch = pytest.importorskip("torch", reason="torch is optional; the NumPy path is tested above")
    q, k, v = _qkv()
    tq, tk, tv = (torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) for x in (q, k, v))
    out = fa3.flash_attn_func(tq, tk, tv)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    want = fa3.flash_attn_func(q, k, v)
    assert np.array_equal(out.view(torch.int16).numpy(), want.view(np.int16))


@pytest.mark.parametrize("call, match", [
    (lambda q, k, v: fa3.flash_attn_func(q, k, v, qv=q), "qv: not emulated"),
    (lambda q, k, v: fa3.flash_attn_func(q, k, v, num_splits=True), "num_splits"),
    (lambda q, k, v: fa3.flash_attn_func(q[..., :60], k[..., :60], v[..., :60]), "multiple of 8"),
    (lambda q, k, v: fa3.flash_attn_varlen_func(q[0], k[0], v[0], np.array([0, 3, 2], np.int32),
                                                np.array([0, 40], np.int32), 5, 40), "cu_seqlens_q"),
    (lambda q, k, v: fa3.flash_attn_varlen_func(q[0], k[0], v[0], np.array([0.0, 5.0]),
                                                np.array([0, 40], np.int32), 5, 40), "cu_seqlens_q"),
    (lambda q, k, v: fa3.flash_attn_varlen_func(q[0], k[0], v[0], np.array([0, 5], np.int32),
                                                np.array([0, 40], np.int32), 4, 40), "max_seqlen_q"),
    (lambda q, k, v: fa3.flash_attn_with_kvcache(q, k, v, cache_seqlens=np.array([41, 0], np.int32)),
     "cache_seqlens"),
    (lambda q, k, v: fa3.flash_attn_with_kvcache(q, k, v, k=k[:, :2], v=v[:, :2]), "cache_seqlens"),
    (lambda q, k, v: fa3.flash_attn_with_kvcache(q, k, v, cache_batch_idx=np.array([0, 2], np.int32)),
     "cache_batch_idx"),
    (lambda q, k, v: fa3.flash_attn_with_kvcache(q, k, v, page_table=np.zeros((2, 1), np.int32)),
     "page_table: not emulated"),
    (lambda q, k, v: fa3.flash_attn_func(q, k[:, :, :1].repeat(3, axis=2), v[:, :, :1].repeat(3, axis=2)),
     "heads_kv"),
])
def test_bad_arguments_are_refused_naming_them(call, match):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=match):
        call(q, k, v)


# ---- hypothesis-drawn API calls (python -m simulator.device.fa3_api_replay on the H200) ---------
DRAWN = fa3_api.read_json(fa3_api.DATA / "fa3_api_replay_report.json", fa3_api.REGENERATE)


def test_hypothesis_drawn_calls_agreed_on_the_device():
    assert DRAWN["provenance"]["gpu"] == "NVIDIA H200"
    assert DRAWN["provenance"]["extension_sha256"] == fa3_library.EXTENSION_SHA256
    assert DRAWN["cases"] >= 5000 and DRAWN["distinct_cases"] >= 5000
    assert DRAWN["disagreements"] == 0 and not DRAWN["stopped"]
    drawn = DRAWN["drawn"]
    for label in ("api=kvcache", "api=varlen", "api=func", "num_splits=0", "num_splits=16",
                  "gqa=16", "dtype=e4m3", "causal=True", "softcap=True"):
        assert drawn[label] >= 100, label


@pytest.mark.parametrize("j", range(len(DRAWN["sample"])))
def test_sampled_drawn_calls_replay(j):
    from simulator.device.fa3_api_replay import emulate

    rec = DRAWN["sample"][j]
    want = {k: v for k, v in rec.items() if k != "case"}
    assert emulate(rec["case"]) == want, rec["case"]
