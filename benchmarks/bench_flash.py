"""Benchmark: the emulated FA3 forward against plain NumPy float32 attention, same data.

batch 1, 8 heads, seqlen 1024, head_dim 128, bf16, non-causal and causal; prints each time and
the ratio (target: at most 20x). Run: ``python benchmarks/bench_flash.py [--seqlen 1024]``.
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np

from simulator import flash


def numpy_attention(q, k, v, causal):
    """float32 softmax(QK^T / sqrt(d)) V, the plain way (no blocking)."""
    q, k, v = (x.astype(np.float32).transpose(0, 2, 1, 3) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(q.shape[-1]))
    if causal:
        n = s.shape[-1]
        s = np.where(np.tri(s.shape[-2], n, n - s.shape[-2], dtype=bool), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    shape = (1, args.seqlen, args.heads, 128)
    q, k, v = (rng.standard_normal(shape).astype(ml_dtypes.bfloat16) for _ in range(3))
    for causal in (False, True):
        t0 = time.perf_counter()
        numpy_attention(q, k, v, causal)
        t_np = time.perf_counter() - t0
        t0 = time.perf_counter()
        flash.forward(q, k, v, causal=causal)
        t_sim = time.perf_counter() - t0
        ratio = t_sim / t_np
        print(f"causal={causal!s:5s} emulator {t_sim:7.2f} s  numpy float32 {t_np:6.3f} s  "
              f"ratio {ratio:6.1f}x (target <= 20x): {'MET' if ratio <= 20 else 'MISSED'}")


if __name__ == "__main__":
    main()
