"""A FlashAttention-style forward in Triton, the benchmarks' interpreter anchor.

Imported only when torch and triton are installed; set ``TRITON_INTERPRET=1`` before importing
it to run the kernel on the CPU (the Triton interpreter executes each program with NumPy).
One program per (block of 128 query rows, head) over 128-key blocks (FA3's tile at head_dim
128): Q K^T by ``tl.dot``, an online softmax in float32 with ``exp``, P V by ``tl.dot``; with
``causal`` the key loop stops at the block's diagonal. It is an anchor for speed only: its
arithmetic is not the H200's.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 128


@triton.jit
def _fwd(Q, K, V, O, scale, seqlen, stride_h, stride_m,
         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    head = tl.program_id(1)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    base = head * stride_h
    q = tl.load(Q + base + rows[:, None] * stride_m + dims[None, :]).to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    hi = seqlen
    if CAUSAL:
        hi = (start_m + 1) * BLOCK_M
    for start_n in range(0, hi, BLOCK_N):
        keys = start_n + cols
        k = tl.load(K + base + keys[None, :] * stride_m + dims[:, None]).to(tl.float32)
        v = tl.load(V + base + keys[:, None] * stride_m + dims[None, :]).to(tl.float32)
        s = tl.dot(q, k) * scale
        if CAUSAL:
            s = tl.where(rows[:, None] >= keys[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(O + base + rows[:, None] * stride_m + dims[None, :], acc / l_i[:, None])


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """O float32 [1, S, H, D] of [1, S, H, D] inputs (any float dtype; S a multiple of 128,
    equal for queries and keys)."""
    _, s, h, d = q.shape
    if q.shape[0] != 1 or s % BLOCK_M or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"triton anchor: expected equal [1, S, H, D] shapes, S % 128 == 0; "
                         f"got {q.shape}")
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(x.astype(np.float32).transpose(0, 2, 1, 3)[0]))
                  for x in (q, k, v))                                                  # [H, S, D]
    out = torch.empty_like(tq)
    _fwd[(s // BLOCK_M, h)](tq, tk, tv, out, float(1.0 / np.sqrt(d)), s, s * d, d,
                            D=d, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=causal)
    return out.numpy().transpose(1, 0, 2)[None]
