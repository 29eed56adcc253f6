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
