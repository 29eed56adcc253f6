"""Under autograd, as FA3's ``FlashAttnFunc`` / ``FlashAttnVarlenFunc``
(hopper/flash_attn_interface.py): a forward whose backward FA3 refuses still runs, with the
bits of the same call without grad, and ``loss.backward()`` raises a ValueError naming the
argument (e4m3 inputs: ``mha_bwd`` takes fp16 / bf16 only; deterministic at kernel head dim
256, here V's 256 with Q's 64; attention_chunk: the interface's assert; qv)."""

from __future__ import annotations

import pytest

from simulator import fa3

torch = pytest.importorskip("torch", reason="autograd needs torch (CPU build)")


def _t(shape, dtype, seed, grad=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(dtype)
    return x.requires_grad_(grad)


def _cases():
    bf, e4 = torch.bfloat16, torch.float8_e4m3fn
    yield ("e4m3", dict(), [(1, 40, 2, 64), (1, 40, 2, 64), (1, 40, 2, 64)], e4, "^q: expected dtype")
    yield ("deterministic", dict(deterministic=True, causal=True),
           [(1, 40, 2, 64), (1, 40, 2, 64), (1, 40, 2, 256)], bf, "^deterministic: .*256")
    yield ("chunk", dict(attention_chunk=16, causal=True),
           [(1, 40, 2, 64), (1, 40, 2, 64), (1, 40, 2, 64)], bf, "^attention_chunk:")
    yield ("qv", dict(qv=_t((1, 40, 2, 256), bf, 9, grad=False)),
           [(1, 40, 2, 64), (1, 40, 2, 64), (1, 40, 2, 256)], bf, "^qv:")


@pytest.mark.parametrize("name, kwargs, shapes, dtype, match", list(_cases()),
                         ids=[c[0] for c in _cases()])
def test_the_forward_runs_and_the_backward_raises_naming_the_argument(name, kwargs, shapes,
                                                                      dtype, match):
    q, k, v = (_t(s, dtype, i) for i, s in enumerate(shapes))
    out = fa3.flash_attn_func(q, k, v, **kwargs)
    assert out.requires_grad
    want = fa3.flash_attn_func(q.detach(), k.detach(), v.detach(), **kwargs)
    assert torch.equal(out.detach().view(torch.int16), want.view(torch.int16))
    with pytest.raises(ValueError, match=match):
        out.float().sum().backward()


def test_varlen_forward_with_attention_chunk_runs_and_its_backward_raises():
    cu = torch.tensor([0, 17, 40], dtype=torch.int32)
    q, k, v = (_t((40, 2, 64), torch.bfloat16, i) for i in range(3))
    out = fa3.flash_attn_varlen_func(q, k, v, cu, cu, 23, 23, causal=True, attention_chunk=8)
    want = fa3.flash_attn_varlen_func(q.detach(), k.detach(), v.detach(), cu, cu, 23, 23,
                                      causal=True, attention_chunk=8)
    assert torch.equal(out.detach().view(torch.int16), want.view(torch.int16))
    with pytest.raises(ValueError, match="^attention_chunk: FA3 has no backward with it"):
        out.float().sum().backward()
