"""The command line under stress: a closed stdout, refusals that say what to do instead."""

from __future__ import annotations

import io

from simulator import cli


class _ClosedStdout(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


def test_run_writes_its_plot_before_printing_into_a_closed_stdout(tmp_path, monkeypatch):
    from simulator.run import command

    def fake_plot(path, *args):  # the real one takes 5-25 s; what matters is when it is called
        path.write_bytes(b"png")

    monkeypatch.setattr(command, "plot", fake_plot)
    monkeypatch.setattr("sys.stdout", _ClosedStdout())
    out, png = tmp_path / "o.npz", tmp_path / "p.png"
    status = cli.main(["run", "--no-progress", "--heads", "0", "--out", str(out), "--plot", str(png)])
    assert status == cli.EXIT_BROKEN_PIPE
    assert out.is_file() and png.is_file()


class _ClosedPipe(_ClosedStdout):
    def isatty(self):
        return False


def test_a_stderr_pipe_closed_by_its_reader_costs_neither_the_run_nor_its_result(tmp_path,
                                                                                 monkeypatch, capsys):
    """``run 2> >(head -1)``: progress and notes are lost, the run and its output are not."""
    monkeypatch.setattr("sys.stderr", _ClosedPipe())
    out = tmp_path / "o.npz"
    assert cli.main(["run", "--heads", "0", "--out", str(out)]) == cli.EXIT_OK
    assert out.is_file() and f"wrote     {out}" in capsys.readouterr().out


def test_progress_into_a_closed_stderr_stops_quietly(monkeypatch):
    from simulator.flash.chunks import Progress

    monkeypatch.setattr("sys.stderr", _ClosedPipe())
    bar = Progress(True, 10)
    bar.update(4)
    bar.update(6)  # the last line would be printed here
    bar.close()
    assert bar.done == 10


def test_run_backward_takes_a_softcap_with_the_backwards_bits(tmp_path, capsys):
    """The backward emulates softcap (checked against the CUDA twin): run --backward --softcap
    gives flash.backward's gradients at the run's out and LSE, not a refusal."""
    import ml_dtypes
    import numpy as np

    from simulator import flash, run
    from simulator.run.backward import draw_dout

    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 40, 2, 64)).astype(np.float32) for _ in range(3))
    np.savez(tmp_path / "in.npz", q=q, k=k, v=v)
    out = tmp_path / "o.npz"
    status = cli.main(["run", "--no-progress", "--input", str(tmp_path / "in.npz"), "--dtype", "bf16",
                       "--causal", "--softcap", "5", "--backward", "--dout-seed", "3", "--out", str(out)])
    assert status == cli.EXIT_OK, capsys.readouterr().err
    assert "softcap checked against the CUDA twin" in capsys.readouterr().out
    qb, kb, vb = (x.astype(bf16) for x in (q, k, v))
    fwd = flash.forward(qb, kb, vb, causal=True, softcap=5.0)
    dout = draw_dout(fwd.out, 3)
    want = flash.backward(dout, qb, kb, vb, fwd.out, fwd.lse, causal=True, softcap=5.0)
    plain = flash.backward(dout, qb, kb, vb, fwd.out, fwd.lse, causal=True)
    res = run.load_result(out)
    assert np.array_equal(res["dq_bits"], want.dq.view(np.uint16))
    assert np.array_equal(res["dk_bits"], want.dk.view(np.uint16))
    assert not np.array_equal(res["dq_bits"], plain.dq.view(np.uint16))


def test_a_bad_engine_setting_is_a_one_line_usage_error(monkeypatch, capsys):
    """``SIMULATOR_ENGINE=bogus python -m simulator run``: exit 2 and the variable named in one
    line (a traceback and exit 3 before)."""
    import importlib

    from simulator import cli

    monkeypatch.setitem(importlib.import_module("simulator.engine")._state, "engine", None)
    monkeypatch.setenv("SIMULATOR_ENGINE", "bogus")
    assert cli.main(["run"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "SIMULATOR_ENGINE: expected one of" in err
