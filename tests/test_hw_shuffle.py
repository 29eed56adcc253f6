"""shfl.sync emulation against the H200 recordings (simulator/data/device/hw_shuffle.npz)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator import hw
from simulator.io import read_json, read_npz
from simulator.replay import hw as hw_replay
from simulator.replay.hw import REGEN

DATA = Path(hw.__file__).resolve().parents[1] / "data" / "device"
REC = read_npz(DATA / "hw_shuffle.npz", REGEN)  # checked against MANIFEST.json
REPORT = read_json(DATA / "hw_report.json", REGEN)["shuffle"]


@pytest.mark.parametrize("mode", hw.shuffle.MODES)
@pytest.mark.parametrize("variant", ["", "_diverged"])
def test_recorded_shuffles_bit_exact(mode, variant):
    b, c, m = REC[f"{mode}_b"], REC[f"{mode}_c"], REC[f"{mode}_mask"]
    d, p = REC[f"{mode}{variant}_d"], REC[f"{mode}{variant}_p"]
    de, pe, defined = hw_replay.emulate_shuffles(mode, b, c, m)
    active = ((m[:, None].astype(np.int64) >> np.arange(32)) & 1).astype(bool)
    # every lane that executed: defined lanes exactly, undefined lanes under the "zero" policy
    np.testing.assert_array_equal(d[active], de[active])
    np.testing.assert_array_equal(p[active], pe[active].astype(np.uint8))
    assert np.all(d[~active] == 0xDEADBEEF)
    assert (active & ~defined).sum() > 0  # the recording does exercise unpredictable reads
    rep = REPORT[f"{mode}{variant}"]
    assert rep["value_mismatches"] == rep["pred_mismatches"] == 0
    assert rep["undefined_lanes_zero"] == rep["undefined_lanes"]


def test_recording_covers_the_operand_space():
    for mode in hw.shuffle.MODES:
        b, c, m = REC[f"{mode}_b"], REC[f"{mode}_c"], REC[f"{mode}_mask"]
        assert b.max() >= 32 and (c >> 13).max() > 0 and (c & 0x1F).min() < 31
        assert len(np.unique(m)) > 8 and np.any(b != b[:, :1])  # masks, per-lane b


def _lanes(n=32):
    return np.arange(n, dtype=np.uint32) * np.uint32(3) + np.uint32(7)


def test_bfly_idx_up_down_full_warp():
    x = _lanes()
    lane = np.arange(32)
    np.testing.assert_array_equal(hw.shfl_xor(x, 5, axis=-1), x[lane ^ 5])
    np.testing.assert_array_equal(hw.shfl_idx(x, 9, axis=-1), x[np.full(32, 9)])
    np.testing.assert_array_equal(hw.shfl_up(x, 3, axis=-1), x[np.where(lane >= 3, lane - 3, lane)])
    np.testing.assert_array_equal(hw.shfl_down(x, 3, axis=-1),
                                  x[np.where(lane + 3 < 32, lane + 3, lane)])


def test_width_segments():
    x, lane = _lanes(), np.arange(32)
    seg = lane & ~7
    np.testing.assert_array_equal(hw.shfl_idx(x, 3, width=8, axis=-1), x[seg + 3])
    np.testing.assert_array_equal(hw.shfl_idx(x, 11, width=8, axis=-1), x[seg + 3])  # b mod width
    np.testing.assert_array_equal(hw.shfl_down(x, 2, width=8, axis=-1),
                                  x[np.where((lane & 7) + 2 < 8, lane + 2, lane)])
    np.testing.assert_array_equal(hw.shfl_up(x, 2, width=8, axis=-1),
                                  x[np.where((lane & 7) >= 2, lane - 2, lane)])
    # bfly across a segment boundary: allowed downward (j <= maxLane), refused upward
    r = hw.shfl_sync(x, "bfly", 8, hw.c_for_width(8, "bfly"), axis=-1, full=True)
    j = lane ^ 8
    np.testing.assert_array_equal(r.pred, j <= (seg | 7))
    np.testing.assert_array_equal(r.value, x[np.where(r.pred, j, lane)])


def test_b_uses_five_bits_and_c_ignores_high_bits():
    x = _lanes()
    np.testing.assert_array_equal(hw.shfl_sync(x, "bfly", 33, axis=-1),
                                  hw.shfl_sync(x, "bfly", 1, axis=-1))
    np.testing.assert_array_equal(hw.shfl_sync(x, "idx", 5, 0xFFFFE01F, axis=-1),
                                  hw.shfl_sync(x, "idx", 5, 0x001F, axis=-1))


def test_warpgroup_axis_shuffles_each_warp_alone_with_batch_axes():
    x = np.arange(2 * 128 * 3, dtype=np.float32).reshape(2, 128, 3)
    y = hw.shfl_xor(x, 16)
    t = np.arange(128)
    np.testing.assert_array_equal(y, x[:, (t // 32) * 32 + ((t % 32) ^ 16), :])
    z = hw.shfl_idx(x, 0)
    np.testing.assert_array_equal(z, x[:, (t // 32) * 32, :])


def test_membermask_rules():
    x = _lanes()
    with pytest.raises(ValueError, match="not named in membermask"):
        hw.shfl_sync(x, "bfly", 1, membermask=0x0000FFFF, active=np.ones(32, bool), axis=-1)
    r = hw.shfl_sync(x, "bfly", 16, membermask=0x0000FFFF, axis=-1, full=True)
    assert not r.defined[:16].any() and not r.defined[16:].any()  # sources outside / inactive
    assert np.all(r.value[:16] == 0) and np.array_equal(r.value[16:], x[16:])
    r = hw.shfl_sync(x, "bfly", 1, membermask=0x0000FFFF, axis=-1, full=True)
    assert r.defined[:16].all() and not r.defined[16:].any()
    r2 = hw.shfl_sync(x, "bfly", 16, membermask=0x0000FFFF, axis=-1, full=True, undefined="source")
    np.testing.assert_array_equal(r2.value[:16], x[16:])
    with pytest.raises(ValueError, match="unpredictable"):
        hw.shfl_sync(x, "bfly", 16, membermask=0x0000FFFF, axis=-1, undefined="raise")


def test_bad_inputs():
    with pytest.raises(ValueError, match="thread axis .* length 64"):
        hw.shfl_xor(np.zeros((64, 2), np.float32), 1)
    with pytest.raises(TypeError, match="32-bit"):
        hw.shfl_xor(np.zeros((32, 2), np.float64), 1)
    with pytest.raises(ValueError, match="mode"):
        hw.shfl_sync(np.zeros(32, np.float32), "rotate", 1, axis=-1)
    with pytest.raises(ValueError, match="width"):
        hw.c_for_width(3, "idx")
    with pytest.raises(ValueError, match="per-thread array"):
        hw.shfl_sync(np.zeros(32, np.float32), "idx", np.zeros(16, int), axis=-1)
