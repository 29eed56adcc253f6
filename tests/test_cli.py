"""The command line end to end, in a subprocess, as a user runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest


def _run(*args):
    # no timeout: every command here is bounded work (a wall-clock limit fails on a busy machine)
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True,
                          text=True)


def test_help_lists_commands():
    r = _run("--help")
    assert r.returncode == 0
    assert "verify" in r.stdout and "Exit codes" in r.stdout


def test_verify_help_has_a_description_and_the_exit_codes(capsys):
    from simulator import cli

    with pytest.raises(SystemExit) as stop:
        cli.main(["verify", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("Replay the device outputs (H200; H100 for sdpa, fa2, dew, fa4) recorded in "
            "simulator/data/device/") in text
    for code in ("0 every check matches", "1 the emulator and a recording differ",
                 "2 usage error", "3 internal error", "130 interrupted"):
        assert code in text, code


def test_verify_replays_device_bits_from_the_command_line():
    """The command's plumbing on one topic (the hardware sweeps: 786,552 recorded results under
    --quick, in seconds); every topic's replay is tested on its own (tests/test_verify_topics.py
    and the per-topic replay tests), and ``verify`` itself replays them all."""
    r = _run("verify", "--topic", "hw", "--quick", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows and {row["topic"] for row in rows} == {"hw"}
    assert sum(row["cases"] for row in rows) > 500_000
    assert all(row["mismatches"] == 0 for row in rows)


def test_usage_errors_exit_2_without_traceback():
    for args in (["bogus"], ["verify", "--topic", "nope"], ["sweep"]):
        r = _run(*args)
        assert r.returncode == 2, (args, r.returncode)
        assert "Traceback" not in r.stderr
        assert r.stderr.strip(), args


def test_corrupt_recorded_data_is_an_input_error(tmp_path, monkeypatch, capsys):
    from simulator import cli
    from simulator.replay import numerics as ev

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


# A real SIGINT, sent by the child to itself when it first imports MODULE: Ctrl-C at that moment.
_CTRL_C_AT_IMPORT = r"""
import os, runpy, signal, sys
# Python's own handler, also when this test runs in a background job (which starts with SIGINT
# ignored, so that the signal below would do nothing)
signal.signal(signal.SIGINT, signal.default_int_handler)
target = sys.argv[1]
fired = []
def hook(event, args):
    if event == "import" and args[0] == target and not fired:
        fired.append(True)
        os.kill(os.getpid(), signal.SIGINT)
sys.addaudithook(hook)
sys.argv = ["simulator", *sys.argv[2:]]
runpy.run_module("simulator", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("command, module", [
    ("run", "simulator.cli"),               # the command line itself
    ("run", "simulator.device.runtime"),    # cli.main's first import
    ("run", "ml_dtypes"),                   # simulator.run's imports
    ("run", "numpy._typing"),               # inside NumPy's import_array: becomes an ImportError
    ("run", "simulator.flash"),
    ("verify", "simulator.verify"),
])
def test_ctrl_c_during_imports_is_one_line_and_exit_130(tmp_path, command, module):
    args = (["run", "--no-progress", "--out", str(tmp_path / "o.npz")] if command == "run"
            else ["verify", "--quick", "--topic", "hw"])
    r = subprocess.run([sys.executable, "-c", _CTRL_C_AT_IMPORT, module, *args],
                       capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (130, "interrupted\n"), (r.returncode, r.stderr[-2000:])
    assert not (tmp_path / "o.npz").exists()


def test_ctrl_c_swallowed_by_an_import_is_exit_130(monkeypatch, capsys):
    """NumPy prints a KeyboardInterrupt of its import through sys.excepthook and raises ImportError."""
    from simulator import cli, verify

    def numpy_import(*a, **kw):
        sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)
        raise ImportError("numpy._core.multiarray failed to import")

    hook = sys.excepthook
    monkeypatch.setattr(verify, "run_checks", numpy_import)
    assert cli.main(["verify", "--quick"]) == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert sys.excepthook is hook

    def plain_ctrl_c(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(verify, "run_checks", plain_ctrl_c)
    assert cli.main(["verify", "--quick"]) == 130
    assert capsys.readouterr().err == "interrupted\n"

    def import_error(*a, **kw):  # without Ctrl-C an ImportError is still a bug
        raise ImportError("no module named x")

    monkeypatch.setattr(verify, "run_checks", import_error)
    assert cli.main(["verify", "--quick"]) == 3
    assert "ImportError: no module named x" in capsys.readouterr().err


def test_measure_lists_its_runs_and_refuses_an_unknown_one(capsys):
    """``python -m simulator measure``: every run is a module with ``main``; a wrong name is one
    line and exit 2."""
    import importlib

    from simulator import cli, measure

    assert cli.main(["measure", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in measure.RUNS)
    for name in measure.RUNS:
        assert callable(importlib.import_module(f"simulator.measure.{name}").main), name
    assert cli.main(["measure", "no_such_run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown run 'no_such_run'" in err, err
    assert err.startswith("error: ") and "measure --help" in err, err
    assert cli.main(["measure"]) == 2


def test_measure_common_pieces_without_a_gpu(tmp_path, capsys):
    """What the measurement runs share (simulator.measure.common), on the CPU: the --out parser,
    the kernel provenance, the atomic writes of a recording, the timestamped log line."""
    import numpy as np

    from simulator.device import runtime
    from simulator.measure import common, forward_trace, hw_probe, mufu_calibrate, numerics_sweep
    from simulator.replay import numerics as ev

    assert callable(forward_trace.main) and callable(mufu_calibrate.main) and callable(numerics_sweep.main)
    ap = common.out_parser("forward_trace", "Record device step traces of the forward.")
    assert ap.prog == "python -m simulator measure forward_trace"
    assert ap.parse_args(["--out", "d"]).out == "d"
    assert common.kernel_provenance(ev.KERNEL) == {
        "kernel": f"kernels/{ev.KERNEL}", "kernel_sha256": runtime.source_sha256(ev.KERNEL)}
    common.write_recordings(tmp_path / "r", "x_report.json", {"a": 1}, {"x.npz": {"b": np.arange(3)}})
    assert json.loads((tmp_path / "r" / "x_report.json").read_text()) == {"a": 1}
    assert np.load(tmp_path / "r" / "x.npz")["b"].tolist() == [0, 1, 2]
    meta = {"configs": []}
    path = common.write_forward_recording(tmp_path / "f", "t.npz", "t.json", meta, {"c0": np.ones(2)})
    assert meta["file_bytes"] == os.path.getsize(path) > 0
    with np.load(path) as z:
        assert json.loads(str(z["meta"])) == {"configs": []} and z["c0"].tolist() == [1.0, 1.0]
    common.GpuRun(None, None, t0=0.0).log("x")
    assert re.fullmatch(r"\[ *\d+\.\d s\] x\n", capsys.readouterr().out)
    # hw_probe's shared checks: the emulator's own layout decodes with 0 mismatches
    from simulator.hw import a_operand_layout, accumulator_layout

    alay, dlay, rec = a_operand_layout("m16n8k16"), accumulator_layout("m16n8k16"), {}
    assert hw_probe._a_slot_mismatches(alay.thread_of.astype(np.int64), alay.reg_of.astype(np.int64),
                                       alay, rec, "p_") == 0
    assert hw_probe._a_slot_mismatches(None, alay.reg_of, alay, {}, "p_") is None
    a, b = np.ones((2, 16, 16), np.float32), np.full((2, 16, 8), 2.0, np.float32)
    d = dlay.from_matrix(np.einsum("cik,ckj->cij", a, b))
    assert hw_probe._random_mismatches(d, a, b, dlay, rec, "p_") == 0
    assert sorted(rec) == ["p_elem_of", "p_rand_a", "p_rand_b", "p_rand_d", "p_thread_of"]


def test_every_parser_refuses_a_bad_option_in_one_line(capsys):
    """The top-level parser, its subcommands and every measurement run's own parser: a bad
    option is one ``error: ...`` line naming the command, with exit code 2 (no usage block)."""
    from simulator import cli, measure

    cases = [(["bogus"], "error: argument COMMAND: invalid choice: 'bogus'"),
             (["verify", "--bogus"], "error: unrecognized arguments: --bogus"),
             (["calibrate", "--bogus"], "error: calibrate: unrecognized arguments: --bogus")]
    cases += [(["measure", name, "--no-such-option"], f"error: measure {name}: ")
              for name in measure.RUNS if name != "mufu_calibrate"]
    for args, start in cases:
        try:
            code = cli.main(args)
        except SystemExit as stop:
            code = stop.code
        err = capsys.readouterr().err
        assert code == 2, (args, code)
        assert err.startswith(start) and err.count("\n") == 1 and "--help`)" in err, (args, err)


def test_verify_help_names_every_topic():
    from simulator import cli, verify

    assert cli.VERIFY_TOPICS == tuple(verify.TOPICS)


def test_measure_exp2_throughput_sass_names_the_missing_tool(tmp_path, capsys, monkeypatch):
    """Without the CUDA toolkit ``--sass`` is one line naming what is missing and how to give
    it (exit 2), not "[Errno 2] No such file or directory: '/x'"; nothing is written."""
    from simulator import cli

    monkeypatch.setenv("CUOBJDUMP", str(tmp_path / "no_cuobjdump"))
    assert cli.main(["measure", "exp2_throughput", "--sass", "--out", str(tmp_path / "o"),
                     "--nvcc", sys.executable]) == 2  # an executable: the disassembler is checked
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CUOBJDUMP: expected the path of cuobjdump" in err
    monkeypatch.delenv("CUOBJDUMP")
    assert cli.main(["measure", "exp2_throughput", "--sass", "--out", str(tmp_path / "o"),
                     "--nvcc", str(tmp_path / "no_nvcc")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--nvcc: expected the CUDA compiler" in err
    assert not (tmp_path / "o").exists()
