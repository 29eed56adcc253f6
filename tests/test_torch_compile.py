"""torch.compile and torch.export through simulator.fa3.flash_attn_func: the entry point traces
as the custom ops simulator_fa3::fwd / ::bwd (simulator/fa3/torch_ops.py), forward and backward
giving the eager call's bits."""

from __future__ import annotations

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
