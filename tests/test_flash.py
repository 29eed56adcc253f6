"""The emulated FA3 forward: error against float64, invariants, trace, bad input.

Bit-exactness against the device kernel is checked in tests/test_forward_goldens.py (recorded
H200 outputs); here the emulator is held to bounds derived from the formats.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import flash

BF16, F16, E4M3 = ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn
# ||O - O_ref|| / ||O_ref|| bounds: P and O are rounded to the format (unit roundoff u), the
# accumulation adds a few more u; e4m3 additionally keeps ~14 bits through wgmma.
BOUND = {BF16: 8 * 2.0**-9, F16: 8 * 2.0**-12, E4M3: 0.1}
LSE_BOUND = {BF16: 1e-4, F16: 1e-4, E4M3: 3e-3}


def qkv(dtype, b=1, sq=96, sk=150, h=2, hkv=1, d=64, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    mk = lambda *s: (scale * rng.standard_normal(s)).astype(np.float32).astype(dtype)  # noqa: E731
    return mk(b, sq, h, d), mk(b, sk, hkv, d), mk(b, sk, hkv, d)


def rel_err(out, ref):
    den = np.linalg.norm(ref)
    return np.linalg.norm(out.astype(np.float64) - ref) / (den if den else 1.0)


CASES = [
    dict(), dict(causal=True), dict(window=(40, 8)), dict(softcap=20.0),
    dict(seqlens_k=np.array([0, 120])), dict(kblock_m=64, kblock_n=64),
    dict(kblock_m=192, kblock_n=48, causal=True), dict(schedule="plain"),
]


@pytest.mark.parametrize("dtype", [BF16, F16, E4M3])
@pytest.mark.parametrize("kw", CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_close_to_float64_reference(dtype, kw):
    if dtype is E4M3 and kw.get("kblock_n") == 48:
        kw = {**kw, "kblock_n": 64}
    b = 2 if "seqlens_k" in kw else 1
    q, k, v = qkv(dtype, b=b)
    out, lse = flash.forward(q, k, v, **kw)
    ref_kw = {key: val for key, val in kw.items() if key not in ("kblock_m", "kblock_n", "schedule")}
    ref_out, ref_lse = flash.reference(q, k, v, **ref_kw)
    assert out.dtype == (BF16 if dtype is E4M3 else dtype) and out.shape == q.shape
    assert rel_err(out, ref_out) < BOUND[dtype]
    empty = np.isneginf(ref_lse)
    assert np.array_equal(np.isneginf(lse), empty)
    assert np.max(np.abs(lse[~empty] - ref_lse[~empty]), initial=0) < LSE_BOUND[dtype]


@pytest.mark.parametrize("d", [32, 96, 128, 192, 256])
def test_head_dims(d):
    q, k, v = qkv(BF16, sq=70, sk=90, d=d)
    out, lse = flash.forward(q, k, v, kblock_n=32)
    assert rel_err(out, flash.reference(q, k, v)[0]) < BOUND[BF16]


def test_rows_without_keys_give_zero_and_minus_inf():
    q, k, v = qkv(BF16, b=2, sq=100, sk=60)
    out, lse = flash.forward(q, k, v, causal=True, seqlens_k=np.array([0, 60]))
    assert np.all(out[0].view(np.uint16) == 0) and np.all(np.isneginf(lse[0]))
    # causal, bottom-right: rows 0..39 of batch 1 see no key (seqlen_q - seqlen_k = 40)
    assert np.all(out[1, :40].view(np.uint16) == 0) and np.all(np.isneginf(lse[1, :, :40]))
    assert np.all(np.isfinite(lse[1, :, 40:]))


def test_single_key_window_reproduces_v_exactly():
    q, k, v = qkv(BF16, sq=64, sk=64)
    out, lse = flash.forward(q, k, v, window=(0, 0))
    assert np.array_equal(out.view(np.uint16), np.repeat(v, 2, axis=2).view(np.uint16))


def test_lse_at_least_scaled_max():
    q, k, v = qkv(F16, sq=64, sk=64)
    _, lse = flash.forward(q, k, v)
    s = np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64), np.repeat(k, 2, 2).astype(np.float64))
    assert np.all(lse >= s.max(-1) / 8 - 1e-5)


def test_nan_in_a_score_row():
    q, k, v = qkv(BF16, sq=64, sk=64)
    q[0, 3, 0, 0] = np.nan
    out, lse = flash.forward(q, k, v)
    assert np.all(np.isnan(out[0, 3, 0].astype(np.float32)))  # NaN P reaches O through PV
    assert np.isneginf(lse[0, 0, 3])  # sum is NaN: LSE -inf, inv_sum 0
    assert np.all(np.isfinite(out[0, :3].astype(np.float32)))


def test_fp8_descales_fold_like_scaling_the_inputs():
    q, k, v = qkv(E4M3, sq=64, sk=64)
    out1, lse1 = flash.forward(q, k, v, q_descale=np.float32(2.0), k_descale=np.float32(0.5),
                               v_descale=np.float32(1.0))
    out2, lse2 = flash.forward(q, k, v)
    assert np.array_equal(out1.view(np.uint16), out2.view(np.uint16))  # 2 * 0.5 == 1 exactly
    out3, _ = flash.forward(q, k, v, v_descale=np.float32(2.0))
    assert np.array_equal(out3.astype(np.float32), 2 * out2.astype(np.float32))


def test_ideal_arch_differs_but_stays_close():
    q, k, v = qkv(F16, sq=64, sk=128)
    hw, _ = flash.forward(q, k, v)
    ideal, _ = flash.forward(q, k, v, mufu="ideal")
    assert not np.array_equal(hw.view(np.uint16), ideal.view(np.uint16))
    assert rel_err(hw, ideal.astype(np.float64)) < 1e-3


def test_trace_records_the_steps_in_order():
    q, k, v = qkv(BF16, sq=64, sk=150)
    res = flash.forward(q, k, v, schedule="plain", kblock_m=64, kblock_n=64, trace=[(0, 1, 0)])
    plain = flash.forward(q, k, v, schedule="plain", kblock_m=64, kblock_n=64)
    assert plain.trace is None
    assert np.array_equal(res.out.view(np.uint16), plain.out.view(np.uint16))
    steps = [(e.step, e.n_block) for e in res.trace]
    assert steps[:6] == [("qk_gemm", 2), ("mask", 2), ("max_get_scale", 2), ("online_softmax", 2),
                         ("rescale_o", 2), ("pv_gemm", 2)]
    assert [s for s, _ in steps[-2:]] == ["finalize", "epilogue"]
    ev = res.trace.events[0]
    assert ev.cta == (0, 1, 0) and ev.data["acc_s"].shape == (1, 128, 32)
    last = res.trace.for_cta((0, 1, 0))[-1]
    assert last.data["acc_o"].shape == (1, 128, 32)


@pytest.mark.parametrize("kw,match", [
    (dict(q=np.zeros((1, 4, 2, 64), np.float32)), "^q: expected dtype"),
    (dict(q=np.zeros((4, 2, 64), BF16)), "^q: expected a 4-d array"),
    (dict(kblock_m=96), "^kblock_m"), (dict(kblock_n=40), "^kblock_n"),
    (dict(schedule="fast"), "^schedule"), (dict(softmax_scale=-1.0), "^softmax_scale"),
    (dict(softmax_scale=float("nan")), "^softmax_scale"), (dict(softcap=-2.0), "^softcap"),
    (dict(q_descale=np.float32(1)), "^q_descale: descales apply to e4m3"),
    (dict(seqlens_k=np.array([5000])), "^seqlens_k"), (dict(window=(1, 2, 3)), "^window"),
    (dict(gpu="a100"), "^gpu"), (dict(mufu="sm80"), "^mufu"), (dict(causal=True, window=(-2, 4)), "^window"),
])
def test_bad_input(kw, match):
    q, k, v = qkv(BF16, sq=16, sk=16)
    args = {"q": q, "k": k, "v": v}
    args.update({key: kw.pop(key) for key in list(kw) if key in args})
    with pytest.raises(ValueError, match=match):
        flash.forward(args["q"], args["k"], args["v"], **kw)


def test_gqa_heads_must_divide():
    q, k, v = qkv(BF16, h=3, hkv=2, sq=16, sk=16)
    with pytest.raises(ValueError, match="heads_kv = 2 must divide heads = 3"):
        flash.forward(q, k, v)


@settings(max_examples=12, deadline=None)
@given(sq=st.integers(1, 130), sk=st.integers(1, 200), causal=st.booleans(),
       seed=st.integers(0, 2**16), scale=st.sampled_from([0.1, 1.0, 4.0]))
def test_property_close_to_reference(sq, sk, causal, seed, scale):
    q, k, v = qkv(BF16, sq=sq, sk=sk, d=32, seed=seed, scale=scale)
    out, lse = flash.forward(q, k, v, causal=causal, kblock_m=64, kblock_n=64)
    ref_out, ref_lse = flash.reference(q, k, v, causal=causal)
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse))
    assert rel_err(out, ref_out) < BOUND[BF16]


def test_reference_accepts_forward_kwargs_and_edge_inputs():
    q, k, v = qkv(BF16, sq=20, sk=30)
    a = flash.reference(q, k, v, kblock_n=64, schedule="plain", mufu="ideal")
    b = flash.reference(q, k, v)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    # keys beyond seqlens_k are absent even when they hold NaN
    v2 = v.copy()
    v2[0, 25:] = np.nan
    out, lse = flash.reference(q, k, v2, seqlens_k=np.array([25]))
    assert np.all(np.isfinite(out))
    # no key at all
    out, lse = flash.reference(q, k, v, seqlens_k=np.array([0]))
    assert np.all(out == 0) and np.all(np.isneginf(lse))


def test_windows_wider_than_the_sequences_are_unbounded():
    q, k, v = qkv(BF16, sq=40, sk=50)
    base = flash.forward(q, k, v, window=(0, -1))
    huge = flash.forward(q, k, v, window=(0, 2**62))
    assert np.array_equal(base.out.view(np.uint16), huge.out.view(np.uint16))
    with pytest.raises(ValueError, match="^window"):
        flash.forward(q, k, v, window=(10**30, 0.5))


@pytest.mark.parametrize("kw,match", [
    (dict(softmax_scale=1e-50), "float32 cast"), (dict(softcap=1e-46), "^softcap"),
    (dict(softcap=1e39), "float32 cast"), (dict(causal="False"), "^causal"),
    (dict(kblock_m=128.0), "^kblock_m"), (dict(trace=[(0, 0, 99)]), "^trace"),
    (dict(trace=[(0, 0)]), "^trace"), (dict(trace=5), "^trace"),
])
def test_more_bad_input(kw, match):
    q, k, v = qkv(BF16, sq=16, sk=16)
    with pytest.raises(ValueError, match=match):
        flash.forward(q, k, v, **kw)


def test_descales_must_be_positive_normal():
    q, k, v = qkv(E4M3, sq=16, sk=16)
    for bad in (0.0, -1.0, 1e-45, np.inf):
        with pytest.raises(ValueError, match="^q_descale: expected positive"):
            flash.forward(q, k, v, q_descale=np.float32(bad))


# ---- launch parameters the FA3 host side passes (simulator.fa3) -----------------------------------
def _gqa(seed=3, sq=70, sk=500, h=8, hkv=2, d=64):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((2, sq, h, d)).astype(ml_dtypes.bfloat16),
            rng.standard_normal((2, sk, hkv, d)).astype(ml_dtypes.bfloat16),
            rng.standard_normal((2, sk, hkv, d)).astype(ml_dtypes.bfloat16))


def _same(a, b) -> bool:
    return (np.array_equal(np.asarray(a.out).view(np.uint16 if a.out.itemsize == 2 else np.uint32),
                           np.asarray(b.out).view(np.uint16 if b.out.itemsize == 2 else np.uint32))
            and np.array_equal(a.lse.view(np.uint32), b.lse.view(np.uint32)))


def test_pack_gqa_leaves_unsplit_bits_unchanged():
    """docs/forward.md, "PackGQA": rows are independent, extra fully masked blocks are neutral."""
    q, k, v = _gqa()
    for causal in (False, True):
        assert _same(flash.forward(q, k, v, causal=causal, pack_gqa=True),
                     flash.forward(q, k, v, causal=causal, pack_gqa=False))


def test_one_split_is_the_unsplit_kernel_and_splits_are_not():
    q, k, v = _gqa()
    plain = flash.forward(q, k, v, causal=True)
    one = flash.forward(q, k, v, causal=True, num_splits=1)
    assert one.out.dtype == np.float32 and one.out.shape == (1,) + plain.out.shape
    assert np.array_equal(one.out[0].astype(ml_dtypes.bfloat16).view(np.uint16), plain.out.view(np.uint16))
    assert np.array_equal(one.lse[0].view(np.uint32), plain.lse.view(np.uint32))
    three = flash.forward(q, k, v, causal=True, num_splits=3)
    assert three.out.shape[0] == 3 and not np.array_equal(three.lse[0], plain.lse)


def test_split_launches_pack_gqa_tiles_and_that_moves_causal_split_bounds():
    """With splits FA3 always packs GQA; under a causal mask the packed tile's block range, and
    so its split boundaries, differ from a per-head tile's: other bits (docs/fa3_api.md)."""
    q, k, v = _gqa(sq=64, sk=924, h=4, hkv=1, d=128)
    packed = flash.forward(q, k, v, causal=True, num_splits=7)
    per_head = flash.forward(q, k, v, causal=True, num_splits=7, pack_gqa=False)
    assert not np.array_equal(packed.out.view(np.uint32), per_head.out.view(np.uint32))


def test_launch_parameters_are_checked():
    q, k, v = _gqa()
    with pytest.raises(ValueError, match="num_splits"):
        flash.forward(q, k, v, num_splits=0)
    with pytest.raises(ValueError, match="num_splits"):
        flash.forward(q, k, v, num_splits=2.5)
    with pytest.raises(ValueError, match="max_seqlen_q"):
        flash.forward(q, k, v, max_seqlen_q=q.shape[1] - 1)
    with pytest.raises(ValueError, match="pack_gqa"):
        flash.forward(q, k, v, pack_gqa="yes")
    with pytest.raises(ValueError, match="trace"):
        flash.forward(q, k, v, num_splits=2, trace=[(0, 0, 0)])


def test_max_seqlen_sets_the_dispatch_of_a_varlen_sequence():
    """One sequence of 1 query row in a launch whose longest has 100: FA3 keeps causal (and its
    tile) for the launch, where the sequence alone would run non-causal."""
    q, k, v = _gqa(sq=1, sk=300, h=2, hkv=2)
    alone = flash.make_config(q, k, v, causal=True)
    in_launch = flash.make_config(q, k, v, causal=True, max_seqlen_q=100)
    assert not alone.causal and in_launch.causal
    assert (alone.kblock_n, in_launch.kblock_n) == (192, 128)
