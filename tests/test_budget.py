"""flash.Exactness (each hardware approximation switched to exact) and simulator.budget."""

import ml_dtypes
import numpy as np
import pytest

from simulator import budget as bud
from simulator.flash import Exactness, forward, reference
from simulator.flash.exact import round_once

BF16, F16, E4M3 = ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn


def _qkv(dtype, sq=100, sk=300, h=2, hkv=None, d=64, seed=0, scale=2.0):
    rng = np.random.default_rng(seed)
    hkv = hkv or h
    return [(rng.standard_normal((1, s, n, d)) * scale).astype(dtype)
            for s, n in ((sq, h), (sk, hkv), (sk, hkv))]


def _u(x):
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


#: inputs covering both schedules, RescaleOBeforeGemm (head dim > 128), masks, softcap, FP8, GQA
CASES = [
    ("bf16", dict(dtype=BF16), {}),
    ("f16 causal", dict(dtype=F16), dict(causal=True)),
    ("bf16 softcap", dict(dtype=BF16), dict(softcap=5.0)),
    ("e4m3", dict(dtype=E4M3, d=64), {}),
    ("bf16 d=192 local", dict(dtype=BF16, d=192, sk=400), dict(window=(150, 20))),
    ("bf16 gqa plain", dict(dtype=BF16, h=4, hkv=2), dict(schedule="plain")),
    ("bf16 attention_chunk", dict(dtype=BF16, sk=300), dict(attention_chunk=128)),
]


@pytest.mark.parametrize("name, make, kw", CASES, ids=[c[0] for c in CASES])
def test_nothing_exact_is_the_default_path_bit_for_bit(name, make, kw):
    q, k, v = _qkv(**make)
    base = forward(q, k, v, **kw)
    generic = forward(q, k, v, exact=Exactness(), **kw)
    assert generic.out.dtype == base.out.dtype
    assert np.array_equal(_u(generic.out), _u(base.out))
    assert np.array_equal(_u(generic.lse), _u(base.lse))


@pytest.mark.parametrize("name, make, kw", CASES, ids=[c[0] for c in CASES])
def test_everything_exact_is_the_reference_rounded_once(name, make, kw):
    q, k, v = _qkv(**make)
    ref_out, ref_lse = reference(q, k, v, **kw)
    out_fmt = "f16" if q.dtype == F16 else "bf16"
    rounded = forward(q, k, v, exact=Exactness.all(o_rounding=False), **kw).out
    assert np.array_equal(_u(rounded), _u(round_once(ref_out, out_fmt)))
    wide = forward(q, k, v, exact=Exactness.all(), **kw)
    assert wide.out.dtype == np.float64 and wide.lse.dtype == np.float64
    assert np.max(np.abs(wide.out - ref_out)) < 1e-12
    assert np.max(np.abs(wide.lse - ref_lse)) < 1e-12


def test_the_emulator_is_not_the_reference_rounded_once():
    # the all-exact equality above is not automatic: the H200's arithmetic differs
    q, k, v = _qkv(BF16)
    assert not np.array_equal(_u(forward(q, k, v).out), _u(round_once(reference(q, k, v)[0], "bf16")))


@pytest.mark.parametrize("switch", Exactness.names())
def test_each_switch_changes_the_output(switch):
    q, k, v = _qkv(BF16, sq=128, sk=400, scale=3.0)
    kw = dict(softcap=4.0) if switch == "tanh" else {}
    # O kept in float64 (o_rounding exact) so that a change below a bf16 ulp shows
    keep = {} if switch == "o_rounding" else {"o_rounding": True}
    base = forward(q, k, v, exact=Exactness(**keep) if keep else None, **kw).out.astype(np.float64)
    one = forward(q, k, v, exact=Exactness(**keep, **{switch: True}), **kw).out
    assert not np.array_equal(one, base), f"{switch} exact left the emulator's output unchanged"
    exact = forward(q, k, v, exact=Exactness.all(), **kw).out
    alone = forward(q, k, v, exact=Exactness.all(**{switch: False}), **kw).out.astype(np.float64)
    assert not np.array_equal(alone, exact), f"{switch} alone left the exact output unchanged"


def test_fp8_rounding_of_p_changes_the_output():
    q, k, v = _qkv(E4M3)
    base = forward(q, k, v).out
    one = forward(q, k, v, exact=Exactness(p_rounding=True)).out
    assert not np.array_equal(_u(one), _u(base))


def test_round_once_bf16():
    y = np.random.default_rng(1).standard_normal(10_000).astype(np.float32)
    assert np.array_equal(_u(round_once(y.astype(np.float64), "bf16")), _u(y.astype(BF16)))
    # 1 + 2^-8 + 2^-40: above the tie, rounds up once (through float32 it would tie to 1)
    x = np.array([1 + 2**-8 + 2**-40, 1 + 2**-8, -(1 + 3 * 2**-8), 2.0**-131, 4e38, np.nan])
    bits = _u(round_once(x, "bf16"))
    assert bits[:5].tolist() == [0x3F81, 0x3F80, 0xBF82, 0x0004, 0x7F80]
    assert np.isnan(round_once(x, "bf16")[5].astype(np.float32))
    with pytest.raises(ValueError, match="fmt"):
        round_once(x, "e4m3")


def test_exact_argument_errors():
    q, k, v = _qkv(BF16, sq=16, sk=32)
    with pytest.raises(ValueError, match="exact: expected None or"):
        forward(q, k, v, exact=True)
    with pytest.raises(ValueError, match="exact: not with num_splits"):
        forward(q, k, v, exact=Exactness(), num_splits=2)
    with pytest.raises(ValueError, match=r"Exactness.ex2: expected True or False"):
        Exactness(ex2=1)


def test_budget_parts_are_the_forwards_errors():
    q, k, v = _qkv(BF16, h=4, hkv=2, sq=130, sk=300)
    kw = dict(causal=True)
    b = bud.budget(q, k, v, head=(0, 3), **kw)
    ref = reference(q, k, v, **kw)[0][0, :, 3]
    emu = forward(q, k, v, **kw).out[0, :, 3]
    assert (b.total_max, b.total_mean) == bud.relative_error(emu, ref)
    for p in b.parts:
        alone = forward(q, k, v, exact=Exactness.all(**{p.name: False}), **kw).out[0, :, 3]
        without = forward(q, k, v, exact=Exactness(**{p.name: True}), **kw).out[0, :, 3]
        assert (p.alone_max, p.alone_mean) == bud.relative_error(alone, ref)
        assert (p.without_max, p.without_mean) == bud.relative_error(without, ref)
    assert sum(p.share for p in b.parts) == pytest.approx(1.0)
    assert [p.name for p in b.parts if p.name == "tanh"] == []  # no softcap: no MUFU.TANH
    assert b.exact_max < 1e-12 and b.elements == 130 * 64
    assert b.part("p_rounding").alone_mean > 100 * b.part("ex2").alone_mean


def test_budget_row_scope_and_flat_index():
    q, k, v = _qkv(BF16, h=4, hkv=2, sq=50, sk=200)
    by_tuple = bud.budget(q, k, v, row=(0, 2, 7))
    by_flat = bud.budget(q, k, v, row=(0 * 4 + 2) * 50 + 7)
    assert str(by_tuple) == str(by_flat)
    assert by_tuple.scope == "row (batch 0, head 2, query 7)"  # as run --explain prints it
    assert by_tuple.elements == 64
    ref = reference(q, k, v)[0][0, 7, 2]
    assert by_tuple.total_max == bud.relative_error(forward(q, k, v).out[0, 7, 2], ref)[0]
    assert all(len(line) < 100 for line in str(by_tuple).splitlines())
    assert "share: of the summed alone means" in str(by_tuple)  # the header says what share is


def test_budget_argument_errors():
    q, k, v = _qkv(BF16, sq=16, sk=32)
    with pytest.raises(ValueError, match="row: expected the query index in 0..15"):
        bud.budget(q, k, v, row=(0, 0, 16))
    with pytest.raises(ValueError, match="row, head: give one"):
        bud.budget(q, k, v, row=(0, 0, 0), head=(0, 0))
    with pytest.raises(ValueError, match="row: expected the flat row index"):
        bud.budget(q, k, v, row=2 * 16)
    with pytest.raises(ValueError, match="trace: not taken by budget"):
        bud.budget(q, k, v, trace=[(0, 0, 0)])


def test_relative_error_is_relative_to_the_row():
    ref = np.array([[1.0, -4.0], [0.0, 0.0], [np.nan, 1.0]])
    out = np.array([[1.5, -4.0], [0.25, 0.0], [0.0, 0.0]])
    assert bud.relative_error(out, ref) == (0.25, pytest.approx((0.125 + 0.25) / 4))


def test_plot_budget_draws_every_part():
    import matplotlib
    matplotlib.use("Agg")
    q, k, v = _qkv(BF16, sq=16, sk=64)
    b = bud.budget(q, k, v, row=(0, 1, 3))
    ax = bud.plot_budget(b)
    assert len(ax.patches) == 2 * len(b.parts)
    assert [t.get_text() for t in ax.get_yticklabels()] == [p.label for p in b.parts]


def test_exact_runs_the_same_through_an_executor():
    from concurrent.futures import ThreadPoolExecutor

    q, k, v = _qkv(BF16, sq=200, sk=300)
    exact = Exactness(ex2=True, o_rounding=True)
    serial = forward(q, k, v, causal=True, exact=exact)
    with ThreadPoolExecutor(2) as ex:
        chunked = forward(q, k, v, causal=True, exact=exact, executor=ex,
                          memory_budget=16 << 20)
    assert serial.out.dtype == chunked.out.dtype == np.float64
    assert np.array_equal(_u(serial.out), _u(chunked.out))
    assert np.array_equal(_u(serial.lse), _u(chunked.lse))


def test_qv_mla_exact_and_budget():
    rng = np.random.default_rng(5)
    q, k = ((rng.standard_normal((1, n, 2, 64)) * 2).astype(BF16) for n in (40, 200))
    v, qv = (rng.standard_normal((1, n, 2, 256)).astype(BF16) for n in (200, 40))
    base = forward(q, k, v, qv=qv)
    assert np.array_equal(_u(forward(q, k, v, qv=qv, exact=Exactness()).out), _u(base.out))
    ref = reference(q, k, v, qv=qv)[0]
    rounded = forward(q, k, v, qv=qv, exact=Exactness.all(o_rounding=False)).out
    assert np.array_equal(_u(rounded), _u(round_once(ref, "bf16")))
    b = bud.budget(q, k, v, qv=qv, row=(0, 1, 17))
    assert b.total_max == bud.relative_error(base.out[0, 17, 1], ref[0, 17, 1])[0]
