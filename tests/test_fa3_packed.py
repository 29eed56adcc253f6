"""``flash_attn_qkvpacked_func`` (hopper/flash_attn_interface.py): the packed layouts split as
FA3 splits them, the same bits as the unpacked ``flash_attn_func`` call, gradients back into
qkv, and what it refuses."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import fa3

BF16 = ml_dtypes.bfloat16


def _bits(x):
    return np.asarray(x).view(np.uint16)


def test_mha_layout_gives_the_unpacked_bits():
    qkv = np.random.default_rng(0).standard_normal((2, 70, 3, 4, 64)).astype(BF16)
    out, lse = fa3.flash_attn_qkvpacked_func(qkv, causal=True, return_attn_probs=True)
    ref, ref_lse = fa3.flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True,
                                       return_attn_probs=True)
    assert np.array_equal(_bits(out), _bits(ref))
    assert np.array_equal(lse.view(np.uint32), ref_lse.view(np.uint32))


def test_gqa_layout_splits_along_the_heads():
    qkv = np.random.default_rng(1).standard_normal((1, 50, 6 + 2 * 2, 64)).astype(BF16)
    out = fa3.flash_attn_qkvpacked_func(qkv, num_heads_q=6, window_size=(16, 0))
    ref = fa3.flash_attn_func(qkv[:, :, :6], qkv[:, :, 6:8], qkv[:, :, 8:], window_size=(16, 0))
    assert out.shape == (1, 50, 6, 64) and np.array_equal(_bits(out), _bits(ref))


def test_torch_gradients_flow_back_into_qkv():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = torch.tensor(rng.standard_normal((1, 40, 3, 2, 128)), dtype=torch.bfloat16,
                     requires_grad=True)
    fa3.flash_attn_qkvpacked_func(x, causal=True).float().sum().backward()
    y = x.detach().clone().requires_grad_(True)
    q, k, v = y.unbind(dim=2)
    fa3.flash_attn_func(q, k, v, causal=True).float().sum().backward()
    assert x.grad is not None and torch.equal(x.grad.view(torch.int16), y.grad.view(torch.int16))


@pytest.mark.parametrize("shape, heads_q, message", [
    ((1, 8, 2, 4, 64), None, r"qkv: expected \[batch, seqlen, 3, heads, head_dim\]"),
    ((1, 8, 64), None, "qkv: expected"),
    ((1, 8, 10, 64), None, "num_heads_q: required"),
    ((1, 8, 10, 64), 7, "num_heads_q: 7 leaves 3 heads"),
    ((1, 8, 10, 64), 9, "num_heads_q: expected an int <= 8"),
])
def test_unsplittable_qkv_is_refused_naming_it(shape, heads_q, message):
    with pytest.raises(ValueError, match=message):
        fa3.flash_attn_qkvpacked_func(np.zeros(shape, BF16), num_heads_q=heads_q)
