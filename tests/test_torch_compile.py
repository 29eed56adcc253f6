"""torch.compile and torch.export through simulator.fa3.flash_attn_func: the entry point traces
as the custom ops simulator_fa3::fwd / ::bwd (simulator/fa3/torch_ops.py), forward and backward
giving the eager call's bits."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch.compile needs torch (CPU build)")

from simulator import fa3  # noqa: E402

# simulator.fa3 may have been imported before torch in this process (another test module):
# register the ops now, as a user does before a fullgraph compile
fa3.register_torch_ops()

ROOT = Path(__file__).resolve().parents[1]


def _inputs():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, 80, 2, 64, generator=g).to(torch.bfloat16).requires_grad_()
            for _ in range(3)]


def _bits(t):
    return t.detach().view(torch.int16)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_compiled_model_gives_the_eager_bits_forward_and_backward(backend):
    def layer(q, k, v):
        return fa3.flash_attn_func(q, k, v, causal=True) * 2

    q, k, v = _inputs()
    eager = layer(q, k, v)
    eager.float().sum().backward()
    want = [_bits(x.grad).clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    compiled = torch.compile(layer, backend=backend, fullgraph=True)(q, k, v)
    compiled.float().sum().backward()
    assert torch.equal(_bits(compiled), _bits(eager))
    for x, w in zip((q, k, v), want, strict=True):
        assert torch.equal(_bits(x.grad), w)


@pytest.mark.skipif(all(shutil.which(c) is None for c in ("c++", "g++", "clang++")),
                    reason="torch.compile's default backend (inductor) needs a C++ compiler on CPU")
def test_a_small_model_compiles_with_the_default_backend():
    """A projection, FA3's attention and an output projection, compiled as a user writes it
    (``torch.compile(model)``, inductor): the attention's output bit for bit, the model's output
    and gradients as eager's (inductor may fuse torch's own layers in another order)."""

    class Block(torch.nn.Module):
        def __init__(self, heads=2, head_dim=64):
            super().__init__()
            self.heads, self.head_dim = heads, head_dim
            width = heads * head_dim
            self.qkv = torch.nn.Linear(width, 3 * width, dtype=torch.bfloat16)
            self.proj = torch.nn.Linear(width, width, dtype=torch.bfloat16)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).unbind(2)
            y = fa3.flash_attn_func(q, k, v, causal=True)
            return y, self.proj(y.reshape(b, s, -1))

    torch.manual_seed(0)
    model = Block()
    x = torch.randn(1, 48, 128, dtype=torch.bfloat16)
    eager_y, eager = model(x)
    eager.float().sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    y, compiled = torch.compile(model)(x)
    compiled.float().sum().backward()
    assert torch.equal(_bits(y), _bits(eager_y))
    torch.testing.assert_close(compiled, eager)
    for p, w in zip(model.parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, w)


def test_export_records_the_custom_op():
    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            return fa3.flash_attn_func(q, k, v)

    q, k, v = (x.detach() for x in _inputs())
    program = torch.export.export(Attention(), (q, k, v))
    assert "simulator_fa3.fwd" in str(program.graph)
    assert torch.equal(_bits(program.module()(q, k, v)), _bits(fa3.flash_attn_func(q, k, v)))


def test_simulator_imported_before_torch_still_compiles():
    """The ops then register at the first compiled call (one graph break outside fullgraph)."""
    code = ("import simulator.fa3 as fa3\nimport torch\n"
            "q = torch.ones(1, 16, 1, 64, dtype=torch.bfloat16)\n"
            "out = torch.compile(lambda q: fa3.flash_attn_func(q, q, q), backend='eager')(q)\n"
            "print(torch.equal(out, fa3.flash_attn_func(q, q, q)))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-1] == "True"


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_compiled_varlen_call_gives_the_eager_bits_forward_and_backward(backend):
    """flash_attn_varlen_func traces as simulator_fa3::varlen_fwd / ::varlen_bwd (fullgraph),
    seqused_q / seqused_k included; it failed to compile ('bfloat16 not understood')."""
    g = torch.Generator().manual_seed(1)
    cu = torch.tensor([0, 20, 50], dtype=torch.int32)
    used = torch.tensor([15, 30], dtype=torch.int32)
    leaves = [torch.randn(50, 2, 64, generator=g).bfloat16().requires_grad_() for _ in range(3)]

    def varlen(q, k, v):
        return fa3.flash_attn_varlen_func(q, k, v, cu, cu, 30, 30, seqused_q=used,
                                          seqused_k=used, causal=True) * 2

    eager = varlen(*leaves)
    eager.float().sum().backward()
    want = [_bits(x.grad).clone() for x in leaves]
    for x in leaves:
        x.grad = None
    compiled = torch.compile(varlen, backend=backend, fullgraph=True)(*leaves)
    compiled.float().sum().backward()
    assert torch.equal(_bits(compiled), _bits(eager))
    for x, w in zip(leaves, want, strict=True):
        assert torch.equal(_bits(x.grad), w)


def test_export_records_the_varlen_op():
    class Packed(torch.nn.Module):
        def forward(self, q, k, v, cu):
            return fa3.flash_attn_varlen_func(q, k, v, cu, cu, 30, 30, causal=True)

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(50, 2, 64, generator=g).bfloat16() for _ in range(3))
    cu = torch.tensor([0, 20, 50], dtype=torch.int32)
    program = torch.export.export(Packed(), (q, k, v, cu))
    assert "simulator_fa3.varlen_fwd" in str(program.graph)
    want = fa3.flash_attn_varlen_func(q, k, v, cu, cu, 30, 30, causal=True)
    assert torch.equal(_bits(program.module()(q, k, v, cu)), _bits(want))


def test_a_kvcache_call_compiles_outside_the_graph():
    """flash_attn_with_kvcache has no custom op: a compiled model runs it eagerly (a graph
    break) with the eager bits and cache writes; it failed to compile ('bfloat16 not
    understood' on fake tensors)."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 1, 4, 64, generator=g).bfloat16()
    k_new, v_new = (torch.randn(2, 1, 2, 64, generator=g).bfloat16() for _ in range(2))
    caches = [torch.randn(2, 300, 2, 64, generator=g).bfloat16() for _ in range(2)]
    lens = torch.tensor([120, 298], dtype=torch.int32)

    def decode(q, k_cache, v_cache):
        return fa3.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens)

    eager_caches = [c.clone() for c in caches]
    eager = decode(q, *eager_caches)
    compiled = torch.compile(decode, backend="eager")(q, *caches)
    assert torch.equal(_bits(compiled), _bits(eager))
    for got, want_cache in zip(caches, eager_caches, strict=True):  # the appended keys written
        assert torch.equal(_bits(got), _bits(want_cache))
