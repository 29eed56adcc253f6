"""The backward with V's head dim unlike Q's (FA3's mha_bwd at round_up_headdim(max(d, dv)),
Dao-AILab/flash-attention#1604): it runs (through flash_attn_backward and autograd), within
bf16 accuracy of float64 attention, with FA3's refusals; the bits against the library are the
recording's (replayed when it is in the package)."""

import numpy as np
import pytest

from simulator import fa3
from simulator.fa3.backward import common_head_dim
from simulator.replay import fa3_bwd_dv


def reference(q, k, v, dout, causal):
    """float64 attention's gradients (GQA by repetition)."""
    qf, kf, vf, gf = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    g = q.shape[2] // k.shape[2]
    kr, vr = np.repeat(kf, g, axis=2), np.repeat(vf, g, axis=2)
    scale = q.shape[-1] ** -0.5
    s = np.einsum("bqhd,bkhd->bhqk", qf, kr) * scale
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        keep = np.arange(sk)[None] <= np.arange(sq)[:, None] + (sk - sq)
        s = np.where(keep, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = np.einsum("bqhd,bkhd->bhqk", gf, vr)
    o = np.einsum("bhqk,bkhd->bqhd", p, vr)
    ds = p * (dp - np.einsum("bqhd,bqhd->bhq", gf, o)[..., None])
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kr) * scale
    dk = np.einsum("bhqk,bqhd->bkhd", ds, qf) * scale
    dv = np.einsum("bhqk,bqhd->bkhd", p, gf)
    fold = lambda x: x.reshape(x.shape[:2] + (k.shape[2], g, x.shape[-1])).sum(3)  # noqa: E731
    return dq, fold(dk), fold(dv)


@pytest.mark.parametrize("d, dv, causal", [(64, 128, False), (64, 256, True), (192, 128, True),
                                           (40, 112, False)])
def test_gradients_near_float64(d, dv, causal):
    case = fa3_bwd_dv._case("t", 99, "bf16", 1, 90, 130, 4, 2, d, dv, causal, (-1, -1))
    x = fa3_bwd_dv.case_inputs(case)
    dq, dk, dv_ = fa3.flash_attn_backward(x["dout"], x["q"], x["k"], x["v"], x["out"], x["lse"],
                                          causal=causal)
    assert dq.shape == x["q"].shape and dk.shape == x["k"].shape and dv_.shape == x["v"].shape
    for got, want in zip((dq, dk, dv_), reference(x["q"], x["k"], x["v"], x["dout"], causal),
                         strict=True):
        err = np.abs(got.astype(np.float64) - want).max()
        assert err <= 0.02 * max(1.0, np.abs(want).max()), err


def test_autograd_runs_it():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 50, 2, 64, generator=g).bfloat16().requires_grad_()
    k = torch.randn(1, 70, 1, 64, generator=g).bfloat16().requires_grad_()
    v = torch.randn(1, 70, 1, 128, generator=g).bfloat16().requires_grad_()
    out = fa3.flash_attn_func(q, k, v, causal=True)
    dout = torch.randn(out.shape, generator=g).bfloat16()
    grads = torch.autograd.grad(out, (q, k, v), dout)
    want = fa3.flash_attn_backward(dout, q.detach(), k.detach(), v.detach(), out.detach(),
                                   fa3.flash_attn_func(q.detach(), k.detach(), v.detach(),
                                                       causal=True, return_attn_probs=True)[1],
                                   causal=True)
    for a, b in zip(grads, want, strict=True):
        assert np.array_equal(a.view(torch.int16).numpy(), b.view(torch.int16).numpy())


def test_fa3s_refusals_at_the_kernel_head_dim():
    case = fa3_bwd_dv._case("t", 5, "bf16", 1, 20, 20, 2, 2, 64, 256, False, (-1, -1))
    x = fa3_bwd_dv.case_inputs(case)
    # kernel head dim round_up_headdim(max(64, 256)) = 256: no deterministic kernel (mha_bwd)
    with pytest.raises(ValueError, match="deterministic"):
        fa3.flash_attn_backward(x["dout"], x["q"], x["k"], x["v"], x["out"], x["lse"],
                                deterministic=True)
    with pytest.raises(ValueError, match="dout"):  # dout must have V's head dim, like out
        fa3.flash_attn_backward(x["dout"][..., :64], x["q"], x["k"], x["v"], x["out"], x["lse"])


def test_common_head_dim_pads_the_narrower_group_with_zeros():
    q = np.ones((1, 3, 2, 64), np.float16)
    v = np.ones((1, 3, 2, 128), np.float16)
    arrs, dims = common_head_dim({"q": q, "k": q, "v": v, "out": v, "dout": v})
    assert dims == (64, 128)
    assert arrs["q"].shape[-1] == 128 and not arrs["q"][..., 64:].any()
    assert arrs["v"] is v
    same, none = common_head_dim({"q": q, "k": q, "v": q, "out": q, "dout": q})
    assert none is None and same["q"] is q


@pytest.mark.skipif(not fa3_bwd_dv.REPORT.exists(), reason="no fa3_bwd_dv recording in the "
                    "package yet: python -m simulator.measure.fa3_bwd_dv_record --out DIR on the "
                    "device (docs/fa3-upstream-tests.md)")
def test_recording_replays():
    (r,) = fa3_bwd_dv.replay()
    assert r["mismatches"] == 0, r


@pytest.mark.parametrize("key", ["m4", "m124"])
def test_library_dq_at_seqlen_k_1_is_not_zero(key):
    """FA3's test_flash_attn_output checks dq with a zero tolerance at seqlen_k = 1 (the float64
    reference's dq is exactly 0 there: one key, P = 1, dP - dPsum = 0) and fails on the GPU as
    on this emulator (Dao-AILab/flash-attention#1136): the recorded library's dq is not 0 (dP
    from the tensor cores and dPsum from the preprocess round differently), and the emulation
    gives the recorded bits."""
    from simulator.fa3.backward import BackwardCall, launch
    from simulator.io import read_json, read_npz
    from simulator.replay import bwd_cases
    from simulator.replay.fa3_backward import REGENERATE, REPORT, SAMPLE

    report = read_json(REPORT, REGENERATE)
    case = report["matrix"][int(key[1:])]["case"]
    assert case["seqlen_k"] == 1
    recorded = np.asarray(read_npz(SAMPLE, REGENERATE)[f"{key}_dq"])
    x = bwd_cases.case_inputs(case)
    out, lse = fa3.flash_attn_func(x["q"], x["k"], x["v"], causal=x["causal"],
                                   window_size=x["window"], return_attn_probs=True)
    args = {"dout": x["dout"], "q": x["q"], "k": x["k"], "v": x["v"], "out": out,
            "softmax_lse": lse, "softmax_scale": None, "causal": x["causal"],
            "window_size": x["window"], "softcap": 0.0, "cu_seqlens_q": None,
            "cu_seqlens_k": None, "max_seqlen_q": None, "max_seqlen_k": None,
            "seqused_q": None, "seqused_k": None}
    dq = launch(BackwardCall(**args), True, spread=False)[0].dq
    assert np.array_equal(np.ascontiguousarray(dq).view(np.uint16), recorded)
    assert np.count_nonzero(recorded & 0x7FFF) > 0  # values other than +-0


@pytest.mark.parametrize("d, dv, name", [(64, 512, "v"), (64, 100, "v"), (100, 64, "q"),
                                         (264, 128, "q")])
def test_head_dims_mha_bwd_refuses_are_named_as_the_caller_gave_them(d, dv, name):
    """mha_bwd: each of head_size and head_size_v a multiple of 8, the larger at most 256. The
    error names the tensor with the caller's head dim, not the padded one."""
    rng = np.random.default_rng(0)
    bf = lambda *s: rng.standard_normal(s).astype(np.float16)  # noqa: E731
    q, k, v, o = bf(1, 8, 2, d), bf(1, 8, 2, d), bf(1, 8, 2, dv), bf(1, 8, 2, dv)
    lse = np.zeros((1, 2, 8), np.float32)
    want = rf"^{name}: head_dim must be a multiple of 8 from 8 to 256 .*got {dv if name == 'v' else d} "
    with pytest.raises(ValueError, match=want):
        fa3.flash_attn_backward(o, q, k, v, o, lse)


def test_autograd_at_64_512_runs_the_forward_and_names_v_at_the_backward():
    torch = pytest.importorskip("torch", reason="autograd needs torch (CPU build)")
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 8, 2, 64, generator=g).to(torch.bfloat16).requires_grad_() for _ in range(2))
    v = torch.randn(1, 8, 2, 512, generator=g).to(torch.bfloat16).requires_grad_()
    out = fa3.flash_attn_func(q, k, v)  # FA3 compiles the 64 / 512 forward, no such backward
    with pytest.raises(ValueError, match="^v: head_dim must be a multiple of 8 from 8 to 256"):
        out.float().sum().backward()


@pytest.mark.parametrize("d, dv", [(64, 256), (192, 128)])
@pytest.mark.parametrize("name, shape, want", [
    ("q", (1, 7, 2, "d"), r"^out: expected shape \(1, 7, 2, {dv}\) \(q's with V's head dim"),
    ("v", (1, 9, 2, "dv"), r"^v: expected shape \(1, 8, 2, {dv}\) \(k's with V's head dim"),
    ("k", (2, 8, 2, "d"), r"^k: expected shape \[1, seqlen_k, heads_kv, {d}\] .*got \(2, 8, 2, {d}\)"),
    ("k", (8, 2, "d"), r"^k: expected shape \[1, seqlen_k, heads_kv, {d}\] .*got \(8, 2, {d}\)"),
])
def test_shape_errors_show_the_callers_head_dims(d, dv, name, shape, want):
    """With dv != d the arrays are zero-padded for the kernel: a shape error is found before
    that, and shows the shapes the caller passed (not 'k ... 256' for a k of 64)."""
    rng = np.random.default_rng(1)
    bf = lambda *s: rng.standard_normal(s).astype(np.float16)  # noqa: E731
    a = dict(dout=bf(1, 8, 2, dv), q=bf(1, 8, 2, d), k=bf(1, 8, 2, d), v=bf(1, 8, 2, dv),
             out=bf(1, 8, 2, dv), softmax_lse=np.zeros((1, 2, 8), np.float32))
    dims = {"d": d, "dv": dv}
    a[name] = bf(*(dims.get(x, x) for x in shape))
    if name == "k":  # v follows k, so that only the q / k relation is wrong
        a["v"] = bf(*(dv if x == "d" else x for x in shape))
    with pytest.raises(ValueError, match=want.format(d=d, dv=dv)):
        fa3.flash_attn_backward(**a)
