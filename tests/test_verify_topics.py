"""`python -m simulator verify` topics replay their recordings, and can fail."""

from __future__ import annotations

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
