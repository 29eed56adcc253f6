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
