"""Regression cases from public reports of attention numerics, with what the hardware does.

Each case builds its inputs deterministically and names the forward keyword arguments; the
H200's bits for every case are recorded by ``python -m simulator measure regressions --out DIR``
(``simulator/data/device/regressions.npz``) and ``tests/test_regressions.py`` checks the
emulator against them and asserts each case's explanation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

BF16, E4M3 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn


@dataclass(frozen=True)
class Case:
    """A regression case: ``build()`` returns (q, k, v, kwargs); ``about`` says what happens."""

    name: str
    about: str
    build: Callable[[], tuple]


def _rng(seed):
    return np.random.default_rng(seed)


def _logits_below_minus_5e4():
    # every logit of row 0 is below -5e4 (q . k = -6.4e5, scaled by 1/8): a max initialised to
    # a finite "very negative" constant would swamp them; FA3 starts from -inf and is exact
    d, n = 64, 96
    q = np.full((1, 4, 1, d), 100.0, np.float32)
    k = np.full((1, n, 1, d), -100.0, np.float32) + _rng(1).standard_normal((1, n, 1, d)).astype(np.float32)
    v = _rng(2).standard_normal((1, n, 1, d)).astype(np.float32)
    return q.astype(BF16), k.astype(BF16), v.astype(BF16), {}


def _q_k_v_133120():
    # Q = K = V = 133120 (exact in bf16), head_dim 64, one token: S = 133120^2 * 64 = 1.13e12;
    # in log2 units the max is 2.04e11, and FFMA(s, scale, -RN(max * scale)) keeps the product's
    # rounding residual, so P = exp2(residual) instead of 1
    x = np.full((1, 1, 1, 64), 133120.0, np.float32).astype(BF16)
    return x, x.copy(), x.copy(), {}


def _fp8_v_ones():
    # V = 1 everywhere, so the exact output is 1 in every row; with FP8 P (Max_offset 8: P in
    # [0, 256]) every P below 2^-9 flushes to 0 in e4m3 while row_sum (float32) still counts it
    rng = _rng(3)
    q = (3 * rng.standard_normal((1, 64, 1, 64))).astype(np.float32).astype(E4M3)
    k = (3 * rng.standard_normal((1, 256, 1, 64))).astype(np.float32).astype(E4M3)
    v = np.ones((1, 256, 1, 64), np.float32).astype(E4M3)
    return q, k, v, {"kblock_n": 128}


def _fully_masked_rows():
    # causal, bottom-right aligned, seqlen_q > seqlen_k: the first seqlen_q - seqlen_k rows see
    # no key; O = 0 and LSE = -inf there (inv_sum = 0 when the sum is 0)
    rng = _rng(4)
    q = rng.standard_normal((1, 100, 2, 64)).astype(np.float32).astype(BF16)
    k = rng.standard_normal((1, 40, 2, 64)).astype(np.float32).astype(BF16)
    v = rng.standard_normal((1, 40, 2, 64)).astype(np.float32).astype(BF16)
    return q, k, v, {"causal": True}


def _seqlen_k_zero():
    rng = _rng(5)
    q = rng.standard_normal((2, 70, 2, 64)).astype(np.float32).astype(BF16)
    k = rng.standard_normal((2, 50, 1, 64)).astype(np.float32).astype(BF16)
    v = rng.standard_normal((2, 50, 1, 64)).astype(np.float32).astype(BF16)
    return q, k, v, {"seqlens_k": np.array([0, 50])}


def _fp8_two_block_sizes(kblock_n):
    def build():
        rng = _rng(6)
        q = (2 * rng.standard_normal((1, 128, 1, 128))).astype(np.float32).astype(E4M3)
        k = (2 * rng.standard_normal((1, 512, 1, 128))).astype(np.float32).astype(E4M3)
        v = rng.standard_normal((1, 512, 1, 128)).astype(np.float32).astype(E4M3)
        return q, k, v, {"kblock_n": kblock_n}
    return build


CASES = {c.name: c for c in (
    Case("logits_below_minus_5e4", "all logits of the rows below -5e4: exact, finite LSE",
         _logits_below_minus_5e4),
    Case("q_k_v_133120", "huge logit: P = exp2(FFMA rounding residual) = inf instead of 1, so "
         "the sum is inf, inv_sum = 0, O = inf * 0 = NaN and LSE = +inf", _q_k_v_133120),
    Case("fp8_v_ones", "V = 1 but O != 1 (0.988 .. 1.016): P is rounded to e4m3 (and P below "
         "2^-9 flushes to 0) while row_sum adds the float32 P", _fp8_v_ones),
    Case("fully_masked_rows", "rows that see no key: O = 0, LSE = -inf", _fully_masked_rows),
    Case("seqlen_k_zero", "a batch with seqlen_k = 0: O = 0, LSE = -inf", _seqlen_k_zero),
    Case("fp8_kblock_n_64", "FP8, kblock_n = 64: compare with kblock_n = 128",
         _fp8_two_block_sizes(64)),
    Case("fp8_kblock_n_128", "FP8, kblock_n = 128: other bits than kblock_n = 64 (row_sum, max and "
         "the 14-bit FP8 accumulation follow the block boundaries)", _fp8_two_block_sizes(128)),
)}
