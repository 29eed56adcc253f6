"""Regression cases from public reports of attention numerics (simulator/regressions.py):
the emulator reproduces the H200's recorded bits, and each case's explanation holds."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from simulator import flash
from simulator.device.runtime import source_sha256
from simulator.io import read_json, read_npz
from simulator.regressions import CASES
from simulator.replay import hypothesis as rr
from simulator.replay.common import DATA_DIR

REGEN = "python -m simulator measure regressions --out DIR` on a GPU; copy DIR's files"
RECORDED = read_npz(DATA_DIR / "regressions.npz", REGEN)
META = read_json(DATA_DIR / "regressions.json", REGEN)


@pytest.fixture(scope="module")
def runs():
    return {name: flash.forward(*c.build()[:3], **c.build()[3]) for name, c in CASES.items()}


def test_recorded_on_the_current_kernel():
    assert META["device"]["gpu"] == "NVIDIA H200"
    assert META["kernel_sha256"] == source_sha256("fa3_forward.cu"), (
        "kernels/fa3_forward.cu changed: re-record with `" + REGEN)
    assert set(META["cases"]) == set(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_emulator_reproduces_device_bits(runs, name):
    out, lse = runs[name]
    assert np.array_equal(out.view(np.uint16), RECORDED[f"{name}__out"]), name
    assert np.array_equal(lse.view(np.uint32), RECORDED[f"{name}__lse"]), name


def test_logits_below_minus_5e4_are_exact(runs):
    out, lse = runs["logits_below_minus_5e4"]
    assert np.all(np.isfinite(lse)) and np.all(lse < -5e4 / 8)
    ref_out, ref_lse = flash.reference(*CASES["logits_below_minus_5e4"].build()[:3])
    assert np.max(np.abs(lse - ref_lse)) < 1e-2
    assert np.linalg.norm(out.astype(np.float64) - ref_out) / np.linalg.norm(ref_out) < 1e-2


def test_q_k_v_133120_gives_nan(runs):
    out, lse = runs["q_k_v_133120"]
    assert np.all(np.isnan(out.astype(np.float32))) and np.isposinf(lse).all()


def test_fp8_v_ones_is_not_one(runs):
    out, _ = runs["fp8_v_ones"]
    o = out.astype(np.float32)
    assert np.all(np.abs(o - 1) < 0.02) and np.any(o != 1)


def test_rows_without_keys(runs):
    out, lse = runs["fully_masked_rows"]
    assert np.all(out[0, :60].view(np.uint16) == 0) and np.all(np.isneginf(lse[0, :, :60]))
    out, lse = runs["seqlen_k_zero"]
    assert np.all(out[0].view(np.uint16) == 0) and np.all(np.isneginf(lse[0]))


def test_fp8_block_size_changes_bits(runs):
    a, b = runs["fp8_kblock_n_64"].out, runs["fp8_kblock_n_128"].out
    assert np.count_nonzero(a.view(np.uint16) != b.view(np.uint16)) > 1000


def test_meta_is_json_serialisable():
    json.dumps(META)


def test_hypothesis_replay_on_the_device_found_no_disagreement():
    """The deep run of `python -m simulator measure hypothesis_replay` on the H200 (15
    hypothesis-seeded shards, docs/properties.md): every drawn case gave the same O and LSE
    bits on device and emulator, for the kernel source in the repository."""
    rep = read_json(DATA_DIR / "hypothesis_replay_report.json", rr.REGENERATE)
    assert rep["device"]["gpu"] == "NVIDIA H200"
    assert rep["cases"] >= 30_000 and rep["disagreements"] == 0
    assert rep["cases"] == sum(r["cases"] for r in rep["runs"])
    assert all(r["disagreements"] == 0 and not r["shard_errors"] for r in rep["runs"])
    assert rep["kernel_sha256"] == source_sha256("fa3_forward.cu")
    drawn = Counter()
    for r in rep["runs"]:
        drawn.update(r["drawn"])
    # what the strategy covered: every format, mask and kernel configuration, non-finite inputs
    for label in ("dtype=bfloat16", "dtype=float16", "dtype=float8_e4m3fn", "mask=causal",
                  "mask=local", "softcap=yes", "seqlens_k=yes", "gqa=yes", "nonfinite_inputs=yes",
                  "blocks=192x96 intra_wg_overlap", "blocks=64x64 plain"):
        assert drawn[label] >= 3000, label


@pytest.fixture(scope="module")
def replay_sample():
    return rr.load_sample()


def test_emulator_reproduces_the_recorded_hypothesis_cases(replay_sample):
    """The sampled drawn cases of the deep runs, with the H200's bits: emulated bit for bit."""
    assert len(replay_sample) >= 100
    for c in replay_sample:
        assert rr.case_digest(c["q"], c["k"], c["v"], c["kwargs"]) == c["input_digest"]
        out, lse = rr.result_bits(*flash.forward(c["q"], c["k"], c["v"], **c["kwargs"]))
        assert np.array_equal(out, c["out_bits"]) and np.array_equal(lse, c["lse_bits"]), c["kwargs"]


def test_recorded_hypothesis_cases_tell_ideal_arithmetic_apart(replay_sample):
    """The sample can fail: correctly rounded MUFU and IEEE tensor cores change some bits."""
    differ = 0
    for c in replay_sample[:20]:
        out, lse = rr.result_bits(*flash.forward(c["q"], c["k"], c["v"], mufu="ideal", **c["kwargs"]))
        differ += int(not (np.array_equal(out, c["out_bits"]) and np.array_equal(lse, c["lse_bits"])))
    assert differ >= 3  # 6 of the first 20 measured; small drawn cases often round alike


def test_database_replay_on_the_device_replayed_the_stored_examples_first():
    rec = read_json(DATA_DIR / "hypothesis_replay_database.json", rr.REGENERATE)
    dev = rec["device_report"]
    assert dev["device"]["gpu"] == "NVIDIA H200" and dev["mode"] == "database"
    assert dev["kernel_sha256"] == source_sha256("fa3_forward.cu")
    assert dev["database_entries_before"] > 0 and dev["disagreements"] == 0 and dev["cases"] >= 300
    assert set(dev["first_cases"][:4]) <= set(rec["stored_example_digests"])
