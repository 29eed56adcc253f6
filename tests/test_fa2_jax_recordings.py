"""flash-attn 2.x's kernels as PyPI flash-attn-jax 0.6.2 ships them, recorded on an H100
(``simulator/data/device/fa2_jax/``), and FA3 as dew-flash-attn 0.3.6 builds it
(``simulator/data/device/dew_fa3/``): the recordings are whole and name their GPU, a sample of
calls replays bit for bit through :mod:`simulator.fa2` / :mod:`simulator.fa3`, and each rule
the recordings decided fails them when flipped."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator import fa2
from simulator.flash import mainloop_fwd_fa2 as mf
from simulator.io import read_manifest
from simulator.replay import dew_fa3, dew_fa3_cases, fa2_jax, fa2_jax_cases
from simulator.replay.common import digest

if not fa2_jax.recorded() or not dew_fa3.recorded():
    pytest.skip("no flash-attn-jax / dew-flash-attn recordings in the package: "
                + fa2_jax.REGENERATE, allow_module_level=True)


@pytest.fixture(scope="module")
def fa2_data():
    return fa2_jax.load()


@pytest.fixture(scope="module")
def dew_data():
    from simulator.io import read_json, read_npz

    return (read_json(dew_fa3.REPORT, dew_fa3.REGENERATE),
            read_npz(dew_fa3.SAMPLE, dew_fa3.REGENERATE))


def _rec(report, part, index):
    return next(r for r in report[part] if r["index"] == index)


def test_recordings_are_listed_and_name_their_gpu(fa2_data, dew_data):
    for folder, names in ((fa2_jax.FOLDER, ("fa2_jax_report.json", "fa2_jax_sample.npz")),
                          (dew_fa3.FOLDER, ("dew_fa3_report.json", "dew_fa3_sample.npz"))):
        listed = read_manifest(folder)
        assert listed and all(n in listed for n in names), folder
    for report in (fa2_data[0], dew_data[0]):
        prov = report["provenance"]
        assert prov["gpu"] == "NVIDIA H100 80GB HBM3" and prov["sm_count"] == 132
        assert prov["compute_capability"] == "9.0" and prov["driver_version"]
        assert fa2_jax.gpu_of(report) == "h100"


def test_case_lists_are_the_frozen_generators(fa2_data, dew_data):
    rep = fa2_data[0]
    assert [r["case"] for r in rep["forward"]] == fa2_jax_cases.forward_cases()
    assert [r["case"] for r in rep["varlen"]] == fa2_jax_cases.varlen_cases()
    assert [r["case"] for r in rep["backward"]] == fa2_jax_cases.backward_cases()
    assert len(rep["forward"]) + len(rep["varlen"]) + len(rep["backward"]) >= 300
    assert [r["case"] for r in dew_data[0]["forward"]] == dew_fa3_cases.forward_cases()
    assert [r["case"] for r in dew_data[0]["backward"]] == dew_fa3_cases.backward_cases()
    assert len(dew_data[0]["backward"]) >= 300


def test_sample_bits_hash_to_the_report(fa2_data):
    rep, sample = fa2_data
    checked = 0
    for r in rep["forward"]:
        key = f"c{r['index']}_out"
        if key in sample:
            assert digest(sample[key]).hex() == r["out"]
            assert digest(sample[f"c{r['index']}_lse"].view(np.uint32)).hex() == r["lse"]
            checked += 1
    assert checked >= 30


@pytest.mark.parametrize("index", [0, 64, 112, 136, 200, 296])
def test_forward_sample_bit_exact(fa2_data, index):
    """Unsplit, split-KV (the fast-math combine) and drawn calls."""
    rep, sample = fa2_data
    res = fa2_jax.check_forward(_rec(rep, "forward", index), sample, "h100")
    assert res["values"] > 0 and res["differ"] == 0


def test_forward_and_backward_replay_quick_rows(fa2_data):
    rep, sample = fa2_data
    for i in (0, 9, 17):
        assert fa2_jax.check_varlen(_rec(rep, "varlen", i), sample, "h100")["differ"] == 0
    for i in (0, 47, 48):  # plain, GQA 4/2 (glue sum), MQA 4/1
        res = fa2_jax.check_backward(_rec(rep, "backward", i), sample, "h100")
        assert res["differ"] == 0 and res["outside"] == 0 and res["values"] > 0


def _differs_under(monkeypatch, fa2_data, index, **build_changes) -> bool:
    build = dataclasses.replace(mf.FLASH_ATTN, **build_changes)
    monkeypatch.setattr("simulator.fa2.interface.FLASH_ATTN", build)
    rep, sample = fa2_data
    return fa2_jax.check_forward(_rec(rep, "forward", index), sample, "h100")["differ"] > 0


def test_unfused_exp2_argument_misses_the_recording(monkeypatch, fa2_data):
    # PyTorch's UNFUSE_FMA form (FMUL, then FSUB) instead of flash-attn's one FFMA
    assert any(_differs_under(monkeypatch, fa2_data, i, unfuse_fma=True) for i in (0, 2, 40))


def test_ieee_reciprocal_misses_the_recording(monkeypatch, fa2_data):
    # 1.f / sum correctly rounded (PyTorch's build) instead of rcp.approx.ftz
    assert any(_differs_under(monkeypatch, fa2_data, i, rcp_approx=False)
               for i in range(0, 152, 8))


def test_combine_without_the_contracted_log_misses_the_recording(monkeypatch, fa2_data):
    from simulator.fa2 import combine as cb
    from simulator.numerics import fadd, fmul
    from simulator.numerics.mufu import LN2_F32, lg2

    def unfused(x, y, mufu, fast_math):
        return fadd(fmul(lg2(x, model=mufu, ftz=True), LN2_F32, ftz=True), y, ftz=True)

    monkeypatch.setattr(cb, "_log_add", unfused)
    rep, sample = fa2_data
    splits = [r for r in rep["forward"] if f"c{r['index']}_out" in sample and
              fa2.plan_forward(r["case"]["batch"], r["case"]["seqlen_q"], r["case"]["seqlen_k"],
                               r["case"]["heads"], r["case"]["heads_kv"], r["case"]["head_dim"],
                               causal=r["case"]["causal"], window=r["case"]["window"],
                               gpu="h100").num_splits > 1 and "library_defect" not in r]
    assert splits
    assert any(fa2_jax.check_forward(r, sample, "h100")["differ"] for r in splits[:6])


def test_one_sided_window_rule_decides_a_recorded_call(monkeypatch, fa2_data):
    # case 167: window (38, 62) with seqlen_q 60 > seqlen_k 48: the right side is >= seqlen_k,
    # so -1, then seqlen_k by set_params_fprop, which masks keys of the first rows
    rep, _ = fa2_data
    rec = _rec(rep, "forward", 167)
    assert rec["case"]["window"] == [38, 62] and rec["case"]["seqlen_q"] > rec["case"]["seqlen_k"]
    real = fa2.plan_forward

    def without_rule(*a, **kw):
        launch = real(*a, **kw)
        w = tuple(-1 if x == a[2] else x for x in launch.window)  # undo seqlen_k on open sides
        return dataclasses.replace(launch, window=w)

    monkeypatch.setattr("simulator.fa2.interface.plan_forward", without_rule)
    sample = {}  # compare by digest
    assert fa2_jax.check_forward(rec, sample, "h100")["differ"] > 0


def test_library_defect_calls_are_the_split_calls_at_160_and_224(fa2_data):
    rep, _ = fa2_data
    defects = [r for r in rep["forward"] if "library_defect" in r]
    assert len(defects) == 8
    assert {r["case"]["head_dim"] for r in defects} == {160, 224}


def test_dew_forward_head_dim_96_runs_the_128_kernel(dew_data):
    report, sample = dew_data
    rec = _rec(report, "forward", 20)
    assert rec["case"]["head_dim"] == 96
    assert dew_fa3.check_forward(rec, sample, "h100")["differ"] == 0
    # FA3 upstream's own head-dim-96 kernel (192 x 144 tiles) gives other bits
    original = dew_fa3.BUILD_HEAD_DIMS
    try:
        dew_fa3.BUILD_HEAD_DIMS = (64, 96, 128, 192, 256)
        assert dew_fa3.check_forward(rec, sample, "h100")["differ"] > 0
    finally:
        dew_fa3.BUILD_HEAD_DIMS = original


@pytest.mark.parametrize("index", [0, 30, 60, 120, 200])
def test_dew_backward_sample(dew_data, index):
    report, sample = dew_data
    res = dew_fa3.check_backward(_rec(report, "backward", index), sample, "h100")
    assert res["differ"] == 0 and res["outside"] == 0 and res["unchecked"] == 0


@pytest.mark.parametrize("kwargs, name", [
    ({"softcap": 30.0}, "softcap"), ({"alibi_slopes": np.zeros(2, np.float32)}, "alibi_slopes"),
    ({"dropout_p": 0.1}, "philox"), ({"window_size": (1,)}, "window_size"),
    ({"causal": 1}, "causal"), ({"dropout_p": 1.5}, "dropout_p")])
def test_fa2_api_refuses_naming_the_argument(kwargs, name):
    q = np.zeros((1, 4, 2, 64), np.float16)
    with pytest.raises(ValueError, match=name):
        fa2.flash_attn_func(q, q, q, **kwargs)


def test_fa2_api_refuses_bad_shapes_and_offsets():
    q = np.zeros((1, 4, 2, 60), np.float16)
    with pytest.raises(ValueError, match="head dimension"):
        fa2.flash_attn_func(q, q, q)
    with pytest.raises(ValueError, match="q: expected a 4-d"):
        fa2.flash_attn_func(q[0], q, q)
    p = np.zeros((5, 2, 64), np.float16)
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        fa2.flash_attn_varlen_func(p, p, p, np.array([0, 4], np.int64), np.array([0, 5], np.int32), 5, 5)
    with pytest.raises(ValueError, match="max_seqlen_k"):
        fa2.flash_attn_varlen_func(p, p, p, np.array([0, 5], np.int32), np.array([0, 5], np.int32), 5, 3)


def test_packed_entry_points_are_flash_attn_func(fa2_data):
    """flash_attn_qkvpacked_func / kvpacked_func on a recorded call's inputs, stacked: the
    recorded bits."""
    rep, sample = fa2_data
    rec = _rec(rep, "forward", 0)
    (q, k, v), _ = fa2_jax._inputs(rec["case"])
    out = fa2.flash_attn_kvpacked_func(q, np.stack([k, v], axis=2), gpu="h100")
    assert np.array_equal(out.view(np.uint16), sample["c0_out"])
    rec48 = _rec(rep, "forward", 48)  # seqlen_q == seqlen_k, one head
    qkv = np.stack(fa2_jax._inputs(rec48["case"])[0], axis=2)
    both = fa2.flash_attn_qkvpacked_func(qkv, causal=rec48["case"]["causal"], gpu="h100")
    assert np.array_equal(both.view(np.uint16), sample["c48_out"])
    with pytest.raises(ValueError, match="qkv: expected a 5-d"):
        fa2.flash_attn_qkvpacked_func(q)
