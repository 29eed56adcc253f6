"""The backward through the compiled engine: its GEMMs (``simulator.mma.gemm``) and its
``P = ex2(S * scale_log2 - LSE_log2)`` (``engine.ex2_ffma_rows``) give the recorded H200 bits
of the real library's backward and the NumPy model's bits on drawn inputs."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import engine
from simulator.io import read_json, read_npz
from simulator.numerics import ffma
from simulator.numerics.mufu import ex2
from simulator.replay import bwd_cases
from simulator.replay import fa3_backward as replay

pytestmark = pytest.mark.skipif(not engine.available(), reason="numba is not installed")


def _drawn_float32(rng, shape):
    """Random bit patterns of every class (normal, subnormal, zeros, inf, NaN) as float32."""
    bits = rng.integers(0, 1 << 32, size=shape, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32).copy()
    pick = rng.random(shape)
    x[pick < 0.6] = (rng.standard_normal(int((pick < 0.6).sum())) * 20).astype(np.float32)
    x[(pick >= 0.6) & (pick < 0.65)] = -np.inf
    return x


@pytest.mark.parametrize("fmt", ["bf16", "f16", "e4m3"])
@pytest.mark.parametrize("softcap", [False, True])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the NumPy side overflows on purpose
def test_the_compiled_ds_step_gives_the_numpy_operands(fmt, softcap):
    """``engine.backward_ds`` (dS = P (dP - dPsum), times dtanh with softcap, P and dS
    converted and decoded, P^T and dS^T transposed) against the NumPy steps of
    ``mainloop_bwd_sm90`` then ``convert`` and ``engine.decode_operand``, on P in [0, 1] with
    zeros, dP / dPsum / dtanh of every class: values and codes bit for bit."""
    from simulator import mma
    from simulator.numerics import convert, fmul, fsub

    rng = np.random.default_rng(7 + softcap)
    shape = (3, 64, 80)
    p = rng.random(shape).astype(np.float32) ** 4
    p[rng.random(shape) < 0.2] = 0
    dp, dtanh = _drawn_float32(rng, shape), _drawn_float32(rng, shape)
    dpsum = _drawn_float32(rng, shape[:2])
    params = mma.parse("wgmma", f"m64n80k{32 if fmt == 'e4m3' else 16}.f32.{fmt}.{fmt}").params
    with engine.use_engine("numba"):
        got = engine.backward_ds(p, dp, dpsum, dtanh if softcap else None, fmt, params.emin)
    ds = fmul(p, fsub(dp, dpsum[..., None], ftz=True), ftz=True)
    ds = fmul(ds, dtanh, ftz=True) if softcap else ds
    p16, ds16 = convert(p, fmt), convert(ds, fmt)
    want = [engine.decode_operand(x, params) for x in
            (np.swapaxes(p16, 1, 2), ds16, np.swapaxes(ds16, 1, 2))]
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g.vals.view(np.uint32), w.vals.view(np.uint32))
        assert np.array_equal(g.codes, w.codes)
    with pytest.raises(ValueError, match="^dp: expected"):
        engine.backward_ds(p, dp[:, :32], dpsum, None, fmt, params.emin)
    with pytest.raises(ValueError, match="^dpsum: expected"):
        engine.backward_ds(p, dp, dpsum[:, :3], None, fmt, params.emin)
    with pytest.raises(ValueError, match="^dtanh: expected"):
        engine.backward_ds(p, dp, dpsum, dtanh.astype(np.float64), fmt, params.emin)


@pytest.mark.parametrize("mufu", ["h200", "ideal"])
@pytest.mark.parametrize("shape", [(3, 64, 128), (5, 176), (7,)])
def test_ex2_ffma_rows_gives_the_numpy_bits(mufu, shape):
    rng = np.random.default_rng(len(shape) * 10 + (mufu == "ideal"))
    s = _drawn_float32(rng, shape)
    lse = _drawn_float32(rng, shape[:-1])
    for scale in (np.float32(0.18033688), np.float32(3e38), np.float32(2.0**-130), np.float32(0)):
        want = ex2(ffma(s, scale, -lse[..., None], ftz=True), model=mufu)
        got = engine.ex2_ffma_rows(s, scale, -lse, mufu)
        assert got.shape == want.shape
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


REPORT = read_json(replay.REPORT, replay.REGENERATE)
DIFFS = bwd_cases.unpack_diffs(read_npz(replay.DIFFS, replay.REGENERATE))
# every 48th recorded matrix case and every 24th drawn one (the whole set: tests/test_backward.py
# with the engine of the environment)
SAMPLE = [("matrix", i) for i in range(0, len(REPORT["matrix"]), 48)] + \
         [("drawn", i) for i in range(0, len(REPORT["drawn"]), 24)]


@pytest.mark.parametrize("part, i", SAMPLE)
def test_recorded_backward_replays_through_the_compiled_engine(part, i):
    e = REPORT[part][i]
    with engine.use_engine("numba"):
        r = replay.check(f"{part[0]}{i}", e, DIFFS)
    assert r["mismatches"] == [] and r["outside"] == 0 and r["values"] > 0


@pytest.mark.parametrize("case", ["f16-softcap-gqa-96", "bf16-causal-deterministic-128",
                                  "bf16-window-64"])
def test_backward_on_decoded_operands_gives_the_numpy_bits(case, monkeypatch):
    """The backward's compiled hand-over (K^T, V^T, K decoded once per chunk, Q and dO once
    per m_block, the dS step compiled: counted) gives the NumPy engine's dQ, dK, dV bits with
    GQA, softcap, local windows, a causal deterministic launch, f16 and head dim 96."""
    import ml_dtypes

    from simulator import flash

    fmt, *opts, d = case.split("-")
    rng = np.random.default_rng(len(case))
    dtype = np.float16 if fmt == "f16" else ml_dtypes.bfloat16
    heads_kv = 2 if "gqa" in opts else 4
    kw = dict(causal="causal" in opts, softcap=3.0 if "softcap" in opts else 0.0,
              window=(60, 25) if "window" in opts else (-1, -1))
    q, do = ((rng.standard_normal((2, 230, 4, int(d))) * 2).astype(dtype) for _ in range(2))
    k, v = ((rng.standard_normal((2, 210, heads_kv, int(d))) * 2).astype(dtype) for _ in range(2))
    fw = flash.forward(q, k, v, **kw)
    kw["deterministic"] = "deterministic" in opts
    with engine.use_engine("numpy"):
        want = flash.backward(do, q, k, v, fw.out, fw.lse, **kw)
    calls = []
    real = engine.backward_ds
    monkeypatch.setattr(engine, "backward_ds", lambda *a: calls.append(1) or real(*a))
    with engine.use_engine("numba"):
        got = flash.backward(do, q, k, v, fw.out, fw.lse, **kw)
    assert calls
    for name in ("dq", "dk", "dv"):
        w, g = np.asarray(getattr(want, name)), np.asarray(getattr(got, name))
        assert w.dtype == g.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8)), name
