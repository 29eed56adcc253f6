"""thread_reduce / quad allreduce / reduce_max / reduce_sum against the H200 recordings."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from simulator import hw
from simulator.io import read_json, read_npz
from simulator.numerics import fadd
from simulator.replay import hw as hw_replay
from simulator.replay.hw import REGEN

DATA = Path(hw.__file__).resolve().parents[1] / "data" / "device"
REC = read_npz(DATA / "hw_reduce.npz", REGEN)  # checked against MANIFEST.json
REPORT = read_json(DATA / "hw_report.json", REGEN)["reduce"]


@pytest.fixture(scope="module", params=sorted(hw_replay.REDUCE_SHAPES))
def inputs(request):
    sname = request.param
    frag, init = hw_replay.reduce_inputs(hw_replay.REDUCE_SHAPES[sname])
    digest = hashlib.sha256(frag.tobytes() + init.tobytes()).digest()
    assert digest == REC[f"{sname}_input_sha256"].tobytes(), \
        "regenerated probe inputs differ from the recorded ones (NumPy random stream changed?)"
    return sname, frag, init


@pytest.mark.parametrize("build", sorted(hw_replay.REDUCE_BUILDS))
@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("zi", [True, False])
def test_recorded_reductions_bit_exact(inputs, build, op, zi):
    sname, frag, init = inputs
    ftz = hw_replay.REDUCE_BUILDS[build]
    key = f"reduce_{op}_{sname}_{'zi' if zi else 'acc'}_{build}"
    thread, quad = hw_replay.emulate_reduce(op, zi, frag, init, ftz)
    for stage, got in (("thread", thread), ("quad", quad)):
        head = REC[f"{key}_{stage}_head"]
        np.testing.assert_array_equal(got.view(np.uint32)[:len(head)], head)
        np.testing.assert_array_equal(hw_replay.block_digests(got), REC[f"{key}_{stage}_digest"])
    other = REPORT[key][f"emulator_ftz={not ftz}"]  # the ftz flag is visible in the data
    assert other["thread_mismatches"] > 0


def test_fast_math_build_is_ftz():
    """FA3's build (--use_fast_math) and CuPy's default both flush; -ftz=false does not."""
    for key, entry in REPORT.items():
        ftz = hw_replay.REDUCE_BUILDS[key.rsplit("_", 1)[1]]
        assert entry[f"emulator_ftz={ftz}"] == {"thread_mismatches": 0, "quad_mismatches": 0}
        if "_sum_" in key:
            assert entry["emulator_reversed_column_order_thread_mismatches"] > 0


def _f32(*v):
    return np.array(v, dtype=np.float32)


def test_thread_reduce_order_is_column_by_column():
    # one thread's row: 1e8, 1, -1e8, 1 -> sequential float32 adds give 1, not 2 or 0
    t = np.zeros((32, 1, 4), np.float32)
    t[:, 0] = _f32(1e8, 1, -1e8, 1)
    out = hw.thread_reduce(t, op="sum")
    assert out.shape == (32, 1) and np.all(out == 1.0)
    acc = fadd(fadd(fadd(_f32(1e8), _f32(1)), _f32(-1e8)), _f32(1))
    assert out[0, 0] == acc[0]


def test_zero_init_false_folds_the_summary_first():
    t = np.ones((128, 2, 3), np.float32)
    s = np.full((128, 2), 10, np.float32)
    assert np.all(hw.thread_reduce(t, s, op="sum", zero_init=False) == 13)
    assert np.all(hw.thread_reduce(t, s, op="max", zero_init=False) == 10)
    assert np.all(hw.thread_reduce(t, s, op="sum") == 3)  # summary ignored
    with pytest.raises(ValueError, match="needs a summary"):
        hw.thread_reduce(t, op="sum", zero_init=False)


def test_allreduce_butterfly_and_widths():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 128, 2)).astype(np.float32)
    q = hw.quad_allreduce(x, "max")
    np.testing.assert_array_equal(q, np.repeat(hw.split_quads(x).max(axis=-2), 4, axis=-2))
    # sum: (x0 + x2) + (x1 + x3) for lane 0, the butterfly's own pairing
    s = hw.allreduce(x, "sum", 4)
    g = hw.split_quads(x)
    want = fadd(fadd(g[..., 0, :], g[..., 2, :], ftz=True), fadd(g[..., 1, :], g[..., 3, :], ftz=True),
                ftz=True)
    np.testing.assert_array_equal(hw.split_quads(s)[..., 0, :].view(np.uint32), want.view(np.uint32))
    w32 = hw.allreduce(x, "max", 32)
    np.testing.assert_array_equal(w32, np.repeat(hw.split_warps(x).max(axis=-2), 32, axis=-2))
    with pytest.raises(ValueError, match="width"):
        hw.allreduce(x, "sum", 3)
    with pytest.raises(ValueError, match="op must be"):
        hw.allreduce(x, "prod")


def test_reduce_max_sum_on_fragments():
    lay = hw.accumulator_layout("m64n64k16")
    rng = np.random.default_rng(2)
    m = rng.standard_normal((2, 64, 64)).astype(np.float32)
    frag = hw.Fragment.from_matrix(m, lay)
    mx = hw.reduce_max(frag)  # [2, 128, 2]
    view = hw.rowcol_view(lay)
    row_max = m.max(axis=2)  # [2, 64]
    np.testing.assert_array_equal(mx, row_max[:, view.row])  # every thread holds its rows' max
    part = hw.reduce_sum(frag, warp_reduce=False)
    full = hw.reduce_sum(frag)
    assert full.shape == part.shape == (2, 128, 2)
    np.testing.assert_array_equal(full, hw.quad_allreduce(part, "sum"))
    q = hw.split_quads(full, axis=-2)
    assert np.all(q.view(np.uint32) == q[..., :1, :].view(np.uint32))  # quad lanes agree


def test_ftz_flag():
    tiny = np.float32(2.0**-130)
    t = np.full((32, 1, 2), tiny, np.float32)
    assert np.all(hw.thread_reduce(t, op="sum") == 0)  # add.ftz: subnormals read as zero
    assert np.all(hw.thread_reduce(t, op="sum", ftz=False) == np.float32(2.0**-129))


def test_bad_shapes():
    with pytest.raises(ValueError, match="thread axis"):
        hw.thread_reduce(np.zeros((64, 2, 4), np.float32))
    with pytest.raises(ValueError, match="summary"):
        hw.thread_reduce(np.zeros((128, 2, 4), np.float32), np.zeros((128, 3), np.float32),
                         zero_init=False)
    with pytest.raises(TypeError):
        hw.thread_reduce(np.zeros((128, 2, 4), np.float64))
