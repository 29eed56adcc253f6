"""simulator.sdpa / simulator.fa2: FlashAttention-2's host rules as flash_api.cpp states them,
the API's refusals, and the forward's agreement with float64 attention. The device bits are
checked by the replay of the SDPA recordings (simulator/replay/sdpa.py, verify --topic sdpa)
once they are in the package (docs/sdpa.md)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import flash, sdpa
from simulator.fa2 import num_splits_heuristic, plan_forward
from simulator.flash.mainloop_fwd_fa2 import fa2_tile, kernel_head_dim, splitkv_tile


def test_num_splits_heuristic_follows_the_sources_own_example():
    """flash_api.cpp's comment: batch * n_heads = 48 on 108 SMs takes 2 splits (efficiency
    0.89) rather than 3 (0.67); a launch that almost fills the SMs takes 1."""
    assert num_splits_heuristic(48, 108, 64, 128) == 2
    assert num_splits_heuristic(87, 108, 64, 128) == 1  # 87 >= 0.8 * 108
    assert num_splits_heuristic(1, 264, 1, 128) == 1    # one key block: nothing to split


def test_tiles_on_hopper():
    """run_mha_fwd_hdim* of flash_fwd_launch_template.h on a compute capability 9.0 GPU; no
    160 or 224 kernel in torch 2.11's build (tests/test_sdpa_recordings.py checks every
    recorded call's kernel against these)."""
    assert [fa2_tile(d, False, False)[:2] for d in (32, 64, 96, 128, 160, 192, 224, 256)] == \
        [(128, 128), (128, 128), (128, 64), (128, 64), (128, 64), (128, 64), (64, 64), (64, 64)]
    assert fa2_tile(128, False, True)[:2] == (128, 32) and fa2_tile(192, True, True)[:2] == (64, 64)
    assert [kernel_head_dim(d) for d in (8, 40, 72, 136, 200, 256)] == [32, 64, 96, 192, 256, 256]
    assert [splitkv_tile(d)[1] for d in (64, 128, 192)] == [256, 128, 64]


def test_plan_forward_normalises_like_mha_fwd():
    one = plan_forward(2, 1, 500, 8, 2, 128, causal=True, gpu="h100")
    assert not one.causal and one.swapped and (one.seqlen_q, one.heads) == (4, 2)
    assert plan_forward(1, 64, 64, 2, 2, 64, causal=True).window == (-1, 0)
    # the SM count decides the split count: 114 SMs split where 132 do not, or differently
    sxm = [plan_forward(1, 1, sk, 32, 32, 64, causal=False, gpu="h100").num_splits
           for sk in (1024, 2048, 4096)]
    pcie = [plan_forward(1, 1, sk, 32, 32, 64, causal=False, gpu="h100-pcie").num_splits
            for sk in (1024, 2048, 4096)]
    assert sxm != pcie


@pytest.mark.parametrize("kwargs, needle", [
    (dict(dropout_p=0.1), "philox_seed: dropout_p > 0 needs the Philox state"),
    (dict(dropout_p=0.1, philox_seed=1, philox_offset=-4), "philox_offset: dropout_p > 0 needs"),
    (dict(dropout_p=1.0), "dropout_p: expected a number in [0, 1)"),
    (dict(scale=0.0), "scale: expected None or a finite positive number"),
    (dict(is_causal=1), "is_causal: expected True or False"),
    (dict(gpu="a100"), "gpu: unknown GPU 'a100'"),
])
def test_refusals_name_the_argument(kwargs, needle):
    q = np.zeros((1, 2, 8, 64), ml_dtypes.bfloat16)
    with pytest.raises(ValueError) as info:
        sdpa.flash_attention_forward(q, q, q, **kwargs)
    assert needle in str(info.value)


def test_shapes_and_dtypes_are_refused_by_name():
    q = np.zeros((1, 2, 8, 64), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="^key: heads_kv = 3 must equal heads = 2"):
        sdpa.flash_attention_forward(q, np.zeros((1, 3, 8, 64), q.dtype), np.zeros((1, 3, 8, 64), q.dtype))
    with pytest.raises(ValueError, match="^query: head_dim must be a multiple of 8"):
        x = np.zeros((1, 2, 8, 36), q.dtype)
        sdpa.flash_attention_forward(x, x, x)
    with pytest.raises(ValueError, match="^attn_mask: the flash backend takes no attention mask"):
        sdpa.scaled_dot_product_attention(q, q, q, attn_mask=np.zeros((8, 8), bool))


@pytest.mark.parametrize("shape, causal", [((2, 4, 300, 64), False), ((2, 4, 300, 64), True),
                                           ((1, 8, 1, 128), False), ((1, 2, 130, 96), True)])
def test_the_forward_is_attention_to_bf16_accuracy(shape, causal):
    """Unsplit and split-KV launches (the first two split on the H200's 132 SMs) agree with
    float64 attention within bf16's rounding, the LSE within float32's."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape).astype(ml_dtypes.bfloat16) for _ in range(3))
    out, lse = sdpa.flash_attention_forward(q, k, v, is_causal=causal)
    t = lambda x: np.swapaxes(x, 1, 2)  # noqa: E731
    ref, ref_lse = flash.reference(t(q), t(k), t(v), causal=causal and shape[2] > 1)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == shape[:3]
    assert np.abs(t(out).astype(np.float64) - ref).max() < 2e-2
    assert np.abs(lse - ref_lse).max() < 1e-5
