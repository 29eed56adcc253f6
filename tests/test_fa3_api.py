"""``simulator.fa3`` (FA3's Python API) against the real library's calls recorded on the H200.

Recorded by ``python -m simulator measure fa3_library_record --api`` (fa3-fwd 0.0.3): 350 calls of
``flash_attn_with_kvcache`` (splits by FA3's heuristic and explicit, appended k / v,
cache_batch_idx, cache_leftpad, caches up to 32k), ``flash_attn_varlen_func``,
``flash_attn_func`` with splits (and the Split kernel's partial outputs), V head dims different
from Q/K's, and ``flash_attn_combine`` itself.
"""

from __future__ import annotations

import ci_sample
import ml_dtypes
import numpy as np
import pytest

from simulator import fa3
from simulator.device import fa3_library
from simulator.replay import fa3_api, fa3_api_cases
from simulator.replay.common import digest

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
    assert {c["heads"] // c["heads_kv"] for c in cases if c["api"] != "combine"} >= {1, 2, 4, 8, 16}
    assert {c["num_splits"] for c in kv} >= {0, 1, 2, 3, 4, 8, 16}
    assert sum(c["seqlen_new"] > 0 for c in kv) >= 20
    assert sum(c["cache_batch_idx"] for c in kv) >= 15 and sum(c["cache_leftpad"] for c in kv) >= 15
    varlen = [c for c in cases if c["api"] == "varlen"]
    assert len(varlen) >= 60 and sum(c["seqused_k"] for c in varlen) >= 10
    assert sum(0 in c["seqlens_k"] for c in varlen) >= 10      # empty sequences
    splits = [r for r in REPORT["cases"] if "out_accum" in r]
    assert len(splits) >= 30                                     # the partials of the Split kernel
    assert len(kv) + len(varlen) >= 200
    assert max(c["seqlen_cache"] for c in kv) >= 32768
    pairs = {(c["head_dim"], c["head_dim_v"]) for c in cases if "head_dim_v" in c and c["api"] != "combine"}
    assert pairs >= {(192, 128), (64, 256), (64, 512), (64, 128), (48, 96), (144, 112)}
    assert sum(c["api"] == "combine" for c in cases) >= 20      # flash_attn_combine itself


def test_head_dim_v_kernels_follow_fa3s_dispatch():
    """run_mha_fwd_constexpr (hopper/flash_api.cpp): 64 / 256 for V in (64, 256], 64 / 512
    above, 192 / 128 for Q/K in (128, 192] with V <= 128; tiles from tile_size_fwd_sm90."""
    from simulator.flash.dispatch import fa3_dispatch

    want = {(48, 96, "bf16"): (64, 256, 128, 96), (64, 512, "bf16"): (64, 512, 64, 64),
            (160, 112, "bf16"): (192, 128, 128, 128), (192, 128, "e4m3"): (192, 128, 128, 160),
            (64, 32, "bf16"): (64, 64, 192, 192)}
    for (d, dv, fmt), (kd, kdv, m, n) in want.items():
        disp = fa3_dispatch(fmt, d, 500, causal=False, head_dim_v=dv)
        assert (disp.kernel_head_dim, disp.kernel_head_dim_v, disp.kblock_m, disp.kblock_n) == \
            (kd, kdv, m, n), (d, dv, fmt)


@pytest.mark.parametrize("d, dv, fmt, match", [
    (128, 64, "bf16", "only for Q/K head dim in"), (256, 128, "bf16", "only for Q/K head dim in"),
    (64, 520, "bf16", "only for Q/K head dim in"), (64, 272, "e4m3", "HeaddimV > 256"),
    (64, 128, "e4m3", "no e4m3 kernel"), (192, 100, "bf16", "multiple of 8")])
def test_head_dim_v_pairs_fa3_refuses(d, dv, fmt, match):
    dt = {"bf16": BF16, "e4m3": ml_dtypes.float8_e4m3fn}[fmt]
    q = np.zeros((1, 3, 1, d), dt)
    k = np.zeros((1, 5, 1, d), dt)
    v = np.zeros((1, 5, 1, dv), dt)
    with pytest.raises(ValueError, match=match):
        fa3.flash_attn_func(q, k, v)


def test_appending_v_narrower_than_k_is_refused():
    """FA3's AppendKV writes head_dim values per V row: with head_dim_v < head_dim it zeroes the
    cache's next values (measured on the H200: the library's v_cache had zeros right after every
    appended row); not emulated."""
    q = np.zeros((1, 1, 1, 64), BF16)
    kc, vc = np.zeros((1, 40, 1, 64), BF16), np.zeros((1, 40, 1, 32), BF16)
    with pytest.raises(ValueError, match="v: appending new values with head_dim_v 32"):
        fa3.flash_attn_with_kvcache(q, kc, vc, k=np.zeros((1, 1, 1, 64), BF16),
                                    v=np.zeros((1, 1, 1, 32), BF16), cache_seqlens=np.array([3], np.int32))
    out = fa3.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array([3], np.int32))
    assert out.shape == (1, 1, 1, 32)


def test_varlen_split_counts_use_the_kernels_tile():
    """Q/K 48 with V 96 runs the 64 / 256 kernel (kBlockM x kBlockN 128 x 96) while the source's
    host code names the 64 / 96 tile (192 x 192): the recorded varlen call with splits agrees
    only with the kernel's tile (fa3_api_report.json); with the host tile its bits differ."""
    import simulator.fa3.arguments as arguments
    from simulator.flash.dispatch import tile_size_fwd_sm90

    index = next(i for i, r in enumerate(REPORT["cases"]) if r["case"]["api"] == "varlen"
                 and r["case"].get("head_dim_v") == 96 and r["case"]["num_splits"] == 2
                 and max(r["case"]["seqlens_q"]) > 192)
    assert fa3_api.check_case(index, REPORT["cases"][index], SAMPLE, digest).ok
    real = arguments.launch_flags

    def host_tile(fmt, d, dv, causal, window, max_q, max_k, softcap, chunk=0):
        c, l_, _ = real(fmt, d, dv, causal, window, max_q, max_k, softcap, chunk)
        return c, l_, tile_size_fwd_sm90(64, 96, c, l_)[:2]

    arguments.launch_flags = host_tile
    try:
        assert not fa3_api.check_case(index, REPORT["cases"][index], SAMPLE, digest).ok
    finally:
        arguments.launch_flags = real


@pytest.mark.parametrize("index", ci_sample.api_params(REPORT["cases"], SAMPLE))  # all: --full-replay
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
    (lambda q, k, v: fa3.flash_attn_func(q, k, v, qv=q), "qv: FA3 takes qv only for"),
    (lambda q, k, v: fa3.flash_attn_func(q, k, v, num_splits=True), "num_splits"),
    (lambda q, k, v: fa3.flash_attn_func(q[..., :60], k[..., :60], v[..., :60]), "multiple of 8"),
    (lambda q, k, v: fa3.flash_attn_varlen_func(q[0], k[0], v[0], np.array([0, 3, 2], np.int32),
                                                np.array([0, 40], np.int32), 5, 40), "cu_seqlens_q"),
    (lambda q, k, v: fa3.flash_attn_varlen_func(q[0], k[0], v[0], np.array([0.0, 5.0]),
                                                np.array([0, 40], np.int32), 5, 40), "cu_seqlens_q"),
    (lambda q, k, v: fa3.flash_attn_varlen_func(q[0], k[0], v[0], np.array([0, 5], np.int32),
                                                np.array([0, 40], np.int32), 4, 40), "max_seqlen_q"),
    (lambda q, k, v: fa3.flash_attn_varlen_func(q[0], k[0], v[0], np.array([0, 5]),
                                                np.array([0, 40], np.int32), 5, 40),
     "cu_seqlens_q: FA3 requires dtype int32"),
    (lambda q, k, v: fa3.flash_attn_with_kvcache(q, k, v, cache_seqlens=np.array([3, 4], np.int64)),
     "cache_seqlens: FA3 requires dtype int32"),
    (lambda q, k, v: fa3.flash_attn_with_kvcache(q, k, v, cache_seqlens=np.array([41, 0], np.int32)),
     "cache_seqlens"),
    (lambda q, k, v: fa3.flash_attn_with_kvcache(q, k, v, k=k[:, :2], v=v[:, :2]), "cache_seqlens"),
    (lambda q, k, v: fa3.flash_attn_with_kvcache(q, k, v, cache_batch_idx=np.array([0, 2], np.int32)),
     "cache_batch_idx"),
    (lambda q, k, v: fa3.flash_attn_with_kvcache(q, k, v, page_table=np.zeros((2, 1), np.int64)),
     "page_table: FA3 requires dtype int32"),
    (lambda q, k, v: fa3.flash_attn_func(q, k[:, :, :1].repeat(3, axis=2), v[:, :, :1].repeat(3, axis=2)),
     "heads_kv"),
])
def test_bad_arguments_are_refused_naming_them(call, match):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=match):
        call(q, k, v)


# ---- hypothesis-drawn API calls (python -m simulator measure fa3_api_replay on the H200) ---------
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


@pytest.mark.parametrize("j", ci_sample.drawn_api_params(DRAWN["sample"]))  # all: --full-replay
def test_sampled_drawn_calls_replay(j):
    from simulator.replay.fa3_api import emulate

    rec = DRAWN["sample"][j]
    want = {k: v for k, v in rec.items() if k != "case"}
    assert emulate(rec["case"]) == want, rec["case"]


# the second drawn run: a quarter of the calls with one of FA3's V head dims different from
# Q/K's, and direct flash_attn_combine calls (stopped by its time limit after 3,748 calls)
DRAWN_DV = fa3_api.read_json(fa3_api.DATA / "fa3_api_replay_dv_report.json", fa3_api.REGENERATE)


def test_drawn_calls_with_head_dim_v_and_combine_agreed_on_the_device():
    assert DRAWN_DV["provenance"]["gpu"] == "NVIDIA H200"
    assert DRAWN_DV["provenance"]["extension_sha256"] == fa3_library.EXTENSION_SHA256
    assert DRAWN_DV["cases"] >= 3000 and DRAWN_DV["disagreements"] == 0
    assert DRAWN_DV["stopped"] in ("", "time limit")
    drawn = DRAWN_DV["drawn"]
    for label in ("api=combine", "head_dim_v=112", "head_dim_v=128", "head_dim_v=256",
                  "head_dim_v=512", "head_dim_v=32", "head_dim_v=96", "num_splits=0"):
        assert drawn[label] >= 20, label


@pytest.mark.parametrize("j", ci_sample.drawn_api_params(DRAWN_DV["sample"]))  # all: --full-replay
def test_sampled_drawn_head_dim_v_and_combine_calls_replay(j):
    from simulator.replay.fa3_api import emulate

    rec = DRAWN_DV["sample"][j]
    want = {k: v for k, v in rec.items() if k != "case"}
    assert emulate(rec["case"]) == want, rec["case"]


# ---- argument checks and FA3's host rules (small shapes, no GPU) -----------
def _u16(x):
    return np.asarray(x).view(np.uint16)


def _packed(q, k, v):
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    cu_q = np.arange(b + 1, dtype=np.int32) * sq
    cu_k = np.arange(b + 1, dtype=np.int32) * sk
    return q.reshape(b * sq, h, d), k.reshape(b * sk, hkv, d), v.reshape(b * sk, hkv, d), cu_q, cu_k


def test_api_a_dtype_fa3_refuses_is_a_value_error():
    q, k, v = (x.astype(np.float32) for x in _qkv())
    with pytest.raises(ValueError, match="q: expected dtype bfloat16"):
        fa3.flash_attn_func(q, k, v)


@pytest.mark.parametrize("softcap", ["x", None, True])
def test_api_softcap_must_be_a_number(softcap):
    q, k, v = _qkv()
    qp, kp, vp, cu_q, cu_k = _packed(q, k, v)
    with pytest.raises(ValueError, match="softcap: expected a float"):
        fa3.flash_attn_func(q, k, v, softcap=softcap)
    with pytest.raises(ValueError, match="softcap: expected a float"):
        fa3.flash_attn_varlen_func(qp, kp, vp, cu_q, cu_k, 5, 40, softcap=softcap)
    with pytest.raises(ValueError, match="softcap: expected a float"):
        fa3.flash_attn_with_kvcache(q, k, v, softcap=softcap)


def test_api_sm_margin_and_num_sms_are_checked():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="sm_margin: expected an int"):
        fa3.flash_attn_func(q, k, v, sm_margin="1")
    with pytest.raises(ValueError, match="num_sms: expected an int"):
        fa3.flash_attn_with_kvcache(q, k, v, num_sms=1.5)
    with pytest.raises(ValueError, match="sm_margin: num_sms - sm_margin must be >= 1"):
        fa3.flash_attn_with_kvcache(q, k, v, num_splits=0, sm_margin=200)


def test_api_flags_must_be_bools():
    q, k, v = _qkv()
    qp, kp, vp, cu_q, _ = _packed(q, k, v)
    empty_k = np.zeros(3, np.int32)  # no key anywhere: no kernel runs, the flags still checked
    with pytest.raises(ValueError, match="return_attn_probs: expected True or False"):
        fa3.flash_attn_func(q, k, v, return_attn_probs="no")
    with pytest.raises(ValueError, match="deterministic: expected True or False"):
        fa3.flash_attn_func(q, k, v, deterministic="x")
    with pytest.raises(ValueError, match="return_softmax_lse: expected True or False"):
        fa3.flash_attn_with_kvcache(q, k, v, return_softmax_lse=1)
    with pytest.raises(ValueError, match="causal: expected True or False"):
        fa3.flash_attn_varlen_func(qp, kp, vp, cu_q, empty_k, 5, 1, causal="yes")
    for bad in ("x", 1):
        with pytest.raises(ValueError, match="pack_gqa: expected None, True or False"):
            fa3.flash_attn_func(q, k, v, pack_gqa=bad)


def test_api_pack_gqa_false_in_a_split_varlen_gqa_launch_is_refused():
    """FA3's prepare kernel reads the caller's pack_gqa (split counts, m blocks) while the Split
    kernel always packs: not emulated. Non-varlen splits and pack_gqa=True keep the bits."""
    q, k, v = _qkv(b=1, sq=3, sk=200, h=4, hkv=1, d=64)
    qp, kp, vp, cu_q, cu_k = _packed(q, k, v)
    with pytest.raises(ValueError, match="pack_gqa: False with splits"):
        fa3.flash_attn_varlen_func(qp, kp, vp, cu_q, cu_k, 3, 200, num_splits=3, pack_gqa=False)
    with pytest.raises(ValueError, match="pack_gqa: False with splits"):
        fa3.flash_attn_with_kvcache(q, k, v, cache_seqlens=200, num_splits=3, pack_gqa=False)
    want = fa3.flash_attn_varlen_func(qp, kp, vp, cu_q, cu_k, 3, 200, num_splits=3)
    got = fa3.flash_attn_varlen_func(qp, kp, vp, cu_q, cu_k, 3, 200, num_splits=3, pack_gqa=True)
    assert np.array_equal(_u16(got), _u16(want))
    split = fa3.flash_attn_func(q, k, v, num_splits=3)
    assert np.array_equal(_u16(fa3.flash_attn_func(q, k, v, num_splits=3, pack_gqa=False)), _u16(split))


def test_api_num_splits_above_256_is_refused_everywhere():
    q, k, v = _qkv()
    qp, kp, vp, cu_q, cu_k = _packed(q, k, v)
    with pytest.raises(ValueError, match="num_splits: expected at most 256"):
        fa3.flash_attn_varlen_func(qp, kp, vp, cu_q, cu_k, 5, 40, num_splits=300)
    with pytest.raises(ValueError, match="num_splits: expected at most 256"):
        fa3.flash_attn_with_kvcache(q, k, v, num_splits=300)


def test_api_no_key_in_the_launch_gives_lse_plus_inf():
    """mha_fwd: total_k (+ new keys) == 0 skips the kernel: out.zero_(), softmax_lse.fill_(inf).
    Empty sequences in a launch that has keys keep the kernel's -inf."""
    q, k, v = _qkv()
    out, lse = fa3.flash_attn_func(q, k[:, :0], v[:, :0], return_attn_probs=True)
    assert not np.any(out.astype(np.float32)) and np.all(lse == np.inf)
    qp, kp, vp, cu_q, _ = _packed(q, k, v)
    none = np.zeros(3, np.int32)
    out, lse = fa3.flash_attn_varlen_func(qp, kp[:0], vp[:0], cu_q, none, 5, 1, return_attn_probs=True)
    assert not np.any(out.astype(np.float32)) and np.all(lse == np.inf)
    _, lse = fa3.flash_attn_varlen_func(qp, kp, vp, cu_q, none, 5, 1, return_attn_probs=True)
    assert np.all(lse == -np.inf)
    out, lse, *_ = fa3.flash_attn_with_kvcache(q, k[:, :0], v[:, :0], return_softmax_lse=True)
    assert not np.any(out.astype(np.float32)) and np.all(lse == np.inf)


def test_api_varlen_and_kvcache_descales_are_checked_as_flash_attn_func_does():
    q, k, v = (x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn) for x in _qkv())
    qp, kp, vp, cu_q, cu_k = _packed(q, k, v)
    varlen = lambda **kw: fa3.flash_attn_varlen_func(qp, kp, vp, cu_q, cu_k, 5, 40, **kw)  # noqa: E731
    with pytest.raises(ValueError, match="q_descale: expected float32"):
        varlen(q_descale=np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"k_descale: expected a scalar or shape \[2, 2\]"):
        varlen(k_descale=np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="v_descale: expected float32"):
        fa3.flash_attn_with_kvcache(q, k, v, v_descale=np.ones((2, 2)))
    row = np.array([[0.5, 2.0]], np.float32)
    assert np.array_equal(_u16(varlen(q_descale=row)), _u16(varlen(q_descale=np.repeat(row, 2, 0))))
    with pytest.raises(ValueError, match="q_descale: descales apply to e4m3 inputs only"):
        b16 = _qkv()
        fa3.flash_attn_varlen_func(*_packed(*b16)[:3], cu_q, np.zeros(3, np.int32), 5, 1,
                                   q_descale=np.ones((2, 2), np.float32))


def test_api_kvcache_new_values_of_another_dtype_are_refused_before_any_write():
    q, k, v = _qkv()
    kc, vc = np.zeros((2, 64, 2, 64), BF16), np.zeros((2, 64, 2, 64), BF16)
    with pytest.raises(ValueError, match="k, v: expected"):
        fa3.flash_attn_with_kvcache(q, kc, vc, k=k[:, :2], v=v[:, :2].astype(np.float16), cache_seqlens=3)
    assert not np.any(kc.astype(np.float32)) and not np.any(vc.astype(np.float32))


def test_api_kvcache_read_only_cache_is_refused_before_any_write():
    q, k, v = _qkv()
    kc, vc = np.zeros((2, 64, 2, 64), BF16), np.zeros((2, 64, 2, 64), BF16)
    vc.flags.writeable = False
    with pytest.raises(ValueError, match="v_cache: read-only"):
        fa3.flash_attn_with_kvcache(q, kc, vc, k=k[:, :2], v=v[:, :2], cache_seqlens=0)
    assert not np.any(kc.astype(np.float32))


@pytest.mark.parametrize("seqlens", [2 ** 70, -1, 65])
def test_api_kvcache_int_cache_seqlens_out_of_range(seqlens):
    q, k, v = _qkv(sk=64)
    with pytest.raises(ValueError, match="cache_seqlens: expected 0..64"):
        fa3.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens)


def test_api_kvcache_shape_errors_name_the_argument():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="k_cache: heads_kv = 2 must divide heads = 3"):
        fa3.flash_attn_with_kvcache(q[:, :, :3], k, v, num_splits=0)
    with pytest.raises(ValueError, match="q: batch, seqlen_q and heads must be >= 1"):
        fa3.flash_attn_with_kvcache(q[:, :0], k, v, num_splits=0)


def test_api_kvcache_without_cache_seqlens_is_not_a_varlen_launch(monkeypatch):
    """No cache_seqlens / cache_leftpad: FA3's launch has no seqused_k, so no prepare kernel:
    every batch runs the static count of get_num_splits(varlen=False) (5 here); with
    cache_seqlens the prepare kernel's per-batch counts (3 here) run."""
    from simulator.fa3 import launch

    seen = []

    def record(q, k, v, kw, splits, partials=None):
        seen.append(splits)
        return np.zeros(q.shape, BF16), np.zeros((1, q.shape[2], q.shape[1]), np.float32)

    monkeypatch.setattr(launch, "run_forward", record)
    q, k, v = _qkv(b=3, sq=1, sk=1024, h=8, hkv=8, d=64)
    fa3.flash_attn_with_kvcache(q, k, v, num_splits=0)
    assert seen == [5, 5, 5]
    seen.clear()
    fa3.flash_attn_with_kvcache(q, k, v, cache_seqlens=1024, num_splits=0)
    assert seen == [3, 3, 3]


def test_flash_attn_combine_takes_mha_combines_layouts():
    """out_partial [splits, batch, seqlen, heads, d], lse_partial [splits, batch, seqlen, heads]
    (hopper/flash_api.cpp, mha_combine); float32 out by default. Merging the Split kernel's
    partials gives flash_attn_func's split result bit for bit (not checked on the device: the
    recorded split calls go through FA3's own combine)."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 16, 4, 64)).astype(BF16)
    k = rng.standard_normal((2, 700, 2, 64)).astype(BF16)
    part = fa3.interface.flash.forward(q, k, k, num_splits=3)
    o_c, l_c = np.ascontiguousarray(part.out), np.ascontiguousarray(np.swapaxes(part.lse, -1, -2))
    out, lse = fa3.flash_attn_combine(o_c, l_c, out_dtype=BF16)
    want, want_lse = fa3.flash_attn_func(q, k, k, num_splits=3, return_attn_probs=True)
    assert np.array_equal(out.view(np.uint16), want.view(np.uint16))
    assert np.array_equal(np.swapaxes(lse, -1, -2).view(np.uint32), want_lse.view(np.uint32))
    assert fa3.flash_attn_combine(o_c, l_c)[0].dtype == np.float32
    with pytest.raises(ValueError, match="out_partial"):
        fa3.flash_attn_combine(o_c.astype(np.float64), l_c)


def test_api_trace_records_steps_without_changing_bits():
    """trace= (keyword-only, not FA3's) on the three forward functions: the traced CTA's steps,
    and the same out / LSE bits as without it; refused with splits."""
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal(s).astype(BF16) for s in ((2, 30, 2, 64), (2, 50, 1, 64), (2, 50, 1, 64)))
    cu_q, cu_k = np.array([0, 30, 60], np.int32), np.array([0, 50, 100], np.int32)
    cs = np.array([40, 20], np.int32)
    calls = [
        lambda **t: fa3.flash_attn_func(q, k, v, causal=True, return_attn_probs=True, **t),
        lambda **t: fa3.flash_attn_varlen_func(q.reshape(60, 2, 64), k.reshape(100, 1, 64),
                                               v.reshape(100, 1, 64), cu_q, cu_k, 30, 50,
                                               causal=True, return_attn_probs=True, **t),
        lambda **t: fa3.flash_attn_with_kvcache(q[:, :1], k, v, cache_seqlens=cs, num_splits=1,
                                                return_softmax_lse=True, **t),
    ]
    for call in calls:
        out, lse = call()[:2]
        res = call(trace=[(1, 1, 0)])
        t_out, t_lse, trace = res[0], res[1], res[-1]
        assert t_out.view(np.uint16).tobytes() == out.view(np.uint16).tobytes()
        assert t_lse.view(np.uint32).tobytes() == lse.view(np.uint32).tobytes()
        assert trace.ctas() == [(1, 1, 0)] and {e.step for e in trace} >= {"qk_gemm", "epilogue"}
    with pytest.raises(ValueError, match="trace: recorded for unsplit launches only"):
        fa3.flash_attn_func(q, k, v, num_splits=3, trace=[(0, 0, 0)])
    with pytest.raises(ValueError, match="trace: CTA"):
        fa3.flash_attn_func(q, k, v, trace=[(2, 0, 0)])


def test_api_trace_ctas_are_checked_against_the_grid_of_their_sequence():
    q = np.ones((8, 2, 64), BF16)
    cu = np.array([0, 4, 8], np.int32)
    empty = np.array([0, 8, 8], np.int32)
    with pytest.raises(ValueError, match=r"trace: CTA \(1, 0, 1\) is outside the grid.*sequence 1 "
                                         r"\(4 query rows, kBlockM \d+\) has m_blocks 0..0"):
        fa3.flash_attn_varlen_func(q, q, q, cu, cu, 4, 4, trace=[(1, 0, 1)])
    with pytest.raises(ValueError, match="sequence 1 .0 query rows.*has no m_block"):
        fa3.flash_attn_varlen_func(q, q, q, empty, empty, 8, 8, trace=[(1, 0, 0)])
    with pytest.raises(ValueError, match="heads 0..1"):
        fa3.flash_attn_func(q[None], q[None], q[None], trace=[(0, -5, 0)])


def test_api_causal_sets_the_right_window_to_zero_as_mha_fwd():
    """hopper/flash_api.cpp: ``if (is_causal) { window_size_right = 0; }``."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 40, 1, 64)).astype(BF16)
    a = fa3.flash_attn_func(q, q, q, causal=True, window_size=(8, 3))
    b = fa3.flash_attn_func(q, q, q, window_size=(8, 0))
    assert a.view(np.uint16).tobytes() == b.view(np.uint16).tobytes()


def test_api_combine_out_dtype_names_and_torch_dtypes():
    o = np.random.default_rng(0).standard_normal((2, 1, 3, 1, 8)).astype(np.float32)
    lse = np.zeros((2, 1, 3, 1), np.float32)
    ref = fa3.flash_attn_combine(o, lse, out_dtype=BF16)[0]
    assert fa3.flash_attn_combine(o, lse, out_dtype="bfloat16")[0].view(np.uint16).tobytes() == \
        ref.view(np.uint16).tobytes()
    for bad in ("nonsense", 5, np.int32):
        with pytest.raises(ValueError, match="out_dtype: expected None, float32, bfloat16 or float16"):
            fa3.flash_attn_combine(o, lse, out_dtype=bad)


def test_append_with_a_head_dim_pair_fa3_refuses_names_the_pair():
    z = np.zeros
    with pytest.raises(ValueError, match="only for Q/K head dim in"):
        fa3.flash_attn_with_kvcache(z((1, 2, 2, 128), BF16), z((1, 16, 2, 128), BF16),
                                    z((1, 16, 2, 64), BF16),
                                    k=z((1, 1, 2, 128), BF16), v=z((1, 1, 2, 64), BF16),
                                    cache_seqlens=np.array([3], np.int32))


def test_torch_cache_views_are_appended_in_place_and_grad_tensors_accepted():
    torch = pytest.importorskip("torch", reason="torch is optional; the NumPy path is tested above")
    big_k = torch.zeros(2, 80, 1, 64, dtype=torch.bfloat16)
    big_v = torch.zeros_like(big_k)
    kc, vc = big_k[:, :64], big_v[:, :64]                     # views: stride(-1) == 1, as FA3 takes
    kn = torch.randn(2, 3, 1, 64).to(torch.bfloat16)
    fa3.flash_attn_with_kvcache(torch.randn(2, 3, 2, 64).to(torch.bfloat16), kc, vc, k=kn, v=kn.clone(),
                                cache_seqlens=torch.tensor([5, 7], dtype=torch.int32))
    assert bool((kc[0, 5:8] == kn[0]).all()) and bool((vc[1, 7:10] == kn[1]).all())
    qg = torch.randn(1, 4, 2, 64).to(torch.bfloat16).requires_grad_(True)
    fa3.flash_attn_func(qg, qg.detach(), qg.detach())
    o = torch.zeros(2, 1, 3, 1, 8)
    out, _ = fa3.flash_attn_combine(o, torch.zeros(2, 1, 3, 1), out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16


def _bits_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x.view(np.uint8), y.view(np.uint8))


@pytest.mark.parametrize("make", ["thread", "process"])
def test_api_executor_progress_and_budget_give_the_serial_bits(make):
    """executor=, progress=, memory_budget= reach every flash.forward call of the three entry
    points (unsplit, split with the combine, varlen, KV cache with append): same bits as the
    serial call, and progress counts the visits of each forward call."""
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    q, k, v = _qkv(b=2, sq=70, sk=300, h=4, hkv=2, seed=5)
    qp, kp, vp, cu_q, cu_k = _packed(q, k, v)
    new = np.random.default_rng(6).standard_normal((2, 3, 2, 64)).astype(BF16)
    seqlens = np.array([200, 150], np.int32)

    def calls(**how):
        kc, vc = k.copy(), v.copy()
        return [fa3.flash_attn_func(q, k, v, causal=True, return_attn_probs=True, **how),
                fa3.flash_attn_func(q, k, v, num_splits=3, return_attn_probs=True, **how),
                fa3.flash_attn_varlen_func(qp, kp, vp, cu_q, cu_k, 70, 300, causal=True,
                                           return_attn_probs=True, **how),
                fa3.flash_attn_with_kvcache(q[:, :1], kc, vc, k=new, v=new, cache_seqlens=seqlens,
                                            num_splits=0, return_softmax_lse=True, **how) + (kc, vc)]

    serial = calls()
    seen = []
    pool = ThreadPoolExecutor(2) if make == "thread" else ProcessPoolExecutor(2)
    with pool:
        parallel = calls(executor=pool, memory_budget=64 << 20,
                         progress=lambda done, total: seen.append((done, total)))
    for a, b in zip(serial, parallel, strict=True):
        _bits_equal(a, b)
    assert seen and all(0 <= done <= total for done, total in seen)
    assert sum(1 for done, total in seen if done == total) >= 6  # 1 + 1 + 2 + 2 forward calls


def test_api_parallel_arguments_are_checked_before_the_cache_is_written():
    from concurrent.futures import ThreadPoolExecutor

    q, k, v = _qkv()
    new = np.ones((2, 1, 2, 64), BF16)
    kc, vc = k.copy(), v.copy()
    cache_seqlens = np.array([3, 3], np.int32)
    with pytest.raises(TypeError, match="executor: expected a concurrent.futures.Executor"):
        fa3.flash_attn_with_kvcache(q, kc, vc, k=new, v=new, cache_seqlens=cache_seqlens,
                                    executor=object())
    with pytest.raises(TypeError, match="progress: expected None, a bool or a callable"):
        fa3.flash_attn_func(q, k, v, progress="yes")
    with pytest.raises(ValueError, match="memory_budget: expected a positive int"):
        fa3.flash_attn_varlen_func(*_packed(q, k, v), 5, 40, memory_budget=0)
    with ThreadPoolExecutor(1) as ex, pytest.raises(ValueError, match="trace: not recorded with an executor"):
        fa3.flash_attn_with_kvcache(q, kc, vc, k=new, v=new, cache_seqlens=cache_seqlens,
                                    num_splits=1, executor=ex, trace=[(0, 0, 0)])
    _bits_equal((kc, vc), (k, v))


def test_api_kvcache_bad_trace_leaves_the_cache_unwritten():
    """The CTAs to trace are checked before AppendKV writes the new keys into the cache."""
    q, k, v = _qkv()
    new = np.ones((2, 1, 2, 64), BF16)
    kc, vc = k.copy(), v.copy()
    with pytest.raises(ValueError, match="trace: CTA"):
        fa3.flash_attn_with_kvcache(q, kc, vc, k=new, v=new, cache_seqlens=np.array([3, 3], np.int32),
                                    num_splits=1, trace=[(5, 0, 0)])
    _bits_equal((kc, vc), (k, v))


def test_one_bool_check_for_the_api_and_the_split_heuristic():
    """flash_attn_* flags and the host heuristics' flags share one check and one message."""
    from simulator.fa3 import combine

    with pytest.raises(ValueError, match=r"^is_causal_or_local: expected True or False, got 1$"):
        combine.num_splits_heuristic(10, 132, 8, 2, 1 << 20, 1, 128)
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"^causal: expected True or False, got 'yes'$"):
        fa3.flash_attn_with_kvcache(q, k, v, causal="yes")


@pytest.mark.parametrize("num_splits", [1, 0, 3])
def test_api_kvcache_too_small_a_memory_budget_leaves_the_cache_unwritten(num_splits):
    """A memory_budget that not even one CTA fits is refused before AppendKV writes the cache
    (unsplit, FA3's heuristic and the Split kernel alike); one that fits runs as before."""
    q, k, v = _qkv()
    new = np.ones((2, 1, 2, 64), BF16)
    kc, vc = k.copy(), v.copy()
    seqlens = np.array([3, 30], np.int32)
    with pytest.raises(MemoryError, match="memory_budget: this forward needs about"):
        fa3.flash_attn_with_kvcache(q, kc, vc, k=new, v=new, cache_seqlens=seqlens,
                                    num_splits=num_splits, memory_budget=1 << 20)
    _bits_equal((kc, vc), (k, v))
    serial = fa3.flash_attn_with_kvcache(q, kc, vc, k=new, v=new, cache_seqlens=seqlens,
                                         num_splits=num_splits, return_softmax_lse=True)
    kc2, vc2 = k.copy(), v.copy()
    tight = fa3.flash_attn_with_kvcache(q, kc2, vc2, k=new, v=new, cache_seqlens=seqlens,
                                        num_splits=num_splits, return_softmax_lse=True,
                                        memory_budget=16 << 20)
    _bits_equal(serial + (kc, vc), tight + (kc2, vc2))


def test_verify_row_of_drawn_calls_counts_values_and_catches_a_disagreement(monkeypatch):
    """The row counts the values its digests cover (O, LSE, caches), like every other verify
    row, and a call whose digests differ counts all of its values as mismatches."""
    sample = DRAWN["sample"][:2]
    monkeypatch.setattr(fa3_api, "DRAWN_REPORTS", ("fa3_api_replay_report.json",))
    monkeypatch.setattr(fa3_api, "read_json", lambda *a: {"sample": sample})
    (good,) = fa3_api.check_drawn()
    sizes = [fa3_api._emulate_counted(r["case"])[1] for r in sample]
    assert good["cases"] == sum(sizes) > 2 and good["mismatches"] == 0
    wrong = [dict(sample[0], out="0" * 32), sample[1]]
    monkeypatch.setattr(fa3_api, "read_json", lambda *a: {"sample": wrong})
    (bad,) = fa3_api.check_drawn()
    assert bad["mismatches"] == sizes[0] and bad["detail"]


def test_kvcache_returns_fa3s_four_values_and_the_split_partials():
    """hopper/flash_attn_interface.py: ``return (out, softmax_lse, *rest) if return_softmax_lse``
    with rest = out_accum, softmax_lse_accum (empty without splits); combining the returned
    partials (flash_attn_combine's [splits, batch, seqlen, heads, d] layout) gives out."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 4, 64)).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((2, 700, 2, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    out, lse, o_acc, l_acc = fa3.flash_attn_with_kvcache(q, k, v, num_splits=3,
                                                         return_softmax_lse=True)
    assert o_acc.shape == (3, 2, 4, 3, 64) and l_acc.shape == (3, 2, 4, 3)
    assert o_acc.dtype == np.float32 and l_acc.dtype == np.float32
    merged = fa3.flash_attn_combine(o_acc.transpose(0, 1, 3, 2, 4), l_acc.transpose(0, 1, 3, 2),
                                    out_dtype=out.dtype)
    merged = merged[0] if isinstance(merged, tuple) else merged
    assert np.array_equal(merged.view(np.uint16), out.view(np.uint16))
    unsplit = fa3.flash_attn_with_kvcache(q, k, v, num_splits=1, return_softmax_lse=True)
    assert len(unsplit) == 4 and unsplit[2].shape == (0,) and unsplit[3].shape == (0,)
