"""The BLAS-backed fused dot-add (simulator.mma.fast) against the per-term model and the H200.

Every recorded probe block goes through the shipped path (the fast one) and must give the
device's digest; on a sample of blocks and on forward GEMMs the fast path must equal the
per-term model bit for bit; a deliberately wrong clean test must be caught.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import flash, mma
from simulator.mma import fast, fused, spec, termloop
from simulator.replay import mma as ev
from simulator.replay.common import digest
from simulator.replay.mma_cases import mma_block
from simulator.replay.mma_probes import PROBES, decode, emulate_probe

BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def recorded():
    return ev.load_recorded()


def test_which_families_take_the_fast_path():
    assert all(fast.supports(p) for p in mma.PARAMS.values())
    # bf16 (window 11 bits) and FP8 mma.sync's f16-style steps (19); not f16 (5), FP8 wgmma (7, 9)
    assert {key for key, p in mma.PARAMS.items() if fast.preferred(p)} == {
        ("wgmma", "bf16"), ("mma_sync", "bf16"), ("mma_sync", "e4m3"), ("mma_sync", "e5m2")}
    assert not fast.supports(fused.FusedDotAdd())  # operand width unknown: per-term path only


@pytest.mark.parametrize("name", list(PROBES))
def test_fast_path_gives_the_device_bits_on_every_recorded_block(recorded, name, monkeypatch):
    """All 40 recorded blocks of every probed instruction (10,485,760 outputs each), through
    the fast path also for the families that do not use it by default."""
    monkeypatch.setattr(fast, "preferred", fast.supports)
    report, digests = recorded
    kind, m, n, k, fmt = PROBES[name]
    tiles = ev.tiles_per_block(name, report)
    params = mma.PARAMS[(kind, fmt)]
    bad = [blk for blk in range(report[name]["blocks"])
           if digest(emulate_probe(name, *mma_block(fmt, m, n, k, blk, tiles), params))
           != digests[name][blk].tobytes()]
    assert bad == []


def _steps(p, a, b, c):
    """(a, b, c) of every fused step of fused_dot_add, c of each step from the reference."""
    if not p.c_in_sum:
        c = np.zeros_like(c)
    for idx in spec.k_step_positions(p, a.shape[-1]):
        aa, bb = a[..., idx], b[..., idx, :]
        yield aa, bb, c
        c = termloop.term_loop_step(aa, bb, c, p)


@pytest.mark.parametrize("name", list(PROBES))
def test_fast_step_equals_per_term_model(name):
    kind, m, n, k, fmt = PROBES[name]
    p = mma.PARAMS[(kind, fmt)]
    for blk in (0, 7, 39):
        A, B, C = mma_block(fmt, m, n, k, blk, 256)
        for a, b, c in _steps(p, decode(A, fmt), decode(B, fmt), C.view(np.float32)):
            got = fast.fused_step(a, b, c, p)
            want = termloop.term_loop_step(a, b, c, p)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def _fast_everywhere(monkeypatch):
    monkeypatch.setattr(fast, "preferred", fast.supports)


def _per_term_only(monkeypatch):
    monkeypatch.setattr(fast, "preferred", lambda p: False)


@pytest.mark.parametrize("dtype,causal", [(BF16, False), (BF16, True), (ml_dtypes.float8_e4m3fn, False),
                                          (np.float16, True)])
def test_forward_bits_equal_with_and_without_fast_path(monkeypatch, dtype, causal):
    rng = np.random.default_rng(3)
    q = (rng.standard_normal((2, 150, 2, 64)) * 2).astype(dtype)
    k = rng.standard_normal((2, 300, 1, 64)).astype(dtype)
    v = rng.standard_normal((2, 300, 1, 64)).astype(dtype)
    seqlens = np.array([300, 77], np.int32)
    _fast_everywhere(monkeypatch)
    got = flash.forward(q, k, v, causal=causal, seqlens_k=seqlens)
    _per_term_only(monkeypatch)
    want = flash.forward(q, k, v, causal=causal, seqlens_k=seqlens)
    assert np.array_equal(got.out.view(np.uint8), want.out.view(np.uint8))
    assert np.array_equal(got.lse.view(np.uint32), want.lse.view(np.uint32))


def test_chained_gemm_with_zeros_spread_and_signed_zeros(monkeypatch):
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((3, 64, 64)) * np.exp2(rng.integers(-30, 30, (3, 64, 64))))
    b = rng.standard_normal((3, 64, 40)) * np.exp2(rng.integers(-20, 5, (3, 64, 40)))
    a[0, :10] = 0.0
    a[1, :, 16:32] = -0.0
    b[2, :, :7] = 0.0
    c = np.full((3, 64, 40), -0.0, np.float32)
    c[1] = (rng.standard_normal((64, 40)) * 2.0**-140).astype(np.float32)   # subnormal C
    A, B = a.astype(np.float32).astype(BF16), b.astype(np.float32).astype(BF16)
    got = mma.gemm(A, B, c, instruction="wgmma.m64n40k16.f32.bf16.bf16")
    _per_term_only(monkeypatch)
    want = mma.gemm(A, B, c, instruction="wgmma.m64n40k16.f32.bf16.bf16")
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("lo,hi", [(56, 70), (90, 120), (-120, -60), (-10, 10)])
def test_products_near_float32_limits_equal_per_term_model(monkeypatch, lo, hi):
    """Operand exponents whose products leave float32's range (both ends) or straddle it."""
    rng = np.random.default_rng(lo + 1000)
    a = (rng.standard_normal((4, 64, 32)) * np.exp2(rng.integers(lo, hi, (4, 64, 32))))
    b = (rng.standard_normal((4, 32, 24)) * np.exp2(rng.integers(lo, hi, (4, 32, 24))))
    A, B = a.astype(np.float32).astype(BF16), b.astype(np.float32).astype(BF16)
    c = (rng.standard_normal((4, 64, 24)) * 2.0**hi).astype(np.float32)
    got = mma.gemm(A, B, c, instruction="wgmma.m64n24k16.f32.bf16.bf16")
    _per_term_only(monkeypatch)
    want = mma.gemm(A, B, c, instruction="wgmma.m64n24k16.f32.bf16.bf16")
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_wrong_clean_test_is_caught(recorded, monkeypatch):
    """Calling every output clean (plain float64 BLAS plus C) misses the device's bits."""
    monkeypatch.setattr(fast, "_DENSE_FRACTION", 1.0)  # the probe tiles are mostly not clean
    monkeypatch.setattr(fast, "_dirty", lambda ops, sl, c, f, *rest: (
        np.matmul(ops.a[sl], ops.b[sl]).reshape(-1)[f] + c.reshape(-1)[f]))
    rows = {r["check"]: r for r in ev.check_probe("wgmma_m64n8k16_bf16", *recorded, blocks=1)}
    assert rows["wgmma_m64n8k16_bf16 digests of 1 block"]["mismatches"] > 0
    # the readable spec does not use the fast path: its row stays clean
    assert rows["wgmma_m64n8k16_bf16 readable spec (simulator/mma/spec.py), 1 block"]["mismatches"] == 0


def test_c_below_the_window_takes_blas_and_equals_per_term_model(monkeypatch):
    """Outputs whose products are clean but whose C has bits below 2^(maxE - F) (C truncated,
    E = maxE) go through BLAS plus a truncated C; with C ~ N(0, 1) beside 16 products of
    N(0, 1) operands about a quarter of the outputs are such. Truncating nothing is caught."""
    rng = np.random.default_rng(11)
    A = rng.standard_normal((4, 64, 16)).astype(BF16)
    B = rng.standard_normal((4, 16, 128)).astype(BF16)
    c = rng.standard_normal((4, 64, 128)).astype(np.float32)
    c[1] *= np.exp2(rng.integers(-40, 4, (64, 128))).astype(np.float32)  # C at every distance
    c[2] = np.nextafter(np.exp2(np.floor(np.log2(np.abs(c[2])))), 0, dtype=np.float32)  # 24 bits
    taken = []
    orig = fast._c_below
    monkeypatch.setattr(fast, "_c_below", lambda *a: taken.append(orig(*a)) or taken[-1])
    inst = "wgmma.m64n128k16.f32.bf16.bf16"
    got = mma.gemm(A, B, c, instruction=inst)
    assert sum(t.size for t in taken if t is not None) > 0.15 * c.size
    monkeypatch.setattr(fast, "_truncate_c", lambda cf, *rest: cf.astype(np.float64))
    assert not np.array_equal(mma.gemm(A, B, c, instruction=inst).view(np.uint32), got.view(np.uint32))
    _per_term_only(monkeypatch)
    want = mma.gemm(A, B, c, instruction=inst)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_per_term_model_turns_the_blas_path_off_for_a_block_and_thread(monkeypatch):
    import threading

    from simulator import engine

    p = mma.PARAMS[("wgmma", "bf16")]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 32)).astype(BF16)
    b = rng.standard_normal((32, 64)).astype(BF16)
    with engine.use_engine("numpy"):
        want = mma.gemm(a, b, instruction="wgmma.m64n64k16.f32.bf16.bf16")
        seen = []
        with fast.per_term_model():
            assert not fast.preferred(p)
            worker = threading.Thread(target=lambda: seen.append(fast.preferred(p)))
            worker.start()
            worker.join()

            def blas_path(*args):
                raise AssertionError("the BLAS path ran inside per_term_model()")

            monkeypatch.setattr(fast, "fused_step", blas_path)
            got = mma.gemm(a, b, instruction="wgmma.m64n64k16.f32.bf16.bf16")
        monkeypatch.undo()
    assert seen == [True]  # another thread keeps the default
    assert fast.preferred(p)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("seed", [5, 6])
def test_operands_wider_than_the_format_take_the_per_term_model(seed):
    """float64 operands with more significant bits than the format (an unrounded P of
    ``flash.forward(..., exact=Exactness(p_rounding=True))``) break the BLAS path's clean test,
    which assumes narrow values: ``fused.fused_step`` gives them to the per-term model, so the
    NumPy engine gives ``spec.spec_dot_add``'s bits (it gave 14 of 32 outputs wrong before);
    narrow values still take the BLAS path."""
    from simulator import engine

    rng = np.random.default_rng(seed)
    p = mma.PARAMS[("wgmma", "bf16")]
    a64 = rng.random((4, 16)).astype(np.float32).astype(np.float64)
    b64 = rng.standard_normal((16, 8)).astype(BF16).astype(np.float64)
    c = rng.standard_normal((4, 8)).astype(np.float32)
    with engine.use_engine("numpy"):
        got = mma.dot_add(a64, b64, c, p)
    assert np.array_equal(got.view(np.uint32), spec.spec_dot_add(a64, b64, c, p).view(np.uint32))
    assert not fast.holds_operands(a64, b64, p)
    assert fast.holds_operands(a64.astype(np.float32).astype(BF16).astype(np.float64), b64, p)
    assert not fast.holds_operands(np.array([[2.0**-1070]]), b64[:1], p)  # float64 subnormal
