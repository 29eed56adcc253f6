"""The real FA3 libraries re-recorded on the H100 (``simulator/data/device/h100/``:
fa3-fwd 0.0.3's case matrix and API calls, flash-attn3-jax 0.2.3's backward matrix, by
``scripts/device_h100_libraries.sh``) give the H200's recorded digests on every case, so the
H200 recordings' replay against the emulator (``verify --topic fa3`` / ``backward``) holds for
the H100's outputs too. Device against device, CPU only."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from simulator.io import DEVICE_DATA_DIR, read_json, read_manifest

H100 = DEVICE_DATA_DIR / "h100"
ROOT = Path(__file__).resolve().parents[1]
REGEN = "bash scripts/device_h100_libraries.sh on an H100, then copy the reports"

if not (H100 / "fa3_library_report.json").exists():
    pytest.skip("no H100 library recordings in the package", allow_module_level=True)


def _compare_module():
    spec = importlib.util.spec_from_file_location("h100_library_compare",
                                                  ROOT / "scripts" / "h100_library_compare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def reports():
    names = ("fa3_library_report.json", "fa3_api_report.json", "fa3_backward_report.json")
    listed = read_manifest(H100)
    assert all(n in listed for n in names)
    h100 = {n: read_json(H100 / n, REGEN) for n in names}
    h200 = {n: read_json(DEVICE_DATA_DIR / n, REGEN) for n in names}
    return h100, h200


def test_the_reports_name_the_h100(reports):
    h100, h200 = reports
    for name, rep in h100.items():
        assert rep["provenance"]["gpu"] == "NVIDIA H100 80GB HBM3", name
        assert h200[name]["provenance"]["gpu"] == "NVIDIA H200", name


def test_every_forward_and_api_case_gives_the_h200_digests(reports):
    cmp = _compare_module()
    h100, h200 = reports
    lib = cmp.compare_forward(h100["fa3_library_report.json"], h200["fa3_library_report.json"],
                              "cases", ("out", "lse"))
    api = cmp.compare_forward(h100["fa3_api_report.json"], h200["fa3_api_report.json"], "cases",
                              ("out", "lse", "k_cache", "v_cache"))
    for r in (lib, api):
        assert r["cases"] == r["h200_cases"] > 300 and r["inputs_differ"] == 0
        assert r["differ"] == 0 and r["compared_values"] >= 2 * r["cases"] - 2 * r["refused_both"]


def test_every_backward_case_gives_the_h200_deterministic_digests(reports):
    cmp = _compare_module()
    h100, h200 = reports
    r = cmp.compare_backward(h100["fa3_backward_report.json"], h200["fa3_backward_report.json"])
    assert r["cases"] == 312 and r["differ"] == 0
    assert r["default_runs_differed"] > 50  # the default mode's spread showed on the H100 too


def test_the_comparison_can_fail(reports):
    cmp = _compare_module()
    h100, h200 = reports
    changed = {**h100["fa3_library_report.json"]}
    changed["cases"] = [dict(c) for c in changed["cases"]]
    changed["cases"][3]["out"] = "0" * 32
    r = cmp.compare_forward(changed, h200["fa3_library_report.json"], "cases", ("out", "lse"))
    assert r["differ"] == 1 and r["differing_cases"] == [3]


def test_drawn_backward_cases_give_the_h200_digests():
    """The H200's 2,200 hypothesis-drawn backward calls re-recorded on the H100: out, LSE and
    the deterministic dQ / dK / dV equal everywhere; the scratch buffers (dpsum, LSE_log2) where
    every row is written (no varlen / seqused)."""
    cmp = _compare_module()
    slim = read_json(H100 / "fa3_backward_hyp_digests.json", REGEN)
    old = read_json(DEVICE_DATA_DIR / "fa3_backward_hyp_report.json", REGEN)
    assert slim["provenance"]["gpu"] == "NVIDIA H100 80GB HBM3"
    r = cmp.compare_hyp(slim, old)
    assert r["cases"] == 2200 and r["differ"] == 0 and r["scratch_compared"] > 1000
    broken = {**slim, "cases": [dict(c) for c in slim["cases"]]}
    broken["cases"][5] = {**broken["cases"][5], "det": {**broken["cases"][5]["det"], "dq": "0" * 32}}
    assert cmp.compare_hyp(broken, old)["differ"] == 1


def test_drawn_api_calls_ran_live_on_the_h100():
    """``fa3_api_replay`` on the H100: hypothesis-drawn API calls, simulator.fa3 beside the real
    library on the device, no disagreement."""
    rep = read_json(H100 / "fa3_api_replay_report.json", REGEN)
    assert rep["provenance"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert rep["cases"] >= 1000 and rep["disagreements"] == 0 and not rep["stopped"]
