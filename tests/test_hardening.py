"""Argument checking of the library layers: bad arguments fail at once, naming the argument."""

from __future__ import annotations

import io
import os
import re
import shutil
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from memory_peak import traced_peak

from simulator import cli, compare, hw, mma, strategies
from simulator.errors import RecordedDataError
from simulator.numerics import fadd, mufu, mufu_cache, mufu_data, to_float32
from simulator.trace import Trace

BF16 = ml_dtypes.bfloat16


# ---- shuffles, reductions, layouts --------------------------------------------------------------
X32 = np.arange(32, dtype=np.float32).reshape(32, 1)


def _sh(*args, **kwargs):
    return hw.shfl_sync(X32, *args, **kwargs)


class _Sub(np.ndarray):
    pass


def _masked(a):
    return np.ma.masked_array(a, mask=np.zeros(a.shape, bool))


@pytest.mark.parametrize("shape", [(2, 32, 1), (3, 2, 32, 4), (2, 128, 3)])
@pytest.mark.parametrize("mask", [0x0000FFFF, 0xFFFF0000, 0x5555AAAA])
def test_shuffle_batch_axes_with_a_partial_membermask(shape, mask):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    flat = x.reshape((-1,) + shape[-2:])
    for mode, b in (("bfly", 1), ("up", 3), ("down", 2), ("idx", 5)):
        got = hw.shfl_sync(x, mode, b, membermask=mask, full=True)
        want = [hw.shfl_sync(f, mode, b, membermask=mask, full=True) for f in flat]
        np.testing.assert_array_equal(got.value.reshape(flat.shape), [w.value for w in want])
        assert all(np.array_equal(got.defined, w.defined) for w in want)
    y = hw.shfl_xor(x, 1, membermask=mask)
    np.testing.assert_array_equal(y.reshape(flat.shape),
                                  [hw.shfl_xor(f, 1, membermask=mask) for f in flat])


def test_shuffle_batch_axes_with_active_lanes_and_another_axis():
    x = np.arange(2 * 3 * 32, dtype=np.uint32).reshape(2, 32, 3)
    active = np.zeros((2, 32), bool)
    active[0, :8] = True
    active[1, :] = True
    got = hw.shfl_sync(x, "bfly", 1, active=active, full=True)
    for i in range(2):
        one = hw.shfl_sync(x[i], "bfly", 1, active=active[i], full=True)
        np.testing.assert_array_equal(got.value[i], one.value)
        np.testing.assert_array_equal(got.defined[i], one.defined)
    xt = np.moveaxis(x, 1, 0)  # thread axis first: [32, 2, 3]
    np.testing.assert_array_equal(hw.shfl_sync(xt, "bfly", 1, membermask=0xFFFF, axis=0),
                                  np.moveaxis(hw.shfl_sync(x, "bfly", 1, membermask=0xFFFF), 1, 0))


@pytest.mark.parametrize("call, error, match", [
    (lambda: _sh("bfly", 2**64), ValueError, r"b: .*0\.\.0xffffffff, got 18446744073709551616"),
    (lambda: _sh("bfly", -1), ValueError, "b: .*got -1"),
    (lambda: _sh("bfly", np.full(32, 2**63, np.uint64)), ValueError, "b: .*got 9223372036854775808"),
    (lambda: _sh("bfly", np.array([1.7] * 32, dtype=object)), TypeError, r"b: expected an int.*1\.7"),
    (lambda: _sh("bfly", np.array([True] * 32, dtype=object)), TypeError, "b: expected an int.*True"),
    (lambda: _sh("bfly", 1.7), TypeError, r"b: expected an int.*1\.7 \(float\)"),
    (lambda: _sh("bfly", True), TypeError, r"b: expected an int.*True \(bool\)"),
    (lambda: _sh("bfly", np.ones(32)), TypeError, "b: expected an int.*float64"),
    (lambda: _sh("bfly", 1, 31.0), TypeError, r"c: expected an int.*31\.0"),
    (lambda: _sh("bfly", 1, 2**40), ValueError, "c: .*got 1099511627776"),
    (lambda: _sh("bfly", 1, membermask="0xffff"), TypeError, "membermask: .*'0xffff' \\(str\\)"),
    (lambda: _sh("bfly", 1, membermask=65535.0), TypeError, r"membermask: .*65535\.0 \(float\)"),
    (lambda: _sh("bfly", 1, membermask=True), TypeError, r"membermask: .*True \(bool\)"),
    (lambda: _sh("bfly", 1, membermask=2**32), ValueError, "membermask: .*4294967296"),
    (lambda: _sh("bfly", 1, membermask=-1), ValueError, "membermask: .*got -1"),
    (lambda: _sh("bfly", 1, axis=1.5), TypeError, r"axis: expected an int.*1\.5"),
    (lambda: _sh("bfly", 1, full=1), TypeError, "full: expected True or False, got 1"),
    (lambda: _sh("bfly", 1, active=np.full(32, 1.5)), TypeError, "active: .*float64"),
    (lambda: _sh("bfly", 1, active=np.ones(16, bool)), ValueError, r"active: shape \(16,\)"),
    (lambda: _sh(["bfly"], 1), ValueError, "mode must be one of"),
    (lambda: _sh("bfly", 1, undefined=["zero"]), ValueError, "undefined must be one of"),
    (lambda: hw.shfl_xor(X32, 1, width=4.0), TypeError, r"width: expected an int.*4\.0"),
    (lambda: hw.shfl_xor(X32, 1, width=True), TypeError, r"width: expected an int.*True"),
    (lambda: hw.shfl_xor(X32, 1.0), TypeError, r"b: expected an int.*1\.0"),
    (lambda: hw.shfl_xor(X32, 1, membermask=65535.0), TypeError, "membermask"),
    (lambda: hw.allreduce(X32, width=4.0), TypeError, r"width: expected an int.*4\.0"),
    (lambda: hw.allreduce(X32, width=2**70), ValueError, "width must be a power of two"),
    (lambda: hw.c_for_width(4.0, "bfly"), TypeError, r"width: expected an int.*4\.0"),
    (lambda: hw.source_lanes("bfly", 1, 31, threads=32.0), ValueError, r"threads must be .*32\.0"),
    (lambda: hw.thread_index(threads=32.0), ValueError, r"threads must be .*32\.0"),
])
def test_shuffle_arguments_are_checked(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_good_integer_operands_still_work():
    ref = hw.shfl_sync(X32, "bfly", 1, membermask=0xFFFF)
    for b in (np.int64(1), np.uint32(1), np.ones(32, np.uint8), np.array([1] * 32, dtype=object)):
        np.testing.assert_array_equal(hw.shfl_sync(X32, "bfly", b, membermask=np.uint32(0xFFFF)), ref)
    assert np.array_equal(hw.allreduce(X32, width=np.int64(4)), hw.allreduce(X32, width=4))


@pytest.mark.parametrize("call", [
    lambda x: hw.allreduce(x, ftz=0),
    lambda x: hw.resolve_op("sum", ftz="no"),
    lambda x: hw.thread_reduce(x[..., None], zero_init=1),
    lambda x: hw.reduce_sum(x[..., None], warp_reduce=None),
    lambda x: hw.reduce_max(x[..., None], warp_reduce=0),
])
def test_reduction_flags_must_be_bools(call):
    x = np.ones((128, 2), np.float32)
    with pytest.raises(TypeError, match="expected True or False"):
        call(x)


def test_subclasses_are_refused_by_shuffles_reductions_and_fragments():
    x = np.ma.masked_array(np.ones((128, 2), np.float32))
    with pytest.raises(TypeError, match="x: expected a plain numpy array"):
        hw.shfl_xor(x, 1)
    with pytest.raises(TypeError, match="x: expected a plain numpy array"):
        hw.allreduce(x)
    with pytest.raises(TypeError, match="b: expected a plain numpy array"):
        hw.shfl_sync(np.ones((32, 1), np.float32), "bfly", np.ma.masked_array(np.ones(32, int)))
    with pytest.raises(ValueError, match="Fragment data: expected a plain numpy array"):
        hw.Fragment(np.ma.masked_array(np.ones((128, 8), np.float32)), "m64n16k16")
    with pytest.raises(ValueError, match="matrix: expected a plain numpy array"):
        hw.Fragment.from_matrix(np.ma.masked_array(np.ones((64, 16), np.float32)), "m64n16k16")


@pytest.mark.parametrize("tiles", [(10**6, 10**6), (1, 10**9), (2**40, 1)])
def test_huge_tiles_fail_at_once(tiles):
    with pytest.raises(ValueError, match=r"tiles .*at most 4,194,304 elements"):
        hw.accumulator_layout("m64n16k16", tiles=tiles)
    with pytest.raises(ValueError, match=r"tiles .*at most 4,194,304 elements"):
        hw.rowcol_view("m64n16k16", tiles=tiles)


@pytest.mark.parametrize("tiles", [(1.0, 2), (True, 1), (1, 2, 3), (0, 1), "12", None])
def test_tiles_must_be_two_positive_ints(tiles):
    with pytest.raises(ValueError, match="tiles must be a pair of positive ints"):
        hw.accumulator_layout("m64n16k16", tiles=tiles)


def test_largest_tiling_still_builds():
    lay = hw.accumulator_layout("m64n16k16", tiles=(np.int64(2), 3))
    assert (lay.rows, lay.cols) == (128, 48)


# ---- numerics: flags and conversions ------------------------------------------------------------
@pytest.mark.parametrize("fn", [mufu.ex2, mufu.rcp, mufu.lg2])
@pytest.mark.parametrize("model", ["h200", "ideal"])
@pytest.mark.parametrize("flag", [None, 0, 1, "no", 0.0])
def test_mufu_ftz_must_be_a_bool(fn, model, flag):
    with pytest.raises(TypeError, match=f"ftz: expected True or False, got {flag!r}"):
        fn(np.float32([1.5]), model, ftz=flag)


@pytest.mark.parametrize("fn", [mufu.ex2, mufu.rcp, mufu.lg2])
def test_mufu_ftz_numpy_bool_is_fine(fn):
    x = np.array([2.0**-130, 3.0], dtype=np.float32)
    for flag in (False, True):
        want = fn(x, "ideal", ftz=flag)
        assert np.array_equal(fn(x, "ideal", ftz=np.bool_(flag)).view(np.uint32), want.view(np.uint32))


def test_float32_ftz_must_be_a_bool():
    x = np.ones(2, np.float32)
    with pytest.raises(TypeError, match="ftz: expected True or False, got None"):
        fadd(x, x, ftz=None)


@pytest.mark.parametrize("x", [_masked(np.ones((2, 2), BF16)), np.ones((2, 2), np.float16).view(_Sub)])
def test_subclasses_are_refused_by_to_float32(x):
    with pytest.raises(TypeError, match="x: expected a plain numpy array, got (MaskedArray|_Sub)"):
        to_float32(x)


# ---- tensor-core operands and instruction strings -----------------------------------------------
A = np.ones((64, 16), dtype=BF16)
B = np.ones((16, 64), dtype=BF16)
C = np.zeros((64, 64), dtype=np.float32)


@pytest.mark.parametrize("call, name", [
    (lambda: mma.wgmma("m64n64k16.f32.bf16.bf16", _masked(A), B, C), "A"),
    (lambda: mma.wgmma("m64n64k16.f32.bf16.bf16", A, _masked(B), C), "B"),
    (lambda: mma.wgmma("m64n64k16.f32.bf16.bf16", A, B, _masked(C)), "C"),
    (lambda: mma.wgmma("m64n64k16.f32.bf16.bf16", A.view(_Sub), B, C), "A"),
    (lambda: mma.gemm(_masked(A), B), "A"),
    (lambda: mma.gemm(A, B, _masked(C)), "C"),
])
def test_subclasses_are_refused_by_mma(call, name):
    with pytest.raises(TypeError, match=f"{name}: expected a plain numpy array, got (MaskedArray|_Sub)"):
        call()


@pytest.mark.parametrize("instruction", [None, 3, b"wgmma.m64n64k16.f32.bf16.bf16"])
def test_gemm_instruction_must_be_an_instruction_or_a_string(instruction):
    with pytest.raises(ValueError, match="instruction: expected an Instruction or a string"):
        mma.gemm(A, B, instruction=instruction)


@pytest.mark.parametrize("instruction", [
    "wgmma.m64n064k16.f32.bf16.bf16", "wgmma.m64n64k16.f32.bf16.bf16\n",
    "mma_sync.m16n8k16.f32.bf16.bf16.f32\n", "wgmma.m64n00064k16.f32.bf16.bf16",
])
def test_instruction_shapes_are_matched_in_full(instruction):
    with pytest.raises(ValueError, match="unsupported"):
        mma.gemm(A, B, instruction=instruction)
    kind, _, shape = instruction.partition(".")
    with pytest.raises(ValueError, match="unsupported"):
        mma.parse(kind, shape)


def test_parse_kind_is_checked():
    with pytest.raises(ValueError, match="kind: expected 'wgmma' or 'mma_sync', got 'mma.sync'"):
        mma.parse("mma.sync", "m16n8k16.f32.bf16.bf16.f32")
    assert mma.parse("wgmma", "m64n64k16.f32.bf16.bf16").n == 64


# ---- compare.diff -------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["a", "b"])
def test_subclasses_are_refused_by_diff(which):
    x = np.array([1.0, 2.0], np.float32)
    args = {"a": x, "b": x.copy()}
    args[which] = np.ma.masked_array(x, mask=[True, False])
    with pytest.raises(ValueError, match=f"{which}: expected a plain numpy array, got MaskedArray"):
        compare.diff(args["a"], args["b"])


@pytest.mark.parametrize("top", [-1, None, True, False, 1.0, "3"])
def test_diff_top_must_be_an_int_at_least_zero(top):
    a = np.array([1.0, 2.0, 3.0], np.float32)
    with pytest.raises(ValueError, match=f"top: expected an int >= 0 .*got {top!r}"):
        compare.diff(a, a + np.float32(1), top=top)


def test_diff_top_zero_and_numpy_ints():
    a = np.array([1.0, 2.0, 3.0], np.float32)
    assert compare.diff(a, a + np.float32(1), top=0).worst == []
    assert len(compare.diff(a, a + np.float32(1), top=np.int64(2)).worst) == 2
    assert len(compare.diff(a, a + np.float32(1), top=10).worst) == 3


# ---- traces and strategies ----------------------------------------------------------------------
@pytest.mark.parametrize("cta", [(0, 1), (0, 1, 2, 3), 5, None, (0, 1.5, 0), (0, True, 0), (0, -1, 0),
                                 ("0", "1", "2")])
def test_trace_cta_is_three_ints(cta):
    with pytest.raises(ValueError, match="cta: expected three ints >= 0"):
        Trace().add("mask", cta, 0)


@pytest.mark.parametrize("n_block", [-1, 1.0, "0", True])
def test_trace_n_block_is_none_or_an_int(n_block):
    with pytest.raises(ValueError, match="n_block: expected None or an int >= 0"):
        Trace().add("mask", (0, 0, 0), n_block)


def test_trace_with_valid_events_round_trips():
    import io

    t = Trace()
    t.add("mask", [np.int64(0), 1, 2], np.int64(3), acc_s=np.zeros((1, 128, 4), np.float32))
    t.add("finalize", (0, 1, 2), None, lse=np.zeros((1, 128, 2), np.float32))
    with np.load(io.BytesIO(t.to_npz_bytes())) as z:
        back = Trace.from_npz(z)
    assert [(e.step, e.cta, e.n_block) for e in back] == [("mask", (0, 1, 2), 3),
                                                           ("finalize", (0, 1, 2), None)]


@pytest.mark.parametrize("fmt", ["bad", "e5m2", None, ["bf16"]])
def test_narrow_values_names_the_formats(fmt):
    with pytest.raises(ValueError, match=r"fmt: expected one of e4m3, bf16, f16, got"):
        strategies.narrow_values(fmt)


# ---- MUFU data and its cache --------------------------------------------------------------------
@pytest.fixture
def fresh_mufu(monkeypatch, tmp_path):
    """MUFU tables loaded afresh, with the decoded-table cache in a temporary folder."""
    monkeypatch.setenv("FA3SIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(mufu_data.ENV_DIR, raising=False)
    monkeypatch.setattr(mufu_cache, "WARNED", set())
    mufu_data.load.cache_clear()
    mufu.clear_models()
    yield tmp_path
    mufu_data.load.cache_clear()
    mufu.clear_models()


def test_mufu_data_error_is_recorded_data_error():
    assert issubclass(mufu_data.MufuDataError, RecordedDataError)
    assert issubclass(mufu.MufuDataError, RuntimeError)


def test_missing_shipped_table_is_reported_as_missing(fresh_mufu, monkeypatch, capsys):
    data = fresh_mufu / "data"
    data.mkdir()
    shutil.copy(mufu_data.DATA_DIR / "sm90.json", data / "sm90.json")  # sm90.npz deleted
    monkeypatch.setattr(mufu_data, "DATA_DIR", data)
    missing = r"sm90\.npz: file not found.*python -m simulator calibrate"
    with pytest.raises(mufu_data.MufuDataError, match=missing):
        mufu.ex2(np.float32([1.0]))
    (data / "sm90.json").unlink()  # both files gone: sm90 is still the shipped architecture
    with pytest.raises(mufu_data.MufuDataError, match=r"sm90\.npz: file not found"):
        mufu.rcp(np.float32([1.0]))
    with pytest.raises(ValueError, match="unknown MUFU model .sm80."):
        mufu.rcp(np.float32([1.0]), "sm80")
    capsys.readouterr()
    assert cli.main(["verify", "--topic", "mufu", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: MUFU data") and "sm90.npz: file not found" in err


@pytest.fixture(scope="module")
def good_cache(tmp_path_factory):
    """Tables decoded once, and the folder their cache files were written to."""
    folder = tmp_path_factory.mktemp("good-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FA3SIM_CACHE", str(folder))
        mp.delenv(mufu_data.ENV_DIR, raising=False)
        mufu_data.load.cache_clear()
        tables = mufu_data.load("sm90")
        mufu_data.load.cache_clear()
    assert sorted(p.name.split("-")[2] for p in folder.glob("mufu-*.npy")) == sorted(mufu_data.TABLES)
    return tables, folder


def _cache_path(name="rcp"):
    return mufu_cache.cache_path(name, mufu_data.provenance("sm90")["table_blake2b"][name])


def _load_with_warnings():
    mufu_data.load.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tables = mufu_data.load("sm90")
    return tables, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def _not_npy(table):
    return b"not an npy file"


def _truncated(table):
    return _npy(table)[:-4]


def _short(table):
    return _npy(table[:-1])


def _altered_entry(table):
    t = table.copy()
    t[4321] ^= np.uint32(1)
    return _npy(t)


def _other_dtype(table):
    return _npy(table.view(np.int32))


def _npy(a):
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


@pytest.mark.parametrize("damage", [_not_npy, _truncated, _short, _altered_entry, _other_dtype])
@pytest.mark.parametrize("name", ["rcp", "tanh"])
def test_wrong_cache_is_ignored_once_and_rebuilt(fresh_mufu, good_cache, damage, name):
    good, folder = good_cache
    path = _cache_path(name)
    shutil.copytree(folder, path.parent)  # the other tables come from the cache
    path.write_bytes(damage(good[name]))
    again, warned = _load_with_warnings()
    assert len(warned) == 1 and str(path) in warned[0] and "rewriting the cache" in warned[0]
    assert all(np.array_equal(good[k], again[k]) for k in good)
    assert np.array_equal(np.load(path), good[name])  # rebuilt
    _, warned = _load_with_warnings()
    assert warned == []


def _ex2_altered_pos(a):
    return _npy(a + np.int32(np.arange(a.size) == 77))


def _ex2_altered_neg(a):  # in the half that holds ex2_neg, reversed
    return _npy(a + np.int32(np.arange(a.size) == a.size - 5))


@pytest.mark.parametrize("damage", [_not_npy, _short, _ex2_altered_pos, _ex2_altered_neg,
                                    lambda a: _npy(a.view(np.float32))])
def test_wrong_ex2_layout_cache_is_ignored_once_and_rebuilt(fresh_mufu, damage):
    mufu_data.ex2_table("sm90")
    (path,) = (fresh_mufu / "cache").glob("mufu-*-ex2c-*.npy")
    good = np.load(path)
    path.write_bytes(damage(good))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = mufu_data.ex2_table("sm90")
    warned = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(warned) == 1 and str(path) in warned[0] and "rewriting the cache" in warned[0]
    assert np.array_equal(again, good) and np.array_equal(np.load(path), good)


@pytest.mark.parametrize("kind", ["directory", "devnull"])
def test_unusable_cache_path_falls_back_to_decoding(fresh_mufu, good_cache, kind):
    if kind == "devnull" and not os.path.exists(os.devnull):
        pytest.skip("no /dev/null")
    good, folder = good_cache
    path = _cache_path()
    shutil.copytree(folder, path.parent)
    path.unlink()
    if kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(os.devnull)
    tables, warned = _load_with_warnings()
    assert len(warned) == 1 and str(path) in warned[0] and "cannot use the MUFU table cache" in warned[0]
    assert all(np.array_equal(good[k], tables[k]) for k in good)
    mufu_data.load.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process: no second warning
        mufu_data.load("sm90")
    assert path.is_dir() if kind == "directory" else path.is_symlink()


# ---- forward arguments --------------------------------------------------------------------------
def _qkv(fmt=BF16, shape=(2, 8, 2, 32)):
    x = np.ones(shape, dtype=np.float32).astype(fmt)
    return x, x, x


@pytest.mark.parametrize("name", ["softmax_scale", "softcap"])
@pytest.mark.parametrize("value", [10**400, -10**400, 10**5000], ids=["1e400", "-1e400", "1e5000"])
def test_ints_beyond_float64_are_a_value_error(name, value):
    from simulator import flash
    from simulator.flash import host_constants
    for call in (lambda: flash.forward(*_qkv(), **{name: value}),
                 lambda: flash.reference(*_qkv(), **{name: value}),
                 lambda: host_constants(32, **{"softmax_scale": None, "softcap": 0.0, name: value})):
        with pytest.raises(ValueError, match=rf"^{name}: expected a finite .*beyond float64's range"):
            call()


@pytest.mark.parametrize("wrap", [_masked, lambda a: a.view(_Sub)])
def test_seqlens_k_subclasses_are_refused(wrap):
    from simulator import flash
    seqlens = wrap(np.array([8, 3], dtype=np.int64))
    with pytest.raises(ValueError, match=r"^seqlens_k: expected a plain numpy array, got .*mask or subclass"):
        flash.forward(*_qkv(), seqlens_k=seqlens)


@pytest.mark.parametrize("name", ["q_descale", "k_descale", "v_descale"])
@pytest.mark.parametrize("wrap", [_masked, lambda a: a.view(_Sub)])
def test_descale_subclasses_are_refused(name, wrap):
    from simulator import flash
    descale = wrap(np.ones((2, 2), dtype=np.float32))
    with pytest.raises(ValueError, match=rf"^{name}: expected a plain numpy array, got .*mask or subclass"):
        flash.forward(*_qkv(ml_dtypes.float8_e4m3fn), **{name: descale})


def test_plain_seqlens_k_and_descales_still_work():
    from simulator import flash
    res = flash.forward(*_qkv(ml_dtypes.float8_e4m3fn), seqlens_k=[8, 3], q_descale=np.float32(1.0),
                        k_descale=np.ones((2, 2), np.float32), v_descale=np.ones((2, 2), np.float32))
    assert res.out.shape == (2, 8, 2, 32)


# ---- recorded device data against its manifest --------------------------------------------------
def _data_copy(tmp_path, names):
    """A copy of the recorded device folder's manifest and ``names``, in ``tmp_path``."""
    from simulator import io as sio

    folder = tmp_path / "device"
    folder.mkdir()
    for name in [sio.MANIFEST_NAME, *names]:
        shutil.copy(sio.DEVICE_DATA_DIR / name, folder / name)
    return folder


def test_manifest_matches_every_listed_file():
    from simulator import io as sio

    listed = sio.read_manifest(sio.DEVICE_DATA_DIR)
    assert listed, f"{sio.DEVICE_DATA_DIR / sio.MANIFEST_NAME} is missing; run `{sio.MAKE_MANIFEST}`"
    now = sio.manifest_entries(sio.DEVICE_DATA_DIR)
    stale = sorted(n for n, e in listed.items() if n not in now or now[n]["sha256"] != e["sha256"])
    assert not stale, (f"simulator/data/device/{sio.MANIFEST_NAME} is stale for {stale} (a new "
                       f"recording?): run `{sio.MAKE_MANIFEST}` and commit the manifest")


def test_replayed_recordings_are_listed(monkeypatch):
    """Every file the replay reads through read_npz / read_json is in the manifest."""
    from simulator import io as sio
    from simulator import verify

    seen = []
    real = sio.check_manifest

    def spy(path, data, regenerate):
        seen.append(Path(path))
        return real(path, data, regenerate)

    monkeypatch.setattr(sio, "check_manifest", spy)
    verify.run_checks(["hw", "mma", "numerics"], quick=True)
    listed = sio.read_manifest(sio.DEVICE_DATA_DIR)
    device = [p for p in seen if p.parent == sio.DEVICE_DATA_DIR]
    assert {p.name for p in device} >= {"hw_layouts.npz", "mma_report.json", "numerics_digests.npz"}
    assert not [p.name for p in device if p.name not in listed]


def _flip_one_value(path):
    """Rewrite an .npz with one bit of its first non-empty array flipped: still a valid file."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    name = next(k for k, a in arrays.items() if a.size and a.dtype.kind in "uif")
    flat = arrays[name].reshape(-1).view(np.uint8)
    flat[0] ^= 1
    np.savez(path, **arrays)


def test_altered_recording_is_corrupt_data_not_a_mismatch(tmp_path, monkeypatch, capsys):
    from simulator.replay import hw as hw_evidence

    folder = _data_copy(tmp_path, ["hw_layouts.npz", "hw_shuffle.npz"])
    _flip_one_value(folder / "hw_shuffle.npz")
    monkeypatch.setattr(hw_evidence, "DATA_DIR", folder)
    capsys.readouterr()
    assert cli.main(["verify", "--topic", "hw", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: recording corrupt: {folder / 'hw_shuffle.npz'} sha256 differs from "
                          "MANIFEST.json; regenerate with `python -m simulator measure hw_probe"), err
    assert "python scripts/make_manifest.py" in err


def test_altered_goldens_are_corrupt_data_not_a_mismatch(tmp_path, monkeypatch, capsys):
    """The twin's recorded goldens go through the manifest check too: one flipped bit of O is a
    corrupt recording (exit 2), not an emulator that disagrees with the device (exit 1)."""
    from simulator.replay import forward_goldens as fg

    folder = _data_copy(tmp_path, [fg.GOLDENS_FILE])
    assert fg.load_goldens(folder / fg.GOLDENS_FILE)[1]  # the intact copy reads
    _flip_one_value(folder / fg.GOLDENS_FILE)
    with pytest.raises(RecordedDataError, match=r"^recording corrupt: .*forward_goldens\.npz sha256 "
                       r"differs from MANIFEST\.json; regenerate with `python -m "
                       r"simulator measure forward_goldens --out DIR` on a GPU"):
        fg.load_goldens(folder / fg.GOLDENS_FILE)
    monkeypatch.setattr(fg, "DATA_DIR", folder)
    capsys.readouterr()
    assert cli.main(["verify", "--topic", "forward", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: recording corrupt: "), err


def test_altered_traces_are_corrupt_data(tmp_path):
    from simulator.replay import forward_traces as ft

    folder = _data_copy(tmp_path, [ft.TRACES_FILE])
    assert ft.load_traces(folder / ft.TRACES_FILE)[1]
    _flip_one_value(folder / ft.TRACES_FILE)
    with pytest.raises(RecordedDataError, match=r"^recording corrupt: .*forward_traces\.npz sha256 "
                       r"differs from MANIFEST\.json; regenerate with `python -m "
                       r"simulator measure forward_trace --out DIR` on a GPU"):
        ft.load_traces(folder / ft.TRACES_FILE)
    with pytest.raises(RecordedDataError, match=r"forward_traces\.npz is missing"):
        ft.load_traces(tmp_path / "nowhere" / ft.TRACES_FILE)


def test_no_plain_reads_of_recorded_device_data():
    """Every reader of simulator/data/device (package, tests, notebooks) goes through
    simulator.io.read_npz / read_json, so none can bypass the manifest check."""
    import re

    root = Path(__file__).resolve().parents[1]
    sources = [*root.glob("simulator/**/*.py"), *root.glob("tests/*.py"), *root.glob("notebooks/src/*.py")]
    plain = re.compile(r"np\.load\(|json\.loads?\(")
    # names these sources give the device folder or its files (mufu_data.DATA_DIR is the MUFU
    # tables' folder, checked by their own loader)
    device_names = re.compile(r"(?<!mufu_data\.)DATA_DIR|\bDATA\b|data/device|\"device\"|DEVICE_DATA|"
                              r"\bev\.|GOLDENS|TRACES")
    offenders = []
    for path in sources:
        if path.name == "io.py" or "/device/" in str(path.relative_to(root)) and path.stem.endswith(
                ("_sweep", "_probe", "_record", "_calibrate", "_replay")):
            continue  # io.py is the loader; GPU runs read what they have just written
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if plain.search(line) and device_names.search(line):
                offenders.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert not offenders, "plain reads of recorded device data:\n" + "\n".join(offenders)


def test_read_npz_and_read_json_check_listed_files(tmp_path):
    from simulator import io as sio

    folder = _data_copy(tmp_path, ["mma_fp8_probe.json", "mma_fp8_sweep_e4m3.npz"])
    assert sio.read_json(folder / "mma_fp8_probe.json", "regen")
    assert sio.read_npz(folder / "mma_fp8_sweep_e4m3.npz", "regen")
    text = (folder / "mma_fp8_probe.json").read_text()
    (folder / "mma_fp8_probe.json").write_text(text.replace("}", " }", 1))  # same JSON, other bytes
    with pytest.raises(RecordedDataError, match=r"^recording corrupt: .*mma_fp8_probe\.json sha256 "
                       r"differs from MANIFEST\.json; regenerate with `regen`"):
        sio.read_json(folder / "mma_fp8_probe.json", "regen")
    _flip_one_value(folder / "mma_fp8_sweep_e4m3.npz")
    with pytest.raises(RecordedDataError, match=r"^recording corrupt: .*mma_fp8_sweep_e4m3\.npz"):
        sio.read_npz(folder / "mma_fp8_sweep_e4m3.npz", "regen")
    np.savez(folder / "unlisted.npz", x=np.zeros(2))  # not in the manifest: read unchecked
    assert sio.read_npz(folder / "unlisted.npz", "regen")["x"].shape == (2,)


@pytest.mark.parametrize("manifest", ["not json", "[]", '{"format": "other", "files": {}}',
                                      '{"format": "fa3sim-manifest/1", "files": {"a": 3}}'])
def test_a_broken_manifest_is_recorded_data_error(tmp_path, manifest):
    from simulator import io as sio

    (tmp_path / sio.MANIFEST_NAME).write_text(manifest)
    np.savez(tmp_path / "a.npz", x=np.zeros(2))
    with pytest.raises(RecordedDataError, match=r"MANIFEST\.json is .*python scripts/make_manifest\.py"):
        sio.read_npz(tmp_path / "a.npz", "regen")


def test_make_manifest_script(tmp_path):
    import subprocess
    import sys

    np.savez(tmp_path / "a.npz", x=np.arange(3))
    (tmp_path / "b.json").write_text("{}\n")
    script = [sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "make_manifest.py"),
              "--folder", str(tmp_path)]
    assert subprocess.run(script, capture_output=True).returncode == 0
    from simulator import io as sio

    assert set(sio.read_manifest(tmp_path)) == {"a.npz", "b.json"}
    ok = subprocess.run([*script, "--check"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.endswith("MANIFEST.json: current (2 files)\n"), ok.stdout
    (tmp_path / "b.json").write_text("{ }\n")
    r = subprocess.run([*script, "--check"], capture_output=True, text=True)
    assert r.returncode == 1 and "b.json: sha256 differs" in r.stdout
    with pytest.raises(RecordedDataError, match="recording corrupt"):
        sio.read_json(tmp_path / "b.json", "regen")


# ---- a closed stdout is not a success ------------------------------------------------------------
def _closed_pipe() -> int:
    """The write end of a pipe whose reader has gone: every write fails with EPIPE."""
    r, w = os.pipe()
    os.close(r)
    return w


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_run_into_a_closed_stdout_writes_the_result_and_fails(tmp_path, unbuffered):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "o.npz"
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED=unbuffered)
    w = _closed_pipe()
    try:
        r = subprocess.run([sys.executable, "-m", "simulator", "run", "--no-progress", "--heads",
                            "0", "--out", str(out)], stdout=w, stderr=subprocess.PIPE, text=True,
                           cwd=root, env=env)
    finally:
        os.close(w)
    assert r.returncode == cli.EXIT_BROKEN_PIPE, r.stderr
    assert "broken pipe" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert out.is_file()


class _ClosedStdout(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


def test_verify_into_a_closed_stdout_is_not_a_success(monkeypatch, capsys):
    from simulator import verify

    rows = [{"topic": "hw", "check": "x", "cases": 1, "mismatches": 1, "detail": "bad"}]
    monkeypatch.setattr(verify, "run_checks", lambda topics, quick, workers=1, progress=None: rows)
    monkeypatch.setattr("sys.stdout", _ClosedStdout())
    assert cli.main(["verify", "--topic", "hw"]) == cli.EXIT_BROKEN_PIPE
    rows[0]["mismatches"] = 0
    assert cli.main(["verify", "--topic", "hw"]) == cli.EXIT_BROKEN_PIPE


# ---- the KV cache append: all or nothing -------------------------------------------------------
def _kv_call(seed=3):
    rng = np.random.default_rng(seed)
    bf = lambda *s: rng.standard_normal(s).astype(BF16)  # noqa: E731
    q, kc, vc = bf(4, 1, 2, 64), bf(4, 32, 1, 64), bf(4, 32, 1, 64)
    kn, vn = bf(4, 2, 1, 64), bf(4, 2, 1, 64)
    return q, kc, vc, dict(k=kn, v=vn, cache_seqlens=np.array([3, 9, 0, 20], np.int32))


def _interrupt_at(n: int, filename: str):
    """A trace function raising KeyboardInterrupt at the n-th line run in ``filename``: Ctrl-C
    between any two lines of that module."""
    count = [0]

    def local(frame, event, arg):
        if event == "line":
            count[0] += 1
            if count[0] == n:
                raise KeyboardInterrupt
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename == filename else None

    return tracer


def test_ctrl_c_anywhere_in_the_kvcache_call_leaves_the_caches_unchanged_or_appended():
    import sys

    from simulator.fa3 import flash_attn_with_kvcache, kvcache

    q, kc0, vc0, kw = _kv_call()
    kc1, vc1 = kc0.copy(), vc0.copy()
    flash_attn_with_kvcache(q, kc1, vc1, **kw)
    assert not np.array_equal(kc0.view(np.uint16), kc1.view(np.uint16))
    seen = {"unchanged": 0, "appended": 0}
    for n in range(1, 10_000):
        kc, vc = kc0.copy(), vc0.copy()
        sys.settrace(_interrupt_at(n, kvcache.__file__))
        try:
            flash_attn_with_kvcache(q, kc, vc, **kw)
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        finally:
            sys.settrace(None)
        state = [(kc.view(np.uint16).tobytes(), vc.view(np.uint16).tobytes())
                 == (a.view(np.uint16).tobytes(), b.view(np.uint16).tobytes())
                 for a, b in ((kc0, vc0), (kc1, vc1))]
        assert any(state), f"interrupted at line event {n}: the caches are half-written"
        seen["unchanged" if state[0] else "appended"] += 1
        if not interrupted or state[1]:
            break  # the append is done: later interruptions cannot undo it
    assert seen["unchanged"] > 10 and seen["appended"] == 1, seen


# ---- memory budgets: split launches end to end -------------------------------------------------
def test_a_split_launch_stays_within_its_memory_budget():
    from simulator import fa3, flash
    from simulator.flash.forward import memory_needed

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(BF16) for s in ((1, 2048, 4, 64), (1, 384, 4, 64),
                                                              (1, 384, 4, 64)))
    want = fa3.flash_attn_func(q, k, v, num_splits=2)  # also loads the MUFU tables
    fixed, per_cta = memory_needed(flash.make_config(q, k, v, num_splits=2), q.dtype)
    budget = fixed + 4 * per_cta
    got, peak = traced_peak(lambda: fa3.flash_attn_func(q, k, v, num_splits=2, memory_budget=budget))
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    assert peak <= budget, f"peak {peak / budget:.2f} x the budget"


def test_the_combine_runs_its_rows_within_the_budget_with_the_same_bits():
    from simulator.fa3.combine import combine, combine_kernel, row_bytes

    rng = np.random.default_rng(1)
    o = rng.standard_normal((3, 2, 500, 4, 128)).astype(np.float32)
    lse = rng.standard_normal((3, 2, 4, 500)).astype(np.float32)
    want = combine(o, lse, BF16, head_dim_v=128)
    out_bytes = 2 * 500 * 4 * (128 * 2 + 4)
    budget = o.nbytes + lse.nbytes + out_bytes + 50 * row_bytes(3, 128, combine_kernel(3, 128).max_splits)
    got, peak = traced_peak(lambda: combine(o, lse, BF16, head_dim_v=128, memory_budget=budget))
    assert np.array_equal(got[0].view(np.uint16), want[0].view(np.uint16))
    assert np.array_equal(got[1].view(np.uint32), want[1].view(np.uint32))
    assert peak <= budget, f"peak {peak / budget:.2f} x the budget"
    with pytest.raises(MemoryError, match=r"memory_budget: this combine .* per row\), more than"):
        combine(o, lse, BF16, head_dim_v=128, memory_budget=o.nbytes)


# ---- torch tensors: every refusal names the argument -------------------------------------------
def test_an_expanded_torch_v_cache_is_refused_before_either_cache_is_written():
    torch = pytest.importorskip("torch", reason="torch is optional")
    from simulator import fa3

    q = torch.randn(2, 1, 2, 64).to(torch.bfloat16)
    kc = torch.zeros(2, 32, 1, 64, dtype=torch.bfloat16)
    vc = torch.zeros(1, 32, 1, 64, dtype=torch.bfloat16).expand(2, 32, 1, 64)
    kn = torch.randn(2, 1, 1, 64).to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"v_cache: cannot be written in place .* v_cache\.clone\(\)"):
        fa3.flash_attn_with_kvcache(q, kc, vc, k=kn, v=kn.clone(),
                                    cache_seqlens=torch.tensor([3, 4], dtype=torch.int32))
    assert not kc.any()


@pytest.mark.parametrize("dtype, want", [
    ("float8_e5m2", "q: expected dtype bfloat16, float16 or float8_e4m3fn, got float8_e5m2"),
    ("float8_e4m3fnuz", "q: expected dtype bfloat16, float16 or float8_e4m3fn, got float8_e4m3fnuz"),
    ("complex32", r"q: torch dtype torch.complex32 has no NumPy counterpart; FA3 takes"),
])
def test_torch_dtypes_fa3_lacks_are_refused_by_name(dtype, want):
    torch = pytest.importorskip("torch", reason="torch is optional")
    from simulator import fa3

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: complex32 support is experimental
        x = torch.zeros(1, 4, 1, 64, dtype=getattr(torch, dtype))
    with pytest.raises(ValueError, match=want):
        fa3.flash_attn_func(x, x, x)


def test_a_sparse_torch_tensor_is_refused_by_name():
    torch = pytest.importorskip("torch", reason="torch is optional")
    from simulator import fa3

    dense = torch.zeros(1, 4, 1, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"k: expected a dense \(strided\) tensor, got layout "
                                         r"torch.sparse_coo; pass k.to_dense\(\)"):
        fa3.flash_attn_func(dense, dense.to_sparse(), dense)


def test_a_shut_down_executor_is_refused_before_the_caches_are_written():
    from concurrent.futures import ThreadPoolExecutor

    from simulator.fa3 import flash_attn_with_kvcache

    q, kc, vc, kw = _kv_call()
    before = kc.copy()
    pool = ThreadPoolExecutor(2)
    pool.shutdown()
    with pytest.raises(ValueError, match="executor: it takes no more tasks .*not shut down"):
        flash_attn_with_kvcache(q, kc, vc, executor=pool, **kw)
    assert np.array_equal(kc.view(np.uint16), before.view(np.uint16))


# ---- the API's length arguments ----------------------------------------------------------------
def test_a_query_batch_larger_than_the_cache_batch_blames_the_cache():
    from simulator.fa3 import flash_attn_with_kvcache

    q, kc, vc, _ = _kv_call()
    with pytest.raises(ValueError, match=r"^k_cache: expected q's batch 4, got 2 \(FA3: 'batch_size "
                                         r"must be equal to batch_size_k'\)$") as info:
        flash_attn_with_kvcache(q, kc[:2], vc[:2])
    assert "cache_batch_idx" not in str(info.value)  # an argument the caller did not pass


def test_max_seqlen_k_0_is_taken_when_every_sequence_is_empty():
    from simulator import fa3

    q = np.ones((4, 2, 64), BF16)
    k = np.ones((0, 2, 64), BF16)
    cq, ck = np.array([0, 2, 4], np.int32), np.zeros(3, np.int32)
    out, lse = fa3.flash_attn_varlen_func(q, k, k, cq, ck, 2, 0, return_attn_probs=True)
    assert not out.astype(np.float32).any() and np.isposinf(lse).all()  # mha_fwd: total_k == 0
    with pytest.raises(ValueError, match=r"max_seqlen_k: expected an int >= every sequence's "
                                         r"length \(2\), got 0"):
        fa3.flash_attn_varlen_func(q, np.ones((3, 2, 64), BF16), np.ones((3, 2, 64), BF16), cq,
                                   np.array([0, 1, 3], np.int32), 2, 0)


@pytest.mark.parametrize("value, shown", [(3, "int 3"), (np.int32(4), r"int32 np\.int32\(4\)")])
def test_lengths_that_are_not_arrays_say_what_they_are(value, shown):
    from simulator import fa3

    q = np.ones((4, 2, 64), BF16)
    with pytest.raises(ValueError, match=rf"cu_seqlens_q: expected an int32 array \(NumPy or "
                                         rf"torch\), got {shown}"):
        fa3.flash_attn_varlen_func(q, q, q, value, np.array([0, 4], np.int32), 4, 4)


@pytest.mark.parametrize("softcap, why", [
    (1e-45, r"becomes np.float32\(1e-45\): a subnormal float32, which the kernel's .ftz "
            r"arithmetic flushes to 0\)"),
    (1e-50, r"becomes np.float32\(0.0\): an underflow\)"),
    (1e39, r"becomes np.float32\(inf\): an overflow\)"),
])
def test_a_softcap_lost_in_the_float32_cast_says_how(softcap, why):
    from simulator import fa3

    q = np.ones((1, 4, 1, 64), BF16)
    with pytest.raises(ValueError, match=rf"softcap: {re.escape(repr(softcap))} does not survive .*{why}"):
        fa3.flash_attn_func(q, q, q, softcap=softcap)


# ---- the MUFU table cache: unusable folders and killed writers ---------------------------------
def _rcp_with_warnings():
    mufu_data.load.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = mufu_data.tables("sm90", ["rcp"])["rcp"]
    return table, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("kind", ["file", "devnull", "read-only"])
def test_an_unwritable_cache_folder_is_reported_once(fresh_mufu, good_cache, monkeypatch, kind):
    good, _ = good_cache
    if kind == "file":
        (fresh_mufu / "plain").write_text("not a folder")
        monkeypatch.setenv("FA3SIM_CACHE", str(fresh_mufu / "plain"))
    elif kind == "devnull":
        monkeypatch.setenv("FA3SIM_CACHE", os.devnull)
    else:  # as root (which ignores permissions) a read-only folder is simulated
        from simulator import io as sim_io

        def refused(path, data, durable=True):
            raise PermissionError(13, "Permission denied", str(path))

        monkeypatch.setattr(sim_io, "write_bytes_atomic", refused)
    table, warned = _rcp_with_warnings()
    assert np.array_equal(table, good["rcp"])
    assert len(warned) == 1 and "cannot use the MUFU table cache" in warned[0], warned
    assert "cannot write it" in warned[0] and "FA3SIM_CACHE to a writable folder" in warned[0]
    _, again = _rcp_with_warnings()
    assert again == []  # once per process


def test_a_killed_writers_temporary_file_is_removed_when_stale(fresh_mufu, good_cache, monkeypatch):
    import time

    _, folder = good_cache
    cache = fresh_mufu / "cache"
    shutil.copytree(folder, cache)
    monkeypatch.setattr(mufu_cache, "SWEPT", set())
    stale, fresh = cache / ".mufu-3-rcp-x.npy.abc.tmp", cache / ".mufu-3-lg2-x.npy.def.tmp"
    for p in (stale, fresh):
        p.write_bytes(b"\0" * 1000)
    old = time.time() - mufu_data.STALE_TMP_SECONDS - 60
    os.utime(stale, (old, old))
    _rcp_with_warnings()
    assert not stale.exists() and fresh.exists()  # a live writer's file is left alone


@pytest.mark.parametrize("o_shape, l_shape, match", [
    ((2, 1, 3, 1, 1000), (2, 1, 3, 1), r"out_partial: head_dim 1000 is over 512"),
    ((2, 1, 1, 3, 1, 8), (2, 1, 1, 3, 1), r"out_partial: expected 5 dims .* got shape \[2, 1, 1, 3, 1, 8\]"),
    ((2, 1, 3, 1, 8), (2, 1, 3, 1, 1), r"lse_partial: expected 4 dims .* got shape \[2, 1, 3, 1, 1\]"),
])
def test_flash_attn_combine_applies_fa3s_limits(o_shape, l_shape, match):
    from simulator import fa3

    with pytest.raises(ValueError, match=match):
        fa3.flash_attn_combine(np.zeros(o_shape, np.float32), np.zeros(l_shape, np.float32))


def test_memory_mapped_inputs_are_taken_by_the_fa3_api(tmp_path):
    from simulator import fa3

    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 40, 2, 64)).astype(np.float16)
    np.save(tmp_path / "x.npy", x)
    m = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert isinstance(m, np.memmap) and not m.flags.writeable
    got = fa3.flash_attn_func(m, m, m, causal=True)
    assert np.array_equal(got.view(np.uint16), fa3.flash_attn_func(x, x, x, causal=True).view(np.uint16))
    kc = np.load(tmp_path / "x.npy", mmap_mode="r")  # a read-only cache still cannot take appends
    with pytest.raises(ValueError, match="k_cache: read-only"):
        fa3.flash_attn_with_kvcache(m[:, :1], kc, kc, k=m[:, :1], v=m[:, :1],
                                    cache_seqlens=np.array([3], np.int32))


@pytest.mark.parametrize("api", ["func", "kvcache"])
def test_a_batch_vector_of_descales_is_refused_not_applied_per_kv_head(api):
    from simulator import fa3

    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 16, 2, 64)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
               for _ in range(3))
    per_batch = np.array([0.5, 2.0], np.float32)  # batch == heads_kv: it would broadcast per head
    call = fa3.flash_attn_func if api == "func" else fa3.flash_attn_with_kvcache
    with pytest.raises(ValueError, match=r"k_descale: expected a scalar or shape \[2, 2\] \(\[batch, "
                                         r"heads_kv\]: FA3's .* got \[2\]"):
        call(q, k, v, k_descale=per_batch)
    call(q, k, v, k_descale=np.repeat(per_batch[:, None], 2, axis=1))  # the [batch, heads_kv] form
