"""The compiled engine (numba) against the NumPy model and the recorded H200 bits: every
tensor-core recording replayed through both engines, drawn GEMMs compared bit for bit."""

from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import engine, mma
from simulator.replay import mma as ev
from simulator.replay.common import digest
from simulator.replay.mma_cases import mma_block
from simulator.replay.mma_probes import PROBES, emulate_probe

pytest.importorskip("numba", reason="the compiled engine needs numba")
# the NumPy model warns on casts of NaN terms it then replaces
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn,
          "e5m2": ml_dtypes.float8_e5m2}
UINTS = {"bf16": np.uint16, "f16": np.uint16, "e4m3": np.uint8, "e5m2": np.uint8}
FAMILIES = ["wgmma.m64n64k16.f32.bf16.bf16", "wgmma.m64n64k16.f32.f16.f16",
            "wgmma.m64n64k32.f32.e4m3.e4m3", "wgmma.m64n64k32.f32.e5m2.e5m2",
            "mma_sync.m16n8k16.f32.bf16.bf16.f32", "mma_sync.m16n8k16.f32.f16.f16.f32",
            "mma_sync.m16n8k32.f32.e4m3.e4m3.f32", "mma_sync.m16n8k32.f32.e5m2.e5m2.f32"]


@pytest.fixture(scope="module")
def recorded():
    return ev.load_recorded()


@pytest.mark.parametrize("name", sorted(PROBES))
def test_numba_replays_the_recorded_probe_blocks(recorded, name):
    """Blocks of every probed instruction (262,144 outputs each) through the compiled engine:
    the recorded raw head and block digests of the H200's bits."""
    report, digests = recorded
    kind, m, n, k, fmt = PROBES[name]
    tiles = ev.tiles_per_block(name, report)
    params = mma.PARAMS[(kind, fmt)]
    with engine.use_engine("numba"):
        for blk in range(3):
            got = emulate_probe(name, *mma_block(fmt, m, n, k, blk, tiles), params)
            if blk == 0:
                head = digests[f"{name}_head"]
                assert np.count_nonzero(got.reshape(-1)[: head.size] != head) == 0
            assert digest(got) == digests[name][blk].tobytes(), f"block {blk}"


def test_numba_replays_the_fp8_mma_sync_recordings():
    """The targeted FP8 mma.sync probe (384,000 outputs, raw bits) and both sweeps
    (1,280,000 outputs per format) through the compiled engine."""
    from simulator.io import read_json, read_npz
    from simulator.replay import mma_fp8 as sweep

    probe = read_npz(ev.DATA_DIR / "mma_fp8_probe.npz", "python -m simulator measure mma_fp8_probe")
    with engine.use_engine("numba"):
        got = emulate_probe(ev.FP8_PROBE, probe["A"], probe["B"], probe["C"],
                            mma.PARAMS[("mma_sync", "e4m3")])
        assert np.count_nonzero(got != probe["D"]) == 0
        for fmt in ("e4m3", "e5m2"):
            regen = f"python -m simulator measure mma_fp8_sweep --fmt {fmt}"
            rows = sweep.check(fmt, read_npz(ev.DATA_DIR / f"mma_fp8_sweep_{fmt}.npz", regen),
                               read_json(ev.DATA_DIR / f"mma_fp8_sweep_{fmt}.json", regen))
            assert [r["mismatches"] for r in rows] == [0, 0, 0], rows


def _special_bits(fmt: str, rng, shape) -> np.ndarray:
    """Operand bit patterns: uniform random bits (every exponent, subnormals, inf / NaN where
    the format has them), zeros of both signs, and narrow exponent bands that cancel."""
    u = UINTS[fmt]
    width = np.dtype(u).itemsize * 8
    bits = rng.integers(0, 1 << width, size=shape, dtype=np.uint64).astype(u)
    mode = rng.integers(0, 4)
    if mode == 1:  # mostly zeros of both signs, a few values
        zero = rng.random(shape) < 0.8
        bits[zero] = np.where(rng.random(int(zero.sum())) < 0.5, 0, 1 << (width - 1)).astype(u)
    elif mode == 2:  # one exponent band: heavy cancellation, exact zeros
        vals = rng.integers(-3, 4, size=shape).astype(np.float32) * np.float32(2.0 ** rng.integers(-8, 8))
        bits = vals.astype(DTYPES[fmt]).view(u)
    elif mode == 3:  # finite only: mask NaN / inf patterns away by clearing the top exponent bit
        vals = bits.view(DTYPES[fmt]).astype(np.float32)
        bits = np.where(np.isfinite(vals), bits, bits & u((1 << (width - 2)) - 1)).astype(u)
    return bits


def _c_values(rng, shape) -> np.ndarray:
    bits = rng.integers(0, 1 << 32, size=shape, dtype=np.uint64).astype(np.uint32)
    c = bits.view(np.float32)
    mode = rng.integers(0, 3)
    if mode == 1:
        c = np.where(rng.random(shape) < 0.5, np.float32(-0.0), np.float32(0.0))
    elif mode == 2:  # finite, moderate, with subnormals mixed in
        c = (rng.standard_normal(shape) * 2.0 ** rng.integers(-140, 40, size=shape)).astype(np.float32)
    return np.ascontiguousarray(c, dtype=np.float32)


def _both(ins, a, b, c):
    with engine.use_engine("numpy"):
        want = mma.gemm(a, b, c, instruction=ins)
    with engine.use_engine("numba"):
        got = mma.gemm(a, b, c, instruction=ins)
    return want.view(np.uint32), got.view(np.uint32)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), seed=st.integers(0, 2**32 - 1),
       batch=st.integers(1, 40), steps=st.integers(1, 3))
def test_engines_agree_on_drawn_gemms(family, seed, batch, steps):
    """Drawn GEMMs of every instruction family: ``batch`` independent GEMMs of ``steps``
    chained k-steps, operands with every exponent, signed zeros, subnormals, inf / NaN;
    the engines' bits agree (compared as uint32)."""
    ins = mma.instruction_for(family)
    rng = np.random.default_rng(seed)
    m, n = ins.m, (ins.n if ins.kind == "mma_sync" else int(rng.choice([8, 16, 24, 64])))
    k = ins.k * steps
    a = _special_bits(ins.fmt, rng, (batch, m, k)).view(DTYPES[ins.fmt])
    b = _special_bits(ins.fmt, rng, (batch, k, n)).view(DTYPES[ins.fmt])
    want, got = _both(ins, a, b, _c_values(rng, (batch, m, n)))
    assert np.array_equal(want, got), np.count_nonzero(want != got)


@pytest.mark.parametrize("family", FAMILIES)
def test_engines_agree_on_ten_thousand_drawn_gemms(family):
    """1,250 drawn single-instruction GEMMs per family, 10,000 over the eight families
    (special-value operands), the last quarter with B and C broadcast over the batch. wgmma
    takes N = 56: the compiled kernel's vector loop (16 columns a turn) and its remainder."""
    ins = mma.instruction_for(family)
    rng = np.random.default_rng(FAMILIES.index(family))
    m, n = ins.m, (8 if ins.kind == "mma_sync" else 56)
    total = 0
    for part in range(4):
        count = 1250 // 4 + (part < 1250 % 4)
        a = _special_bits(ins.fmt, rng, (count, m, ins.k)).view(DTYPES[ins.fmt])
        b = _special_bits(ins.fmt, rng, (count, ins.k, n)).view(DTYPES[ins.fmt])
        c = _c_values(rng, (count, m, n))
        if part == 3:  # broadcast B and C
            b, c = b[:1], c[:1]
        want, got = _both(ins, a, b, c)
        assert np.array_equal(want, got), np.count_nonzero(want != got)
        total += count
    assert total * len(FAMILIES) == 10_000


def test_wgmma_entry_points_follow_the_switch():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 64, 16)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((16, 32)).astype(ml_dtypes.bfloat16)
    with engine.use_engine("numpy"):
        want = mma.wgmma("m64n32k16.f32.bf16.bf16", a, b)
    with engine.use_engine("numba"):
        got = mma.wgmma("m64n32k16.f32.bf16.bf16", a, b)
    assert np.array_equal(want.view(np.uint32), got.view(np.uint32))


def test_engine_switch_rules(monkeypatch):
    assert engine.get_engine() in engine.ENGINES
    with pytest.raises(ValueError, match="^engine: expected one of"):
        engine.set_engine("fortran")
    before = engine.get_engine()
    with engine.use_engine("numpy"):
        assert engine.get_engine() == "numpy"
        assert not engine.wants_numba("dotadd", 1 << 40)
    assert engine.get_engine() == before
    with engine.use_engine("numba"):
        assert engine.wants_numba("dotadd", 1)
    with pytest.raises(ValueError, match="^n: expected a positive int"):
        engine.set_threads(0)


def test_engine_from_the_environment(monkeypatch):
    monkeypatch.setitem(engine._state, "engine", None)
    monkeypatch.setenv("SIMULATOR_ENGINE", "NumPy")
    assert engine.get_engine() == "numpy"
    monkeypatch.setitem(engine._state, "engine", None)
    monkeypatch.setenv("SIMULATOR_ENGINE", "cuda")
    with pytest.raises(ValueError, match="^SIMULATOR_ENGINE: expected one of"):
        engine.get_engine()
    monkeypatch.setitem(engine._state, "engine", None)


def test_forward_goldens_replay_through_the_compiled_engine():
    """Every recorded forward golden of the H200 (O and LSE bits), with the forward's GEMMs
    on the compiled engine."""
    from simulator.replay import forward_goldens as fg

    with engine.use_engine("numba"):
        rows = fg.check_all()
    assert rows and all(r["mismatches"] == 0 for r in rows), [r for r in rows if r["mismatches"]]


@pytest.mark.parametrize("fmt", sorted(DTYPES))
def test_compiled_decode_gives_every_bit_pattern_as_the_numpy_model(fmt):
    """The compiled engine decodes narrow operands itself (values and exponents in one pass):
    every bit pattern of the format, through a transposed (strided) view, gives the float64
    bits of ``to_float32(x).astype(float64)`` and the exponents of those values."""
    from simulator.engine import decode
    from simulator.numerics import to_float32

    count = 1 << (8 * np.dtype(DTYPES[fmt]).itemsize)
    x = np.arange(count, dtype=np.int64).astype(UINTS[fmt]).view(DTYPES[fmt])
    x = np.swapaxes(x.reshape(1, -1, 16), 1, 2)
    emin = mma.PARAMS[("wgmma", fmt)].emin
    vals, exps = decode.operand(x, 1, emin)
    with np.errstate(invalid="ignore"):
        want = np.ascontiguousarray(to_float32(x).astype(np.float64))
    assert np.array_equal(vals.view(np.uint64), want.view(np.uint64))
    assert np.array_equal(exps, decode.operand(want, 1, emin)[1])
    # the int16 codes of the exponent pass: the exponent, or a zero's / inf-NaN's mark
    codes = np.where(exps == decode.NO_EXP, decode.CODE_ZERO,
                     np.where(exps >= decode.SPECIAL, decode.CODE_INF, exps))
    for src in (x, want):
        got = decode.operand(src, 1, emin, coded=True)[1]
        assert got.dtype == np.int16 and np.array_equal(got, codes)
    assert set(np.unique(codes[np.isfinite(want) & (want != 0)])) <= set(range(emin, 128))


@pytest.mark.parametrize("family", FAMILIES)
def test_engines_agree_on_drawn_float64_operands(family):
    """``fused_dot_add`` with float64 operands (the exact values of the narrow ones, as
    ``simulator.mma`` hands them over; the compiled path takes their exponents from the
    values instead of decoding bits): 300 drawn single-instruction GEMMs per family, special
    values included, the engines' bits agree."""
    from simulator.mma.fused import fused_dot_add
    from simulator.numerics import to_float32

    ins = mma.instruction_for(family)
    rng = np.random.default_rng(100 + FAMILIES.index(family))
    m, n = ins.m, (8 if ins.kind == "mma_sync" else 24)
    for _ in range(3):
        a, b = (to_float32(_special_bits(ins.fmt, rng, shape).view(DTYPES[ins.fmt])).astype(np.float64)
                for shape in ((100, m, ins.k), (100, ins.k, n)))
        c = _c_values(rng, (100, m, n))
        with engine.use_engine("numpy"):
            want = fused_dot_add(a, b, c, ins.params)
        with engine.use_engine("numba"):
            got = fused_dot_add(a, b, c, ins.params)
        assert np.array_equal(want.view(np.uint32), got.view(np.uint32))


def _random_bits(rng, fmt, shape):
    """Narrow operands of random bit patterns: every exponent, subnormals, zeros, inf / NaN."""
    bits = rng.integers(0, 1 << (8 * np.dtype(UINTS[fmt]).itemsize), size=shape)
    return bits.astype(UINTS[fmt]).view(DTYPES[fmt])


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.startswith("wgmma")])
def test_decoded_operands_give_the_gemm_bits(family):
    """Operands decoded once and read through indices (``engine.decode_operand``,
    ``engine.dot_add_decoded``: the forward's K / V shared by the CTAs of a kv head, Q by its
    K/V blocks, one -0 C read by every entry) give ``mma.gemm``'s bits on the operands each
    batch entry reads, on random bit patterns."""
    ins = mma.instruction_for(family)
    fmt = family.split(".")[-1]
    rng = np.random.default_rng(11)
    a = _random_bits(rng, fmt, (3, 64, 4 * ins.k))
    b = _random_bits(rng, fmt, (2, 4 * ins.k, 56))
    c = np.full((1, 64, 56), -0.0, dtype=np.float32)
    ia, ib, ic = np.array([2, 0, 1, 2, 1]), np.array([1, 1, 0, 0, 1]), np.zeros(5, np.int64)
    with engine.use_engine("numpy"):
        with np.errstate(all="ignore"):
            want = mma.gemm(a[ia], b[ib], c[ic], instruction=ins)
    got = engine.dot_add_decoded(engine.decode_operand(a, ins.params, ia),
                                 engine.decode_operand(b, ins.params, ib), c, ins.params, ins.k, ic)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    c2 = _random_bits(rng, fmt, (5, 64, 56)).astype(np.float32)  # C of its own per entry
    with engine.use_engine("numpy"):
        with np.errstate(all="ignore"):
            want = mma.gemm(a[ia], b[ib], c2, instruction=ins)
    got = engine.dot_add_decoded(engine.decode_operand(a, ins.params, ia),
                                 engine.decode_operand(b, ins.params, ib), c2, ins.params, ins.k)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("edge", ["top", "bottom"])
def test_bf16_products_at_the_edges_of_float32_agree(edge):
    """The compiled sum pass multiplies narrow operands in float32 where no product of a
    k-step can overflow it (``dotadd._products_fit``: exponent sums up to 126) and in float64
    otherwise; products below float32's normal range are left to the truncation. bf16
    operands whose exponent sums straddle both edges (sums of 125..128; sums of -138..-125
    with subnormal operands among them), with a C that is zero, tiny or large: the engines'
    bits agree. Raising the top bound by one fails this test (checked)."""
    ins = mma.instruction_for("wgmma.m64n64k16.f32.bf16.bf16")
    rng = np.random.default_rng(7 if edge == "top" else 8)
    shape_a, shape_b = (6, 64, 64), (6, 64, 64)
    sig_a = rng.uniform(1, 2, shape_a) * rng.choice([-1, 1], shape_a)
    sig_b = rng.uniform(1, 2, shape_b) * rng.choice([-1, 1], shape_b)
    if edge == "top":  # exponent sums 125..128 and a few ordinary ones
        ea, eb = rng.integers(61, 65, shape_a), rng.integers(62, 64, shape_b)
    else:  # sums -138..-125, bf16 subnormals (below 2^-126) among them
        ea, eb = rng.integers(-70, -60, shape_a), rng.integers(-68, -64, shape_b)
        sig_a[:, :, ::5] *= 2.0 ** -70
    a = (sig_a * 2.0 ** ea).astype(ml_dtypes.bfloat16)
    b = (sig_b * 2.0 ** eb).astype(ml_dtypes.bfloat16)
    c = np.zeros((6, 64, 64), dtype=np.float32)
    c[1] = 1e-40
    c[2] = rng.standard_normal((64, 64)).astype(np.float32) * np.float32(2.0 ** 120)
    c[3] = -0.0
    want, got = _both(ins, a, b, c)
    assert np.array_equal(want, got)


@pytest.mark.parametrize("family", ["wgmma.m64n64k16.f32.bf16.bf16",
                                    "mma_sync.m16n8k16.f32.bf16.bf16.f32"])
def test_sums_at_the_edges_of_int32_agree(family):
    """The compiled finish adds C's term to the int32 sum of the product terms in int32 and
    flags a total that wraps. 16 products of +-(255/128)^2 (each term 65025 * 2^11 in units
    of 2^-25, their sum 2^31 - 16744448, just under 2^31) plus a C swept over (-2, 2):
    totals on both sides of +-2^31, -2^31 itself among them (C = -16744448 * 2^-25). The
    engines' bits agree, and that exact sum, -64, comes out as -64 (every term is exact:
    nothing truncates). Dropping the wrap flag fails this test (checked)."""
    ins = mma.instruction_for(family)
    m, n = ins.m, ins.n
    top = np.float32(1.9921875)
    a = np.full((2, m, 16), top, dtype=np.float32)
    a[1] = -top  # batch 1: every product negative
    b = np.full((2, 16, n), top, dtype=np.float32)
    sweep = np.linspace(-1.9999999, 1.9999999, m * n - 2, dtype=np.float32)
    c = np.concatenate([sweep, [-16744448 * 2.0**-25, 16744448 * 2.0**-25]]).astype(np.float32).reshape(m, n)
    c = np.broadcast_to(c, (2, m, n)).copy()
    want, got = _both(ins, a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), c)
    assert np.array_equal(want, got)
    assert got.view(np.float32)[1, -1, -2] == np.float32(-64.0)


def test_decoded_operands_refuse_bad_arguments():
    ins = mma.instruction_for("wgmma.m64n64k16.f32.bf16.bf16")
    a = np.zeros((2, 64, 32), dtype=ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="^x: expected an operand"):
        engine.decode_operand(a[0], ins.params)
    with pytest.raises(ValueError, match="^index: expected entries of"):
        engine.decode_operand(a, ins.params, np.array([0, 2]))
    da = engine.decode_operand(a, ins.params)
    db = engine.decode_operand(np.zeros((1, 32, 8), dtype=ml_dtypes.bfloat16), ins.params, [0, 0])
    c = np.zeros((2, 64, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="^a, b, c: shapes"):
        engine.dot_add_decoded(da, db, c[:, :, :4], ins.params, ins.k)
    with pytest.raises(ValueError, match="^a, b, c_index: batch entries"):
        engine.dot_add_decoded(da, engine.decode_operand(db.vals, ins.params, [0]), c,
                               ins.params, ins.k)
    with pytest.raises(ValueError, match="^c_index: expected entries"):
        engine.dot_add_decoded(da, db, c, ins.params, ins.k, np.array([0, 2]))
    sync = mma.instruction_for("mma_sync.m16n8k32.f32.e4m3.e4m3.f32")
    with pytest.raises(ValueError, match="^p, kblock: not one fused step"):
        engine.dot_add_decoded(da, db, c, sync.params, sync.k)


@pytest.mark.parametrize("fmt", ["bf16", "e4m3"])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_on_decoded_operands_gives_the_numpy_bits(fmt, causal, monkeypatch):
    """The forward's compiled hand-over (Q decoded once per group of CTAs, each K/V block once
    per distinct (batch, kv head), read by every CTA of the group through an index): O and LSE
    bits of the NumPy engine, with GQA (4 heads on 2 kv heads), 2 batches of different
    seqlens_k, several m_blocks per group (shared K/V blocks) and inputs with large values."""
    from simulator import flash

    rng = np.random.default_rng(5)
    scale = 1.0 if fmt == "e4m3" else 60.0
    q, k, v = ((rng.standard_normal((2, 300, h, 64)) * scale).astype(DTYPES[fmt])
               for h in (4, 2, 2))
    kw = dict(causal=causal, seqlens_k=np.array([300, 170]), pack_gqa=False)
    with engine.use_engine("numpy"):
        want = flash.forward(q, k, v, **kw)
    calls = []
    real = engine.dot_add_decoded
    monkeypatch.setattr(engine, "dot_add_decoded",
                        lambda a, b, *args: calls.append(len(np.unique(b.index)) < b.index.size)
                        or real(a, b, *args))
    with engine.use_engine("numba"):
        got = flash.forward(q, k, v, **kw)
    assert calls and (causal or any(calls))  # the hand-over ran; K/V blocks shared by CTAs
    assert np.array_equal(np.asarray(got.out).view(np.uint16), np.asarray(want.out).view(np.uint16))
    assert np.array_equal(got.lse.view(np.uint32), want.lse.view(np.uint32))


def test_a_kernel_runs_serial_on_one_thread_and_parallel_on_more(monkeypatch):
    """Each parallel kernel is compiled twice (``engine.launch.Kernel``): on one thread its
    serial twin runs (a parallel launch costs about 120 us in numba's workqueue layer), on
    more the parallel one; both give the same bits."""
    import numba

    from simulator.engine import dotadd

    ins = mma.instruction_for("wgmma.m64n64k16.f32.bf16.bf16")
    rng = np.random.default_rng(5)
    a = _random_bits(rng, "bf16", (3, 64, 32))
    b = _random_bits(rng, "bf16", (3, 32, 64))
    c = _c_values(rng, (3, 64, 64))
    calls = []
    kernel = dotadd.gemm_rows
    for name in ("serial", "parallel"):
        inner = getattr(kernel, name)
        monkeypatch.setattr(kernel, name, lambda *args, _f=inner, _n=name: (calls.append(_n), _f(*args))[1])
    before = numba.get_num_threads()
    got = {}
    try:
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            engine.set_threads(threads)
            with engine.use_engine("numba"), np.errstate(all="ignore"):
                got[threads] = mma.gemm(a, b, c, instruction=ins).view(np.uint32)
    finally:
        engine.set_threads(before)
    assert calls[0] == "serial"
    if numba.config.NUMBA_NUM_THREADS > 1:
        assert calls[-1] == "parallel"
    assert np.array_equal(got[1], got[max(got)])


@pytest.mark.skipif(not engine.available(), reason="numba is not installed")
@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_backward_on_task_threads_give_the_one_thread_bits(causal, monkeypatch):
    """With ``engine.set_threads(N)``, N > 1, the backward's chunks of (batch, head) rows, and
    the forward's chunks of CTAs where each gets ``MIN_TASK_CTAS`` or more (here the
    non-causal forward's 48 CTAs in one group) or whole groups where there are at most
    ``MAX_THREADS_PER_GROUP`` threads per group (the causal one's 9 groups of 8 CTAs, one
    m_block each), run on N threads of the process, each
    running the serial kernels without the launch lock: O, LSE, dQ, dK, dV bits of the
    one-thread run."""
    import numba

    from simulator import flash

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba sees one core: no second thread to spread chunks over")
    rng = np.random.default_rng(11)
    q, k, v, do = (rng.standard_normal((2, 1100, 4, 64)).astype(ml_dtypes.bfloat16)
                   for _ in range(4))
    before = numba.get_num_threads()
    got, started = {}, {}
    real = engine.serial_thread
    try:
        for threads in (1, 2):
            engine.set_threads(threads)
            with engine.use_engine("numba"):
                for step in ("forward", "backward"):
                    monkeypatch.setattr(engine, "serial_thread",
                                        lambda _s=step, _t=threads: (started.setdefault((_t, _s), 1), real()))
                    if step == "forward":
                        fwd = flash.forward(q, k, v, causal=causal)
                    else:
                        bwd = flash.backward(do, q, k, v, fwd.out, fwd.lse, causal=causal)
            got[threads] = [np.asarray(x).view(np.uint16) for x in (fwd.out, bwd.dq, bwd.dk, bwd.dv)]
            got[threads].append(fwd.lse.view(np.uint32))
    finally:
        engine.set_threads(before)
    # a pool spawns its threads as tasks come: the task threads ran where they should
    assert set(started) == {(2, "forward"), (2, "backward")}
    for one, two in zip(got[1], got[2], strict=True):
        assert np.array_equal(one, two)


def test_task_threads_follow_the_engine_and_the_pool():
    """One thread wherever the NumPy engine runs the call; numba's pool size where the
    compiled engine does."""
    assert engine.task_threads(10**9) >= 1
    with engine.use_engine("numpy"):
        assert engine.task_threads(10**9) == 1
    if engine.available():
        import numba

        with engine.use_engine("numba"):
            assert engine.task_threads(1) == numba.get_num_threads()


@pytest.mark.skipif(not engine.available(), reason="numba is not installed")
def test_task_threads_shrink_to_what_the_memory_budget_affords():
    """A budget with room for one CTA beside the fixed arrays runs on one thread, within its
    budget, where two task threads would each need a CTA: no MemoryError, the same bits."""
    import numba
    from memory_peak import traced_peak

    from simulator import flash
    from simulator.flash.forward import memory_needed

    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 1100, 4, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    before = numba.get_num_threads()
    try:
        engine.set_threads(2)
        with engine.use_engine("numba"):
            want = flash.forward(q, k, v)
            fixed, per_cta = memory_needed(flash.make_config(q, k, v), q.dtype)
            got, peak = traced_peak(lambda: flash.forward(q, k, v, memory_budget=fixed + per_cta))
    finally:
        engine.set_threads(before)
    assert np.array_equal(np.asarray(got.out).view(np.uint16), np.asarray(want.out).view(np.uint16))
    assert peak <= fixed + per_cta


def test_a_gated_task_runs_at_most_so_many_at_once():
    """``chunks.gated``: eight calls on a pool of four threads, gated to two, never overlap by
    more than two (the backward's chunks on a thread pool larger than its budget affords)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from simulator.flash import chunks

    lock, now, most = threading.Lock(), [0], [0]

    def task(i):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.02)
        with lock:
            now[0] -= 1
        return i

    run = chunks.gated(task, 2)
    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(run, range(8))) == list(range(8))
    assert most[0] == 2
    assert chunks.affordable(16, 100, 40, 20) == 3 and chunks.affordable(16, 100, 90, 20) == 1


@pytest.mark.skipif(not engine.available(), reason="numba is not installed")
def test_auto_decides_once_for_a_whole_launch(monkeypatch):
    """Under "auto", ``flash.forward`` and ``flash.backward`` pick their evaluator once by the
    work of the whole launch (``flash.evaluator.pick``): at a threshold equal to a launch's
    products, every kernel call of it runs compiled though each call alone is smaller, the
    backward's task threads included (the evaluator travels with their tasks); a threshold
    above it keeps the launch on NumPy. The bits are the NumPy engine's either way."""
    import threading

    import numba

    from simulator import flash

    seam = importlib.import_module("simulator.flash.evaluator")
    rng = np.random.default_rng(5)
    q, k, v, do = (rng.standard_normal((1, 512, 4, 64)).astype(ml_dtypes.bfloat16)
                   for _ in range(4))
    works, ran = [], []
    real_pick, real_mark = seam.pick, engine.mark_compiled
    monkeypatch.setattr(seam, "pick", lambda work, exact=None: (works.append(work),
                                                               real_pick(work, exact))[1])
    monkeypatch.setattr(engine, "mark_compiled",
                        lambda kernel: (ran.append(threading.current_thread()), real_mark(kernel)))
    with engine.use_engine("numpy"):
        want_f = flash.forward(q, k, v)
        want_b = flash.backward(do, q, k, v, want_f.out, want_f.lse)
    fwd_work, bwd_work = works
    before = numba.get_num_threads()
    try:
        engine.set_threads(2)
        with engine.use_engine("auto"):
            for step, threshold in (("forward", fwd_work), ("backward", bwd_work)):
                for limit, compiled in ((threshold + 1, False), (threshold, True)):
                    monkeypatch.setattr(engine, "AUTO_MIN_WORK", limit)
                    ran.clear()
                    if step == "forward":
                        got = flash.forward(q, k, v)
                        pairs = ((got.out, want_f.out), (got.lse, want_f.lse))
                    else:
                        got = flash.backward(do, q, k, v, want_f.out, want_f.lse)
                        pairs = tuple((getattr(got, n), getattr(want_b, n)) for n in ("dq", "dk", "dv"))
                    assert bool(ran) == compiled, (step, limit)
                    for a, b in pairs:
                        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
                    if step == "backward" and compiled and numba.config.NUMBA_NUM_THREADS > 1:
                        assert any(t is not threading.main_thread() for t in ran)  # task threads
    finally:
        engine.set_threads(before)


@pytest.mark.skipif(not engine.available(), reason="numba is not installed")
def test_auto_decides_once_for_all_the_sequences_of_a_varlen_call(monkeypatch):
    """A varlen forward runs one kernel-level launch per sequence; "auto" decides once for
    all of them (``fa3.flash_attn_varlen_func`` wraps them in ``engine.launching``, which each
    launch's ``flash.evaluator.pick`` reads): at a threshold above every sequence's work but
    within their sum, every call runs compiled."""
    from simulator import fa3

    seam = importlib.import_module("simulator.flash.evaluator")

    rng = np.random.default_rng(6)
    lengths = [200, 150, 250, 100]
    q, k, v = (rng.standard_normal((sum(lengths), 2, 64)).astype(ml_dtypes.bfloat16)
               for _ in range(3))
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ran = []
    real = engine.mark_compiled
    monkeypatch.setattr(engine, "mark_compiled", lambda kernel: (ran.append(kernel), real(kernel)))
    works, per_sequence = [], []
    real_launching, real_pick = engine.launching, seam.pick
    monkeypatch.setattr(engine, "launching", lambda work: (works.append(work),
                                                          real_launching(work))[1])
    monkeypatch.setattr(seam, "pick", lambda work, exact=None: (per_sequence.append(work),
                                                               real_pick(work, exact))[1])
    with engine.use_engine("numpy"):
        want = fa3.flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths))
    total = works[0]
    assert len(per_sequence) == len(lengths) and max(per_sequence) < total
    with engine.use_engine("auto"):
        monkeypatch.setattr(engine, "AUTO_MIN_WORK", max(per_sequence) + 1)  # above each one's
        got = fa3.flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths))
    assert ran
    assert np.array_equal(np.asarray(got).view(np.uint16), np.asarray(want).view(np.uint16))


def test_use_engine_is_the_calling_threads_and_wins_over_a_launch():
    """``use_engine`` holds for its thread's block only (another thread's block neither
    changes nor ends it) and an explicit "numpy" wins inside an "auto" launch."""
    import threading

    inside, release, done = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def other():
        with engine.use_engine("numpy"):
            inside.set()
            release.wait()
        done.set()

    t = threading.Thread(target=other)
    with engine.use_engine("auto"):
        t.start()
        inside.wait()
        seen["during"] = engine.get_engine()
        release.set()
        done.wait()
        seen["after"] = engine.get_engine()
        with engine.launching(engine.AUTO_MIN_WORK), engine.use_engine("numpy"):
            seen["numpy in a launch"] = engine.wants_numba("dotadd", 0)
    t.join()
    assert seen == {"during": "auto", "after": "auto", "numpy in a launch": False}


@pytest.mark.skipif(not engine.available(), reason="numba is not installed")
def test_a_child_forked_inside_a_launch_keeps_none_of_it():
    """A process pool forks its workers at the first task, inside the launch that submits it:
    the child starts without the parent thread's launch or block (its tasks get theirs)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()

    def child():
        engine.set_engine("auto")  # this process's setting: the launch alone would make it True
        queue.put(engine.wants_numba("dotadd", 1))

    with engine.use_engine("auto"), engine.launching(engine.AUTO_MIN_WORK):
        assert engine.wants_numba("dotadd", 1)
        p = ctx.Process(target=child)
        p.start()
    p.join()  # a child that failed exits non-zero without putting: no wait on the queue
    assert p.exitcode == 0
    assert queue.get() is False


def test_the_engines_cache_stamp_holds_its_sources_digest():
    """The engine's kernels are cached where numba would put them, stamped with the SHA-256
    of all of the engine's sources as this process loaded them besides numba's stamp of their
    own file (``launch.EngineCacheLocator``); functions of other files keep numba's own
    locators."""
    from numba.core import caching

    from simulator.engine import launch, softmax, sources

    assert caching.CacheImpl._locator_classes[0] is launch.EngineCacheLocator
    kernel = softmax.ex2_rows.serial
    loc = launch.EngineCacheLocator.from_function(kernel.py_func, softmax.__file__)
    assert loc is not None and loc.get_source_stamp()[0] == sources.loaded_digest()
    assert sources.loaded_digest() == sources.files_digest()  # nothing edited since the import
    plain = next(c.from_function(kernel.py_func, softmax.__file__)
                 for c in caching.CacheImpl._locator_classes[1:]
                 if c.from_function(kernel.py_func, softmax.__file__) is not None)
    assert loc.get_cache_path() == plain.get_cache_path()
    assert loc.get_source_stamp()[1] == plain.get_source_stamp()
    assert launch.EngineCacheLocator.from_function(kernel.py_func, __file__) is None


def _package_copy(tmp_path):
    """A copy of the package (without the recordings and caches) under ``tmp_path``, and a
    function running Python code in a fresh process on it (numba's own cache location)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import simulator

    src = Path(simulator.__file__).parent

    def skip(folder, names):  # the recordings (47 MB) and caches are not needed here
        return [n for n in names if n == "__pycache__" or (n == "device" and
                                                          Path(folder).name == "data")]

    shutil.copytree(src, tmp_path / "simulator", ignore=skip)
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    env.pop("NUMBA_CACHE_DIR", None)

    def run(code: str, *args: str) -> str:
        out = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=tmp_path,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    return tmp_path / "simulator", run


_EX2_SUM = ("import numpy as np; from simulator import engine; "
            "x = np.linspace(-3, 3, 1000, dtype=np.float32); "
            "print(int(engine.ex2(x).view(np.uint32).astype(np.int64).sum()))")
_EX2_PLUS_ONE = ("    return np.uint32(0) if r < np.int32(0x00800000) else np.uint32(r)",
                 "    return np.uint32(0) if r < np.int32(0x00800000) else np.uint32(r + np.int32(1))")


def test_an_edit_of_a_sibling_module_alone_recompiles_the_kernels_that_inline_it(tmp_path):
    """A copy of the package; ``engine.ex2`` (``softmax.ex2_rows``, which inlines
    ``ex2_packed.lookup``) run in a fresh process, then ``ex2_packed._finish`` edited to add 1
    to every result, ``softmax.py`` untouched: the next process gives the new bits (numba's
    own stamp, of ``softmax.py`` alone, would have loaded the cached old kernel)."""
    package, run = _package_copy(tmp_path)
    first = int(run(_EX2_SUM).split()[-1])
    assert int(run(_EX2_SUM).split()[-1]) == first  # from the cache
    f = package / "engine" / "ex2_packed.py"
    text = f.read_text()
    assert _EX2_PLUS_ONE[0] in text
    f.write_text(text.replace(*_EX2_PLUS_ONE))
    assert int(run(_EX2_SUM).split()[-1]) - first == 1000  # every result one higher


def test_a_kernel_compiled_after_an_edit_seen_mid_process_is_not_served_to_the_old_sources(tmp_path):
    """A process imports the engine (and numba's locator), then ``ex2_packed.py`` changes on
    disk (a ``git pull`` under a running notebook), then the process compiles ``engine.ex2``
    from the edited module and caches it; the file is put back. A fresh process on the
    original sources must not load that machine code: its bits equal the NumPy engine's."""
    package, run = _package_copy(tmp_path)
    f = package / "engine" / "ex2_packed.py"
    original = f.read_text()
    assert _EX2_PLUS_ONE[0] in original
    edit_mid_process = f"""
import pathlib, sys
import numpy as np
import simulator.engine.launch   # the locator registered, the engine's sources read
f = pathlib.Path(sys.argv[1])
text = f.read_text()
f.write_text(text.replace({_EX2_PLUS_ONE[0]!r}, {_EX2_PLUS_ONE[1]!r}))
try:
    from simulator import engine
    engine.ex2(np.linspace(-20, 20, 4096, dtype=np.float32))   # compiles the edit, caches it
finally:
    f.write_text(text)
"""
    run(edit_mid_process, str(f))
    assert f.read_text() == original
    check = """
import numpy as np
from simulator import engine
from simulator.numerics import mufu
x = np.linspace(-20, 20, 4096, dtype=np.float32)
a = engine.ex2(x)
with engine.use_engine("numpy"):
    b = mufu.ex2(x)
print(int((a.view(np.uint32) != b.view(np.uint32)).sum()))
"""
    assert int(run(check).split()[-1]) == 0


def test_no_writable_cache_location_compiles_in_memory_with_one_warning(tmp_path):
    """Every numba cache location unwritable (a read-only install, an unwritable home): the
    engine's kernels compile in memory, with a warning, and give the NumPy model's bits (they
    used to raise "cannot cache function ...: no locator available" at first use)."""
    import subprocess
    import sys

    code = """
import warnings
import numba.core.caching as c
def deny(self):
    raise PermissionError(30, "Read-only file system")
c._CacheLocator.ensure_cache_path = deny
import numpy as np
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    from simulator import engine
    from simulator.numerics import mufu
    x = np.linspace(-20, 20, 4096, dtype=np.float32)
    a = engine.ex2(x)
print(sum("no writable cache location" in str(w.message) for w in seen),
      int((a.view(np.uint32) != mufu.ex2(x).view(np.uint32)).sum()))
"""
    import os

    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "0"]


def test_a_compile_of_the_engine_is_announced_once_per_process():
    """numba's compile event for a function of simulator.engine calls the compile note once;
    a function of another package, a cache load or a second compile calls nothing more."""
    import types

    import numba

    from simulator.engine import launch
    from simulator.flash.evaluator import set_compile_note

    def probe(x):
        return x + 1

    def ours(name):
        f = types.FunctionType(probe.__code__, {}, name)
        f.__module__ = "simulator.engine._probe"
        return numba.njit(f)

    seen = []
    said = launch._COMPILE_NOTE.said
    try:
        launch._COMPILE_NOTE.said = False
        set_compile_note(seen.append)
        outsider = types.FunctionType(probe.__code__, {}, "outsider")
        outsider.__module__ = "someone_else"
        assert numba.njit(outsider)(1) == 2 and seen == []
        assert ours("first")(1) == 2 and seen == [launch.COMPILE_NOTE]
        assert ours("second")(1.5) == 2.5 and seen == [launch.COMPILE_NOTE]
        with pytest.raises(TypeError, match="note: expected a callable"):
            set_compile_note("stderr")
    finally:
        launch.set_compile_note(launch._note_on_terminal)
        launch._COMPILE_NOTE.said = said or launch._COMPILE_NOTE.said


def test_the_default_compile_note_reaches_a_terminal_and_a_notebook(monkeypatch):
    """A notebook's first compiled call shows the note under its cell: ipykernel's stderr says
    it is no terminal, yet a person reads it; a pipe or a log file gets nothing."""
    import io

    from simulator.engine import launch

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    KernelStream = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})
    for stream, shown in ((Terminal(), True), (KernelStream(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stream)
        launch._note_on_terminal("compiling")
        assert stream.getvalue() == ("compiling\n" if shown else ""), type(stream)
    monkeypatch.setattr("sys.stderr", None)
    launch._note_on_terminal("compiling")  # closed at start: nothing, no error
