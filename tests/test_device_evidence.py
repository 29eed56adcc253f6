"""The emulator against the H200's recorded bits (simulator/data/device, numerics_*).

Each check compares exact bits: raw device values where they are stored, BLAKE2b digests of
the device's output bits elsewhere. The last tests show the checks can fail: a deliberately
wrong model is caught.
"""

from __future__ import annotations

import dataclasses

import pytest

from simulator.device.runtime import source_sha256
from simulator.numerics import cvt as convert_mod
from simulator.numerics import float32 as f32_mod
from simulator.replay import numerics as ev


@pytest.fixture(scope="module")
def recorded():
    return ev.load_recorded()


def _assert_rows(rows):
    bad = [r for r in rows if r["mismatches"]]
    assert not bad, bad
    assert all(r["cases"] > 0 for r in rows)


def test_provenance_and_sweep_result(recorded):
    report, digests, _ = recorded
    assert report["device"]["gpu"] == "NVIDIA H200"
    assert report["device"]["compute_capability"] == "9.0"
    assert report["total_mismatches"] == 0
    assert all(v["inputs"] == 2**32 for v in report["conversions"].values())
    assert all(v["cases"] >= 100_000_000 for v in report["arithmetic"].values())
    assert set(digests) == {f"conv_{n}" for n in ev.CONVERSIONS} | {f"arith_{v}" for v in ev.VARIANTS}


def test_recorded_data_matches_kernel_source(recorded):
    report, _, _ = recorded
    assert report["kernel_sha256"] == source_sha256(ev.KERNEL), (
        "kernels/probes/numerics.cu changed since the recorded sweep: rerun "
        "`python -m simulator sweep numerics --out DIR` on a GPU and commit DIR's files")


def test_widening_and_packing(recorded):
    _assert_rows(ev.check_widen_and_pack(recorded[2]))


def test_arithmetic_against_device(recorded):
    _, digests, samples = recorded
    _assert_rows(ev.check_arithmetic(digests, samples, blocks=4))


def test_conversions_against_device(recorded):
    _assert_rows(ev.check_conversions(recorded[1], ev.ci_chunks()))


def test_wrong_tininess_rule_is_caught(recorded, monkeypatch):
    # tininess before rounding (|exact| < 2^-126) instead of the measured after-rounding rule
    monkeypatch.setattr(f32_mod, "_F32_TINY", 2.0**-126)
    _, digests, samples = recorded
    monkeypatch.setattr(ev, "VARIANTS", {"ffma_ftz": ("ffma", True)})
    rows = ev.check_arithmetic(digests, samples, blocks=1)
    assert sum(r["mismatches"] for r in rows) > 0


def test_wrong_nan_pattern_is_caught(recorded, monkeypatch):
    fmts = dict(convert_mod.FORMATS)
    fmts["e4m3"] = dataclasses.replace(fmts["e4m3"], nan_bits=0xFF)
    monkeypatch.setattr(convert_mod, "FORMATS", fmts)
    monkeypatch.setattr(ev, "CONVERSIONS", {"e4m3": ev.CONVERSIONS["e4m3"]})
    nan_chunk = 0x7FC00000 // ev.CHUNK
    rows = ev.check_conversions(recorded[1], [nan_chunk])
    assert rows[0]["mismatches"] > 0
