"""Property tests of the forward emulator, driven by the public strategies.

Profiles: HYPOTHESIS_PROFILE=ci (default, bounded and deterministic) or deep (long runs).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import flash
from simulator import strategies as sst
from simulator.flash.config import input_format
from simulator.flash.masks import allowed, normalize_window
from simulator.numerics import mufu

BOUND = {"bf16": 8 * 2.0**-9, "f16": 8 * 2.0**-12, "e4m3": 0.1}


def examples(ci_count: int) -> int:
    """Examples for a test that runs ``ci_count`` under the ci profile (200 examples): the
    loaded profile scales it (deep, 20,000: 100x; dev, 100: half). An explicit
    ``max_examples`` would override the profile, so the deep profile would not go deeper."""
    return max(1, ci_count * settings.default.max_examples // 200)


def _visible(case):
    """[B, Sq, Sk] boolean: which keys each query row may see."""
    b, sq = case.q.shape[:2]
    sk = case.k.shape[1]
    seqlens = case.kwargs.get("seqlens_k", np.full(b, sk))
    win = normalize_window(case.kwargs.get("causal", False), case.kwargs.get("window", (-1, -1)))
    ok = allowed(np.arange(sq)[None, :, None], np.arange(sk)[None, None, :], sq,
                 np.asarray(seqlens)[:, None, None], win)
    return np.broadcast_to(ok, (b, sq, sk))


@settings(max_examples=examples(25), deadline=None)
@given(sst.attention_inputs(edge_values=False, max_seqlen=130))
def test_close_to_float64_reference(case):
    res = flash.forward(case.q, case.k, case.v, **case.kwargs)
    ref_kw = {k: v for k, v in case.kwargs.items() if k not in ("kblock_m", "kblock_n", "schedule")}
    ref_out, ref_lse = flash.reference(case.q, case.k, case.v, **ref_kw)
    fmt = input_format(case.q.dtype)
    assert np.array_equal(np.isneginf(res.lse), np.isneginf(ref_lse))
    den = max(np.linalg.norm(ref_out), 1e-30)
    assert np.linalg.norm(res.out.astype(np.float64) - ref_out) / den < BOUND[fmt]


@settings(max_examples=examples(25), deadline=None)
@given(sst.attention_inputs(max_seqlen=130))
def test_rows_without_keys_and_the_convex_hull(case):
    out, lse = flash.forward(case.q, case.k, case.v, **case.kwargs)
    vis = _visible(case)                                           # [B, Sq, Sk]
    empty = ~vis.any(-1)                                           # [B, Sq]
    o = out.astype(np.float32)
    assert np.all(np.isneginf(lse.transpose(0, 2, 1)[empty]))
    # O = 0 exactly, unless V holds inf (f16 outliers overflow on purpose): P = 0 times inf is NaN
    if np.all(np.isfinite(case.v.astype(np.float32))):
        assert np.all(o[empty].view(np.uint32) == 0)               # exact +0
    # each output coordinate lies within the attended V rows' range (rounding slack)
    heads, kv = case.q.shape[2], case.k.shape[2]
    v = np.repeat(case.v.astype(np.float64), heads // kv, axis=2)  # [B, Sk, H, d]
    vdesc = float(case.kwargs.get("v_descale", 1.0))
    lse_rows = lse.transpose(0, 2, 1)                              # [B, Sq, H]
    for bi, qi in zip(*np.nonzero(~empty), strict=True):
        rows = v[bi, vis[bi, qi]] * vdesc                          # [keys, H, d]
        got = o[bi, qi].astype(np.float64)
        if not (np.all(np.isfinite(got)) and np.all(np.isfinite(lse_rows[bi, qi]))):
            # huge logits (edge values): P = exp2(FFMA residual) can be 0 for every key (O = 0,
            # LSE = -inf) or inf (O NaN), as on the device; see test_huge_equal_logits
            continue
        tol = 2.0**-5 * np.abs(rows).max(axis=0) + 1e-30
        assert np.all(got <= rows.max(axis=0) + tol) and np.all(got >= rows.min(axis=0) - tol)


@settings(max_examples=examples(60), deadline=None)
@given(sst.score_rows(max_size=64))
def test_softmax_state_on_score_rows(row):
    """One row through the Softmax methods as 4 quad lanes with 16 columns each: rows of -inf
    give LSE -inf; rows of moderate finite logits give LSE >= their max.

    Not asserted for |logit * scale_log2| >= 2^20: there FFMA(s, scale, -RN(max * scale))
    leaves the product's rounding residual (up to 2^-4 .. 2^103) in the exponent, so even the
    maximum's P is exp2(residual), possibly 0 (then LSE = -inf) or inf: FA3's exp2 trick on
    huge logits, reproduced on purpose (see test_huge_equal_logits)."""
    row = np.resize(row, 64).astype(np.float32)
    scores = np.full((128, 2, 16), -np.inf, dtype=np.float32)
    scores[:4, 0, :] = row.reshape(4, 16)                          # quad 0, row 0
    sm = flash.Softmax((), 2, np.float32(1.4426950), 0)
    sm.max_get_scale(scores, is_first=True)
    sm.online_softmax(scores, is_first=True)
    sm.finalize()
    finite = row[~np.isnan(row)]
    lse = sm.lse[0, 0]
    if finite.size == 0 or np.all(finite == -np.inf):
        assert np.isneginf(lse)
    elif np.any(np.isnan(row)) or np.any(finite == np.inf):
        assert np.isneginf(lse) or np.isnan(lse) or np.isfinite(lse)  # NaN sum -> -inf
    elif np.abs(finite).max() < 2.0**19:
        assert lse >= np.float32(finite.max()) - 1e-3 * max(1.0, abs(float(finite.max())))


@settings(max_examples=examples(40), deadline=None)
@given(st.floats(-200, 200, width=32))
def test_ex2_monotone_nonnegative(x):
    xs = np.array([x, np.nextafter(np.float32(x), np.float32(300))], dtype=np.float32)
    y = mufu.ex2(xs)
    assert np.all(y >= 0) and y[0] <= y[1]


def test_huge_equal_logits():
    """A row of equal logits 3.6e9: every P is exp2 of the same FFMA residual, here below
    -149, so the sum is 0 and the row gets LSE = -inf (and O = 0) although nothing is masked."""
    x = np.float32(3.6152576e9)
    scores = np.full((128, 2, 16), -np.inf, dtype=np.float32)
    scores[:4, 0, :] = x
    sm = flash.Softmax((), 2, np.float32(1.4426950), 0)
    sm.max_get_scale(scores, is_first=True)
    p = sm.online_softmax(scores, is_first=True)
    sm.finalize()
    from simulator.numerics import ffma, fmul

    residual = ffma(x, np.float32(1.4426950), -fmul(x, np.float32(1.4426950), ftz=True), ftz=True)
    assert residual < -149 and np.all(p[:4, 0] == 0) and np.isneginf(sm.lse[0, 0])
