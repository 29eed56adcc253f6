"""The forward's softmax step compiled as one call (simulator/engine/fused_softmax.py) against
the NumPy model, bit for bit (uint32 views): P's conversion to every narrow format on every
class of float32 (ties on each format's grid, its subnormals, MAX_NORM and the overflow edge,
NaN, inf), and whole sequences of blocks (the row maximum and its quad butterfly, scores_scale,
P, the row sums, P converted and decoded for the P V GEMM) on scores of every class, against
``Softmax.max_get_scale`` / ``online_softmax`` + ``convert`` + the engine's decode run on
NumPy. The forward's use of it is checked by tests/test_engine.py (drawn forwards and the
recorded goldens through both engines)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import engine, mma
from simulator.flash import evaluator
from simulator.flash.softmax import Softmax
from simulator.hw import rowcol_view
from simulator.numerics import convert, to_float32
from simulator.numerics.cvt import FORMATS

numba = pytest.importorskip("numba", reason="the compiled engine needs numba")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

from simulator.engine import fused_softmax  # noqa: E402  (imports numba)
from simulator.engine.decode import exp_or_code  # noqa: E402

SPECIAL = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7FFFFFFF,
                    0xFFC00001, 0x7F800001, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF,
                    0xFF7FFFFF, 0x3F800000, 0x3F7FFFFF, 0x477FF000, 0x477FEFFF, 0x43E00000,
                    0x43E80000, 0x43F00000, 0x47600000, 0x47700000], dtype=np.uint32)


@numba.njit
def _convert_all(x, args, out_bits, out_codes):
    shift, sub_min, sub_big, max_finite, sat, nan_bits, code_emin = args
    for i in range(x.size):
        v = fused_softmax.narrow_bits(x[i], shift, sub_min, sub_big, max_finite, sat, nan_bits)
        out_bits[i] = v
        out_codes[i] = fused_softmax.code_of_bits(v, code_emin)


def _grid_inputs(fmt: str, rng) -> np.ndarray:
    """float32 on and between the format's grid: every representable magnitude, the exact
    midpoints between neighbours (ties), a float32 ulp either side of them, values past
    MAX_NORM and below the least subnormal, both signs; random bit patterns; the specials."""
    f = FORMATS[fmt]
    grid = np.unique(np.abs(to_float32(np.arange(1 << (8 * np.dtype(f.uint).itemsize))
                                       .astype(f.uint).view(f.dtype))))
    grid = grid[np.isfinite(grid)].astype(np.float64)
    grid = grid[:: max(1, grid.size // 4096)] if fmt == "bf16" else grid
    mid = np.concatenate([(grid[:-1] + grid[1:]) / 2, [f.max_finite * (1 + 2.0**-9)]])
    mid32 = mid.astype(np.float32)
    near = np.concatenate([np.nextafter(mid32, np.float32(np.inf)),
                           np.nextafter(mid32, np.float32(0))])
    beyond = np.array([f.max_finite * 1.01, f.max_finite * 1.07, 3e38, grid[1] / 2,
                       grid[1] / 3, grid[1] * 0.75], dtype=np.float32)
    rand = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([grid.astype(np.float32), mid32, near, beyond, rand, SPECIAL.view(np.float32)])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("fmt", ["bf16", "f16", "e4m3", "e5m2"])
def test_conversion_and_decode_match_convert_then_the_decode(fmt):
    rng = np.random.default_rng(list(FORMATS).index(fmt))
    x = _grid_inputs(fmt, rng)
    emin = int(mma.instructions.EMIN[fmt])
    bits = np.empty(x.size, np.int32)
    codes = np.empty(x.size, np.int16)
    _convert_all(x, fused_softmax.format_args(fmt, emin), bits, codes)
    want = to_float32(convert(x, fmt))
    # the engine's decode of the converted bits, as the forward's unfused path runs it
    decoded = engine.decode_operand(convert(x, fmt).reshape(1, 1, -1),
                                    mma.parse("wgmma", f"m64n64k{32 if fmt in ('e4m3', 'e5m2') else 16}"
                                              f".f32.{fmt}.{fmt}").params)
    assert np.array_equal(bits.view(np.uint32), decoded.vals.reshape(-1).view(np.uint32))
    nan = np.isnan(want)
    assert np.array_equal(bits.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    assert np.array_equal(codes, decoded.codes.reshape(-1))
    assert all(codes[i] == exp_or_code(np.float64(want[i]), emin, True)
               for i in rng.integers(0, x.size, 2000))


def _scores(rng, shape, kind: int) -> np.ndarray:
    """Scores of one class mix: typical sizes; or random bit patterns with -inf, +inf, NaN,
    subnormals and short mantissas; whole rows of -inf in both."""
    n = int(np.prod(shape))
    if kind == 0:
        out = (rng.standard_normal(n) * 4).astype(np.float32)
    else:
        out = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32).copy()
        pick = rng.random(n)
        out[pick < 0.3] = (rng.standard_normal(int((pick < 0.3).sum())) * 10).astype(np.float32)
        out[(pick >= 0.3) & (pick < 0.36)] = -np.inf
        out[(pick >= 0.36) & (pick < 0.38)] = np.inf
        out[(pick >= 0.38) & (pick < 0.39)] = np.nan
        sub = (pick >= 0.39) & (pick < 0.42)
        out[sub] = np.ldexp(rng.integers(1, 1 << 12, int(sub.sum())).astype(np.float64),
                            rng.integers(-160, -120, int(sub.sum()))).astype(np.float32)
    out = out.reshape(shape)
    out[rng.random(shape[:-1]) < 0.05] = -np.inf
    return out


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    view = np.uint32 if a.dtype == np.float32 else a.dtype
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(view), b.view(view))


@pytest.mark.parametrize("seed", range(12))
def test_block_steps_match_the_model(seed):
    rng = np.random.default_rng(100 + seed)
    g, w = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    n = int(rng.choice([64, 128, 176]))
    fmt = ["bf16", "f16", "e4m3"][seed % 3]
    pv = mma.parse("wgmma", f"m64n128k{32 if fmt == 'e4m3' else 16}.f32.{fmt}.{fmt}")
    view = rowcol_view(f"m64n{n}k16")
    flat = view.row[:, :, None] * n + view.col[:, None, :]
    scale = rng.choice(np.array([0.125, 0.0883883, 1.4426950, 2.0**-130, 3e38, 0.0],
                                dtype=np.float32), size=(g, 1))
    offset = 8 if fmt == "e4m3" else 0
    model = Softmax((g, w), 2, scale[:, :, None, None], offset, "h200")
    fused = Softmax((g, w), 2, scale[:, :, None, None], offset, "h200",
                    evaluator=evaluator.COMPILED)
    assert fused.fusable() and not model.fusable()
    kind = seed % 2
    for block in range(4):
        s = _scores(rng, (g, w, 64, n), kind)
        first, check_inf = block == 0, bool(rng.integers(0, 2)) or block == 0
        with engine.use_engine("numba"):
            got_scale, got_p = fused.block_step(s, flat, first, check_inf, fmt, pv.params.emin)
        with engine.use_engine("numpy"):
            scores = np.take(s.reshape(g, w, -1), flat, axis=-1)
            want_scale = model.max_get_scale(scores, is_first=first, check_inf=check_inf)
            p = model.online_softmax(scores, is_first=first, check_inf=check_inf)
            p_mat = np.empty(s.shape, np.float32)
            p_mat.reshape(g, w, -1)[..., flat] = p
            want_p = engine.decode_operand(convert(p_mat, fmt).reshape(g, w * 64, n), pv.params)
        assert _same(got_scale, want_scale), (block, "scores_scale")
        assert _same(fused.row_max, model.row_max), (block, "row_max")
        assert _same(fused.row_sum, model.row_sum), (block, "row_sum")
        assert _same(got_p.vals, want_p.vals), (block, "P values")
        assert _same(got_p.codes, want_p.codes), (block, "P codes")
    assert _same(fused.finalize(), model.finalize()) and _same(fused.lse, model.lse)


def test_block_step_refuses_what_it_does_not_evaluate():
    """The kernel reads and writes through the positions unchecked, so the wrapper refuses
    everything but float32 scores [G, W, M, N], positions naming each tile position once with
    a thread count of whole quads, float32 state of the matching shape, Max_offset 0 / 8 and
    an int exponent floor; each error names the argument."""
    s = np.zeros((1, 1, 64, 64), np.float32)
    flat = np.arange(64 * 64).reshape(128, 2, 16)
    st = np.zeros((1, 1, 128, 2), np.float32)
    one = np.float32(1)

    def call(**kw):
        args = dict(s=s, positions=flat, scale=one, row_max=st, row_sum=st, first=True,
                    check_inf=True, max_offset=0, fmt="bf16", emin=-126)
        args.update(kw)
        return engine.softmax_step(**args)

    for kw, match in (
            (dict(mufu="ideal"), "^mufu"),
            (dict(positions=flat[:64]), "^positions"),
            (dict(positions=flat - 64 * 64), "^positions"),
            (dict(positions=flat + 1), "^positions"),
            (dict(positions=np.zeros_like(flat)), "^positions"),
            (dict(positions=flat.astype(np.float64)), "^positions"),
            (dict(positions=flat.reshape(2, 2, 1024), row_max=np.zeros((1, 1, 2, 2), np.float32),
                  row_sum=np.zeros((1, 1, 2, 2), np.float32)), "^positions"),
            (dict(positions=flat.reshape(-1)), "^positions"),
            (dict(s=s[0]), "^s: expected"),
            (dict(s=s.astype(np.float64)), "^s: expected"),
            (dict(s=s.tolist()), "^s: expected"),
            (dict(row_max=st.astype(np.int32)), "^row_max"),
            (dict(row_sum=st[..., :1]), "^row_sum"),
            (dict(scale=np.ones(3, np.float32)), "^scale"),
            (dict(max_offset=3), "^max_offset"),
            (dict(emin=-130), "^emin"),
            (dict(emin=-14.5), "^emin"),
            (dict(emin=1000), "^emin"),
            (dict(fmt="e3m4"), "^fmt")):
        with pytest.raises(ValueError, match=match):
            call(**kw)
    assert call()[3].vals.shape == (1, 64, 64)  # the arguments above, unchanged, run
    assert not Softmax((1, 1), 2, np.float32(1), 0, "ideal", evaluator=evaluator.COMPILED).fusable()


@pytest.mark.parametrize("case", ["f16-softcap-window", "e4m3-descale-causal", "bf16-gqa-varlen"])
def test_forward_through_the_compiled_block_step_gives_the_numpy_bits(case, monkeypatch):
    """Forwards whose every block ran through ``engine.softmax_step`` (counted) give the NumPy
    engine's O and LSE bits: f16 with softcap and a local window, e4m3 with per-head descales
    (Max_offset 8, satfinite P), bf16 GQA with two batches of different seqlens_k."""
    import ml_dtypes

    from simulator import flash

    rng = np.random.default_rng(len(case))
    fmt = case.split("-")[0]
    dtype = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn}[fmt]
    heads, heads_kv = (4, 2) if "gqa" in case else (2, 2)
    q, k, v = ((rng.standard_normal((2, 300, h, 64)) * 3).astype(dtype)
               for h in (heads, heads_kv, heads_kv))
    kw = dict(pack_gqa=False)
    if "softcap" in case:
        kw.update(softcap=5.0, window=(70, 10))
    if "descale" in case:
        kw.update(causal=True, q_descale=rng.uniform(0.5, 2, (2, 2)).astype(np.float32),
                  k_descale=rng.uniform(0.5, 2, (2, 2)).astype(np.float32),
                  v_descale=rng.uniform(0.5, 2, (2, 2)).astype(np.float32))
    if "varlen" in case:
        kw.update(causal=True, seqlens_k=np.array([300, 90]))
    with engine.use_engine("numpy"):
        want = flash.forward(q, k, v, **kw)
    calls = []
    real = engine.softmax_step
    monkeypatch.setattr(engine, "softmax_step", lambda *a, **k: calls.append(1) or real(*a, **k))
    with engine.use_engine("numba"):
        got = flash.forward(q, k, v, **kw)
    assert len(calls) >= 2  # one call per K/V block visited by a group of CTAs
    assert np.array_equal(np.asarray(got.out).view(np.uint16), np.asarray(want.out).view(np.uint16))
    assert np.array_equal(got.lse.view(np.uint32), want.lse.view(np.uint32))
