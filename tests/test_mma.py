"""Tensor-core models: replay of recorded H200 outputs, API rules, arithmetic invariants."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import gpus, mma
from simulator.device.runtime import source_sha256
from simulator.mma import fused, spec, termloop
from simulator.replay import mma as ev
from simulator.replay.mma_probes import PROBES, emulate_probe

BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def recorded():
    return ev.load_recorded()


def test_report_provenance(recorded):
    report, digests = recorded
    assert report["device"]["gpu"] == "NVIDIA H200"
    assert report["kernel_sha256"] == source_sha256(ev.KERNEL), (
        "kernels/probes/mma.cu changed since the recorded validation: " + ev.REGENERATE)
    for name in PROBES:
        assert report[name]["outputs"] >= 10_000_000
        assert digests[name].shape == (report[name]["blocks"], 16)
    assert all(v["mismatches"] == 0 for v in report["layouts"].values() for v in v)


@pytest.mark.parametrize("name", [n for n, (k, *_r, f) in PROBES.items() if (k, f) in mma.EXACT])
def test_exact_families_replay_device_bits(recorded, name):
    rows = ev.check_probe(name, *recorded, blocks=3)
    assert all(r["mismatches"] == 0 for r in rows), rows


@pytest.fixture(scope="module")
def fp8_probe():
    from simulator.io import read_npz

    return read_npz(ev.DATA_DIR / "mma_fp8_probe.npz", "python -m simulator measure mma_fp8_probe --out DIR")


def test_fp8_mma_sync_targeted_probe_replays_device_bits(fp8_probe):
    """384,000 H200 outputs with 2-3 products each (mma_fp8_probe.npz): the two-step model
    (k % 4 in {0, 1}, then {2, 3}; C added last with RN) reproduces every one; the single
    fused step it replaced misses the outputs whose large product sits in step 1 and small
    opposite-sign product in step 2."""
    from dataclasses import replace

    name = "mma_sync_m16n8k32_e4m3"
    p = mma.PARAMS[("mma_sync", "e4m3")]
    got = emulate_probe(name, fp8_probe["A"], fp8_probe["B"], fp8_probe["C"], p)
    assert got.shape == fp8_probe["D"].shape == (3000, 16, 8)
    assert np.count_nonzero(got != fp8_probe["D"]) == 0
    single = emulate_probe(name, fp8_probe["A"], fp8_probe["B"], fp8_probe["C"], replace(p, k_steps=()))
    assert np.count_nonzero(single != fp8_probe["D"]) > 1000


def test_k_steps_must_cover_k():
    from dataclasses import replace

    p = replace(mma.PARAMS[("mma_sync", "e4m3")], k_steps=((0, 1), (2,)))
    with pytest.raises(ValueError, match="k_steps"):
        fused.fused_dot_add(np.ones((16, 4)), np.ones((4, 8)), np.zeros((16, 8), np.float32), p)


def test_wrong_model_is_caught(recorded, monkeypatch):
    wrong = {key: fused.FusedDotAdd(**{**vars(p), "frac_bits": 24}) for key, p in mma.PARAMS.items()}
    monkeypatch.setitem(mma.instructions.PARAMETER_SETS, gpus.get_gpu().tensor_cores, wrong)
    rows = ev.check_probe("wgmma_m64n8k16_bf16", *recorded, blocks=1)
    assert rows[0]["mismatches"] > 0


def _ints(shape, rng, fmt=BF16):
    return rng.integers(-4, 5, shape).astype(np.float32).astype(fmt)


def test_integer_data_is_exact_and_chaining_matches():
    rng = np.random.default_rng(0)
    a, b = _ints((2, 64, 64), rng), _ints((64, 48), rng)
    c = rng.integers(-9, 10, (2, 64, 48)).astype(np.float32)
    exact = (a.astype(np.float64) @ b.astype(np.float64) + c).astype(np.float32)
    d = mma.gemm(a, b, c, instruction="wgmma.m64n48k16.f32.bf16.bf16")
    assert np.array_equal(d.view(np.uint32), exact.view(np.uint32))
    # gemm over K = 64 is four chained single instructions
    step = c
    for k0 in range(0, 64, 16):
        step = mma.wgmma("m64n48k16.f32.bf16.bf16", a[..., k0:k0 + 16], b[k0:k0 + 16], step)
    assert np.array_equal(d.view(np.uint32), step.view(np.uint32))


def _wgmma_const(a_val, b_val, c_val, k_used):
    a = np.zeros((64, 16), np.float32)
    a[:, :k_used] = a_val
    b = np.zeros((16, 8), np.float32)
    b[:k_used] = b_val
    c = np.full((64, 8), c_val, np.float32)
    return mma.wgmma("m64n8k16.f32.bf16.bf16", a.astype(BF16), b.astype(BF16), c)


def test_terms_below_25_bits_are_truncated_away():
    # 16 products of 2^-26 would add 2^-22 (two ulps of 1.0) to c = 1; each lies 26 binades
    # below E = 0, past the 25 bits kept, so every one is truncated to zero.
    assert np.all(_wgmma_const(2.0**-13, 2.0**-13, 1.0, 16) == np.float32(1.0))
    # at 2^-25 (exactly 25 bits below E) they are kept: 1 + 16 * 2^-25 = 1 + 2^-21
    assert np.all(_wgmma_const(2.0**-12, 2.0**-13, 1.0, 16) == np.float32(1 + 2.0**-21))


def test_sum_rounds_toward_zero():
    # 1 + 3 * 2^-25 is 0.75 ulp above 1: nearest would give 1 + 2^-23, the H200 gives 1
    assert np.all(_wgmma_const(2.0**-12, 2.0**-13, 1.0, 3) == np.float32(1.0))
    assert np.all(_wgmma_const(2.0**-12, -(2.0**-13), -1.0, 3) == np.float32(-1.0))


def test_fp8_wgmma_keeps_14_bits_of_c():
    c = np.full((64, 8), 1 + 2.0**-20, np.float32)
    z = np.zeros((64, 32), np.float32).astype(ml_dtypes.float8_e4m3fn)
    zb = np.zeros((32, 8), np.float32).astype(ml_dtypes.float8_e4m3fn)
    d = mma.wgmma("m64n8k32.f32.e4m3.e4m3", z, zb, c)
    assert np.all(d == 1.0)  # 2^-20 lies below the 13 fractional bits kept


def test_nan_and_inf():
    a = np.ones((16, 16), np.float32)
    a[0, 0] = np.inf
    b = np.zeros((16, 8), np.float32)
    d = mma.mma_sync("m16n8k16.f32.bf16.bf16.f32", a.astype(BF16), b.astype(BF16))
    assert np.all(d[0].view(np.uint32) == 0x7FFFFFFF)  # inf * 0
    assert np.all(d[1:] == 0)


@pytest.mark.parametrize("shape", ["m64n12k16.f32.bf16.bf16", "m64n264k16.f32.bf16.bf16",
                                   "m64n64k32.f32.bf16.bf16", "m64n64k16.f16.bf16.bf16",
                                   "m64n64k32.f32.e4m3.e5m2", 42])
def test_unsupported_shapes(shape):
    with pytest.raises(ValueError, match="supported"):
        mma.parse("wgmma", shape)


def test_operand_errors():
    a = np.zeros((64, 16), BF16)
    b = np.zeros((16, 64), BF16)
    with pytest.raises(TypeError, match="^A: expected an array of dtype bfloat16"):
        mma.wgmma("m64n64k16.f32.bf16.bf16", a.astype(np.float16), b)
    with pytest.raises(ValueError, match=r"^B: expected shape \[..., 16, 64\]"):
        mma.wgmma("m64n64k16.f32.bf16.bf16", a, b[:, :32])
    with pytest.raises(TypeError, match="^C: expected a float32"):
        mma.wgmma("m64n64k16.f32.bf16.bf16", a, b, np.zeros((64, 64)))
    with pytest.raises(ValueError, match="not a multiple"):
        mma.gemm(np.zeros((4, 24), BF16), np.zeros((24, 4), BF16))


def test_fragment_entry_points_match_matrix_calls():
    from simulator.hw import Fragment, a_operand_layout, accumulator_layout

    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 64, 16)).astype(BF16)
    b = rng.standard_normal((16, 32)).astype(BF16)
    c = rng.standard_normal((2, 64, 32)).astype(np.float32)
    want = mma.wgmma("m64n32k16.f32.bf16.bf16", a, b, c)
    a_frag = Fragment.from_matrix(a, a_operand_layout("m64n32k16"))
    c_frag = Fragment.from_matrix(c, accumulator_layout("m64n32k16"))
    d = mma.wgmma_fragments("m64n32k16.f32.bf16.bf16", a_frag, b, c_frag)
    assert d.data.shape == (2, 128, 16)
    assert np.array_equal(d.to_matrix().view(np.uint32), want.view(np.uint32))
    with pytest.raises(ValueError, match="accumulator layout"):
        mma.wgmma_fragments("m64n32k16.f32.bf16.bf16", a, b, Fragment(c_frag.data[..., :8],
                                                                         "m64n16k16"))


def test_fast_path_equals_reference_path():
    from simulator.replay.mma_cases import mma_block
    from simulator.replay.mma_probes import decode

    for fmt, k in (("bf16", 16), ("e4m3", 32)):
        p = mma.PARAMS[("wgmma", fmt)]
        A, B, C = mma_block(fmt, 64, 8, k, 5, 40)
        a, b, c = decode(A, fmt), decode(B, fmt), C.view(np.float32)
        fast = termloop.term_loop_step(a, b, c, p)
        ref = spec.spec_step(a, b, c, p)
        assert np.array_equal(fast.view(np.uint32), ref.view(np.uint32))


def test_agrees_with_mmasim_where_installed():
    torch = pytest.importorskip("torch", reason="mmasim needs torch; optional cross-check")
    sim = pytest.importorskip("mmasim.nv_ptx.sim", reason="optional: pip install mmasim")
    from simulator.replay.mma_cases import mma_block
    from simulator.replay.mma_probes import decode

    A, B, C = mma_block("bf16", 64, 8, 16, 3, 10)
    op = sim.WGMMA("Hopper", "m64n8k16.f32.bf16.bf16")
    for t in range(A.shape[0]):
        ref = op(torch.from_numpy(decode(A[t], "bf16").astype(np.float32)).to(torch.bfloat16),
                 torch.from_numpy(decode(B[t], "bf16").astype(np.float32)).to(torch.bfloat16),
                 torch.from_numpy(C[t].view(np.float32).copy())).numpy()
        ours = mma.wgmma("m64n8k16.f32.bf16.bf16", A[t].view(BF16), B[t].view(BF16), C[t].view(np.float32))
        assert np.array_equal(ref.view(np.uint32), ours.view(np.uint32))


def test_all_zero_operands_give_signed_zero():
    a = np.zeros((64, 16), BF16)
    b = np.zeros((16, 8), BF16)
    d = mma.wgmma("m64n8k16.f32.bf16.bf16", a, b, np.zeros((64, 8), np.float32))
    assert np.all(d.view(np.uint32) == 0)
    # IEEE sums of signed zeros: -0 only when every term is -0 (products +0 * -0 = -0)
    neg_b = np.full((16, 8), -0.0, np.float32).astype(BF16)
    minus = np.full((64, 8), -0.0, np.float32)
    assert np.all(mma.wgmma("m64n8k16.f32.bf16.bf16", a, neg_b, minus).view(np.uint32) == 0x80000000)
    assert np.all(mma.wgmma("m64n8k16.f32.bf16.bf16", a, b, minus).view(np.uint32) == 0)


def _rz_exact(x: float, bits: int) -> float:
    """Round toward zero to ``bits`` significant bits with float32's range, by exact rationals."""
    from fractions import Fraction

    if x == 0:
        return x
    f = abs(Fraction(x))
    e = max(f.numerator.bit_length() - f.denominator.bit_length(), -200)
    while Fraction(2) ** e > f:
        e -= 1
    while Fraction(2) ** (e + 1) <= f:
        e += 1
    q = Fraction(2) ** (max(e, -126) - (bits - 1))
    r = (f // q) * q
    if r >= Fraction(2) ** 128:
        return np.copysign(np.inf, x)
    return float(np.copysign(float(r), x))


@pytest.mark.parametrize("bits", [24, 14])
def test_round_toward_zero_matches_exact_definition(bits):
    rng = np.random.default_rng(7)
    x = np.concatenate([
        rng.standard_normal(2000) * 2.0 ** rng.integers(-160, 130, 2000),
        [2.0**-126, -(2.0**-126) * (1 - 2.0**-40), 2.0**-149 * 1.5, 2.0**-150, 2.0**128,
         2.0**128 * (1 - 2.0**-40), -(2.0**127) * 1.9999999999, 0.0, -0.0]])
    got = fused.round_to_float32(x, "rz", bits)
    want = np.array([_rz_exact(float(v), bits) for v in x], dtype=np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_mma_sync_sweep_replays_device_bits(fmt):
    """The H200 sweep (every ordered K pair, triples, signed zeros; 1,280,000 outputs per
    format): the shipped model matches every digest and raw part; the single fused step it
    replaced does not."""
    from dataclasses import replace

    from simulator.io import read_json, read_npz
    from simulator.replay import mma_fp8 as sweep

    regen = f"python -m simulator measure mma_fp8_sweep --out DIR --fmt {fmt}"
    rec = read_npz(ev.DATA_DIR / f"mma_fp8_sweep_{fmt}.npz", regen)
    meta = read_json(ev.DATA_DIR / f"mma_fp8_sweep_{fmt}.json", regen)
    assert meta["device"]["gpu"] == "NVIDIA H200" and meta["outputs"] == 1_280_000
    assert meta["kernel_sha256"] == source_sha256(ev.KERNEL)
    rows = sweep.check(fmt, rec, meta)
    assert [r["mismatches"] for r in rows] == [0, 0, 0], rows
    A, B, C, part, _ = sweep.make_tiles(fmt)
    name = f"mma_sync_m16n8k32_{fmt}"
    single = emulate_probe(name, A, B, C, replace(mma.PARAMS[("mma_sync", fmt)], k_steps=()))
    pairs = part == sweep.PARTS.index("pairs")
    assert np.count_nonzero(single[pairs] != emulate_probe(name, A[pairs], B[pairs], C[pairs],
                                                           mma.PARAMS[("mma_sync", fmt)])) > 5000


def test_gemm_takes_a_parsed_instruction_with_the_bits_of_its_string():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((2, 64, 32)).astype(BF16)
    b = rng.standard_normal((32, 24)).astype(BF16)
    ins = mma.parse("wgmma", "m64n24k16.f32.bf16.bf16")
    assert mma.instruction_for(ins) is ins
    assert mma.instruction_for("wgmma.m64n24k16.f32.bf16.bf16") == ins
    got = mma.gemm(a, b, instruction=ins)
    want = mma.gemm(a, b, instruction="wgmma.m64n24k16.f32.bf16.bf16")
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.count_nonzero(got) > 0


def test_gemm_names_the_instruction_argument_for_an_unsupported_string():
    a, b = np.ones((64, 16), BF16), np.ones((16, 8), BF16)
    for bad in ("wgmma.m64n64k16", "mma_sync.m16n8k8.f32.bf16.bf16.f32",
                "wgmma.m64n64k32.f32.bf16.bf16"):
        with pytest.raises(ValueError, match=r"^instruction: unsupported (wgmma|mma_sync) shape"):
            mma.gemm(a, b, instruction=bad)
