"""The puzzle ladder (simulator.exercises): every rung's reference solution passes on the device
recordings and at least two wrong attempts a learner makes fail, at the array the mistake touches.

Recordings: the numerics sweep (numerics_samples.npz / numerics_digests.npz), the MUFU
calibration (mufu_samples.npz), the forward's step traces (forward_traces.npz), the reduction
probe (hw_reduce.npz), the real library's split-KV calls (fa3_api_*) and the twin backward's
step traces (twin_backward_traces.npz). Every comparison is of bits.
"""

from __future__ import annotations

import contextlib
import io

import ml_dtypes
import numpy as np
import pytest

from simulator import exercises
from simulator.exercises import solutions as S
from simulator.hw import shfl_down, shfl_xor
from simulator.numerics import convert, fadd, ffma, fmax, fmul, fsub
from simulator.numerics.mufu import LN2_F32, LOG2E_F32, ex2, lg2, rcp

NEG_INF = np.float32(-np.inf)
ZERO = np.float32(0)


def _butterfly(offsets, op):
    def fn(x):
        for offset in offsets:
            x = op(x, shfl_xor(x, offset, axis=-2), ftz=True)
        return x
    return fn


def _max_scaled(row_max, scale_log2):
    return np.where(row_max == NEG_INF, ZERO, fmul(row_max, scale_log2, ftz=True))


def _quad_sum_f64(s):
    """The quad's sum in float64, rounded once: 'more exact' is not the device's bits."""
    quads = s.reshape(*s.shape[:-2], 32, 4, 2).astype(np.float64).sum(axis=-2, keepdims=True)
    return np.repeat(quads, 4, axis=-2).reshape(s.shape).astype(np.float32)


def _ds(core):
    def fn(p, dp, dpsum, dtanh):
        ds = core(p, dp, dpsum[..., None])
        return ds if dtanh is None else fmul(ds, dtanh, ftz=True)
    return fn


def _legacy_finalize(lane_masks):
    def fn(row_max, row_sum, scale_log2, max_offset, final_scale):
        total = _butterfly(lane_masks, fadd)(row_sum)
        empty = (total == 0) | np.isnan(total)
        inv = np.where(empty, ZERO, rcp(np.where(empty, np.float32(1), total)))
        scaled = fmul(total, np.float32(2.0 ** -max_offset)) if max_offset else total
        empty = (scaled == 0) | np.isnan(scaled)
        lse = ffma(row_max, fmul(scale_log2, LN2_F32),
                   fmul(lg2(np.where(empty, np.float32(1), scaled)), LN2_F32))
        return total, fmul(inv, final_scale), np.where(empty, NEG_INF, lse).astype(np.float32)
    return fn


def _fp8(offset, fused=True):
    def fn(scores, row_max, scale_log2):
        ms = ffma(row_max, scale_log2, np.float32(-offset)) if fused else fsub(
            fmul(row_max, scale_log2), np.float32(offset))
        ms = np.where(row_max == NEG_INF, ZERO, ms)
        return ex2(ffma(scores, scale_log2, -ms[..., None]))
    return fn


def _online_rescale(unfused_sum):
    def fn(scores, row_max_prev, row_max, row_sum_prev, acc_o, scale_log2):
        scale, p, row_sum, o = S.online_rescale(scores, row_max_prev, row_max, row_sum_prev,
                                                acc_o, scale_log2)
        if unfused_sum:
            row_sum = fadd(fmul(scale, row_sum_prev), p[..., 0])
            for ni in range(1, p.shape[-1]):
                row_sum = fadd(row_sum, p[..., ni])
        return scale, p, row_sum, o
    return fn


def _combine(exp, tree=True):
    def fn(lse, o, allreduce):
        m = allreduce(lse, "max")
        cur = np.where(m == NEG_INF, ZERO, m)
        e = exp(fsub(lse, cur))
        total = allreduce(e, "sum") if tree else np.add.reduce(e, axis=0, dtype=np.float32)
        lse_out = ffma(lg2(total), LN2_F32, m)
        nonzero = (total != 0) & ~np.isnan(total)
        w = fmul(e, np.where(nonzero, rcp(np.where(nonzero, total, np.float32(1))), ZERO))
        out = np.zeros(o.shape[1:], np.float32)
        for s in range(len(o)):
            take = w[s] > 0
            out[take] = ffma(w[s][take, None], o[s][take], out[take])
        return out, lse_out
    return fn


def _two_blocks(rescale=True, restart=False, quad=False):
    def fn(blocks, scale_log2):
        row_max, row_sum, out = None, None, []
        for scores in blocks:
            row_max, scale = S.max_get_scale(scores, None if restart else row_max, scale_log2)
            p = S.scale_apply_exp2(scores, row_max, scale_log2)
            row_sum = S._row_sum(p, scale if rescale else np.ones_like(scale), row_sum)
            row_sum = S.quad_sum(row_sum) if quad else row_sum
            out.append((row_max, scale, p, row_sum))
        return tuple(np.stack(x) for x in zip(*out, strict=True))
    return fn


def _dot_add_by_product_exponent():
    """The fused dot-add with the alignment taken from each product's own exponent."""
    def fn(a, b, c):
        a64, b64 = a.astype(np.float64), np.swapaxes(b.astype(np.float64), -1, -2)
        with np.errstate(invalid="ignore"):
            terms = np.concatenate([a64[..., :, None, :] * b64[..., None, :, :],
                                    c.astype(np.float64)[..., None]], -1)
        live = np.isfinite(terms) & (terms != 0)
        e = np.frexp(np.where(live, terms, 1.0))[1] - 1
        big = np.where(live, e, -(1 << 20)).max(axis=-1, keepdims=True)
        q = np.ldexp(1.0, np.where(big < -(1 << 19), 0, big - 25))
        total = np.trunc(np.where(live, terms, 0.0) / q).sum(axis=-1) * q[..., 0]
        d = (total.view(np.uint64) & ~np.uint64((1 << 29) - 1)).view(np.float64).astype(np.float32)
        return np.where(np.isfinite(terms).all(axis=-1), d, S.wgmma_dot_add(a, b, c))
    return fn


def _mainloop(divide=False, sum_converted=False):
    def fn(q, k_blocks, v_blocks, keep, scale_log2):
        from simulator.hw import rowcol_view
        from simulator.mma import gemm

        n, dv = k_blocks.shape[1], v_blocks.shape[-1]
        view = rowcol_view(f"m64n{n}k16")
        acc_o = np.zeros(q.shape[:-1] + (dv,), np.float32)
        row_max = row_sum = None
        for kb, vb, ok in zip(k_blocks, v_blocks, keep, strict=True):
            s = gemm(q, kb.T, np.full(q.shape[:-1] + (n,), -0.0, np.float32),
                     instruction=f"wgmma.m64n{n}k16.f32.bf16.bf16")
            scores = view.apply(view.layout.from_matrix(np.where(ok, s, NEG_INF)))
            row_max, scale = S.max_get_scale(scores, row_max, scale_log2)
            p = S.scale_apply_exp2(scores, row_max, scale_log2)
            p16 = convert(p, "bf16").astype(np.float32)
            row_sum = S._row_sum(p16 if sum_converted else p, scale, row_sum)
            acc_o = fmul(acc_o, view.row_values(scale)[..., None], ftz=True)
            acc_o = gemm(convert(view.layout.to_matrix(view.unapply(p)), "bf16"), vb, acc_o,
                         instruction=f"wgmma.m64n{dv}k16.f32.bf16.bf16")
        total, final, lse = S.finalize(row_max, row_sum, scale_log2, 0, np.float32(1))
        if divide:
            return (acc_o / view.row_values(total)[..., None]).astype(np.float32), view.row_values(lse)
        return fmul(acc_o, view.row_values(final)[..., None], ftz=True), view.row_values(lse)
    return fn


#: per rung: (wrong attempt, what it is, the array where the check must find it)
WRONG = {
    "fma": [
        (lambda a, b, c: fadd(fmul(a, b, ftz=True), c, ftz=True), "FMUL then FADD", "a*b+c"),
        (lambda a, b, c: ffma(a, b, c, ftz=False), "FFMA without ftz", "a*b+c"),
        (lambda a, b, c: (a.astype(np.float64) * b + c).astype(np.float32), "float64", "a*b+c")],
    "to_bf16": [
        (lambda x: (x.view(np.uint32) >> 16).astype(np.uint16).view(ml_dtypes.bfloat16),
         "truncation", "cvt to bf16"),
        (lambda x: x.astype(ml_dtypes.bfloat16), "NaN payload kept", "cvt to bf16")],
    "to_e4m3": [
        (lambda x: x.astype(ml_dtypes.float8_e4m3fn), "no satfinite: overflow to NaN", "cvt to e4m3"),
        (lambda x: convert(convert(x, "bf16").astype(np.float32), "e4m3"), "through bf16",
         "cvt to e4m3")],
    "exp2_row": [
        (np.exp2, "np.exp2", "exp2_row"),
        (lambda x: ex2(x, model="ideal"), "correctly rounded", "exp2_row")],
    "fast_expf": [
        (np.exp, "np.exp", "fast_expf"),
        (lambda x: ex2((x.astype(np.float64) * np.log2(np.e)).astype(np.float32)),
         "log2(e) in float64", "fast_expf")],
    "quad_max": [
        (_butterfly((1,), fmax), "one round", "row_max"),
        (_butterfly((4, 8), fmax), "across quads", "row_max"),
        (lambda m: fmax(m, shfl_down(m, 2, axis=-2), ftz=True), "shfl_down", "row_max")],
    "reduce_max": [
        (lambda s, m: S.quad_max(s.max(axis=-1)), "running max forgotten", "row_max"),
        (lambda s, m: S.quad_max(s.max(axis=-1) if m is None else np.maximum(m, s.max(axis=-1))),
         "np.max: no ftz, NaN wins", None)],
    "quad_sum": [
        (_butterfly((1, 2), fadd), "offsets 1 then 2", "row_sum"),
        (_quad_sum_f64, "float64 sum", "row_sum"),
        (_butterfly((2,), fadd), "one round", "row_sum")],
    "scale_apply_exp2": [
        (lambda s, m, c: ex2(fsub(fmul(s, c), _max_scaled(m, c)[..., None])), "FMUL then FSUB",
         "acc_s"),
        (lambda s, m, c: ex2(fmul(fsub(s, m[..., None]), c)), "subtract, then scale", "acc_s"),
        (lambda s, m, c: np.exp2(ffma(s, c, -_max_scaled(m, c)[..., None])), "np.exp2", "acc_s")],
    "max_get_scale": [
        (lambda s, p, c: (S.reduce_max(s, p), S.max_get_scale(s, p, c)[1] if p is None else
                          ex2(ffma(p, c, -fmul(S.reduce_max(s, p), c)))), "FFMA scale",
         "scores_scale"),
        (lambda s, p, c: (S.reduce_max(s, None), S.max_get_scale(s, p, c)[1]), "previous max "
         "dropped", "row_max"),
        (lambda s, p, c: (S.reduce_max(s, p), S.max_get_scale(s, p, c)[1] if p is None else
                          ex2(fmul(fsub(S.reduce_max(s, p), p), c))), "new - old", "scores_scale")],
    "online_rescale": [
        (_online_rescale(True), "row_sum rescale unfused", "row_sum"),
        (lambda *a: (*S.online_rescale(*a)[:3], a[4]), "O not rescaled", "acc_o")],
    "rescale_o": [
        (lambda o, s: (o / (np.float32(1) / s)[..., None]).astype(np.float32),
         "divided by the reciprocal", "acc_o"),
        (lambda o, s: fmul(o, s[..., :1, None], ftz=True), "row mi 0's scale for both rows",
         "acc_o")],
    "online_softmax": [
        (_two_blocks(rescale=False), "earlier sum not rescaled", "row_sum"),
        (_two_blocks(restart=True), "maximum restarted each block", "row_max"),
        (_two_blocks(quad=True), "sum reduced over the quad each block", "row_sum")],
    "wgmma_dot_add": [
        (lambda a, b, c: (np.matmul(a.astype(np.float32), b.astype(np.float32)) + c),
         "float32 matmul, then + C", "D"),
        (lambda a, b, c: (np.matmul(a.astype(np.float64), b.astype(np.float64))
                          + c).astype(np.float32), "exact, rounded to nearest", "D"),
        (_dot_add_by_product_exponent(), "aligned to each product's own exponent", "D")],
    "cta_mainloop": [
        (lambda q, k, v, m, c: S.cta_mainloop(q, k[::-1], v[::-1], m[::-1], c),
         "blocks visited first to last", None),
        (_mainloop(divide=True), "O divided by the row sum", "O"),
        (_mainloop(sum_converted=True), "row sum of the bf16 P", "lse")],
    "fp8_exp2": [
        (_fp8(0), "Max_offset forgotten", "acc_s"),
        (_fp8(8, fused=False), "offset as a separate FSUB", "acc_s")],
    "finalize": [
        (_legacy_finalize((1, 2)), "butterfly in the wrong order", "row_sum"),
        (lambda *a: (S.finalize(*a)[0], S.finalize(*a)[1],
                     S.finalize(a[0], a[1], a[2], 0, a[4])[2]), "FP8 sum not corrected", "lse")],
    "combine": [
        (_combine(np.exp), "np.exp", None),
        (_combine(lambda d: ex2(fmul(d, LOG2E_F32)), tree=False), "np.add over the splits",
         None),
        (_combine(lambda d: ex2(d)), "exp2 instead of exp", "lse")],
    "backward_ds": [
        (_ds(lambda p, dp, d: fsub(fmul(p, dp), fmul(p, d))), "distributed product", "dS"),
        (_ds(lambda p, dp, d: ffma(p, dp, -fmul(p, d))), "FFMA", "dS"),
        (lambda p, dp, d, t: S.backward_ds(p, dp, d, None), "dtanh forgotten", "dS")],
}


def test_the_ladder_has_at_least_14_rungs_in_order():
    assert len(exercises.PUZZLES) >= 14
    assert list(exercises.PUZZLES) == list(range(1, len(exercises.PUZZLES) + 1))
    assert set(WRONG) == {p.name for p in exercises.PUZZLES.values()}
    for p in exercises.PUZZLES.values():
        assert p.lines >= 1 and len(p.hints) >= 2 and p.checked_on, p.name


@pytest.mark.parametrize("name", list(WRONG))
def test_reference_passes_and_wrong_attempts_fail(name):
    p = exercises.puzzle(name)
    ok = exercises.check(name, getattr(S, name))
    assert ok.passed and ok.failing == 0 and ok.compared > 1000, str(ok)
    assert str(ok).startswith(f"puzzle {p.number} ({name}): PASS")
    assert len(WRONG[name]) >= 2
    for fn, what, array in WRONG[name]:
        with np.errstate(all="ignore"):
            r = exercises.check(p.number, fn)
        assert not r.passed and r.failing >= 1, (name, what)
        assert str(r).startswith(f"puzzle {p.number} ({name}): FAIL"), (name, what)
        if array is not None:
            assert r.where["array"] == array, (name, what, r.where)


def test_a_wrong_fma_names_the_first_differing_triple():
    """FMUL + FADD rounds twice: the first triple where that differs, with the H200's bits."""
    r = exercises.check("fma", WRONG["fma"][0][0])
    assert r.where["position"] == (57,) and "triple 57" in str(r)
    got, want = r.tile[0], r.tile[1]
    assert got.dtype == np.uint32 and got.shape == want.shape == (1 << 16,)  # the raw head
    assert int(got[57]) != int(want[57]) and np.array_equal(got[:57], want[:57])


def test_stubs_say_what_to_do():
    for p in exercises.PUZZLES.values():
        with pytest.raises(NotImplementedError, match=f"puzzle {p.name} is a stub"):
            exercises.check(p.number, p.stub)


def test_no_stub_names_the_instructions():
    """The task is what to compute; the instructions, their order and ftz are for the hints."""
    for p in exercises.PUZZLES.values():
        doc = p.stub.__doc__
        assert "lines" in doc or "line)" in doc, p.name
        for word in ("shfl_xor", "ffma(", "fmul(", "fadd(", "fsub(", "fmax(", "ex2(", "lg2(", "rcp(",
                     "FFMA", "FADD", "FSUB", "FMUL", "ftz=True", "satfinite", "MUFU.", "lane mask"):
            assert word not in doc, (p.name, word)


def test_the_expert_rungs_sequences_are_in_their_hints():
    """What the expert stubs used to spell out is revealed one hint at a time instead."""
    last = {"reduce_max": "lane mask 1", "online_rescale": "fmul(acc_o, scores_scale",
            "fp8_exp2": "ffma(scores, scale_log2", "finalize": "lse = ffma(row_max",
            "combine": "out = ffma(w[s], o[s], out)"}
    for name, text in last.items():
        hints = exercises.hints(name)
        assert len(hints) >= 3 and text in hints[-1], (name, hints[-1])
        assert all(text not in h for h in hints[:-1]), name


def test_hints_come_one_at_a_time():
    assert exercises.hints("fma", 1) == exercises.puzzle(1).hints[:1]
    assert exercises.hints(1) == exercises.puzzle("fma").hints
    with pytest.raises(ValueError, match="count: expected a positive integer"):
        exercises.hints(1, 0)
    from simulator.exercises.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["check", "8", "--hint"]) == 0
    text = out.getvalue()
    assert "hint 1 of 3" in text and "hint 2 of" not in text and "--hint 2 shows the next" in text
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["check", "quad_sum", "--hint", "3", "--solution"]) == 0
    text = out.getvalue()
    assert "hint 3 of 3" in text and "next one" not in text and "PASS" in text


def test_list_prints_one_numbered_line_per_puzzle():
    from simulator.exercises.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["list"]) == 0
    starts = [line.split(".")[0] for line in out.getvalue().splitlines() if line[:1].isdigit()]
    assert starts == [str(n) for n in exercises.PUZZLES]


# ---- pictures ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "attempt"), [("quad_sum", 0), ("fma", 0), ("backward_ds", 0),
                                                ("to_bf16", 0)])
def test_the_picture_marks_exactly_the_differing_elements(name, attempt, tmp_path):
    from simulator.exercises.picture import draw

    r = exercises.check(name, WRONG[name][attempt][0])
    got, want, _ = r.tile
    png = tmp_path / "fail.png"
    pic = draw(r, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.array_equal(pic.marked, np.argwhere(got != want))
    assert pic.first == tuple(pic.marked[0])
    assert np.all(pic.ulps[got != want] >= 1) and np.all(pic.ulps[got == want] == 0)


def test_the_picture_circles_the_first_divergence_of_the_text():
    from simulator.exercises.picture import draw

    r = exercises.check("quad_sum", WRONG["quad_sum"][0][0])   # offsets 1 then 2
    pic = draw(r)
    assert pic.first == (0, 0, 0) and len(pic.marked) == 76     # row_sum[warpgroup 0, thread 0, mi 0]
    assert pic.ulps[0, 0, 0] == 1                              # 0x3faaa23e vs 0x3faaa23d
    assert r.where["a"].startswith("0x3faaa23e") and r.where["b"].startswith("0x3faaa23d")


def test_ulp_distance_of_bit_patterns():
    from simulator.exercises.picture import ulp_distance_bits

    a = np.array([0x00000000, 0x80000000, 0x3F800000, 0x00000001, 0x7FC00000], np.uint32)
    b = np.array([0x80000000, 0x00000001, 0x3F800002, 0x80000001, 0x3F800000], np.uint32)
    assert ulp_distance_bits(a, b, 32).tolist() == [0, 1, 2, 2, np.inf]
    with pytest.raises(ValueError, match="width"):
        ulp_distance_bits(a, b, 64)


def test_a_passing_result_has_no_picture():
    from simulator.exercises.picture import draw

    with pytest.raises(ValueError, match="it passed"):
        draw(exercises.check("quad_sum", S.quad_sum))
