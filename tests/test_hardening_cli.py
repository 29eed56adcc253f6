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
