"""MUFU models (ex2, rcp, lg2, tanh and the fast-math forms) against recorded H200 results.

Device truth comes from simulator/data/device/mufu_* (recorded by `python -m simulator
calibrate`, separately from the tables in simulator/data/mufu/): 1M samples per form and
per-chunk digests of all 2^32 results. Every comparison is on uint32 bit patterns.
"""

from __future__ import annotations

import json
import shutil
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from simulator.io import read_json, read_npz
from simulator.numerics import mufu, mufu_data
from simulator.replay import mufu as ev

sys.path.insert(0, str(Path(__file__).parent))
from exact_reference import decode, round_f32  # noqa: E402

FORMS = list(ev.FORMS)
REGEN = "python -m simulator calibrate"


def f32(*v):
    return np.array(v, dtype=np.float32)


def bits(a):
    return [f"0x{int(u):08x}" for u in np.asarray(a).view(np.uint32).reshape(-1)]


@pytest.fixture(scope="module")
def samples():
    return read_npz(ev.SAMPLES, REGEN)  # checked against MANIFEST.json


@pytest.fixture(scope="module")
def digests():
    return read_npz(ev.DIGESTS, REGEN)


def test_report_says_exhaustive_and_exact():
    rep = read_json(ev.REPORT, REGEN)
    assert rep["device"]["gpu"] == "NVIDIA H200"
    assert rep["total_mismatches"] == 0
    for form in FORMS:
        assert rep["forms"][form]["inputs"] == 1 << 32
        assert rep["forms"][form]["mismatches"] == 0


@pytest.mark.parametrize("form", FORMS)
def test_recorded_samples_bit_exact(form, samples):
    x, dev = ev.decode_samples(form, samples)
    assert x.size >= 1 << 20
    emu = mufu.FORMS[form](x.view(np.float32)).view(np.uint32)
    bad = np.flatnonzero(emu != dev)
    assert bad.size == 0, f"{form}: {bad.size} mismatches, e.g. x={bits(x[bad[:4]].view(np.float32))}"


@pytest.mark.parametrize("form", [f for f in FORMS if f not in ev.SAME_AS])
def test_exhaustive_digest_chunks(form, digests):
    edges = ev.edge_chunks(form)
    chunks = edges[:: max(1, len(edges) // 5)][:5] + [0x3F8, 0xC1F]  # + [1, 2), (-30, -28]
    for c in chunks:
        xb = ev.chunk_inputs(c)
        got = ev.digest(mufu.FORMS[form](xb.view(np.float32)).view(np.uint32))
        assert got == digests[form][c].tobytes(), f"{form}: chunk {c:#x} differs from the H200"


def test_special_values_sm90():
    # hardware-facts.md and the H200 sweep: ex2, lg2, rcp specials (result bits)
    assert bits(mufu.ex2(f32(0, -0.0, -np.inf, np.inf, np.nan, -126.0, -126.5))) == [
        "0x3f800000", "0x3f800000", "0x00000000", "0x7f800000", "0x7fffffff", "0x00800000",
        "0x00000000"]
    assert bits(mufu.lg2(f32(0, -0.0, -1, np.inf, 1e-40))) == [
        "0xff800000", "0xff800000", "0x7fffffff", "0x7f800000", "0xff800000"]
    assert bits(mufu.rcp(f32(0, -0.0, np.inf, -np.inf, np.nan, 1e-40))) == [
        "0x7f800000", "0xff800000", "0x00000000", "0x80000000", "0x7fffffff", "0x7f800000"]
    assert bits(mufu.tanh(f32(0, -0.0, np.inf, -np.inf, 1e-40, 9.0))) == [
        "0x00000000", "0x80000000", "0x3f800000", "0xbf800000", "0x000116c2", "0x3f800000"]


def test_non_ftz_forms_keep_subnormals():
    assert bits(mufu.ex2(f32(-149.0), ftz=False)) == ["0x00000001"]
    assert bits(mufu.ex2(f32(-149.0), ftz=True)) == ["0x00000000"]
    assert bits(mufu.lg2(f32(2.0**-140), ftz=False)) == bits(f32(-140.0))
    assert bits(mufu.rcp(f32(2.0**127), ftz=False)) == ["0x00400000"]


def test_ex2_sign_magnitude_split():
    # ex2(x) = 2^i * ex2(f) for x >= 0 and 2^-i * ex2(-f) for x < 0 (|x| = i + f)
    f = np.float32(0.3125)
    for i in (1, 5, 20):
        assert bits(mufu.ex2(np.float32(i) + f)) == bits(mufu.ex2(f) * np.float32(2.0**i))
        assert bits(mufu.ex2(-(np.float32(i) + f))) == bits(mufu.ex2(-f) * np.float32(2.0**-i))


def test_shapes_and_scalars():
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    for fn in (mufu.ex2, mufu.rcp, mufu.lg2, mufu.tanh, mufu.expf_fast, mufu.logf_fast):
        out = fn(x)
        assert out.shape == x.shape and out.dtype == np.float32
    assert mufu.ex2(np.float32(1.0)).shape == ()
    assert bits(mufu.ex2(np.float32(1.0))) == ["0x40000000"]


def test_type_errors_name_argument_and_dtype():
    with pytest.raises(TypeError, match="x: expected a float32 array, got dtype float64"):
        mufu.ex2(np.zeros(3))
    with pytest.raises(TypeError, match="x"):
        mufu.tanh(1.0)


def test_unknown_model_lists_the_gpus():
    with pytest.raises(ValueError, match=r"unknown MUFU model 'sm80': expected 'ideal' or a GPU .*"
                                         r"\['h200', 'h100', 'h100-pcie'\]"):
        mufu.ex2(f32(1.0), model="sm80")
    assert mufu.model_names() == ["ideal", "h200", "h100", "h100-pcie"]


def test_ideal_rcp_is_correctly_rounded():
    rng = np.random.default_rng(3)
    u = rng.integers(0x00800000, 0x7F000000, 2000, dtype=np.uint32)
    got = mufu.rcp(u.view(np.float32), model="ideal", ftz=False).view(np.uint32)
    want = [round_f32(1 / decode(int(v))) for v in u]
    assert [int(g) for g in got] == want


def test_ideal_ex2_lg2_exact_points_and_ulp_cost():
    k = np.arange(-20, 21, dtype=np.float32)
    assert bits(mufu.ex2(k, model="ideal")) == bits(np.float32(2.0) ** k)
    assert bits(mufu.lg2(np.float32(2.0) ** k, model="ideal")) == bits(k)
    # the approximation's cost, in ulps, over the softmax range
    x = np.linspace(-30, 8, 100_000, dtype=np.float32)
    d = mufu.ex2(x).view(np.int32).astype(np.int64) - mufu.ex2(x, model="ideal").view(np.int32)
    assert d.min() >= -2 and d.max() <= 1 and np.any(d != 0)


def test_ideal_tanh_matches_exact_rational_rounding():
    x = f32(0.5, 1.0, 2.5, -0.75)
    got = mufu.tanh(x, model="ideal").view(np.uint32)
    for xi, g in zip(x, got, strict=True):
        from decimal import Decimal, localcontext
        with localcontext() as c:
            c.prec = 80
            e = (2 * Decimal(float(xi))).exp()
            t = (e - 1) / (e + 1)
        assert int(g) == round_f32(Fraction(t))


def _copy_data(tmp_path):
    for p in mufu_data.DATA_DIR.iterdir():
        shutil.copy(p, tmp_path / p.name)


def test_corrupt_table_fails_loudly(tmp_path, monkeypatch):
    _copy_data(tmp_path)
    npz = tmp_path / "sm90.npz"
    with np.load(npz) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["rcp__res"] = arrays["rcp__res"].copy()
    arrays["rcp__res"][12345] += 1
    np.savez_compressed(npz, **arrays)
    monkeypatch.setenv(mufu_data.ENV_DIR, str(tmp_path))
    mufu_data.load.cache_clear()
    try:
        with pytest.raises(mufu_data.MufuDataError) as exc:
            mufu_data.load("sm90")
        msg = str(exc.value)
        assert str(npz) in msg and "checksum mismatch" in msg
        assert "python -m simulator calibrate" in msg
    finally:
        mufu_data.load.cache_clear()


def test_missing_or_unreadable_table(tmp_path, monkeypatch):
    _copy_data(tmp_path)
    (tmp_path / "sm90.npz").write_bytes(b"not a zip")
    monkeypatch.delenv(mufu_data.ENV_DIR, raising=False)
    monkeypatch.setattr(mufu_data, "DATA_DIR", tmp_path)
    mufu_data.load.cache_clear()
    try:
        with pytest.raises(mufu_data.MufuDataError, match="sm90.npz.*python -m simulator calibrate"):
            mufu_data.load("sm90")
        (tmp_path / "sm90.npz").unlink()
        with pytest.raises(mufu_data.MufuDataError, match="not found"):
            mufu_data.load("sm90")
    finally:
        mufu_data.load.cache_clear()


def test_data_budget():
    total = sum(p.stat().st_size for p in mufu_data.DATA_DIR.iterdir())
    assert total <= 16 * 2**20
    evidence = sum(p.stat().st_size for p in ev.DATA_DIR.glob("mufu_*"))
    assert evidence <= 8 * 2**20


@pytest.mark.device
def test_live_device_matches_emulator():
    from simulator.device.runtime import gpu_available, load_module  # noqa: PLC0415

    ok, why = gpu_available()
    if not ok:
        pytest.skip(why)
    import cupy  # noqa: PLC0415

    module = load_module(ev.KERNEL)
    for form, (kname, _, _) in ev.FORMS.items():
        x = ev.sample_inputs(form, 1 << 16)
        dx = cupy.asarray(x)
        d = cupy.empty_like(dx)
        module.get_function(f"{kname}_list")((256,), (256,), (dx, d, np.int64(x.size)))
        assert np.array_equal(d.get(), mufu.FORMS[form](x.view(np.float32)).view(np.uint32)), form


def test_decoded_table_cache(tmp_path, monkeypatch):
    """Decoded tables are cached under FA3SIM_CACHE, one file per table named after its
    recorded checksum, re-verified, and a damaged cache file is ignored (the table is decoded
    again from the shipped data)."""
    monkeypatch.setenv("FA3SIM_CACHE", str(tmp_path))
    # files of earlier cache layouts go when the current one is written; others' files stay
    stale = [tmp_path / "mufu-tables-1-00ff.npz", tmp_path / "mufu-1-ex2-00ff.npy"]
    for p in stale:
        p.write_bytes(b"old")
    (tmp_path / "notes.txt").write_text("mine")
    mufu_data.load.cache_clear()
    first = mufu_data.load("sm90")
    assert not any(p.exists() for p in stale) and (tmp_path / "notes.txt").exists()
    sums = mufu_data.provenance("sm90")["table_blake2b"]
    files = sorted(p.name for p in tmp_path.glob("mufu-*.npy"))
    assert files == sorted(f"mufu-{mufu_data.CACHE_VERSION}-{n}-{sums[n]}.npy" for n in sums)
    (tmp_path / files[0]).write_bytes(b"not an npy")
    mufu_data.load.cache_clear()
    with pytest.warns(RuntimeWarning, match="ignoring the MUFU table cache"):
        again = mufu_data.load("sm90")
    assert all(np.array_equal(first[k], again[k]) for k in first)
    mufu_data.load.cache_clear()


def test_table_checksums_are_recorded_and_match_the_whole():
    """Each table's recorded checksum (so one table can be loaded alone) belongs to the tables
    whose whole-set checksum was recorded at calibration."""
    prov = mufu_data.provenance("sm90")
    t = mufu_data.load("sm90")
    assert mufu_data.checksum(t) == prov["tables_blake2b"]
    assert mufu_data.table_checksums(t) == prov["table_blake2b"]
    assert np.array_equal(mufu_data.ex2_table("sm90")[: 1 << 23].view(np.uint32), t["ex2_pos"])


def test_recordings_belong_to_the_current_probe_kernel():
    """kernels/probes/mufu.cu changed => re-run `python -m simulator calibrate` on a GPU."""
    from simulator.device.runtime import source_sha256

    want = source_sha256("probes/mufu.cu")
    assert read_json(ev.REPORT, REGEN)["kernel_sha256"] == want
    assert json.loads((mufu_data.DATA_DIR / "sm90.json").read_text())["kernel_sha256"] == want
