"""FA2's forward on the compiled engine takes FA3's fused softmax step for flash-attn's
fast-math build (``Fa2Softmax.fusable``) and NumPy's steps for PyTorch's; both engines give the
same bits, including the case the fused step does not cover (FA2 guards ``max_scaled`` against
a -inf row max whatever ``Check_inf``), which the mainloop redoes in NumPy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import engine, fa2
from simulator.flash import mainloop_fwd_fa2 as mf
from simulator.flash.forward_fa2 import forward_fa2

pytestmark = pytest.mark.skipif(not engine.available(), reason="numba is not installed")


def _inputs(seed, sq=130, sk=300, h=2, d=64):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s, np.float32).astype(ml_dtypes.bfloat16)
                 for s in ((1, sq, h, d), (1, sk, h, d), (1, sk, h, d)))


def _both(fn):
    with engine.use_engine("numpy"):
        a = fn()
    with engine.use_engine("numba"):
        b = fn()
    return a, b


def test_fused_step_is_taken_for_flash_attn_and_not_for_pytorch(monkeypatch):
    calls = []
    real = mf.Fa2Softmax.block_step
    monkeypatch.setattr(mf.Fa2Softmax, "block_step",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    q, k, v = _inputs(0)
    with engine.use_engine("numba"):
        forward_fa2(q, k, v, build=mf.FLASH_ATTN)
        n = len(calls)
        forward_fa2(q, k, v, build=mf.PYTORCH)
    assert n > 0 and len(calls) == n


@pytest.mark.parametrize("causal, window", [(False, (-1, -1)), (True, (-1, -1)),
                                            (False, (40, 7))])
def test_both_engines_give_the_same_bits(causal, window):
    q, k, v = _inputs(1)
    (o1, l1), (o2, l2) = _both(lambda: (fa2.flash_attn_func(q, k, v, causal=causal,
                                                             window_size=window,
                                                             return_attn_probs=True)[:2]))
    assert np.array_equal(o1.view(np.uint16), o2.view(np.uint16))
    assert np.array_equal(l1.view(np.uint32), l2.view(np.uint32))


def test_a_row_of_minus_inf_scores_without_check_inf():
    """Non-causal, no window, one key block: no Check_inf. A query row of -inf against
    positive keys has every score -inf: FA2 guards ``max_scaled`` (P = 0, O = 0, LSE = +inf);
    the fused step alone would not (P = NaN). Both engines give FA2's bits."""
    q, k, v = _inputs(2, sq=64, sk=100)
    q = q.astype(np.float32)
    q[0, 5, 0] = -np.inf
    q = q.astype(ml_dtypes.bfloat16)
    k = (np.abs(k.astype(np.float32)) + 0.5).astype(ml_dtypes.bfloat16)
    (o1, l1), (o2, l2) = _both(lambda: tuple(forward_fa2(q, k, v, build=mf.FLASH_ATTN))[:2])
    assert not o1.astype(np.float32)[0, 5, 0].any() and np.isposinf(l1[0, 0, 5])
    assert np.array_equal(o1.view(np.uint16), o2.view(np.uint16))
    assert np.array_equal(l1.view(np.uint32), l2.view(np.uint32))
