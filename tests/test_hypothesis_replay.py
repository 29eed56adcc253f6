"""The device replay of hypothesis-drawn cases, run here with the emulator standing in for the
GPU (the real runs are recorded in simulator/data/device/hypothesis_replay_*; their sample is
replayed by tests/test_regressions.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator import flash
from simulator.device import hypothesis_replay as hr
from simulator.device import replay_record as rr
from simulator.device.forward import make_launch_config


@pytest.fixture()
def stand_in_device(monkeypatch):
    """The emulator as the 'device', flipping one bit of O in the 3rd case it sees."""
    seen = {"n": 0}

    def device_bits(q, k, v, kw):
        out, lse, err = hr._emulate(q, k, v, kw)
        seen["n"] += 1
        if seen["n"] == 3 and out is not None:
            out = out.copy()
            out.reshape(-1)[0] ^= 1
        return out, lse, err

    monkeypatch.setattr(hr, "_device_bits", device_bits)
    monkeypatch.setattr(hr, "precompile_options", lambda *a, **k: None)
    monkeypatch.setattr(hr, "device_info", lambda: {"gpu": "stand-in"})
    return seen


def test_deep_run_streams_shards_and_records_the_disagreement(tmp_path, stand_in_device):
    rep = hr.run_deep(str(tmp_path), cases=12, workers=2, seed0=5, progress=lambda m: None)
    assert rep["cases"] == 12 and rep["disagreements"] == 1 and not rep["shard_errors"]
    assert sum(v for k, v in rep["drawn"].items() if k.startswith("dtype=")) == 12
    meta = json.loads((tmp_path / "replay_disagreements.json").read_text())
    golden = rr.unpack_cases(np.load(tmp_path / "replay_disagreements.npz"), meta)[0]
    assert rr.case_digest(golden["q"], golden["k"], golden["v"], golden["kwargs"]) == meta[0]["input_digest"]
    out, lse = flash.forward(golden["q"], golden["k"], golden["v"], **golden["kwargs"])
    emu_out, emu_lse = rr.result_bits(out, lse)
    assert np.count_nonzero(emu_out != golden["out_bits"]) == 1      # the flipped bit, no more
    assert np.array_equal(emu_lse, golden["lse_bits"])


def test_time_limit_stops_the_run(tmp_path, stand_in_device):
    rep = hr.run_deep(str(tmp_path), cases=10_000, workers=2, seed0=0, time_limit=3.0,
                      progress=lambda m: None)
    assert rep["stopped_at_time_limit"] and 0 < rep["cases"] < 10_000


def test_drawn_cases_use_precompiled_kernels_and_round_trip():
    options = set(hr.all_kernel_options())
    assert len(options) == 36
    for q, k, v, kw in hr.collect(40):
        assert make_launch_config(q, k, v, **kw).options in options
        back = rr.kwargs_from_json(json.loads(json.dumps(rr.kwargs_to_json(kw))))
        assert rr.case_digest(q, k, v, back) == rr.case_digest(q, k, v, kw)
        for key, val in kw.items():
            assert type(back[key]) is type(val) and np.array_equal(back[key], val), key


def test_database_replay_stores_a_disagreement_and_replays_it_first(tmp_path, monkeypatch):
    """A stand-in device that disagrees on every e4m3 case: hypothesis finds one, shrinks it and
    stores it in the database; the recorded golden is the disagreeing input. A second run with an
    honest stand-in replays the stored example before drawing anything new."""
    monkeypatch.setattr(hr, "precompile_options", lambda *a, **k: None)
    monkeypatch.setattr(hr, "device_info", lambda: {"gpu": "stand-in"})

    def lying_device(q, k, v, kw):
        out, lse, err = hr._emulate(q, k, v, kw)
        if out is not None and q.dtype.itemsize == 1:
            out = out ^ np.uint16(1)
        return out, lse, err

    monkeypatch.setattr(hr, "_device_bits", lying_device)
    db = tmp_path / "db"
    rep = hr.run_database(str(tmp_path / "run1"), str(db), cases=30, progress=lambda m: None)
    assert rep["disagreements"] >= 1 and "disagree" in rep["shrunk_failure"]
    assert rep["database_entries_before"] == 0 and rep["database_entries_after"] >= 1
    meta = json.loads((tmp_path / "run1" / "replay_disagreements.json").read_text())
    golden = rr.unpack_cases(np.load(tmp_path / "run1" / "replay_disagreements.npz"), meta)
    assert all(str(g["q"].dtype) == "float8_e4m3fn" for g in golden)

    replayed = []

    def honest_device(q, k, v, kw):
        replayed.append(str(q.dtype))
        return hr._emulate(q, k, v, kw)

    monkeypatch.setattr(hr, "_device_bits", honest_device)
    rep = hr.run_database(str(tmp_path / "run2"), str(db), cases=5, progress=lambda m: None)
    assert rep["disagreements"] == 0 and rep["cases"] == len(replayed) >= 1
    assert replayed[0] == "float8_e4m3fn"  # the stored example ran first
