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


@pytest.mark.parametrize("arch", ["sm90", "ideal"])
@pytest.mark.parametrize("shape", [(3, 64, 128), (5, 176), (7,)])
def test_ex2_ffma_rows_gives_the_numpy_bits(arch, shape):
    rng = np.random.default_rng(len(shape) * 10 + (arch == "ideal"))
    s = _drawn_float32(rng, shape)
    lse = _drawn_float32(rng, shape[:-1])
    for scale in (np.float32(0.18033688), np.float32(3e38), np.float32(2.0**-130), np.float32(0)):
        want = ex2(ffma(s, scale, -lse[..., None], ftz=True), arch=arch)
        got = engine.ex2_ffma_rows(s, scale, -lse, arch)
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
