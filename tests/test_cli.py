"""The command line end to end, in a subprocess, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys


def _run(*args):
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True,
                          text=True, timeout=600)


def test_help_lists_commands():
    r = _run("--help")
    assert r.returncode == 0
    assert "verify" in r.stdout and "Exit codes" in r.stdout


def test_verify_quick_replays_device_bits():
    r = _run("verify", "--quick", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert sum(row["cases"] for row in rows) > 10_000_000
    assert all(row["mismatches"] == 0 for row in rows)


def test_usage_errors_exit_2_without_traceback():
    for args in (["bogus"], ["verify", "--topic", "nope"], ["sweep"]):
        r = _run(*args)
        assert r.returncode == 2, (args, r.returncode)
        assert "Traceback" not in r.stderr
        assert r.stderr.strip(), args


def test_corrupt_recorded_data_is_an_input_error(tmp_path, monkeypatch, capsys):
    from simulator import cli
    from simulator.device import numerics_evidence as ev

    bad = tmp_path / "numerics_digests.npz"
    bad.write_bytes(ev.DIGESTS.read_bytes()[:1000])
    monkeypatch.setattr(ev, "DIGESTS", bad)
    assert cli.main(["verify", "--topic", "numerics", "--quick"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "unreadable" in err and "sweep numerics" in err
    monkeypatch.setattr(ev, "DIGESTS", tmp_path / "absent.npz")
    assert cli.main(["verify", "--topic", "numerics", "--quick"]) == 2
    assert "is missing" in capsys.readouterr().err


def test_sweep_without_gpu_or_with_bad_out_is_exit_2(tmp_path):
    r = _run("sweep", "numerics", "--out", str(tmp_path / "o"), "--blocks", "0")
    assert r.returncode == 2 and "--blocks" in r.stderr
    r = _run("calibrate", "--help")
    assert r.returncode == 0 and "--out" in r.stdout
