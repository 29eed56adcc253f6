"""Live checks on a GPU (skipped, with the reason, where CuPy sees none)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.device


def test_live_numerics_sweep_small(tmp_path):
    from simulator.device import numerics_sweep

    rc = numerics_sweep.main(["--out", str(tmp_path), "--blocks", "1", "--skip-conversions"])
    report = json.loads((tmp_path / "numerics_report.json").read_text())
    assert report["total_mismatches"] == 0, report
    assert rc == 0


def test_live_emulator_matches_device_on_drawn_cases():
    """hypothesis drives the device check itself, with the project's example database: inputs
    that disagreed before (stored under the key of simulator.device.hypothesis_replay's device check,
    shared with ``python -m simulator.device.hypothesis_replay --database``) replay first."""
    from hypothesis import settings

    from simulator.device import hypothesis_replay as hr

    hr.device_property(settings.default.database, max(10, settings.default.max_examples // 4))()
