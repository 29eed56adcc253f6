"""The compiled softmax steps (simulator/engine/softmax.py) against the NumPy model of
simulator/flash/softmax.py, bit for bit (uint32 views): each kernel on random bit patterns of
every class, whole Softmax sequences on hypothesis-drawn scores with -inf rows, NaN,
subnormals, huge and tiny scales, Max_offset 8, Check_inf on and off, MUFU models "h200" and
"ideal"; then the recorded H200 forwards (step traces, the FA3 library's calls, the drawn
replay sample) replayed with engine "numba"."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import engine
from simulator.compare import first_divergence
from simulator.device import forward_trace
from simulator.flash import evaluator
from simulator.flash import forward as emu_forward
from simulator.flash.softmax import Softmax, rescale_o
from simulator.hw import quad_allreduce, thread_reduce
from simulator.numerics import ffma, fmax, fmul
from simulator.numerics.mufu import ex2, model
from simulator.replay import fa3_library, forward_traces
from simulator.replay import hypothesis as replay_sample

pytest.importorskip("numba", reason="the compiled engine needs numba")
# the NumPy model's float64 intermediates overflow on purpose for huge inputs
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SPECIAL = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7FFFFFFF,
                    0xFFC00001, 0x7F800001, 0x00000001, 0x807FFFFF, 0x00400000, 0x00800000,
                    0x80800000, 0x00800001, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000,
                    0x43000000, 0xC3020000, 0x42FE0000], dtype=np.uint32)


def _values(rng, shape, neg_inf_rows: float = 0.1) -> np.ndarray:
    """float32 of ``shape`` mixing every class: random bit patterns (all exponents, NaN
    payloads, subnormals), the special values, short-mantissa numbers whose sums and products
    land on float32 rounding midpoints, scores of a typical size; some rows all -inf."""
    n = int(np.prod(shape))
    kind = rng.integers(0, 4, n)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    out = bits.view(np.float32).copy()
    sp = kind == 1
    out[sp] = SPECIAL[rng.integers(0, SPECIAL.size, int(sp.sum()))].view(np.float32)
    short = kind == 2
    m = rng.integers(1, 1 << 12, int(short.sum())) * rng.choice([-1, 1], int(short.sum()))
    out[short] = np.ldexp(m.astype(np.float64), rng.integers(-150, 120, int(short.sum())))
    typical = kind == 3
    out[typical] = (rng.standard_normal(int(typical.sum())) * 8).astype(np.float32)
    out = out.reshape(shape)
    if neg_inf_rows and out.ndim >= 2:
        rows = rng.random(shape[:-1]) < neg_inf_rows
        out[rows] = -np.inf
    return out


def _same(want, got) -> bool:
    want, got = np.asarray(want), np.asarray(got)
    return want.shape == got.shape and np.array_equal(want.view(np.uint32), got.view(np.uint32))


# ---- each kernel on random bit patterns ----------------------------------------------------------
def _every_ex2_entry() -> np.ndarray:
    """float32 [1, 2^24, 1, 1] inputs whose MUFU.EX2 reads each table entry once: x = lo / 2^23
    (entry lo) and x = lo / 2^23 - 1 (entry 2^23 | lo), all exact in float32."""
    lo = np.arange(1 << 23, dtype=np.float64)
    x = np.concatenate([lo, lo - (1 << 23)]) * 2.0 ** -23
    return x.astype(np.float32).reshape(1, -1, 1, 1)


def _exp2_mode(scores, table, mode, packed=None):
    from simulator.engine import softmax as ksoft

    bits, centres = packed if packed is not None else (np.zeros(1, np.uint32),
                                                       np.zeros(1, np.float32))
    n = scores.shape[1]
    out = np.empty(scores.shape, dtype=np.float32)
    one, zero = np.ones((1, n, 1), np.float32), np.zeros((1, n, 1), np.float32)
    ksoft.scaled_exp2(scores, one, zero, table, bits, centres, mode, out, out.view(np.uint32))
    return out


def test_packed_ex2_table_gives_every_entry():
    """The kernels read MUFU.EX2 from its packed form (``engine.ex2_packed.pack``: one bit per
    entry of the x >= 0 half and a centre per 4096 entries, 1 MB + 8 kB against 64 MB; the
    x < 0 half read one index lower): on inputs that read each of the 2^24 entries once, the
    packed and the plain table give the same bits, through ``scaled_exp2``, ``softmax_exp2``
    and ``engine.ex2``. One flipped bit, or one centre moved by a unit, fails this (checked)."""
    from simulator.engine import ex2_packed
    from simulator.engine import softmax as ksoft

    table = model("h200").ex2_table()
    packed = ex2_packed.pack(table)
    assert packed is not None
    assert packed[0].nbytes == 1 << 20 and packed[1].nbytes == 8 << 10
    x = _every_ex2_entry()
    want = _exp2_mode(x, table, ksoft.EX2_TABLE)
    half = 1 << 23  # entry i at input i; the x < 0 half's exponent one lower
    assert np.array_equal(want.view(np.int32).reshape(-1), table - (np.arange(2 * half) >= half) * half)
    assert _same(want, _exp2_mode(x, table, ksoft.EX2_PACKED, packed))
    assert _same(want, engine.softmax_exp2(x, np.float32(1), np.float32(0), table))
    assert _same(want.reshape(-1), engine.ex2(x.reshape(-1)))
    bad = packed[0].copy()
    bad[12345] ^= 1 << 7
    assert not _same(want, _exp2_mode(x, table, ksoft.EX2_PACKED, (bad, packed[1])))
    moved = packed[1].copy()
    moved[77] += 1
    assert not _same(want, _exp2_mode(x, table, ksoft.EX2_PACKED, (packed[0], moved)))


def test_packed_ex2_halves_are_one_index_apart():
    """What the packing rests on, read off the verified table itself: its x < 0 half is its
    x >= 0 half one index lower (entry 2^23 + j is entry j - 1, entry 2^23 is entry 0), and in
    each 4096-entry segment the mantissas lie within 2 units around 2^(j / 2^23) 2^23 (1.29 at
    most, so one bit per entry places them)."""
    table = model("h200").ex2_table().astype(np.int64)
    half = 1 << 23
    assert table[half] == table[0] and np.array_equal(table[half + 1:], table[:half - 1])
    j = np.arange(half)
    d = (np.exp2(j / half) * half - (table[:half] - (126 << 23))).reshape(-1, 4096)
    width = d.max(axis=1) - d.min(axis=1)
    assert 1.2 < width.max() < 1.3


def test_packed_ex2_refuses_what_it_cannot_hold():
    """``pack`` gives None for a table whose halves are not one index apart or whose entries
    in a segment spread 2 units or more (the kernels then read the table), and refuses a
    table of the wrong kind or size by name."""
    from simulator.engine import ex2_packed
    from simulator.engine import softmax as ksoft

    table = model("h200").ex2_table()
    half = 1 << 23
    shifted = table.copy()
    shifted[half + 5] += 1  # the x < 0 half alone
    assert ex2_packed.pack(shifted) is None
    j = np.arange(17 * 4096, 18 * 4096)  # one segment: its lowest and highest v(j) - m(j)
    d = np.exp2(j / half) * half - (table[j].astype(np.int64) - (126 << 23))
    low, high = j[np.argmin(d)], j[np.argmax(d)]
    spread = table.copy()
    spread[[low, half + low + 1]] += 2  # both halves: the segment now spreads more than 2
    assert ex2_packed.pack(spread) is None
    narrow = table.copy()
    narrow[[high, half + high + 1]] += 1  # its highest one unit lower: still within 2
    packed = ex2_packed.pack(narrow)
    assert packed is not None
    x = (np.array([high, high + 1 - half], dtype=np.float64) * 2.0 ** -23).astype(np.float32)
    got = _exp2_mode(x.reshape(1, -1, 1, 1), narrow, ksoft.EX2_PACKED, packed)
    assert got.view(np.int32).reshape(-1).tolist() == [narrow[high], narrow[high] - half]
    for bad in (table[:-1], table.astype(np.int64), [0] * (1 << 24)):
        with pytest.raises(ValueError, match="table: expected int32"):
            ex2_packed.pack(bad)


def test_a_table_the_packing_cannot_hold_is_read_as_it_is():
    """A table the packing cannot hold (an x < 0 entry no longer its x >= 0 neighbour's;
    ``ex2_packed.pack`` gives None) is read as it is."""
    from simulator.engine import ex2_packed

    table = model("h200").ex2_table().copy()
    table[(1 << 23) | 4096] += 9
    table.setflags(write=False)
    assert ex2_packed.pack(table) is None and ex2_packed.for_table(table) is None
    x = np.full((1, 4, 1, 1), 4096 * 2.0 ** -23 - 1, dtype=np.float32)
    got = engine.softmax_exp2(x, np.float32(1), np.float32(0), table)
    # x in [-1, 0): the entry holds twice the value, the exponent field takes -1 back
    assert (got.view(np.uint32) == table[(1 << 23) | 4096] - (1 << 23)).all()


def test_a_writable_table_is_read_at_every_call():
    """Only read-only tables (the MUFU model's) are packed, once: a writable one may change
    between calls, and an edit after a first call shows in the next."""
    table = model("h200").ex2_table().copy()
    x = np.full((1, 4, 1, 1), 4096 * 2.0 ** -23 - 1, dtype=np.float32)
    first = engine.softmax_exp2(x, np.float32(1), np.float32(0), table)
    table[(1 << 23) | 4096] += 1
    got = engine.softmax_exp2(x, np.float32(1), np.float32(0), table)
    assert (got.view(np.uint32) == first.view(np.uint32) + 1).all()


def test_kernels_agree_with_the_float32_model_on_random_bits():
    rng = np.random.default_rng(7)
    scores = _values(rng, (16, 128, 2, 9), neg_inf_rows=0.0)
    scale = _values(rng, (16, 128, 2), neg_inf_rows=0.0)
    neg = _values(rng, (16, 128, 2), neg_inf_rows=0.0)
    prev = _values(rng, (16, 128, 2), neg_inf_rows=0.0)
    with engine.use_engine("numba"):
        # FFMA.FTZ (the exp2 argument), then MUFU.EX2 from the verified table
        want = ffma(scores, scale[..., None], neg[..., None], ftz=True)
        assert _same(want, engine.softmax_exp2(scores, scale, neg, None))
        assert _same(ex2(want), engine.softmax_exp2(scores, scale, neg, model("h200").ex2_table()))
        # max.ftz: thread_reduce then the quad butterfly, with and without zero_init
        assert _same(quad_allreduce(thread_reduce(scores, op="max", zero_init=True), "max"),
                     engine.softmax_row_max(scores, None))
        assert _same(quad_allreduce(thread_reduce(scores, prev, op="max", zero_init=False), "max"),
                     engine.softmax_row_max(scores, prev))
        # add.ftz row sums, the first add fused with the rescale (FFMA)
        assert _same(thread_reduce(scores, op="sum", zero_init=True),
                     engine.softmax_row_sum(scores, None, None))
        start = ffma(scale, prev, scores[..., 0], ftz=True)
        assert _same(thread_reduce(scores[..., 1:], start, op="sum", zero_init=False),
                     engine.softmax_row_sum(scores, scale, prev))
        # FMUL.FTZ of the O rescale, one scale per row
        acc = scores.reshape(16, 256, 9)
        rows = scale.reshape(16, 256)
        assert _same(fmul(acc, rows[..., None], ftz=True), engine.softmax_scale_rows(acc, rows))


def test_ffma_midpoints_and_tiny_results():
    """Products exactly on a float32 rounding midpoint plus an addend below float64's
    precision (a float64 sum cast once rounds them wrongly), and results around 2^-126 (the
    tininess flush): FFMA's single rounding as the model computes it."""
    rng = np.random.default_rng(11)
    n = 400_000
    x = rng.integers(1 << 12, 1 << 13, n)
    y = rng.integers(1 << 12, 1 << 13, n)
    prod = x * y
    bits = np.floor(np.log2(prod)).astype(np.int64) + 1
    low = np.log2(prod & -prod).astype(np.int64)
    keep = bits - low == 25  # 25 significant bits: exactly halfway between two float32
    x, y = x[keep], y[keep]
    m = x.size
    ea = rng.integers(-70, 60, m)
    eb = rng.integers(-70, 60, m)
    a = np.ldexp(x.astype(np.float64) * rng.choice([-1, 1], m), ea).astype(np.float32)
    b = np.ldexp(y.astype(np.float64), eb).astype(np.float32)
    p = a.astype(np.float64) * b
    c = (p * np.ldexp(rng.choice([-1.0, 1.0], m), -rng.integers(55, 75, m))).astype(np.float32)
    # around 2^-126: the product cancelled by all but a few of its bits, or by nothing
    t = rng.random(m) < 0.3
    a[t] = np.ldexp(x[t].astype(np.float64), -75).astype(np.float32)
    b[t] = np.ldexp(y[t].astype(np.float64), -75).astype(np.float32)
    c[t] = (-(a[t].astype(np.float64) * b[t]) * (1 - np.ldexp(1.0, -rng.integers(1, 30, int(t.sum())))))\
        .astype(np.float32)
    # exact 2^-126 (1 - 2^-24): tiny after rounding, though the subnormal rounding gives 2^-126
    edge = np.float32(np.ldexp(1 - 2.0**-24, -63))
    a = np.concatenate([a, [edge, -edge, edge]]).astype(np.float32)
    b = np.concatenate([b, [2.0**-63, 2.0**-63, 2.0**-63]]).astype(np.float32)
    c = np.concatenate([c, [0.0, 0.0, 2.0**-140]]).astype(np.float32)
    assert m > 10_000
    want = ffma(a, b, c, ftz=True)
    naive = (a.astype(np.float64) * b + c).astype(np.float32)
    assert np.count_nonzero(want.view(np.uint32) != naive.view(np.uint32)) > 1000
    with engine.use_engine("numba"):  # one element per thread and row: per-row operands
        got = engine.softmax_exp2(a.reshape(1, -1, 1, 1), b.reshape(1, -1, 1), c.reshape(1, -1, 1),
                                  None)
    assert _same(want, got.reshape(-1))
    with engine.use_engine("numba"):  # the same through MUFU.EX2 (the kernel's other path)
        got = engine.softmax_exp2(a.reshape(1, -1, 1, 1), b.reshape(1, -1, 1), c.reshape(1, -1, 1),
                                  model("h200").ex2_table())
    assert _same(ex2(want), got.reshape(-1))


def test_ffma_results_aimed_at_two_to_minus_126():
    """The P kernel's FFMA is one IEEE float32 fma (rounded on the subnormal grid) where its
    result is not +-2^-126, the model's FFMA.FTZ where it is: exact values a * b + c within a
    few hundred 2^-150 of +-2^-126 (C is a rounded float32), on both sides, some flushed and
    some kept, and some in [2^-126 - 2^-150, 2^-126 (1 - 2^-25)), where the fma gives
    +-2^-126 and FFMA.FTZ flushes."""
    rng = np.random.default_rng(12)
    n = 200_000
    e = rng.integers(-62, -58, n)
    a = np.ldexp(rng.uniform(1, 2, n), e).astype(np.float32)
    b = np.ldexp(rng.uniform(1, 2, n), -120 - e + rng.integers(-2, 3, n)).astype(np.float32)
    target = rng.choice([-1.0, 1.0], n) * np.ldexp(1.0 + rng.integers(-3, 4, n) * 2.0**-25, -126)
    c = (target - a.astype(np.float64) * b).astype(np.float32)  # a * b exact in float64
    want = ffma(a, b, c, ftz=True)
    at_edge = np.abs(want) == np.float32(2.0**-126)
    assert at_edge.sum() > 1000 and (want == 0).sum() > 1000 and (np.abs(want) > 2.0**-126).sum() > 1000
    exact = np.abs(a.astype(np.float64) * b + c.astype(np.float64))  # exact: 42 bits at most
    window = (exact >= 2.0**-126 - 2.0**-150) & (exact < 2.0**-126 * (1 - 2.0**-25))
    assert np.count_nonzero(window & (want == 0)) > 100  # the fma's 2^-126, flushed by FFMA.FTZ
    with engine.use_engine("numba"):  # one element per thread and row: per-row operands
        got = engine.softmax_exp2(a.reshape(1, -1, 1, 1), b.reshape(1, -1, 1), c.reshape(1, -1, 1),
                                  None)
    assert _same(want, got.reshape(-1))


def test_row_sums_flush_sums_that_cancel_below_two_to_minus_126():
    """FADD.FTZ of two normal numbers just above 2^-126 whose sum falls below it (exact, a
    subnormal in IEEE arithmetic): flushed to zero of its sign, as the model does."""
    rng = np.random.default_rng(13)
    p = np.ldexp(rng.uniform(1, 4, (8, 128, 2, 2)), -126).astype(np.float32)
    p[..., 1] *= -1
    want = thread_reduce(p, op="sum", zero_init=True)
    flushed = (want == 0) & (p[..., 0] + p[..., 1] != 0)
    assert flushed.sum() > 100
    with engine.use_engine("numba"):
        assert _same(want, engine.softmax_row_sum(p, None, None))


def test_max_handles_nan_and_signed_zeros_like_the_model():
    x = np.array([np.nan, -0.0, 0.0, -np.inf, 1e-45, -1e-45, np.inf, np.nan], dtype=np.float32)
    grid = np.stack(np.meshgrid(x, x), -1).reshape(-1, 2)  # every ordered pair, one per thread
    scores = np.zeros((1, 128, 1, 2), dtype=np.float32)
    scores[0, : len(grid), 0] = grid
    with engine.use_engine("numba"):
        got = engine.softmax_row_max(scores, None)
    assert _same(quad_allreduce(thread_reduce(scores, op="max"), "max"), got)
    assert _same(fmax(grid[:, 0], grid[:, 1], ftz=True),
                 thread_reduce(scores, op="max")[0, : len(grid), 0])


# ---- whole Softmax sequences ------------------------------------------------------------------
SCALES = np.array([0.12752, 1.4426950, 0.0, 1e-30, 2.0**-130, 3e38, 1e20, 8.0, 0.5],
                  dtype=np.float32)


def _sequence(name, blocks, checks, batch, nrow, scale_log2, max_offset, mufu, final, acc):
    """Every output of a Softmax run (max_get_scale / online_softmax per block, finalize,
    rescale_o) on the evaluator of engine ``name`` (the NumPy specification or the compiled
    twin, as a launch picks them)."""
    ev = evaluator.COMPILED if name == "numba" else evaluator.SPECIFICATION
    outs = []
    sm = Softmax((batch,), nrow, scale_log2[:, None, None], max_offset, mufu, evaluator=ev)
    for i, scores in enumerate(blocks):
        outs += [sm.max_get_scale(scores, is_first=i == 0, check_inf=checks[i]),
                 sm.row_max, sm.row_sum]
        outs += [sm.online_softmax(scores, is_first=i == 0, check_inf=checks[i]), sm.row_sum]
    scale = sm.finalize(final[:, None, None])
    outs += [scale, sm.lse, sm.row_sum,
             rescale_o(acc, scale.reshape(batch, 128 * nrow), evaluator=ev),
             rescale_o(acc, sm.row_max.reshape(batch, -1), evaluator=ev)]
    return outs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), batch=st.integers(1, 3), nrow=st.sampled_from([1, 2]),
       ncol=st.integers(1, 6), nblocks=st.integers(1, 3),
       checks=st.lists(st.booleans(), min_size=3, max_size=3),
       max_offset=st.sampled_from([0, 8]), mufu=st.sampled_from(["h200", "ideal"]),
       scales=st.lists(st.sampled_from(range(len(SCALES))), min_size=3, max_size=3),
       nasty=st.floats(0.0, 1.0))
def test_softmax_sequences_agree(seed, batch, nrow, ncol, nblocks, checks, max_offset, mufu,
                                 scales, nasty):
    rng = np.random.default_rng(seed)
    blocks = []
    for _ in range(nblocks):
        x = _values(rng, (batch, 128, nrow, ncol), neg_inf_rows=0.2)
        calm = rng.random(x.shape) >= nasty  # from all-typical to all-nasty scores
        x[calm] = (rng.standard_normal(int(calm.sum())) * 4).astype(np.float32)
        blocks.append(x)
    scale_log2 = SCALES[np.resize(scales, batch)]
    final = SCALES[np.resize(scales[::-1], batch)]
    acc = _values(rng, (batch, 128 * nrow, 8), neg_inf_rows=0.0)
    args = (blocks, checks, batch, nrow, scale_log2, max_offset, mufu, final, acc)
    want, got = _sequence("numpy", *args), _sequence("numba", *args)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert _same(w, g), f"output {i}: {np.count_nonzero(w.view(np.uint32) != g.view(np.uint32))} differ"


def test_auto_keeps_small_calls_on_numpy(monkeypatch):
    monkeypatch.setitem(engine._state, "engine", "auto")
    small = np.zeros((2, 128, 2, 4), dtype=np.float32)
    assert not engine.numba_softmax(small)
    assert engine.wants_numba("softmax", engine.AUTO_MIN_ELEMENTS)
    assert not engine.wants_numba("softmax", engine.AUTO_MIN_ELEMENTS - 1)
    with engine.use_engine("numba"):
        assert engine.numba_softmax(small)
        assert not engine.numba_softmax(small.astype(np.float64))
        assert not engine.numba_softmax(small[:, :100])  # not a warpgroup or warp: NumPy raises
    compiled = evaluator.COMPILED  # arrays its kernels do not take go to the specification
    with pytest.raises(ValueError):
        Softmax((2,), 2, np.float32(1), evaluator=compiled).max_get_scale(small[:, :100],
                                                                          is_first=True)
    with pytest.raises(TypeError, match="float32"):
        rescale_o(small[..., 0], np.ones((2, 128), dtype=np.float64), evaluator=compiled)


# ---- recorded forwards through the compiled engine ---------------------------------------------
@pytest.fixture(scope="module")
def recorded_traces():
    return forward_traces.load_traces(forward_traces.__file__.replace(
        "replay/forward_traces.py", f"data/device/{forward_traces.TRACES_FILE}"))


def test_recorded_step_traces_replay_with_the_compiled_softmax(recorded_traces):
    """Every H200 step trace (max_get_scale, online_softmax, rescale_o, finalize events of
    every schedule, dtype, softcap and descale): no divergence with engine "numba"."""
    _, rows = recorded_traces
    assert rows
    with engine.use_engine("numba"):
        for rec, raw in rows:
            inputs = forward_traces.make_inputs(rec)
            lcfg = forward_traces.launch_config(rec, inputs)
            ctas = forward_trace.trace_ctas([tuple(c) for c in rec["trace"]])
            device = forward_trace.decode(raw, lcfg, ctas)
            emulated = emu_forward(inputs["q"], inputs["k"], inputs["v"],
                                   **forward_traces.call_kwargs(rec, inputs)).trace
            div = first_divergence(emulated, device)
            assert div.found is False, f"{rec['name']}: {div}"


def test_library_recordings_replay_with_the_compiled_engine():
    """The real FA3 library's recorded calls (every 8th, incl. inf / NaN / huge K cases) and
    its sampled hypothesis-drawn calls, bit for bit with engine "numba"."""
    with engine.use_engine("numba"):
        rows = fa3_library.check_all(quick=True) + replay_sample.check_sample(quick=True)
    assert rows and all(r["mismatches"] == 0 for r in rows), [r for r in rows if r["mismatches"]]


def test_compiled_ex2_gives_the_models_bits():
    """``engine.ex2`` (MUFU.EX2 from the packed table, no FFMA) against the NumPy model's
    ``ex2`` on inputs reading every table entry, the special values and random bit patterns
    (subnormals, NaN payloads, huge and tiny values)."""
    rng = np.random.default_rng(11)
    x = np.concatenate([_every_ex2_entry().reshape(-1), SPECIAL.view(np.float32),
                        _values(rng, (1 << 16,), neg_inf_rows=0.0)])
    with np.errstate(all="ignore"):
        want = ex2(x)
    assert _same(want, engine.ex2(x))
    assert _same(want[:1000].reshape(10, 100), engine.ex2(x[:1000].reshape(10, 100)))
    with pytest.raises(TypeError, match="^x: expected a float32 array"):
        engine.ex2(x.astype(np.float64))


def test_compiled_ex2_paths_take_what_the_model_takes():
    """``engine.ex2`` takes a ``numpy.float32`` and refuses ndarray subclasses, as
    ``mufu.ex2`` does; empty inputs give empty results; ``softmax_exp2`` and ``ex2_ffma_rows``
    refuse a wrong dtype, too few dimensions or a table of the wrong kind or size by name
    (a short table would be read out of bounds)."""
    one = np.float32(1.5)
    assert _same(engine.ex2(one), ex2(one))
    with pytest.raises(TypeError, match="^x: expected a plain numpy float32 array"):
        engine.ex2(np.ma.masked_array(np.zeros(4, np.float32)))
    assert engine.ex2(np.zeros((0, 3), np.float32)).shape == (0, 3)
    table = model("h200").ex2_table()
    empty = engine.softmax_exp2(np.zeros((1, 4, 2, 0), np.float32), np.float32(1), np.float32(0),
                                table)
    assert empty.shape == (1, 4, 2, 0)
    assert engine.ex2_ffma_rows(np.zeros((5, 0), np.float32), np.float32(1), np.float32(0)).shape \
        == (5, 0)
    s = np.zeros((1, 4, 2, 2), np.float32)
    for kw, err, match in ((dict(scores=s.astype(np.float64)), TypeError, "^scores"),
                           (dict(scores=s[0, 0]), TypeError, "^scores"),
                           (dict(table=np.zeros(10, np.int32)), ValueError, "^table"),
                           (dict(table=table.view(np.float32)), ValueError, "^table"),
                           (dict(table=[1, 2]), TypeError, "^table")):
        args = dict(scores=s, scale=np.float32(1), neg_max=np.float32(0), table=table) | kw
        with pytest.raises(err, match=match):
            engine.softmax_exp2(**args)
    for x in (np.zeros(3, np.float64), np.float32(0), np.zeros(3, np.float16)):
        with pytest.raises(TypeError, match="^x"):
            engine.ex2_ffma_rows(x, np.float32(1), np.float32(0))
    # scale / neg_max: float32 only (nothing cast), plain arrays, checked on empty scores too
    masked = np.ma.masked_array(np.ones(4, np.float32), mask=[1, 0, 0, 0])
    for bad in (1.0, None, "2", np.float64(1), masked):
        with pytest.raises(TypeError, match="^scale"):
            engine.softmax_exp2(s, bad, np.float32(0), table)
        with pytest.raises(TypeError, match="^neg_max"):
            engine.softmax_exp2(s[:0], np.float32(1), bad, table)
        with pytest.raises(TypeError, match="^scale"):
            engine.ex2_ffma_rows(np.zeros((4, 3), np.float32), bad, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="^scale"):
        engine.softmax_exp2(s, np.ones(3, np.float32), np.float32(0), table)


def test_only_the_models_own_table_is_packed():
    """The packed form is derived once and kept, so only the MUFU model's table is packed:
    it is read-only for good (its WRITEABLE flag cannot be set again). A read-only view of a
    caller's writable array is read as it is at every call, so an edit through the array
    shows in the next call."""
    from simulator.engine import ex2_packed
    from simulator.numerics.mufu import is_model_ex2_table

    table = model("h200").ex2_table()
    assert is_model_ex2_table(table) and ex2_packed.for_table(table) is not None
    with pytest.raises(ValueError):
        table.setflags(write=True)
    base = table.copy()
    view = base.view()
    view.setflags(write=False)
    assert not is_model_ex2_table(view) and ex2_packed.for_table(view) is None
    x = np.zeros((1, 4, 1, 1), np.float32)  # reads entry 0
    before = engine.softmax_exp2(x, np.float32(1), np.float32(0), view)
    assert (before.view(np.int32) == table[0]).all()
    base[0] = 0x3F000000
    after = engine.softmax_exp2(x, np.float32(1), np.float32(0), view)
    assert (after.view(np.int32) == 0x3F000000).all()
