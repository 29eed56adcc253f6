"""``run``'s float64 reference shows its own progress after the emulation's bar has read 100%:
a bar of seconds against the estimate on a terminal with tqdm, one line otherwise. Stand-ins
for tqdm and the clock: nothing here depends on how long anything takes."""

from __future__ import annotations

import io
import sys
import types

import numpy as np

from simulator.run import waiting


class _Terminal(io.StringIO):
    def isatty(self):
        return True


class _Bar:
    """tqdm's interface as the run's bars use it (flash.chunks.Progress and waiting.TimedBar)."""

    made: list = []

    def __init__(self, total=None, desc=None, **kw):
        self.total, self.desc, self.n, self.closed, self.shown = total, desc, 0, False, []
        _Bar.made.append(self)

    def update(self, n):
        self.n += n

    def refresh(self):
        self.shown.append((self.n, self.total))

    def close(self):
        self.closed = True


def test_the_timed_bar_follows_the_clock_and_never_reads_done_early():
    now = [100.0]
    bar = waiting.TimedBar(_Bar, io.StringIO(), "float64 reference", 10.4, clock=lambda: now[0])
    drawn = _Bar.made[-1]
    assert drawn.total == 10 and drawn.desc == "float64 reference"
    now[0] = 104.0
    bar.advance()
    assert drawn.shown[-1] == (4.0, 10)
    now[0] = 112.0  # past the estimate: the total grows ahead of the elapsed time
    bar.advance()
    assert drawn.shown[-1][0] == 12.0 and drawn.shown[-1][1] > 12
    now[0] = 113.0
    bar.finish()
    assert drawn.shown[-1] == (13, 13) and drawn.closed
    bar.finish()  # once only
    bar.advance()
    assert drawn.shown[-1] == (13, 13)


def test_progress_of_a_wait(monkeypatch):
    lines = []
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a terminal: the line
    with waiting.progress_of("run: the reference", 42.4, True, lines.append, tick=None):
        pass
    assert lines == ["run: the reference, about 42 s (an estimate)"]
    with waiting.progress_of("run: the reference", 42.4, False, lines.append, tick=None):
        pass
    assert len(lines) == 1  # not shown: nothing
    monkeypatch.setattr("sys.stderr", _Terminal())
    monkeypatch.setitem(sys.modules, "tqdm", None)  # a terminal without tqdm: the line
    with waiting.progress_of("run: the reference", 7, True, lines.append, tick=None):
        pass
    assert lines[-1] == "run: the reference, about 7 s (an estimate)"
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=_Bar))
    with waiting.progress_of("run: the reference", 7, True, lines.append, label="ref", tick=None):
        pass
    drawn = _Bar.made[-1]
    assert drawn.desc == "ref" and drawn.closed and drawn.n == drawn.total and len(lines) == 2
    try:  # the work fails: the bar is closed where it was, not drawn as done
        with waiting.progress_of("run: the reference", 7, True, lines.append, tick=None):
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    drawn = _Bar.made[-1]
    assert drawn.closed and drawn.n == 0


def test_a_run_on_a_terminal_shows_the_references_bar(tmp_path, monkeypatch, capsys):
    from simulator import cli
    from simulator.run import emulation

    x = np.random.default_rng(2).standard_normal((1, 300, 2, 64)).astype(np.float32)
    np.savez(tmp_path / "x.npz", q=x, k=x, v=x)
    monkeypatch.setattr(emulation, "REFERENCE_SECONDS_PER_ELEMENT", 1e-4)  # estimated 2304 s
    monkeypatch.setattr("sys.stderr", _Terminal())
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=_Bar))
    _Bar.made.clear()
    argv = ["run", "--input", str(tmp_path / "x.npz"), "--out", str(tmp_path / "o.npz")]
    assert cli.main(argv) == 0
    bars = {b.desc: b for b in _Bar.made}
    ref = bars["float64 reference"]
    assert ref.closed and ref.n == ref.total  # the reference's bar ran to its end
    assert "about 2304 s" not in sys.stderr.getvalue()  # the bar, not the line
    assert bars["emulating"].closed


def test_the_reference_estimate_prices_each_score_not_only_the_head_dims():
    """The reference's softmax costs the same per score at every head dim: measured 1.8e-7 s
    per score at head dim 64, 1.6e-7 at 128, 3.7e-7 at 256 (simulator/run/emulation.py). A cost
    proportional to the head dims alone priced 1 x 4096 x 8 x 128 at 69 s; it took 22 s."""
    from simulator.run import emulation

    def seconds(s, h, d):
        x = np.empty((1, s, h, d), np.float32)
        return emulation.reference_seconds(types.SimpleNamespace(q=x, k=x, v=x))

    measured = {64: 1.8e-7, 128: 1.6e-7, 256: 3.7e-7}  # seconds per score, 1 x 2048 x 4 heads
    for d, cost in measured.items():
        ratio = seconds(2048, 4, d) / (2048 * 2048 * 4 * cost)
        assert 0.5 <= ratio <= 2, (d, ratio)
    assert 11 <= seconds(4096, 8, 128) <= 44  # 22 s measured


class _Event:
    """threading.Event's wait answering from a script: the ticker's loop runs a known number
    of times, with no clock."""

    def __init__(self, answers):
        self.answers = list(answers)

    def wait(self, timeout=None):
        return self.answers.pop(0) if self.answers else True

    def set(self):
        pass


def test_ticking_redraws_the_bar_until_the_block_ends(monkeypatch):
    bar = _Bar(total=10)
    monkeypatch.setattr(waiting, "_stop_event", lambda: _Event([False, False, True]))
    with waiting.ticking(bar, tick=0.5):
        pass
    assert bar.shown == [(0, 10), (0, 10)]
    for no_bar, tick in ((None, 0.5), (bar, None)):  # lines, or no progress: nothing
        with waiting.ticking(no_bar, tick=tick):
            pass
    assert len(bar.shown) == 2


def test_notes_are_written_above_the_bar(monkeypatch):
    from simulator.run import command

    written = []
    bar_class = types.SimpleNamespace(write=lambda text, file=None: written.append(text))
    monkeypatch.setattr("sys.stderr", _Terminal())
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=bar_class))
    command._note("simulator.engine: compiling")  # the compile note's path in run
    assert written == ["simulator.engine: compiling"] and sys.stderr.getvalue() == ""
    monkeypatch.setitem(sys.modules, "tqdm", None)
    command._note("plain")
    assert sys.stderr.getvalue() == "plain\n"
    monkeypatch.setattr("sys.stderr", None)
    command._note("nowhere")  # stderr closed at start: nothing, no error


def test_the_emulations_bar_keeps_its_clock_through_a_compile(tmp_path, monkeypatch):
    """run hands the emulation's tqdm bar to ticking (its clock then moves while the engine
    compiles, before the first block is done)."""
    from simulator import cli
    from simulator.run import command

    ticked = []

    def record(bar, tick=0.5):
        ticked.append(bar)
        return waiting.ticking(None)

    monkeypatch.setattr(command, "ticking", record)
    monkeypatch.setattr("sys.stderr", _Terminal())
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=_Bar))
    _Bar.made.clear()
    assert cli.main(["run", "--heads", "0", "--out", str(tmp_path / "o.npz")]) == 0
    (bar,) = ticked
    assert isinstance(bar, _Bar) and bar.desc == "emulating"
