"""Layouts and thread hierarchy against the H200 recordings (simulator/data/device/hw_*)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from simulator import hw
from simulator.device import runtime
from simulator.io import read_json, read_npz
from simulator.measure import hw_probe
from simulator.replay.hw import REGEN

DATA = Path(hw.__file__).resolve().parents[1] / "data" / "device"
REPO = Path(hw.__file__).resolve().parents[2]
REPORT = read_json(DATA / "hw_report.json", REGEN)  # checked against MANIFEST.json
LAYOUTS = read_npz(DATA / "hw_layouts.npz", REGEN)
SHAPES = [(fmt, k, n) for fmt, k in (("bf16", 16), ("e4m3", 32)) for n in range(8, 257, 8)]


def test_report_is_clean_and_from_an_h200():
    assert REPORT["total_mismatches"] == 0
    assert REPORT["device"]["gpu"] == "NVIDIA H200"
    assert REPORT["device"]["compute_capability"] == "9.0"
    assert REPORT["layouts"]["descriptor_variant"] == {"bf16": "leading=K", "e4m3": "leading=K"}


def test_recorded_kernels_are_the_current_sources():
    for rel, info in REPORT["kernels"].items():
        text = (runtime.KERNELS_DIR / rel).read_bytes()
        assert hashlib.sha256(text).hexdigest() == info["sha256"], rel


def test_generated_wgmma_section_is_up_to_date():
    text = (runtime.KERNELS_DIR / "probes" / "layouts.cu").read_text()
    body = text.split("// BEGIN GENERATED\n", 1)[1].split("// END GENERATED", 1)[0]
    assert body == hw_probe.render_wgmma_wrappers()


@pytest.mark.parametrize("fmt,k,n", SHAPES)
def test_wgmma_accumulator_layout_matches_device(fmt, k, n):
    lay = hw.accumulator_layout(f"m64n{n}k{k}")
    assert lay.row.shape == lay.col.shape == (128, n // 2)
    np.testing.assert_array_equal(LAYOUTS[f"ss_{fmt}_n{n}_row"].astype(np.int64), lay.row)
    np.testing.assert_array_equal(LAYOUTS[f"ss_{fmt}_n{n}_col"].astype(np.int64), lay.col)
    entry = REPORT["layouts"]["wgmma_ss"][f"m64n{n}k{k}.{fmt}"]["variants"]
    assert entry["leading=K"]["random_mismatches"] == 0
    assert entry["leading=MN"]["decodes_to_bijection"] is False


@pytest.mark.parametrize("fmt,k", [("bf16", 16), ("e4m3", 32)])
@pytest.mark.parametrize("n", hw_probe.RANDOM_KEEP_N)
def test_wgmma_random_products_through_layout(fmt, k, n):
    a = LAYOUTS[f"ss_{fmt}_n{n}_rand_a"].astype(np.float32)
    b = LAYOUTS[f"ss_{fmt}_n{n}_rand_b"].astype(np.float32)
    d = LAYOUTS[f"ss_{fmt}_n{n}_rand_d"]
    ref = (a @ b).astype(np.float32)
    got = hw.Fragment(d, f"m64n{n}k{k}").to_matrix()
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("fmt,k,n", [("bf16", 16, 16), ("e4m3", 32, 32)])
def test_wgmma_a_in_registers_layout_matches_device(fmt, k, n):
    lay = hw.a_operand_layout(f"m64n{n}k{k}")
    np.testing.assert_array_equal(LAYOUTS[f"rs_{fmt}_thread_of"], lay.thread_of)
    np.testing.assert_array_equal(LAYOUTS[f"rs_{fmt}_elem_of"], lay.reg_of)
    a = LAYOUTS[f"rs_{fmt}_rand_a"].astype(np.float32)
    b = LAYOUTS[f"rs_{fmt}_rand_b"].astype(np.float32)
    got = hw.accumulator_layout(f"m64n{n}k{k}").to_matrix(LAYOUTS[f"rs_{fmt}_rand_d"])
    np.testing.assert_array_equal(got.view(np.uint32), (a @ b).astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("fmt,k", [("bf16", 16), ("e4m3", 32)])
def test_mma_sync_layouts_match_device(fmt, k):
    shape = f"m16n8k{k}"
    acc, a_lay = hw.accumulator_layout(shape), hw.a_operand_layout(shape)
    assert acc.row.shape == (32, 4)
    np.testing.assert_array_equal(LAYOUTS[f"mma_{fmt}_row"], acc.row)
    np.testing.assert_array_equal(LAYOUTS[f"mma_{fmt}_col"], acc.col)
    np.testing.assert_array_equal(LAYOUTS[f"mma_{fmt}_a_thread_of"], a_lay.thread_of)
    np.testing.assert_array_equal(LAYOUTS[f"mma_{fmt}_a_elem_of"], a_lay.reg_of)
    ra = LAYOUTS[f"mma_{fmt}_rand_a"].astype(np.float32)
    rb = LAYOUTS[f"mma_{fmt}_rand_b"].astype(np.float32)
    ref = np.einsum("cik,ckj->cij", ra, rb).astype(np.float32)
    got = acc.to_matrix(LAYOUTS[f"mma_{fmt}_rand_d"])  # batch axis of 8 cases
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
    assert REPORT["layouts"]["mma_sync"][f"{shape}.{fmt}"]["random_mismatches"] == 0


def test_wgmma_accumulator_is_mma_sync_per_warp():
    """Each warp's 16-row slab of m64n8k16 is the mma.sync m16n8k16 accumulator."""
    big, small = hw.accumulator_layout("m64n8k16"), hw.accumulator_layout("m16n8k16")
    for w in range(4):
        np.testing.assert_array_equal(big.row[32 * w:32 * w + 32] - 16 * w, small.row)
        np.testing.assert_array_equal(big.col[32 * w:32 * w + 32], small.col)


def test_bijection_both_ways_and_batch_axes():
    lay = hw.accumulator_layout("m64n96k16")
    rng = np.random.default_rng(0)
    m = rng.integers(0, 2**32, (3, 2, 64, 96), dtype=np.uint32)
    frag = lay.from_matrix(m)
    assert frag.shape == (3, 2, 128, 48)
    np.testing.assert_array_equal(lay.to_matrix(frag), m)
    t, r = np.meshgrid(np.arange(128), np.arange(48), indexing="ij")
    i, j = lay.locate(t, r)
    tt, rr = lay.owner(i, j)
    np.testing.assert_array_equal(tt, t)
    np.testing.assert_array_equal(rr, r)


def test_quads_share_rows():
    lay = hw.accumulator_layout("m64n256k16")
    q = hw.split_quads(lay.row, axis=0)  # [32 quads, 4 lanes, 128 regs]
    assert np.all(q == q[:, :1])


def test_rowcol_view_register_order():
    view = hw.rowcol_view("m64n128k16")
    assert (view.nrow, view.ncol) == (2, 32)
    mi, ni = np.meshgrid(np.arange(2), np.arange(32), indexing="ij")
    np.testing.assert_array_equal(view.reg, (ni & 1) + 2 * mi + 4 * (ni >> 1))
    lay = view.layout
    # every entry of row mi of the view is in one matrix row; columns strictly increase
    rows = lay.row[:, view.reg]
    assert np.all(rows == view.row[:, :, None])
    assert np.all(np.diff(view.col.astype(int), axis=1) > 0)
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_array_equal(view.unapply(view.apply(x)), x)


def test_rowcol_view_with_tiles():
    view = hw.rowcol_view("m64n16k16", tiles=(2, 3))
    assert (view.nrow, view.ncol) == (4, 12)
    lay = view.layout
    assert (lay.rows, lay.cols, lay.registers) == (128, 48, 48)
    assert np.all(lay.row[:, view.reg] == view.row[:, :, None])
    assert np.all(np.diff(view.col.astype(int), axis=1) > 0)
    mma = hw.rowcol_view("m16n8k16", tiles=(1, 2))
    np.testing.assert_array_equal(mma.reg, [[0, 1, 4, 5], [2, 3, 6, 7]])


def test_thread_index():
    ti = hw.thread_index()
    assert ti.warp.tolist() == [t // 32 for t in range(128)]
    assert ti.quad[37] == 1 and ti.lane_in_quad[37] == 1 and ti.lane[37] == 5
    assert ti.quad_in_warpgroup[127] == 31
    t = np.array([[0, 33], [66, 127]])
    assert hw.warp_of(t).tolist() == [[0, 1], [2, 3]]
    assert hw.lane_of(t).tolist() == [[0, 1], [2, 31]]
    assert hw.quad_of(t).tolist() == [[0, 0], [0, 7]]
    assert hw.lane_in_quad(t).tolist() == [[0, 1], [2, 3]]
    assert hw.thread_of(hw.warp_of(t), hw.lane_of(t)).tolist() == t.tolist()
    assert hw.split_warps(np.zeros((5, 128, 3))).shape == (5, 4, 32, 3)
    assert hw.split_quads(np.zeros((5, 32, 3))).shape == (5, 8, 4, 3)


@pytest.mark.parametrize("shape,msg", [
    ("m64n12k16", "multiple of 8"), ("m64n264k16", "8..256"), ("m64n0k16", "8..256"),
    ("m64n128k8", "K must be"), ("m32n8k16", "M must be"), ("m16n16k16", "N = 8"),
    ("64x128", "expected the form"),
])
def test_bad_shapes(shape, msg):
    with pytest.raises(ValueError, match=msg):
        hw.accumulator_layout(shape)


def test_bad_fragments():
    lay = hw.accumulator_layout("m64n64k16")
    with pytest.raises(ValueError, match="thread axis .* length 64.*128 threads"):
        lay.to_matrix(np.zeros((64, 32), np.float32))
    with pytest.raises(ValueError, match="30 registers per thread.*32 per thread"):
        hw.Fragment(np.zeros((128, 30), np.float32), lay)
    with pytest.raises(ValueError, match="warp of 32 threads"):
        hw.Fragment(np.zeros((128, 4), np.float32), "m16n8k16")
    with pytest.raises(ValueError, match=r"expected \[..., 64, 64\]"):
        lay.from_matrix(np.zeros((64, 32)))
    with pytest.raises(ValueError, match="tiles"):
        hw.accumulator_layout("m64n64k16", tiles=(0, 1))
    with pytest.raises(ValueError, match="shared memory"):
        hw.b_operand_layout("m64n64k16")
    with pytest.raises(ValueError, match="thread indices"):
        hw.thread_index([0, 128])
    with pytest.raises(ValueError, match="128 .warpgroup. or 32"):
        hw.thread_index(threads=64)
    with pytest.raises(ValueError, match="thread axis"):
        hw.split_warps(np.zeros((32, 4)))


def test_row_values_gathers_quad_uniform_row_state_into_matrix_rows():
    """RowColView.row_values: thread t's row state lands on the matrix rows view.row[t]; a
    quad-uniform input gives every row its own value exactly once."""
    view = hw.rowcol_view("m64n64k16")
    rows = np.arange(64, dtype=np.float32) * 3 + 1
    per_thread = rows[view.row]                              # [128, 2], quad-uniform
    assert np.array_equal(view.row_values(per_thread), rows)
    assert view.row_values(np.stack([per_thread, -per_thread])).shape == (2, 64)
    with pytest.raises(ValueError, match=r"per_thread: expected \[\.\.\., 128, 2\]"):
        view.row_values(per_thread[:, :1])
