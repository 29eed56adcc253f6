"""simulator.sdpa.flash_attention_backward / backward_spread: FlashAttention-2's backward as
PyTorch builds it (simulator/flash/mainloop_bwd_fa2.py). Until the device recordings exist
(simulator/data/device/sdpa/sdpa_backward.npz, replayed by simulator/replay/sdpa_backward.py)
these tests check what can be checked without them: agreement with float64 gradients within a
bound derived from the roundings the kernel makes, the deterministic dQ inside the default
launch's spread, run-to-run determinism, GQA as the group sum, the dropout mask shared with the
forward, the refusals, and the replay's own bookkeeping on a synthetic recording."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import sdpa
from simulator.flash.backward_fa2 import backward_fa2, group_sum
from simulator.flash.mainloop_bwd_fa2 import bwd_tile, deterministic_dq, dot_do_o
from simulator.flash.spread import contains, ordered_sum
from simulator.numerics.philox import dropout_keep
from simulator.replay import sdpa_backward as replay
from simulator.replay import sdpa_cases as sc

BF16 = ml_dtypes.bfloat16
#: unit roundoff of the 16-bit formats (half an ulp at 1): 8 and 11 significant bits
UNIT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def _inputs(b, h, hk, sq, sk, d, dtype=BF16, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, h, sq, d)).astype(dtype)
    k = rng.standard_normal((b, hk, sk, d)).astype(dtype)
    v = rng.standard_normal((b, hk, sk, d)).astype(dtype)
    g = rng.standard_normal((b, h, sq, d)).astype(dtype)
    return q, k, v, g


def _reference(q, k, v, g, out, causal, scale, keep=None, p_drop=0.0):
    """float64 gradients of attention at the 16-bit inputs (torch's layout), and the magnitudes
    the error bound scales with: |P|^T |dO|, and per (row, key) |P| (|dP| + rowsum |dO| |O|)."""
    h, hk = q.shape[1], k.shape[1]
    Q, G, O = (x.astype(np.float64) for x in (q, g, out))
    K, V = (np.repeat(x.astype(np.float64), h // hk, axis=1) for x in (k, v))
    s = Q @ np.swapaxes(K, -1, -2) * scale
    sq, sk = q.shape[2], k.shape[2]
    if causal:
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    tot = e.sum(-1, keepdims=True)
    P = np.where(tot > 0, e / np.where(tot > 0, tot, 1), 0)
    Z = np.ones_like(P) if keep is None else keep / (1.0 - p_drop)
    dPz = G @ np.swapaxes(V, -1, -2)
    D = (G * O).sum(-1, keepdims=True)
    dS = P * (dPz * Z - D)
    dq = dS @ K * scale
    dk = np.swapaxes(dS, -1, -2) @ Q * scale
    dv = np.swapaxes(P * Z, -1, -2) @ G
    mag_v = np.swapaxes(P * Z, -1, -2) @ np.abs(G)
    mag_s = P * (np.abs(dPz * Z) + (np.abs(G) * np.abs(O)).sum(-1, keepdims=True))
    mag_q = mag_s @ np.abs(K) * scale
    mag_k = np.swapaxes(mag_s, -1, -2) @ np.abs(Q) * scale
    b = q.shape[0]

    def grp(x):
        return x.reshape(b, hk, h // hk, *x.shape[2:]).sum(2)
    return (dq, grp(dk), grp(dv)), (mag_q, grp(mag_k), grp(mag_v))


def _assert_close(name, got, ref, mag, u):
    """|got - ref| <= 8 u * mag + 2 u |ref| + 1e-6: the kernel rounds P and dS to the input type
    (relative u each), reads O rounded (u, and its own forward error of a few u, in rowsum(dO O)),
    and rounds the gradient (u; with GQA each head's value first, then the sum); float32
    accumulation adds ~2^-24 per term. Every such error is at most a few u of the magnitude the
    term contributes to ``mag`` (the same sums over absolute values): 8 u leaves a factor of 2."""
    err = np.abs(got.astype(np.float64) - ref)
    tol = 8 * u * mag + 2 * u * np.abs(ref) + 1e-6
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert (err <= tol).all(), f"{name}: error {err[worst]:.3g} > {tol[worst]:.3g} at {worst}"


CASES = [  # (b, h, hk, sq, sk, d, dtype, causal)
    (1, 2, 2, 64, 64, 64, BF16, False),
    (1, 2, 1, 65, 129, 64, BF16, True),
    (2, 1, 1, 33, 300, 32, np.float16, False),
    (1, 2, 2, 129, 65, 96, BF16, True),
    (1, 3, 1, 17, 200, 128, np.float16, True),
    (1, 1, 1, 70, 70, 160, BF16, False),
    (1, 1, 1, 40, 90, 192, np.float16, True),
    (1, 2, 1, 9, 129, 256, BF16, False),
    (1, 1, 1, 1, 129, 72, BF16, True),
]


@pytest.mark.parametrize("b, h, hk, sq, sk, d, dtype, causal", CASES)
def test_gradients_match_float64_within_the_rounding_bound(b, h, hk, sq, sk, d, dtype, causal):
    q, k, v, g = _inputs(b, h, hk, sq, sk, d, dtype, seed=sq * 7 + sk)
    out, lse = sdpa.flash_attention_forward(q, k, v, is_causal=causal, gpu="h100")
    grads = sdpa.flash_attention_backward(g, q, k, v, out, lse, 0.0, causal, None, None,
                                          deterministic=True, gpu="h100")
    refs, mags = _reference(q, k, v, g, out, causal, d ** -0.5)
    u = UNIT[np.dtype(dtype).name]
    for name, got, ref, mag in zip(("dq", "dk", "dv"), grads, refs, mags, strict=True):
        assert got.dtype == q.dtype and got.shape == ref.shape
        _assert_close(name, got, ref, mag, u)


def test_deterministic_dq_is_inside_the_default_spread_and_repeats():
    """Small batch x heads: G = ceil(132 / 2) CTA columns, more than the 8 key blocks, so each
    copy holds at most one partial and the deterministic order is one of the default's (an
    enclosure beyond five partials)."""
    q, k, v, g = _inputs(1, 2, 2, 200, 1000, 64, np.float16)
    out, lse = sdpa.flash_attention_forward(q, k, v, gpu="h100")
    args = (g, q, k, v, out, lse, 0.0, False, None, None)
    det = sdpa.flash_attention_backward(*args, deterministic=True, gpu="h100")
    again = sdpa.flash_attention_backward(*args, deterministic=True, gpu="h100")
    default = sdpa.flash_attention_backward(*args, deterministic=False, gpu="h100")
    spread = sdpa.backward_spread(*args, gpu="h100")
    for i, name in enumerate(("dq", "dk", "dv")):
        assert np.array_equal(det[i].view(np.uint16), again[i].view(np.uint16)), name
        lo, hi = spread[name]
        assert contains(lo, hi, det[i]).all() and contains(lo, hi, default[i]).all(), name
    assert np.array_equal(det[1].view(np.uint16), default[1].view(np.uint16))  # dK: no atomics
    lo, hi = spread["dq"]
    assert (lo != hi).any()  # eight partials: some orders round to other fp16 values


def test_deterministic_copies_follow_the_sm_count():
    """G = ceil(SMs / (batch * heads)) copies; n block j goes to copy j % G in ascending order;
    the copies are added in order into +0."""
    r = backward_fa2(*_kernel_args(b=1, h=40, sq=64, sk=64, d=64), deterministic=True, gpu="h100")
    assert r.grid_cols == 4  # ceil(132 / 40)
    r = backward_fa2(*_kernel_args(b=1, h=40, sq=64, sk=64, d=64), deterministic=True,
                     gpu="h100-pcie")
    assert r.grid_cols == 3  # ceil(114 / 40)
    parts = np.array([[1.0], [2.0 ** -24], [2.0 ** -24], [-1.0]], np.float32)
    # G = 2: copy 0 = 1 + 2^-24 (rounds to 1), copy 1 = 2^-24 - 1; sum 0 + 1 + (2^-24 - 1)
    got = deterministic_dq(parts, np.arange(4), 2, ftz=True)
    want = np.float32(np.float32(1.0) + np.float32(np.float32(2.0 ** -24) - np.float32(1.0)))
    assert got[0] == want == np.float32(2.0 ** -24)
    assert ordered_sum(parts)[0] == 0.0  # one sequential order loses the small partials


def _kernel_args(b, h, sq, sk, d, hk=None, seed=1):
    q, k, v, g = _inputs(b, h, h if hk is None else hk, sq, sk, d, seed=seed)
    out, lse = sdpa.flash_attention_forward(q, k, v, gpu="h100")
    return tuple(np.ascontiguousarray(np.swapaxes(x, 1, 2)) for x in (g, q, k, v, out)) + (lse,)


def test_gqa_is_the_group_sum_of_the_heads_gradients():
    """dK / dV with 4 query heads on 1 kv head equal torch's sum over the group of the rounded
    per-head gradients of the same call with the kv head repeated (dq unchanged)."""
    q, k, v, g = _inputs(1, 4, 1, 33, 100, 64, seed=5)
    out, lse = sdpa.flash_attention_forward(q, k, v, is_causal=True, gpu="h100")
    gqa = sdpa.flash_attention_backward(g, q, k, v, out, lse, 0.0, True, None, None,
                                        deterministic=True, gpu="h100")
    kr, vr = (np.repeat(x, 4, axis=1) for x in (k, v))
    mha = sdpa.flash_attention_backward(g, q, kr, vr, out, lse, 0.0, True, None, None,
                                        deterministic=True, gpu="h100")
    assert np.array_equal(gqa[0].view(np.uint16), mha[0].view(np.uint16))
    for i in (1, 2):
        want = group_sum(mha[i][:, None], axis=2, fmt="bf16")  # [b, 1, 4, s, d] over the 4
        assert np.array_equal(gqa[i].view(np.uint16), want.view(np.uint16))
        exact = mha[i].astype(np.float64).sum(axis=1, keepdims=True)
        assert np.abs(gqa[i].astype(np.float64) - exact).max() <= 2.0 ** -8 * np.abs(exact).max()
    with pytest.raises(ValueError, match="key"):
        sdpa.flash_attention_backward(g, q, k, v, out, lse, 0.0, True, None, None,
                                      deterministic=True, enable_gqa=False)


def test_group_sum_uses_four_interleaved_accumulators():
    x = np.array([1.0, 2.0 ** -9, 2.0 ** -9, 2.0 ** -9, 2.0 ** -9, 0, 0, 0], np.float32)
    got = group_sum(x.astype(BF16)[:, None], axis=0, fmt="bf16")
    # acc0 = 1 + 2^-9 (float32), acc1..3 = 2^-9: (1 + 2^-9 + 2^-9) + 2^-9 + 2^-9 = 1 + 2^-7
    assert float(got[0]) == 1.0 + 2.0 ** -7


def test_dropout_uses_the_forwards_mask():
    """The backward draws the forward's positional mask from the same (seed, offset): its
    gradients match float64 with that mask (and O from the forward matches it too); another
    offset gives another mask and other gradients."""
    p, seed, offset = 0.3, 1234, 64
    q, k, v, g = _inputs(1, 2, 2, 64, 128, 64, seed=3)
    out, lse = sdpa.flash_attention_forward(q, k, v, p, philox_seed=seed, philox_offset=offset,
                                            gpu="h100")
    keep = dropout_keep(seed, offset, 1, 2, 64, 128, p)
    grads = sdpa.flash_attention_backward(g, q, k, v, out, lse, p, False, seed, offset,
                                          deterministic=True, gpu="h100")
    refs, mags = _reference(q, k, v, g, out, False, 64 ** -0.5, keep=keep, p_drop=p)
    for name, got, ref, mag in zip(("dq", "dk", "dv"), grads, refs, mags, strict=True):
        _assert_close(name, got, ref, mag, UNIT["bfloat16"])
    other = sdpa.flash_attention_backward(g, q, k, v, out, lse, p, False, seed, offset + 32 * 2,
                                          deterministic=True, gpu="h100")
    assert not np.array_equal(other[2].view(np.uint16), grads[2].view(np.uint16))


def test_dot_do_o_order_and_dropout_scale():
    """dP_sum: 8 values per thread per 64-wide chunk (hd 128: two chunks), a butterfly over 8
    threads, then * p_keep."""
    rng = np.random.default_rng(2)
    o, g = (rng.standard_normal((3, 128)).astype(BF16) for _ in range(2))
    tile = bwd_tile(128, False)
    got = dot_do_o(o, g, tile, np.float32(0.75))
    exact = (o.astype(np.float64) * g.astype(np.float64)).sum(-1) * 0.75
    assert np.allclose(got, exact, rtol=1e-5, atol=1e-6)
    assert tile.gmem_threads_per_row == 8 and bwd_tile(96, False).gmem_threads_per_row == 4


def test_tiles_on_hopper():
    """run_mha_bwd_hdim* of flash_bwd_launch_template.h with Hopper's 227 KB per block."""
    assert [(t.kblock_m, t.kblock_n) for t in (bwd_tile(d, False) for d in
            (32, 64, 96, 128, 160, 192, 224, 256))] == \
        [(128, 128), (128, 128), (64, 128), (64, 128), (64, 64), (64, 64), (64, 64), (64, 64)]
    assert bwd_tile(32, False).v_in_regs and not bwd_tile(32, True).v_in_regs


@pytest.mark.parametrize("change, argument", [
    (lambda a: {**a, "grad_out": a["grad_out"][:, :, :5]}, "grad_out"),
    (lambda a: {**a, "logsumexp": a["logsumexp"].astype(np.float64)}, "logsumexp"),
    (lambda a: {**a, "dropout_p": 0.2, "philox_seed": None}, "philox_seed"),
    (lambda a: {**a, "dropout_p": 1.0}, "dropout_p"),
    (lambda a: {**a, "deterministic": 1}, "deterministic"),
    (lambda a: {**a, "scale": -1.0}, "scale"),
    (lambda a: {**a, "is_causal": "yes"}, "is_causal"),
    (lambda a: {**a, "value": a["value"].astype(np.float16)}, "value"),
    (lambda a: {**a, "gpu": "a100"}, "gpu"),
])
def test_refusals_name_the_argument(change, argument):
    q, k, v, g = _inputs(1, 2, 2, 8, 8, 64)
    lse = np.zeros((1, 2, 8), np.float32)
    args = dict(grad_out=g, query=q, key=k, value=v, out=q, logsumexp=lse, dropout_p=0.0,
                is_causal=False, philox_seed=None, philox_offset=None, deterministic=True)
    with pytest.raises(ValueError, match=argument):
        sdpa.flash_attention_backward(**change(args))


def test_head_dim_refusals():
    q, k, v, g = _inputs(1, 1, 1, 8, 8, 12)
    with pytest.raises(ValueError, match="head_dim"):
        sdpa.flash_attention_backward(g, q, k, v, q, np.zeros((1, 1, 8), np.float32), 0.0, False,
                                      None, None, deterministic=True)


def _synthetic_recording(case, flip=None):
    """A recording in sdpa_record's format made by the emulator itself (runs 0-2 its
    deterministic bits, 3-5 its default bits), optionally with one bit of run ``flip`` changed."""
    q, k, v = sc.make_inputs(case)
    g = sc.make_grad(case)
    out, lse = sdpa.flash_attention_forward(q, k, v, is_causal=case["causal"], scale=case["scale"],
                                            gpu="h100")
    args = (g, q, k, v, out, lse, 0.0, case["causal"], None, None, case["scale"])
    det = sdpa.flash_attention_backward(*args, deterministic=True, gpu="h100")
    dflt = sdpa.flash_attention_backward(*args, deterministic=False, gpu="h100")
    npz = {"b0_out": out.view(np.uint16), "b0_lse": lse}
    for i, name in enumerate(("dq", "dk", "dv")):
        bits = [det[i].view(np.uint16)] * 3 + [dflt[i].view(np.uint16)] * 3
        bits = [b.copy() for b in bits]
        if flip is not None and name == "dq":
            bits[flip].reshape(-1)[0] ^= np.uint16(0x4000)
        npz[f"b0_{name}_runs"] = np.stack([bits[0]] + [b ^ bits[0] for b in bits[1:]])
    return {"index": 0, "case": case}, npz


def test_replay_check_on_a_synthetic_recording():
    case = sc.backward_cases()[0]
    record, npz = _synthetic_recording(case)
    res = replay.check_backward_case(record, npz, "h100")
    assert res["det_differ"] == 0 and res["default_outside"] == 0 and res["values"] > 0
    record, npz = _synthetic_recording(case, flip=1)
    assert replay.check_backward_case(record, npz, "h100")["det_differ"] == 1
    record, npz = _synthetic_recording(case, flip=4)
    assert replay.check_backward_case(record, npz, "h100")["default_outside"] == 1


@pytest.mark.skipif(not replay.NPZ.exists(), reason=f"no backward recording at {replay.NPZ} yet "
                    "(python3 -m simulator measure sdpa_record on a Hopper GPU with torch)")
def test_recorded_backward_cases_replay():
    rows = replay.check_all(quick=True)
    assert all(r["mismatches"] == 0 for r in rows), rows


def test_replay_reads_the_recorders_format(tmp_path, monkeypatch):
    """The recorder (CPU stand-ins for the flash ops, tests/test_sdpa_record_cpu.py) writes a
    report and sdpa_backward.npz that check_backward_case reads: every value compared (the
    stand-in's float32 math is not FA2, so its bits differ; only the bookkeeping is checked)."""
    pytest.importorskip("torch")
    import json

    from test_sdpa_record_cpu import _stand_ins

    from simulator.measure import sdpa_record as rec

    monkeypatch.setattr(rec, "_ops", _stand_ins)
    assert rec.main(["--out", str(tmp_path), "--device", "cpu", "--limit", "2",
                     "--phases", "backward"]) == 0
    report = json.loads((tmp_path / rec.REPORT_FILE).read_text())
    npz = np.load(tmp_path / rec.BACKWARD_NPZ)
    for r in report["backward"]:
        res = replay.check_backward_case(r, npz, "h100")
        c = r["case"]
        sizes = c["batch"] * c["head_dim"] * (c["heads"] * c["seqlen_q"]
                                              + 2 * c["heads_kv"] * c["seqlen_k"])
        assert res["values"] == 6 * sizes and not res["refused"]


def test_each_build_switch_changes_bits():
    """The rules the recordings decide (docs: the open questions) are switches of
    Fa2BwdBuild; each changes some gradient bits on scores of tens, so the recorded
    bits can tell them apart: the exp2 argument as one FFMA instead of UNFUSE_FMA's FMUL + FSUB,
    and the kernel head dim list of FlashAttention-2 2.5.7 (a 160 kernel)."""
    from dataclasses import replace

    from simulator.flash.mainloop_bwd_fa2 import PYTORCH_BWD

    q, k, v, g = _inputs(1, 2, 2, 65, 129, 64, np.float16, seed=9)
    q, k = ((x.astype(np.float32) * 3).astype(np.float16) for x in (q, k))
    out, lse = sdpa.flash_attention_forward(q, k, v, gpu="h100")
    call = tuple(np.ascontiguousarray(np.swapaxes(x, 1, 2)) for x in (g, q, k, v, out)) + (lse,)
    base = backward_fa2(*call, deterministic=True, gpu="h100")
    fused = backward_fa2(*call, deterministic=True, gpu="h100",
                         build=replace(PYTORCH_BWD, exp=replace(PYTORCH_BWD.exp, unfuse_fma=False)))
    assert any(not np.array_equal(a.view(np.uint16), b.view(np.uint16))
               for a, b in zip(base, fused, strict=True))
    older = replace(PYTORCH_BWD, kernel_head_dims=(32, 64, 96, 128, 160, 192, 224, 256))
    assert bwd_tile(160, False, older).kernel_head_dim == 160
    assert bwd_tile(160, False).kernel_head_dim == 192
