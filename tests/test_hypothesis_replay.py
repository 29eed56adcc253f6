"""The device replay of hypothesis-drawn cases, run here with the emulator standing in for the
GPU (the real runs are recorded in simulator/data/device/hypothesis_replay_*; their sample is
replayed by tests/test_regressions.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator import flash
from simulator.device.forward import make_launch_config
from simulator.measure import hypothesis_replay as hr
from simulator.replay import hypothesis as rr


@pytest.fixture()
def stand_in_device(monkeypatch):
    """The emulator as the 'device', flipping one bit of O in the 3rd case it sees."""
    seen = {"n": 0}

    def device_bits(q, k, v, kw, target="twin"):
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
    # 20 s: spawned workers import and load the MUFU tables first (seconds on a busy 2-core
    # machine); 10,000 cases take minutes, so the limit still stops the run
    rep = hr.run_deep(str(tmp_path), cases=10_000, workers=2, seed0=0, time_limit=20.0,
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


def _crashing_worker(shard, n, seed_value, out_queue, target="twin"):
    """A shard worker that dies like a segfault (no final message) in shard 1."""
    import os

    if shard == 1:
        os._exit(139)
    hr._shard_worker(shard, n, seed_value, out_queue)


def test_a_dead_worker_ends_the_run_with_a_report(tmp_path, stand_in_device, monkeypatch):
    monkeypatch.setattr(hr, "_shard_worker", _crashing_worker)
    rep = hr.run_deep(str(tmp_path), cases=6, workers=2, seed0=0, progress=lambda m: None)
    assert rep["cases"] == 3 and "exited with code 139" in rep["shard_errors"][1]
    assert (tmp_path / "replay_report.json").exists()


def test_a_device_exception_is_recorded_not_fatal(tmp_path, monkeypatch):
    monkeypatch.setattr(hr, "precompile_options", lambda *a, **k: None)
    monkeypatch.setattr(hr, "device_info", lambda: {"gpu": "stand-in"})
    calls = {"n": 0}

    def launch_fails_once(q, k, v, kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("cudaErrorLaunchFailure (stand-in)")
        return hr._emulate(q, k, v, kw)

    monkeypatch.setattr(hr, "forward", lambda q, k, v, **kw: _raise_or_run(launch_fails_once, q, k, v, kw))
    rep = hr.run_deep(str(tmp_path), cases=5, workers=1, seed0=3, progress=lambda m: None)
    assert rep["cases"] == 5 and rep["disagreements"] == 1
    assert "cudaErrorLaunchFailure" in rep["disagreeing"][0]["device_error"]


def _raise_or_run(fn, q, k, v, kw):
    out, lse, err = fn(q, k, v, kw)
    if err:
        raise ValueError(err)
    return flash.forward(q, k, v, **kw)


def test_flaky_database_failure_still_writes_the_report(tmp_path, monkeypatch):
    monkeypatch.setattr(hr, "precompile_options", lambda *a, **k: None)
    monkeypatch.setattr(hr, "device_info", lambda: {"gpu": "stand-in"})
    calls = {"n": 0}

    def wrong_once(q, k, v, kw):
        out, lse, err = hr._emulate(q, k, v, kw)
        calls["n"] += 1
        if calls["n"] == 2 and out is not None:
            out = out ^ np.uint16(1)
        return out, lse, err

    monkeypatch.setattr(hr, "_device_bits", wrong_once)
    rep = hr.run_database(str(tmp_path / "out"), str(tmp_path / "db"), cases=10, progress=lambda m: None)
    assert rep["disagreements"] == 1 and "Flaky" in rep["shrunk_failure"]
    assert (tmp_path / "out" / "replay_disagreements.npz").exists()


def test_bad_arguments_and_used_output_folders_are_refused(tmp_path, stand_in_device, capsys):
    for argv in (["--time-limit", "-1"], ["--time-limit", "nan"], ["--cases", "0"],
                 ["--database", str(tmp_path / "db"), "--workers", "2"]):
        with pytest.raises(SystemExit) as exc:
            hr.main(["--out", str(tmp_path / "x"), *argv])
        assert exc.value.code == 2, argv
    hr.run_deep(str(tmp_path), cases=2, workers=1, seed0=0, progress=lambda m: None)
    with pytest.raises(ValueError, match="earlier run"):
        hr.run_deep(str(tmp_path), cases=2, workers=1, seed0=0, progress=lambda m: None)


def test_repeated_inputs_are_counted_apart(tmp_path, stand_in_device):
    rep = hr.run_deep(str(tmp_path), cases=8, workers=2, seed0=0, progress=lambda m: None)
    assert rep["distinct_cases"] <= rep["cases"] == 8
    sample = json.loads((tmp_path / "replay_sample.json").read_text())
    assert len({s["input_digest"] for s in sample}) == len(sample)  # no repeat sampled twice


@pytest.mark.parametrize("via", ["module", "command"])
@pytest.mark.parametrize("module", ["hypothesis_replay", "mma_fp8_sweep", "numerics_sweep", "regressions"])
def test_device_scripts_without_a_gpu_say_so_in_one_line(module, via, tmp_path):
    """``python -m simulator.measure.NAME`` and ``python -m simulator measure NAME`` alike."""
    import subprocess
    import sys

    from simulator.device.runtime import gpu_available

    if gpu_available()[0]:
        pytest.skip("a GPU is present: the script would run for real")
    launcher = [f"simulator.measure.{module}"] if via == "module" else ["simulator", "measure", module]
    proc = subprocess.run([sys.executable, "-m", *launcher, "--out", str(tmp_path / "o")],
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and ("CuPy" in proc.stderr or "GPU" in proc.stderr), proc.stderr
    assert proc.stderr.startswith("error: ") and "install" in proc.stderr, proc.stderr  # house style
    assert not (tmp_path / "o").exists()
