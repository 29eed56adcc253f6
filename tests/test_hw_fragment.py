"""Fragment: conversion, text dump, ownership picture; live device probe (marked device)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from simulator import hw


def test_fragment_round_trip_and_rowcol():
    lay = hw.accumulator_layout("m64n32k16")
    m = np.arange(4 * 64 * 32, dtype=np.float32).reshape(4, 64, 32)
    f = hw.Fragment.from_matrix(m, lay)
    assert f.batch_shape == (4,) and f.data.shape == (4, 128, 16)
    np.testing.assert_array_equal(f.to_matrix(), m)
    rc = f.rowcol()
    assert rc.shape == (4, 128, 2, 8)
    np.testing.assert_array_equal(f.with_rowcol(rc).data, f.data)
    assert "m64n32k16 accumulator" in repr(f)


def test_dump_quad_text():
    f = hw.Fragment(np.arange(128 * 4, dtype=np.float32).reshape(128, 4), "m64n8k16")
    text = f.dump_quad(1, warp=2)
    lines = text.splitlines()
    assert lines[0] == "m64n8k16 accumulator: warp 2, quad 1 (lanes 4..7)"
    assert "thread  68  lane  4  lane_in_quad 0" in lines[1]
    assert lines[2].startswith("    r0   -> (row  33, col   0)")
    assert "272  (0x43880000)" in lines[2]
    assert len(lines) == 1 + 4 * 5
    with pytest.raises(ValueError, match="quad"):
        f.dump_quad(8)
    with pytest.raises(ValueError, match="batch"):
        f.dump_quad(0, batch=(1,))


def test_plot_needs_matplotlib_with_hint(monkeypatch):
    f = hw.Fragment(np.zeros((128, 4), np.float32), "m64n8k16")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"fa3-hopper-simulator\[notebooks\]"):
        f.plot()


def test_plot_ownership():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    f = hw.Fragment(np.random.default_rng(0).standard_normal((128, 8)).astype(np.float32),
                    "m64n16k16")
    fig = f.plot(color_by="quad")
    assert fig.axes
    fig = f.plot(color_by="value", annotate=False)
    with pytest.raises(ValueError, match="color_by"):
        f.plot(color_by="colour")


@pytest.mark.device
def test_live_hw_probe(tmp_path):
    from simulator.measure import hw_probe

    rc = hw_probe.main(["--out", str(tmp_path)])
    report = json.loads((tmp_path / "hw_report.json").read_text())
    assert report["total_mismatches"] == 0, report
    assert rc == 0
