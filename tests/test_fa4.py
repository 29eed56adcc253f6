"""simulator.fa4 (FlashAttention-4's sm90 forward) against flash-attn-4 4.0.0b36 recorded on an
H100 (simulator/data/device/fa4/): exact bits (uint views) on a sample of the recorded calls,
and each FA4 rule that differs from FA3's flipped back to FA3's form to show the recordings
tell them apart. The full replay is ``python -m simulator verify --topic fa4``."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from simulator import fa4
from simulator.fa4 import host
from simulator.flash import softmax_fa4
from simulator.numerics import ffma, fmul, lg2
from simulator.replay import fa4 as replay
from simulator.replay import fa4_cases as fc

pytestmark = pytest.mark.skipif(not replay.recorded(), reason="no FA4 recordings in the package")

CASES = fc.forward_cases()
#: head dims 32-256 x formats x causal, tile edges, windows, GQA with and without PackGQA,
#: softcap, learnable sinks (f32, bf16, with a window, with GQA), scales, input kinds, varlen
SAMPLE = sorted({*range(0, 32, 3), 41, 50, 56, 74, 80, 87, 91, 98, 99, 102, 106, 111, 113, 115,
                 117, 119, 121, 122, 124, 128, 133, 136, 137, 139, 141})


@pytest.fixture(scope="module")
def recorded():
    report, fwd, bwd = replay.load()
    return {r["index"]: r for r in report["forward"]}, fwd, replay.gpu_of(report)


def _differ(i, recorded) -> int:
    recs, fwd, gpu = recorded
    return replay.check_call(recs[i], CASES[i], fwd, "c", gpu)["differ"]


@pytest.mark.parametrize("i", SAMPLE)
def test_recorded_forward_call_is_bit_exact(i, recorded):
    assert _differ(i, recorded) == 0


def test_quad_sum_order_is_offset_1_then_2(recorded, monkeypatch):
    """FA3's order (offsets 2 then 1) misses recorded LSE bits."""
    def fa3_order(x):
        for offset in (2, 1):
            x = softmax_fa4.fadd(x, softmax_fa4.shfl_sync(x, "bfly", offset, 0x1F,
                                                          softmax_fa4.FULL_MASK, axis=-2))
        return x
    monkeypatch.setattr(softmax_fa4, "_quad_sum", fa3_order)
    assert sum(_differ(i, recorded) for i in (4, 16, 17)) > 0


@pytest.mark.parametrize("form, case", [("fa3", 20), ("float64 product", 8)])
def test_scale_log2_is_a_float32_product(form, case, recorded, monkeypatch):
    """FA3's ``float32(float32(scale) * log2e)`` misses the recorded calls at head dim 160,
    one rounding of the float64 product those at head dim 80: FA4's host multiplies two
    float32 values."""
    original = host.host_constants

    def other(d, s, cap):
        c = original(d, s, cap)
        scale = 1 / math.sqrt(d)
        c["scale_log2"] = np.float32((float(np.float32(scale)) if form == "fa3" else scale)
                                     * math.log2(math.e))
        return c
    monkeypatch.setattr(host, "host_constants", other)
    assert _differ(case, recorded) > 0


def test_lse_is_fma_of_max_then_times_ln2(recorded, monkeypatch):
    """FA3's ``ffma(row_max, scale_log2 * ln2, lg2(sum) * ln2)`` misses recorded LSE bits."""
    original = softmax_fa4.Fa4Softmax.finalize

    def fa3_lse(self, final_scale=1.0, sink=None):
        scale = original(self, final_scale, sink)
        total, mx = self.row_sum, self.row_max
        ln2 = softmax_fa4.LN2_F32
        lse = ffma(mx, fmul(self._scale(), ln2, ftz=True),
                   fmul(lg2(total, model=self.mufu), ln2, ftz=True), ftz=True)
        self.lse = np.where(np.isfinite(self.lse), lse, self.lse).astype(np.float32)
        return scale
    monkeypatch.setattr(softmax_fa4.Fa4Softmax, "finalize", fa3_lse)
    assert sum(_differ(i, recorded) for i in (4, 16)) > 0


def test_tile_table_is_flash_attn_cute_interface():
    """``_tile_size_fwd_sm90`` of flash_attn/cute/interface.py (flash-attn-4 4.0.0b36)."""
    t = host.tile_size_fwd_sm90
    assert t(64, 64, False, False) == (192, 128, True, True)
    assert t(96, 96, False, False) == (192, 144, False, True)
    assert t(96, 96, True, False) == (192, 128, False, True)
    assert t(128, 128, False, True) == (128, 128, True, True)
    assert t(192, 192, False, False) == (128, 112, True, True)
    assert t(192, 128, False, False) == (128, 128, True, True)
    assert t(192, 192, False, True) == (128, 96, True, True)
    assert t(256, 256, False, False) == (128, 80, True, True)
    assert t(256, 256, False, True) == (128, 64, True, True)
    assert [host.tile_hdim(d) for d in (8, 40, 80, 136, 256)] == [16, 48, 80, 144, 256]


def test_window_resolution_is_fa4s():
    r = host.resolve_window
    assert r(False, (None, None)) == (False, False, (-1, -1))
    assert r(False, (-3, -1)) == (False, False, (-1, -1))
    assert r(True, (None, None)) == (True, False, (-1, 0))
    assert r(False, (None, 0)) == (True, False, (-1, 0))
    assert r(True, (8, None)) == (False, True, (8, 0))
    assert r(False, (10_000, 10_000)) == (False, True, (10_000, 10_000))


def _qkv(d=64):
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal((1, 16, 2, d)).astype(ml_dtypes.bfloat16) for _ in range(3))


@pytest.mark.parametrize("kwargs, name", [
    ({"num_splits": 2}, "num_splits"), ({"num_splits": 0}, "num_splits"),
    ({"score_mod": lambda s: s}, "score_mod"), ({"mask_mod": lambda *a: True}, "mask_mod"),
    ({"learnable_sink": np.zeros(3, np.float32)}, "learnable_sink"),
    ({"window_size": (1, 2, 3)}, "window_size"), ({"window_size": (1.5, None)}, "window_size"),
])
def test_refusals_name_the_argument(kwargs, name):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=f"^{name}:"):
        fa4.flash_attn_func(q, k, v, **kwargs)


def test_bad_inputs_name_the_argument():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="^q:"):
        fa4.flash_attn_func(q.astype(np.float32), k, v)
    with pytest.raises(ValueError, match="^q:"):
        fa4.flash_attn_func(*_qkv(260))
    with pytest.raises(ValueError, match="^cu_seqlens_q:"):
        fa4.flash_attn_varlen_func(q[0], k[0], v[0], np.array([0, 99], np.int32),
                                   np.array([0, 16], np.int32))


def test_empty_key_sequence_gives_zero_and_the_sink():
    q, k, v = _qkv()
    sink = np.array([0.5, -1.25], np.float32)
    out, lse = fa4.flash_attn_func(q, k[:, :0], v[:, :0], learnable_sink=sink, return_lse=True)
    assert not np.any(out.view(np.uint16))
    assert np.array_equal(lse[0, :, 0].view(np.uint32), sink.view(np.uint32))
    out, lse = fa4.flash_attn_func(q, k, v)
    assert lse is None


BACKWARD_CASES = fc.backward_cases()


@pytest.fixture(scope="module")
def recorded_backward():
    report, _, bwd = replay.load()
    return {r["index"]: r for r in report["backward"]}, bwd, replay.gpu_of(report)


#: head dims 64-256 x formats x causal, GQA / MQA, windows, softcap, a learnable sink, varlen
BACKWARD_SAMPLE = (0, 3, 6, 11, 14, 17, 19, 28, 31, 32, 34, 35, 38, 42)


@pytest.mark.parametrize("i", BACKWARD_SAMPLE)
def test_recorded_backward_call_is_bit_exact(i, recorded_backward):
    """Deterministic dq, dk, dv bits against the three deterministic runs; the default runs'
    values inside the spread of the reduce-add orders."""
    recs, bwd, gpu = recorded_backward
    res = replay.check_backward(recs[i], BACKWARD_CASES[i], bwd, gpu)
    assert res["differ"] == 0 and res["outside"] == 0


def _backward_differ(i, recorded_backward) -> int:
    recs, bwd, gpu = recorded_backward
    res = replay.check_backward(recs[i], BACKWARD_CASES[i], bwd, gpu)
    return res["differ"]


def test_dpsum_sums_each_element_over_its_chunks(recorded_backward, monkeypatch):
    """FA3's preprocess order (a thread's chunks one after the other, the threads' sums
    from half the group down) misses recorded fp16 gradients at head dims 96 and 192."""
    from simulator.flash import backward_fa4
    from simulator.flash.backward import preprocess_dpsum

    monkeypatch.setattr(backward_fa4, "preprocess_dpsum", preprocess_dpsum)
    assert _backward_differ(7, recorded_backward) + _backward_differ(15, recorded_backward) > 0


def test_gqa_dk_is_scaled_after_the_heads_sum(recorded_backward, monkeypatch):
    """Scaling each query head's dK before the sum (FA3's order) misses recorded GQA bits."""
    import sys

    bwd_module = sys.modules["simulator.flash.backward"]
    original = bwd_module._reduce_kv

    def scaled_first(cfg, x, spread, scale_after_sum=False):
        if scale_after_sum and x.shape[1] > 1:
            x = fmul(x, cfg.softmax_scale)
        return original(cfg, x, spread, False)
    monkeypatch.setattr(bwd_module, "_reduce_kv", scaled_first)
    assert _backward_differ(29, recorded_backward) > 0


def test_dsink_is_one_ordered_reduction(recorded_backward, monkeypatch):
    """dsink's 256 threads meet warp by warp, then the warps' sums in warp 0: one butterfly
    over all 256 threads from offset 128 down misses the recorded sink gradient."""
    from simulator.flash import backward_fa4

    recs, bwd, gpu = recorded_backward
    base = replay.check_backward(recs[35], BACKWARD_CASES[35], bwd, gpu)["differ"]
    monkeypatch.setattr(backward_fa4, "dsink", _dsink_from_offset_16(backward_fa4))
    flipped = replay.check_backward(recs[35], BACKWARD_CASES[35], bwd, gpu)["differ"]
    assert base == 0 and flipped > 0


def _dsink_from_offset_16(module):
    def other(dpsum, lse, sink, threads, mufu):
        acc = np.zeros((len(sink), threads), np.float32)
        for d_b, l_b in zip(dpsum, lse, strict=True):
            for r in range(d_b.shape[-1]):
                p = module.ex2(module.fmul(module.fsub(sink, l_b[:, r]), module.LOG2E_F32),
                               model=mufu)
                acc[:, r % threads] = module.ffma(-d_b[:, r], p, acc[:, r % threads])
        lane = np.arange(threads)
        offset = threads // 2
        while offset:
            acc = module.fadd(acc, acc[:, lane ^ offset])
            offset //= 2
        return acc[:, 0]
    return other


def test_backward_tiles_are_flash_attn_cute_interface():
    """``_tile_size_bwd_sm90`` (flash_attn/cute/interface.py): FA3's except 64 x 48 at 256."""
    from simulator.flash import backward_fa4

    assert backward_fa4.bwd_tiles(64, False, False) == (64, 128, 128)
    assert backward_fa4.bwd_tiles(96, True, False) == (96, 64, 128)
    assert backward_fa4.bwd_tiles(128, False, False) == (128, 80, 128)
    assert backward_fa4.bwd_tiles(128, False, True) == (128, 64, 128)
    assert backward_fa4.bwd_tiles(192, False, False) == (192, 64, 96)
    assert backward_fa4.bwd_tiles(256, False, False) == (256, 64, 48)


def test_softcap_is_a_score_mod_after_the_scale(recorded, monkeypatch):
    """FA3's softcap form (``tanh(s * float32(scale / softcap))``, one FMUL) in place of FA4's
    score_mod (``mul`` by the scale, ``div.rn`` by the softcap) misses recorded calls; the
    backward recomputes the same score_mod (its softcap cases are in BACKWARD_SAMPLE)."""
    from simulator.flash import mainloop_fwd_sm90 as mainloop
    from simulator.numerics.mufu import tanh

    def fa3_form(cfg, s):
        c = cfg.consts
        scale = np.float32(float(c["softmax_scale"]) / float(c["softcap32"]))
        return fmul(tanh(fmul(s, scale), model=cfg.mufu), c["softcap32"])
    monkeypatch.setattr(mainloop, "_softcap_fa4", fa3_form)
    assert sum(_differ(i, recorded) for i in (111, 112, 114)) > 0


def test_backward_refusals_name_the_argument():
    q, k, v = _qkv()
    lse = np.zeros((1, 2, 16), np.float32)
    q, k, v = _qkv(80)
    with pytest.raises(ValueError, match="^q:"):
        fa4.flash_attn_backward(q, q, k, v, q, lse)
