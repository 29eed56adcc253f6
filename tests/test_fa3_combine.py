"""FA3's split-KV combine (simulator.fa3.combine): kernel model, split ranges, host heuristics.

No GPU needed. The bit-exact claims are checked against a thread-by-thread transcription of
hopper/flash_fwd_combine_kernel.h with the instruction sequence of the fa3-fwd 0.0.3 SASS
(docs/combine.md) and against hand-derived values; only the float64 attention property uses a
tolerance (it compares an approximation with exact arithmetic, on purpose).
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from simulator.fa3 import combine as C
from simulator.numerics import convert, fadd, ffma, fmax, fmul, fsub
from simulator.numerics.bits import flush_subnormal
from simulator.numerics.mufu import LN2_F32, LOG2E_F32, ex2, lg2, rcp

BF16 = np.dtype(ml_dtypes.bfloat16)
NEG_INF = np.float32(-np.inf)


def bits(x) -> np.ndarray:
    a = np.ascontiguousarray(x)
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


# ---- an independent transcription of the kernel, one thread at a time -------------------------------
def _thread_splits(tid: int, threads_per_row: int, max_splits: int, kblock_m: int):
    """S2RTiledCopyLSE's partition of sLSE [kMaxSplits, kBlockM] for thread ``tid``: the thread
    layout Shape<T, 256/T> is column-major (t -> (t % T, t / T)), tiled over the tensor."""
    cols = 256 // threads_per_row
    i, j = tid % threads_per_row, tid // threads_per_row
    splits = [i + threads_per_row * a for a in range(max_splits // threads_per_row)]
    rows = [j + cols * b for b in range(kblock_m // cols)]
    return splits, rows


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).reshape(())


def transcribed_row(lse_row: np.ndarray, o_row: np.ndarray, num_splits: int, head_dim_v: int,
                    out_fmt: str, count: int | None = None):
    """One query row through the kernel, per thread and per shuffle, scalar by scalar."""
    kblock_k = 64 if head_dim_v <= 64 else 128
    kblock_m = 8 if kblock_k == 128 else 16
    T = 256 // kblock_m
    log = (4 if (kblock_m >= 16 and num_splits <= 16) else
           5 if num_splits <= 32 else 6 if num_splits <= 64 else 7 if num_splits <= 128 else 8)
    kmax = 1 << log
    count = num_splits if count is None else count
    smem = [_f(lse_row[s]) if s < count else _f(NEG_INF) for s in range(kmax)]
    # the T threads of row 0 of the CTA (the other rows are identical copies of the arithmetic)
    lanes = [tid for tid in range(256) if 0 in _thread_splits(tid, T, kmax, kblock_m)[1]]
    assert len(lanes) == T
    regs = {t: [smem[s] for s in _thread_splits(t, T, kmax, kblock_m)[0]] for t in lanes}
    split_of = {t: _thread_splits(t, T, kmax, kblock_m)[0] for t in lanes}

    def butterfly(vals: dict, op):
        width = T
        off = width // 2
        while off >= 1:  # Allreduce<T>: x = op(x, __shfl_xor_sync(~0, x, off)), lanes of one warp
            vals = {t: op(vals[t], vals[(t // 32) * 32 + ((t % 32) ^ off)]) for t in vals}
            off //= 2
        return vals

    lmax = {}
    for t in lanes:
        m = regs[t][0]
        for v in regs[t][1:]:
            m = fmax(m, v, ftz=True)
        lmax[t] = m
    lmax = butterfly(lmax, lambda a, b: fmax(a, b, ftz=True))
    mvi = {t: max([s for s, v in zip(split_of[t], regs[t], strict=True) if v != NEG_INF], default=-1)
           for t in lanes}
    max_valid = max(mvi.values())
    partial, scales = {}, {}
    for t in lanes:
        cur = _f(0) if lmax[t] == NEG_INF else lmax[t]
        acc = _f(0)
        sc = []
        for v in regs[t]:
            e = ex2(fmul(fsub(v, cur, ftz=True), LOG2E_F32, ftz=True), ftz=True)
            acc = fadd(acc, e, ftz=True)
            sc.append(e)
        partial[t], scales[t] = acc, sc
    total = butterfly(partial, lambda a, b: fadd(a, b, ftz=True))
    lse_out = {}
    weight = {}
    for t in lanes:
        s_ = total[t]
        lse_out[t] = ffma(lg2(s_, ftz=True), LN2_F32, lmax[t], ftz=True)
        inv = _f(0) if (flush_subnormal(s_) == 0 or s_ != s_) else rcp(s_, ftz=True)
        for s, e in zip(split_of[t], scales[t], strict=True):
            weight[s] = fmul(e, inv, ftz=True)
    assert len({bits(lse_out[t]).item() for t in lanes}) == 1  # every lane holds the same LSE
    o = np.zeros(o_row.shape[-1], dtype=np.float32)
    for s in range(max_valid + 1):
        w = weight[s]
        if flush_subnormal(w) > 0:
            o = ffma(w, o_row[s], o, ftz=True)
    out = o if out_fmt == "f32" else convert(o, out_fmt)
    return out, lse_out[lanes[0]]


def random_partials(rng, num, lead, seqlen, heads, dv, *, empty=0.0, spread=4.0):
    o = rng.standard_normal((num, *lead, seqlen, heads, dv)).astype(np.float32)
    lse = (rng.standard_normal((num, *lead, heads, seqlen)) * spread).astype(np.float32)
    if empty:
        dead = rng.random(lse.shape) < empty
        lse[dead] = NEG_INF
        o[np.swapaxes(dead, -1, -2)] = np.nan  # unwritten partials: never read
    return o, lse


def rows_of(o, lse):
    """[S, ..., Sq, H, dv], [S, ..., H, Sq] -> per-row [S] LSE and [S, dv] O, in (..., h, q) order."""
    oc = np.swapaxes(o, -3, -2).reshape(o.shape[0], -1, o.shape[-1])
    lc = lse.reshape(lse.shape[0], -1)
    return lc, oc


@pytest.mark.parametrize("num,dv", [(2, 128), (5, 128), (32, 128), (33, 128), (64, 96), (100, 128),
                                    (129, 128), (256, 128), (2, 64), (16, 64), (17, 64), (32, 48),
                                    (65, 64), (256, 32)])
def test_matches_thread_by_thread_transcription(num, dv):
    rng = np.random.default_rng(1000 + num * 7 + dv)
    o, lse = random_partials(rng, num, (2,), 3, 2, dv, empty=0.2)
    out, lse_out = C.combine(o, lse, BF16, head_dim_v=dv)
    lr, orow = rows_of(o, lse)
    oc = np.swapaxes(out, -3, -2).reshape(-1, dv)
    lc = lse_out.reshape(-1)
    for r in range(lr.shape[1]):
        want_o, want_l = transcribed_row(lr[:, r], orow[:, r], num, dv, "bf16")
        assert bits(oc[r]).tolist() == bits(want_o).tolist(), f"row {r}"
        assert bits(lc[r]) == bits(want_l), f"row {r}"


def test_f16_and_f32_outputs_match_transcription():
    rng = np.random.default_rng(7)
    o, lse = random_partials(rng, 9, (), 4, 3, 80, empty=0.1)
    lr, orow = rows_of(o, lse)
    for dt, fmt in ((np.float16, "f16"), (np.float32, "f32")):
        out, lse_out = C.combine(o, lse, dt, head_dim_v=80)
        assert out.dtype == np.dtype(dt)
        oc = np.swapaxes(out, -3, -2).reshape(-1, 80)
        for r in range(lr.shape[1]):
            want_o, want_l = transcribed_row(lr[:, r], orow[:, r], 9, 80, fmt)
            assert bits(oc[r]).tolist() == bits(want_o).tolist()
            assert bits(lse_out.reshape(-1)[r]) == bits(want_l)


def test_kernel_choice():
    k = C.combine_kernel
    assert k(2, 128) == (8, 128, 5, 32, 1)
    assert k(32, 256) == (8, 128, 5, 32, 1)
    assert k(33, 128) == (8, 128, 6, 32, 2)
    assert k(256, 128) == (8, 128, 8, 32, 8)
    assert k(16, 64) == (16, 64, 4, 16, 1)
    assert k(17, 64) == (16, 64, 5, 16, 2)
    assert k(129, 65) == (8, 128, 8, 32, 8)
    assert k(256, 8) == (16, 64, 8, 16, 16)


def test_summation_order_is_the_kernels():
    """With two splits per thread (33..64 splits at 8 x 128) the kernel adds each thread's own
    splits first, then the butterfly: a plain sequential sum over splits gives other bits."""
    rng = np.random.default_rng(3)
    num = 48
    lse = (rng.standard_normal((num, 1, 4000)) * 0.5).astype(np.float32)
    o = rng.standard_normal((num, 4000, 1, 4)).astype(np.float32)
    _, got = C.combine(o, lse, np.float32, head_dim_v=4)
    m = lse[:, 0].max(axis=0)
    e = ex2(fmul(fsub(lse[:, 0], m, ftz=True), LOG2E_F32, ftz=True))
    seq = np.zeros(4000, np.float32)
    for s in range(num):
        seq = fadd(seq, e[s], ftz=True)
    naive = ffma(lg2(seq), LN2_F32, m, ftz=True)
    assert np.any(bits(got[0]) != bits(naive))
    assert np.max(np.abs(got[0] - naive)) < 1e-5


def test_lse_is_one_ffma_not_mul_then_add():
    rng = np.random.default_rng(5)
    lse = rng.uniform(-30, 30, (2, 1, 5000)).astype(np.float32)
    o = np.ones((2, 5000, 1, 4), np.float32)
    _, got = C.combine(o, lse, np.float32, head_dim_v=4)
    m = lse.max(axis=0)
    cur = m
    e = ex2(fmul(fsub(lse, cur, ftz=True), LOG2E_F32, ftz=True))
    total = fadd(fadd(np.float32(0), e[0], ftz=True), e[1], ftz=True)
    fused = ffma(lg2(total), LN2_F32, m, ftz=True)
    unfused = fadd(fmul(lg2(total), LN2_F32, ftz=True), m, ftz=True)
    assert bits(got[0]).tolist() == bits(fused[0]).tolist()
    assert np.any(bits(fused) != bits(unfused))  # the contraction is visible in the bits


# ---- edge cases --------------------------------------------------------------------------------------
def test_empty_split_and_its_unwritten_o():
    """An empty split appended last (lane 4 of 16, which read -inf anyway) changes no bit; its O
    (NaN here: the Split epilogue leaves it unwritten) is never read. Inserted in the middle it
    moves the later splits to other lanes, so the butterfly adds in another order: the kernel's
    LSE can then differ in the last bit (it does for this seed), still as the transcription says."""
    rng = np.random.default_rng(11)
    o, lse = random_partials(rng, 4, (2,), 5, 3, 64)
    nan_o, inf_l = np.full_like(o[:1], np.nan), np.full_like(lse[:1], -np.inf)
    a = C.combine(o, lse, BF16, head_dim_v=64)
    b = C.combine(np.concatenate([o, nan_o]), np.concatenate([lse, inf_l]), BF16, head_dim_v=64)
    assert bits(a[0]).tolist() == bits(b[0]).tolist()
    assert bits(a[1]).tolist() == bits(b[1]).tolist()
    o3, l3 = np.concatenate([o[:2], nan_o, o[2:]]), np.concatenate([lse[:2], inf_l, lse[2:]])
    c = C.combine(o3, l3, BF16, head_dim_v=64)
    assert np.isfinite(c[0].astype(np.float32)).all()
    assert bits(c[1]).tolist() != bits(a[1]).tolist()
    lr, orow = rows_of(o3, l3)
    for r in range(lr.shape[1]):
        want_o, want_l = transcribed_row(lr[:, r], orow[:, r], 5, 64, "bf16")
        assert bits(np.swapaxes(c[0], -3, -2).reshape(-1, 64)[r]).tolist() == bits(want_o).tolist()
        assert bits(c[1].reshape(-1)[r]) == bits(want_l)


def test_all_splits_empty_gives_zero_and_minus_inf():
    o = np.full((3, 1, 2, 2, 128), np.nan, np.float32)
    lse = np.full((3, 1, 2, 2), -np.inf, np.float32)
    out, l_out = C.combine(o, lse, BF16, head_dim_v=128)
    assert np.all(bits(out) == 0)  # +0.0: the accumulator is never touched
    assert np.all(l_out == -np.inf)


def test_one_split_holding_every_key():
    """Other splits -inf: weight ex2(0) * rcp(1) = 1, so O = cvt(FFMA(1, O_s, +0)) and LSE =
    FFMA(lg2(1) = 0, ln 2, LSE_s) = LSE_s, bit for bit (only -0.0 becomes +0.0)."""
    rng = np.random.default_rng(12)
    o, lse = random_partials(rng, 6, (), 7, 2, 128)
    o[0, 0, 0, :3] = [-0.0, 1e-40, -3.0]  # -0, a subnormal (flushed by FFMA.FTZ), a number
    lse[1:] = -np.inf
    out, l_out = C.combine(o, lse, BF16, head_dim_v=128)
    assert bits(l_out).tolist() == bits(lse[0]).tolist()
    want = convert(flush_subnormal(o[0]) + np.float32(0), "bf16")  # + 0: -0.0 -> +0.0
    assert bits(out).tolist() == bits(want).tolist()
    assert bits(out[0, 0, :2]).tolist() == [0, 0]


def test_nan_lse_gives_zero_o_and_nan_lse():
    """FMNMX skips the NaN, but its weight ex2(NaN) = NaN makes the sum NaN: inv = 0, every weight
    is 0 or NaN (not > 0), so no split is added: O = +0, LSE = NaN."""
    rng = np.random.default_rng(13)
    o, lse = random_partials(rng, 3, (), 2, 1, 64)
    lse[1, 0, 0] = np.nan
    out, l_out = C.combine(o, lse, BF16, head_dim_v=64)
    assert np.isnan(l_out[0, 0]) and bits(l_out[0, 0]) == 0x7FFFFFFF
    assert np.all(bits(out[0, 0]) == 0)
    assert np.all(np.isfinite(out[1, 0].astype(np.float32))) and np.isfinite(l_out[0, 1])


def test_nan_in_a_read_partial_reaches_only_its_element():
    rng = np.random.default_rng(14)
    o, lse = random_partials(rng, 2, (), 2, 1, 8)
    o[1, 0, 0, 3] = np.nan
    out, l_out = C.combine(o, lse, np.float32, head_dim_v=8)
    assert np.isnan(out[0, 0, 3]) and bits(out[0, 0, 3]) == 0x7FFFFFFF
    assert np.isfinite(np.delete(out[0, 0], 3)).all() and np.isfinite(l_out).all()


def test_plus_inf_lse():
    o = np.ones((2, 1, 1, 4), np.float32)
    lse = np.array([np.inf, 0.0], np.float32).reshape(2, 1, 1)
    out, l_out = C.combine(o, lse, np.float32, head_dim_v=4)
    assert np.isnan(l_out).all() and np.all(bits(out) == 0)  # inf - inf: NaN weight, NaN sum


def test_underflowing_split_is_skipped_even_with_nan_partial():
    """A split 200 nats below the max gets weight ex2(-288.5) = 0 (flushed): not added, so a NaN
    in its O does not propagate."""
    o = np.ones((2, 1, 1, 4), np.float32)
    o[1] = np.nan
    lse = np.array([0.0, -200.0], np.float32).reshape(2, 1, 1)
    out, l_out = C.combine(o, lse, np.float32, head_dim_v=4)
    assert np.all(out == 1.0) and l_out[0, 0] == 0.0


# ---- layouts, dynamic split counts, arguments -------------------------------------------------------
def test_layouts_agree():
    rng = np.random.default_rng(21)
    o, lse = random_partials(rng, 7, (3,), 5, 4, 40, empty=0.2)
    ref = C.combine(o, lse, BF16, head_dim_v=40)
    acc = C.combine(np.ascontiguousarray(np.swapaxes(o, -3, -2)), lse, BF16, head_dim_v=40, layout="accum")
    api = C.combine(o, np.ascontiguousarray(np.swapaxes(lse, -1, -2)), BF16, head_dim_v=40,
                    layout="combine")
    assert bits(acc[0]).tolist() == bits(ref[0]).tolist() == bits(api[0]).tolist()
    assert bits(acc[1]).tolist() == bits(ref[1]).tolist()
    assert bits(api[1]).tolist() == bits(np.swapaxes(ref[1], -1, -2)).tolist()
    # mha_combine pads the head dim to a multiple of 4: dv 40 stays, 38 runs as 40
    o38 = np.ascontiguousarray(o[..., :38])
    r38 = C.combine(o38, lse, BF16, head_dim_v=40)
    assert bits(r38[0]).tolist() == bits(ref[0][..., :38]).tolist()


def test_static_split_count_picks_the_template():
    """5 splits read in a 40-split launch (num_splits_dynamic 5; kMaxSplits 64, two splits per
    thread) equal 40 given splits of which 35 are -inf."""
    rng = np.random.default_rng(22)
    o, lse = random_partials(rng, 40, (), 3, 2, 128)
    lse[5:] = -np.inf
    full = C.combine(o, lse, BF16, head_dim_v=128)
    few = C.combine(o[:5], lse[:5], BF16, head_dim_v=128, num_splits=40, num_splits_dynamic=5)
    assert bits(full[0]).tolist() == bits(few[0]).tolist()
    assert bits(full[1]).tolist() == bits(few[1]).tolist()
    with pytest.raises(ValueError, match="only 5 are given"):
        C.combine(o[:5], lse[:5], BF16, head_dim_v=128, num_splits=6)


def test_dynamic_split_counts():
    rng = np.random.default_rng(23)
    o, lse = random_partials(rng, 4, (3,), 2, 2, 64)
    counts = np.array([4, 2, 1]).reshape(3, 1, 1)
    out0 = np.full((3, 2, 2, 64), 7, BF16)
    lse0 = np.full((3, 2, 2), 5.0, np.float32)
    out, l_out = C.combine(o, lse, BF16, head_dim_v=64, num_splits=4, num_splits_dynamic=counts,
                           out=out0, lse=lse0)
    assert out is out0 and l_out is lse0
    a = C.combine(o[:, :1], lse[:, :1], BF16, head_dim_v=64)
    lse_b = lse[:, 1:2].copy()
    lse_b[2:] = -np.inf  # count 2: splits 2 and 3 read as -inf
    b = C.combine(o[:, 1:2], lse_b, BF16, head_dim_v=64)
    assert bits(out[:1]).tolist() == bits(a[0]).tolist() and bits(l_out[:1]).tolist() == bits(a[1]).tolist()
    assert bits(out[1:2]).tolist() == bits(b[0]).tolist() and bits(l_out[1:2]).tolist() == bits(b[1]).tolist()
    assert np.all(out[2].astype(np.float32) == 7) and np.all(l_out[2] == 5)  # count 1: not written
    fresh = C.combine(o, lse, BF16, head_dim_v=64, num_splits=4, num_splits_dynamic=counts)
    assert np.all(np.isnan(fresh[1][2])) and np.all(fresh[0][2].astype(np.float32) == 0)


def test_empty_rows():
    o = np.zeros((3, 2, 0, 4, 64), np.float32)
    lse = np.zeros((3, 2, 4, 0), np.float32)
    out, l_out = C.combine(o, lse, BF16, head_dim_v=64)
    assert out.shape == (2, 0, 4, 64) and l_out.shape == (2, 4, 0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(out_partial=np.zeros((2, 1, 1, 4), np.float64)), "float32"),
    (dict(out_partial=np.ma.zeros((2, 1, 1, 4), np.float32)), "plain numpy"),
    (dict(out_partial=np.zeros((2, 1, 4), np.float32)), "out_partial: expected"),
    (dict(lse_partial=np.zeros((2, 1, 2), np.float32)), "lse_partial: expected"),
    (dict(out_dtype="e4m3"), "out_dtype"),
    (dict(out_dtype=np.int8), "out_dtype"),
    (dict(layout="bshd"), "layout"),
    (dict(head_dim_v=8), "head_dim_v"),
    (dict(head_dim_v=3), "head_dim_v"),
    (dict(head_dim_v=4.0), "head_dim_v"),
    (dict(num_splits=1), "num_splits"),
    (dict(num_splits=257), "num_splits"),
    (dict(num_splits=True), "num_splits"),
    (dict(mufu="sm80x"), "mufu"),
    (dict(mufu=90), "mufu"),
    (dict(num_splits_dynamic=np.ones((3,))), "num_splits_dynamic"),
    (dict(num_splits_dynamic=np.array([5])), "num_splits_dynamic"),
    (dict(num_splits_dynamic=np.array([1.0])), "num_splits_dynamic"),
    (dict(out=np.zeros((1, 1, 4), np.float64)), "out:"),
    (dict(out=np.zeros((1, 4), np.float32)), "out:"),
    (dict(lse=np.zeros((1, 1), np.float64)), "lse:"),
])
def test_bad_arguments(kwargs, match):
    args = dict(out_partial=np.zeros((2, 1, 1, 4), np.float32), lse_partial=np.zeros((2, 1, 1), np.float32),
                out_dtype=np.float32, head_dim_v=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        C.combine(args.pop("out_partial"), args.pop("lse_partial"), args.pop("out_dtype"), **args)


def test_single_split_is_refused():
    with pytest.raises(ValueError, match="returns without writing"):
        C.combine(np.zeros((1, 1, 1, 4), np.float32), np.zeros((1, 1, 1), np.float32), BF16, head_dim_v=4)


@pytest.mark.parametrize("dv,out_dtype", [(64, BF16), (128, np.float16), (256, np.float32)])
def test_one_split_without_the_early_return_is_two_splits_with_an_empty_second(dv, out_dtype):
    """``early_return=False`` on one split runs the kernel's steps as a two-split combine whose
    second split saw no key (LSE -inf; the same kernel: kLogMaxSplits 4 / 5 for both): the same
    bits, -inf rows, a subnormal and -0 included."""
    rng = np.random.default_rng(dv)
    o, lse = random_partials(rng, 1, (2,), 9, 3, dv)
    lse[0, 0, 1, :4] = -np.inf
    o[0, 1, 2, 0, :2] = [-0.0, 1e-40]
    one = C.combine(o, lse, out_dtype, head_dim_v=dv, early_return=False)
    two = C.combine(np.concatenate([o, np.full_like(o, np.nan)]),
                    np.concatenate([lse, np.full_like(lse, -np.inf)]), out_dtype, head_dim_v=dv)
    assert bits(one[0]).tolist() == bits(two[0]).tolist()
    assert bits(one[1]).tolist() == bits(two[1]).tolist()
    assert np.all(bits(one[0][0, :4, 1]) == 0) and np.all(one[1][0, 1, :4] == -np.inf)


def test_combine_of_one_split_runs_the_kernels_arithmetic():
    """One split through flash_attn_combine: the partial where its LSE is finite (FFMA.FTZ
    flushes a subnormal and turns -0 into +0), out +0 and LSE -inf where it is -inf (what
    FA3's own test_flash_attn_combine expects with one split; the library's kernel writes
    nothing then). Torch inputs in upstream's non-contiguous layouts, bits compared."""
    torch = pytest.importorskip("torch", reason="torch tensors in, torch tensors out")
    from simulator.fa3 import flash_attn_combine

    g = torch.Generator().manual_seed(1)
    op = torch.randn(2, 3, 4, 5, 64, generator=g).transpose(2, 3)[:1]      # [1, b, s, h, d]
    lp = torch.randn(1, 3, 8, 5, generator=g).transpose(-1, -2)[:, :, :, :4]  # [1, b, s, h]
    lp[:, :1] = -float("inf")
    op[0, 1, 0, 0, :2] = torch.tensor([-0.0, 1e-40])
    out, lse = flash_attn_combine(op, lp)
    want = op[0].clone()
    want[0] = 0.0
    want[1, 0, 0, :2] = 0.0
    assert torch.equal(out.view(torch.int32), want.contiguous().view(torch.int32))
    assert torch.equal(lse.contiguous().view(torch.int32), lp[0].contiguous().view(torch.int32))
    out16, _ = flash_attn_combine(op, lp, out_dtype=torch.bfloat16)
    assert torch.equal(out16.view(torch.int16), want.to(torch.bfloat16).view(torch.int16))


# ---- the float64 property (the one tolerance in this file) ------------------------------------------
@pytest.mark.parametrize("num_splits,kblock_n", [(2, 16), (3, 16), (7, 8), (40, 4)])
def test_combine_of_exact_splits_is_close_to_exact_attention(num_splits, kblock_n):
    """Splits computed in float64 (then stored as float32, as the Split epilogue does) and
    combined by the kernel model approximate float64 attention. Approximate by nature (MUFU
    ex2 / lg2 / rcp, float32 sums, bf16 output): this is the only test with a tolerance."""
    rng = np.random.default_rng(num_splits)
    sq, sk, heads, d = 5, 150, 2, 32
    q = rng.standard_normal((sq, heads, d))
    k = rng.standard_normal((sk, heads, d))
    v = rng.standard_normal((sk, heads, d))
    s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref_o = np.einsum("hqk,khd->qhd", p / p.sum(-1, keepdims=True), v)
    ref_lse = np.log(np.exp(s).sum(-1))
    n_max = -(-sk // kblock_n)
    o_part = np.full((num_splits, sq, heads, d), np.nan, np.float32)
    l_part = np.full((num_splits, heads, sq), -np.inf, np.float32)
    for split in range(num_splits):
        lo, hi = C.n_block_range_for_split(0, n_max, split, num_splits)
        keys = slice(lo * kblock_n, min(hi * kblock_n, sk))
        if hi <= lo:
            continue  # an empty split: LSE -inf, O unwritten
        ss = s[:, :, keys]
        mx = ss.max(-1, keepdims=True)
        pp = np.exp(ss - mx)
        o_part[split] = np.einsum("hqk,khd->qhd", pp / pp.sum(-1, keepdims=True), v[keys])
        l_part[split] = (np.log(pp.sum(-1)) + mx[..., 0])
    out32, lse32 = C.combine(o_part, l_part, np.float32, head_dim_v=d)
    assert np.max(np.abs(lse32 - ref_lse)) < 2e-5
    assert np.max(np.abs(out32 - ref_o)) < 2e-5
    outb, _ = C.combine(o_part, l_part, BF16, head_dim_v=d)
    assert np.all(np.abs(outb.astype(np.float64) - ref_o) <= 2.0**-8 * np.abs(ref_o) + 1e-5)


# ---- split ranges (hopper/block.h) -------------------------------------------------------------------
def _c_range(n_min: int, n_max: int, split_idx: int, num_splits: int) -> tuple[int, int]:
    """block.h's Split lines, literally (C int semantics; all values here are non-negative)."""
    dyn = (split_idx & 0xFFFFFFFF) >> 16
    actual = split_idx & 0x0000FFFF
    n = dyn if dyn > 0 else num_splits
    per = 0 if n_max <= n_min else (n_max - n_min + n - 1) // n
    lo = n_min + actual * per
    return lo, min(lo + per, n_max)


def test_split_ranges_match_block_h():
    rng = np.random.default_rng(31)
    for _ in range(3000):
        n_min = int(rng.integers(0, 40))
        n_max = int(rng.integers(0, 300))
        ns = int(rng.integers(1, 257))
        dyn = int(rng.integers(0, 3)) and int(rng.integers(1, ns + 1))
        split = int(rng.integers(0, dyn or ns))
        sidx = split | (dyn << 16)
        assert C.n_block_range_for_split(n_min, n_max, sidx, ns) == _c_range(n_min, n_max, sidx, ns)


@pytest.mark.parametrize("n_min,n_max,ns", list(itertools.product(
    [0, 3], [0, 1, 5, 17, 64, 130], [1, 2, 3, 7, 16, 128])))
def test_split_ranges_tile_the_range_in_order(n_min, n_max, ns):
    lo, hi = C.n_block_range_for_split(np.full(ns, n_min), n_max, np.arange(ns), ns)
    covered = [b for a, c in zip(lo.tolist(), hi.tolist(), strict=True) for b in range(a, c)]
    assert covered == list(range(n_min, max(n_min, n_max)))
    per = 0 if n_max <= n_min else -(-(n_max - n_min) // ns)
    assert np.all(hi - lo <= per)
    assert np.all(lo == n_min + np.arange(ns) * per)


def test_split_range_examples():
    # 5 blocks over 4 splits: 2 per split, the last split empty (min 6 > max 5)
    assert [C.n_block_range_for_split(0, 5, s, 4) for s in range(4)] == [(0, 2), (2, 4), (4, 5), (6, 5)]
    # varlen: split 1 of a dynamic count of 2 (top 16 bits) overrides the static 4
    assert C.n_block_range_for_split(0, 5, 1 | (2 << 16), 4) == (3, 5)
    assert C.n_block_range_for_split(4, 4, 0, 3) == (4, 4)
    with pytest.raises(ValueError, match="split_idx"):
        C.n_block_range_for_split(0, 5, 4, 4)
    with pytest.raises(ValueError, match="num_splits"):
        C.n_block_range_for_split(0, 5, 0, 0)
    with pytest.raises(ValueError, match="n_block_min"):
        C.n_block_range_for_split(0.5, 5, 0, 2)


# ---- host heuristics ---------------------------------------------------------------------------------
def test_heuristic_hand_worked():
    h = C.num_splits_heuristic
    # the source's own example: 48 tiles, 108 SMs: efficiencies 0.44, 0.89, 0.67, 0.89, ... with
    # the best 1.0 at 9 splits (432 = 4 * 108); the first reaching 0.85 of it is 2
    assert h(48, 108, 100, 1, 1000, False, 128) == 2
    # enough tiles: 0.8f * 132 = 105.6; 106 tiles -> 1 split, 105 -> the search
    assert h(106, 132, 100, 1, 1000, False, 128) == 1
    assert h(105, 132, 100, 1, 1000, False, 128) == 5  # 525 / 132 = 3.98 waves -> 0.994
    # few K/V blocks: never split ("hdim = 128 and seqlen_k = 512": 3 blocks of 176)
    assert h(1, 132, 4, 1, 1000, False, 128) == 1
    assert h(1, 132, 5, 1, 1000, False, 128) == 5  # efficiency n / 132 grows with n
    # one KV head over 50 MiB with >= 2 * 132 query tiles and no causal: ceil(size / 50 MiB)
    mib50 = 50 * 1024 * 1024
    assert h(300, 132, 100, 264, 2 * mib50, False, 128) == 2
    assert h(300, 132, 100, 264, 2 * mib50 + 1, False, 128) == 3
    assert h(300, 132, 100, 264, 2 * mib50 + 1, True, 128) == 1
    assert h(300, 132, 100, 263, 2 * mib50 + 1, False, 128) == 1
    assert h(300, 132, 100, 264, 39 * mib50 + 1, False, 128) == 40
    assert h(300, 132, 100, 264, 39 * mib50 + 1, False, 16) == 16
    # int32 as in C++: size + 50 MiB - 1 over 2^31 - 1 wraps negative, and C division truncates
    assert h(300, 132, 100, 264, 2**31 - 1, False, 128) == -((2**32 - (2**31 - 1 + mib50 - 1)) // mib50)
    assert h(0, 132, 100, 0, 0, False, 128) == 1  # no tiles: 0 / 0 efficiencies, none qualifies
    with pytest.raises(ValueError, match="is_causal_or_local"):
        h(1, 132, 5, 1, 1000, 1, 128)
    with pytest.raises(ValueError, match="num_sms"):
        h(1, 0, 5, 1, 1000, False, 128)


def test_get_num_splits_hand_worked():
    g = C.get_num_splits
    # decode, bf16 d 128, 8 q heads on 1 kv head: tile 128 x 176, 8 packed rows -> 1 m block,
    # ceil(8192 / 176) = 47 n blocks, 1 tile: efficiency n / 132, best 47 / 132; 40 / 132 is the
    # first >= 0.85 * 47 / 132 (39 / 132 = 0.2955 < 0.3027 <= 0.3030)
    assert g(1, 8, 1, 1, 8192, 128) == 40
    assert g(1, 8, 1, 1, 8192, 128, causal=True) == 40  # causal with seqlen_q 1 is non-causal
    # causal, 2 query rows: tile 128 x 128, 64 n blocks, 16 packed rows -> 1 tile; 55 / 132
    assert g(1, 8, 1, 2, 8192, 128, causal=True) == 55
    # local (1024, 0) with seqlen_q 1: min(8192, 0 + 1024 + 1 + 128) = 1153 keys, 10 blocks of 128
    assert g(1, 8, 1, 1, 8192, 128, local=True, window_size=(1024, 0)) == 9
    # many tiles: 8 * 16 * 8 = 1024 >= 105.6
    assert g(8, 16, 16, 1024, 1024, 128) == 1
    # seqlen_k 512, d 128: 3 n blocks
    assert g(1, 1, 1, 1, 512, 128) == 1
    # varlen counts one batch: 64 batches of decode would fill the GPU, a varlen launch not
    assert g(64, 8, 2, 1, 8192, 128) == 1
    assert g(64, 8, 2, 1, 8192, 128, varlen=True) == 40  # 2 tiles: 2n / 132, best 94 / 132
    # e4m3 d 128: tile 128 x 224 -> ceil(8192 / 224) = 37 blocks; 1 byte per element
    assert g(1, 8, 1, 1, 8192, 128, dtype="e4m3") == 32
    # the L2 rule: one head of 204801 keys x (128 + 128) x 2 bytes > 2 x 50 MiB, 264 query tiles
    assert g(1, 1, 1, 264 * 128, 204801, 128) == 3
    # ... where the int32 size of one KV head wraps: 2^22 keys x 512 x 2 bytes = 2^32 -> 0
    assert C.plan_splits(1, 1, 1, 264 * 128, 1 << 22, 256).size_one_kv_head == 0
    assert g(1, 1, 1, 264 * 128, 1 << 22, 256) == 1
    assert g(1, 8, 1, 1, 8192, 128, num_sms=66) == 40  # n / 66 >= 0.85 * 47 / 66: n >= 39.95


def test_plan_and_pack_gqa():
    p = C.plan_splits(1, 8, 1, 1, 8192, 128)
    assert (p.num_splits, p.pack_gqa, p.kblock_m, p.kblock_n, p.num_m_blocks, p.num_n_blocks,
            p.total_mblocks, p.size_one_kv_head) == (40, True, 128, 176, 1, 47, 1, 8192 * 256 * 2)
    gp = C.get_pack_gqa
    assert gp(2, 8, 8, 100, 128) is True  # always with splits
    assert gp(1, 8, 8, 1, 128) is False  # MHA
    assert gp(1, 8, 1, 1, 128) is True  # 1 / 128 < 0.9 * 8 / 128
    assert gp(1, 4, 2, 128, 128) is False  # 128 rows fill the 128-row tile
    assert gp(1, 4, 2, 100, 128, varlen_q=True) is True
    assert gp(1, 4, 2, 100, 128) is False  # 100 / 128 = 0.78 is not below 0.9 * 200 / 256 = 0.70
    assert C.should_pack_gqa(False, 100, 2, 128) is False
    with pytest.raises(ValueError, match="heads"):
        C.get_num_splits(1, 6, 4, 1, 100, 64)
    with pytest.raises(ValueError, match="dtype"):
        C.get_num_splits(1, 8, 1, 1, 100, 64, dtype="fp32")
    with pytest.raises(ValueError, match="window_size"):
        C.get_num_splits(1, 8, 1, 1, 100, 64, local=True, window_size=(-2, 0))
    with pytest.raises(ValueError, match="window_size: required"):
        C.get_num_splits(1, 8, 1, 1, 100, 64, local=True)
    with pytest.raises(ValueError, match="head_dim"):
        C.get_num_splits(1, 8, 1, 1, 100, 320)


def test_tile_sizes_are_the_kernels_compiled_in_the_wheel():
    """(kBlockM, kBlockN) per kernel head dim: the tiles in the kernel names of fa3-fwd 0.0.3's
    _C.abi3.so (``cuobjdump -symbols``: CollectiveMainloopFwdSm90<..., tuple<M, N, hdim>, ...>)."""
    seen = {("bf16", 64, False): (192, 192), ("bf16", 64, True): (192, 128),
            ("bf16", 96, False): (192, 144), ("bf16", 128, False): (128, 176),
            ("bf16", 128, True): (128, 128), ("bf16", 192, False): (128, 112),
            ("bf16", 256, False): (128, 80), ("e4m3", 64, False): (192, 160),
            ("e4m3", 96, False): (192, 128), ("e4m3", 128, False): (128, 224),
            ("e4m3", 192, False): (128, 160), ("e4m3", 256, False): (128, 128)}
    for (fmt, d, causal), tile in seen.items():
        got = C.tile_size_fwd_sm90(d, d, causal, False, 1 if fmt == "e4m3" else 2)
        assert got[:2] == tile, (fmt, d, causal)


def test_flash_attn_combine_takes_a_memory_budget():
    """Partials larger than the default budget: refused with the estimate, and combined
    (the same bits as with room to spare) once the caller passes a larger memory_budget."""
    from simulator import fa3

    rng = np.random.default_rng(3)
    op = rng.standard_normal((2, 1, 64, 2, 64)).astype(np.float32)
    lp = rng.standard_normal((2, 1, 64, 2)).astype(np.float32)
    with pytest.raises(MemoryError, match="memory_budget"):
        fa3.flash_attn_combine(op, lp, memory_budget=op.nbytes)
    small = fa3.flash_attn_combine(op, lp, memory_budget=op.nbytes + lp.nbytes + 2**20)
    roomy = fa3.flash_attn_combine(op, lp)
    for a, b in zip(small, roomy, strict=True):
        assert np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))
