"""`python -m simulator verify` topics replay their recordings, and can fail."""

from __future__ import annotations

import io
import sys
import types

from simulator import verify
from simulator.replay import hw as hw_evidence


def test_every_topic_is_registered():
    assert set(verify.TOPICS) == {"numerics", "mufu", "hw", "mma", "forward", "fa3", "ext", "paged",
                                 "backward", "sdpa", "fa2", "dew", "fa4"}


def test_hw_topic_replays_and_catches_a_wrong_ftz(monkeypatch):
    rows = verify.run_checks(["hw"])
    assert all(r["mismatches"] == 0 for r in rows) and sum(r["cases"] for r in rows) > 1_000_000
    flipped = {build: not ftz for build, ftz in hw_evidence.REDUCE_BUILDS.items()}
    monkeypatch.setattr(hw_evidence, "REDUCE_BUILDS", flipped)
    bad = hw_evidence.check_reductions(hw_evidence.read_npz(hw_evidence.DATA_DIR / "hw_reduce.npz",
                                                            hw_evidence.REGEN))
    assert bad[0]["mismatches"] > 0


def test_run_checks_reports_each_topic_as_it_goes():
    lines = []
    rows = verify.run_checks(["sdpa"], quick=True, progress=lines.append)
    assert lines[0] == "verify: topic 1/1 sdpa ..."
    assert lines[1].startswith("verify: topic 1/1 sdpa done in ") and lines[1].endswith(
        f"{sum(r['mismatches'] for r in rows):,} mismatches")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_verify_on_a_terminal_draws_a_bar_with_tqdm_else_lines(monkeypatch):
    """On a terminal: tqdm's bar when tqdm is installed, the lines without it; nothing off one."""
    from simulator import cli

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert cli._tty_progress() is None
    monkeypatch.setattr("sys.stderr", _Terminal())
    monkeypatch.setitem(sys.modules, "tqdm", None)  # not installed
    say = cli._tty_progress()
    assert callable(say) and not isinstance(say, cli.TopicBar)
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=_FakeBar))
    assert isinstance(cli._tty_progress(), cli.TopicBar)


class _FakeBar:
    made = []

    def __init__(self, total, **kw):
        self.total, self.kw, self.n, self.postfix, self.closed = total, kw, 0, [], False
        _FakeBar.made.append(self)

    def set_postfix_str(self, text, refresh=True):
        self.postfix.append(text)

    def update(self, n):
        self.n += n

    def refresh(self):
        pass

    def close(self):
        self.closed = True


def test_the_topic_bar_counts_topics_and_mismatches():
    from simulator import cli

    _FakeBar.made.clear()
    bar = cli.TopicBar(_FakeBar, io.StringIO(), tick=None)
    rows = verify.run_checks(["hw", "mma"], quick=True, progress=bar)
    bar.close()
    bar.close()  # twice: harmless
    (drawn,) = _FakeBar.made
    assert drawn.total == 2 and drawn.n == 2 and drawn.closed
    assert drawn.postfix[0] == "hw, 0 mismatches so far"
    assert drawn.postfix[2] == "mma, 0 mismatches so far"
    assert drawn.postfix[-1].startswith("mma done in ")
    assert sum(r["mismatches"] for r in rows) == bar.mismatches == 0
    bar = cli.TopicBar(_FakeBar, io.StringIO(), tick=None)
    bar.topic_started(1, 1, "fa3")
    bar.topic_done(1, 1, "fa3", 2.0, 7)
    assert _FakeBar.made[-1].postfix[-1] == "fa3 done in 2.0 s, 7 mismatches so far"


def test_the_verify_command_closes_its_bar_when_a_topic_fails(monkeypatch):
    """A topic that raises (missing data, Ctrl-C) leaves no bar open and no clock thread."""
    from simulator import cli

    made = []

    class Bar(cli.TopicBar):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    def broken(quick):
        raise KeyError("out")

    monkeypatch.setattr(cli, "TopicBar", Bar)
    monkeypatch.setattr("sys.stderr", _Terminal())
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=_FakeBar))
    monkeypatch.setitem(verify.TOPICS, "hw", broken)
    assert cli.main(["verify", "--topic", "hw"]) == cli.EXIT_USAGE
    (bar,) = made
    assert bar._bar is None and bar._ticker is None
