"""Benchmark: emulated tensor-core instructions and GEMMs, as ratios measured side by side.

1. one wgmma m64n128k16 bf16 instruction: time, and the ratio to the `mmasim` package's
   Hopper model on the same operands when it is installed (target: at least 100x faster);
2. a 1024 x 1024 x 128 bf16 GEMM chained in wgmma k16 steps, as a ratio to NumPy's float32
   matmul on the same values (target: at most 30x).

Run: ``python benchmarks/bench_mma.py [--size 1024]``.
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np
from timing import median_time

from simulator import mma


def mmasim_instruction(a, b, c):
    """A callable running mmasim's Hopper wgmma model, or None when mmasim is missing."""
    try:
        import torch
        from mmasim.nv_ptx.sim import WGMMA
    except ImportError:
        return None
    op = WGMMA("Hopper", "m64n128k16.f32.bf16.bf16")
    ta = torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    tb = torch.from_numpy(b.astype(np.float32)).to(torch.bfloat16)
    tc = torch.from_numpy(c)
    return lambda: op(ta, tb, tc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="GEMM M = N (K = 128)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    bf16 = ml_dtypes.bfloat16

    a = rng.standard_normal((64, 16)).astype(bf16)
    b = rng.standard_normal((16, 128)).astype(bf16)
    c = rng.standard_normal((64, 128)).astype(np.float32)
    t_one = median_time(lambda: mma.wgmma("m64n128k16.f32.bf16.bf16", a, b, c), args.repeats)
    print(f"wgmma m64n128k16 bf16, one instruction: {t_one * 1e3:8.2f} ms")
    ref = mmasim_instruction(a, b, c)
    if ref is None:
        print("  mmasim not installed (pip install mmasim, needs torch): ratio not measured")
    else:
        t_ref = median_time(ref, max(1, args.repeats // 2))
        ratio = t_ref / t_one
        print(f"  mmasim: {t_ref * 1e3:8.2f} ms -> simulator is {ratio:.0f}x faster "
              f"(target >= 100x): {'MET' if ratio >= 100 else 'MISSED'}")

    n = args.size
    A = rng.standard_normal((n, 128)).astype(bf16)
    B = rng.standard_normal((128, n)).astype(bf16)
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    t_np = median_time(lambda: A32 @ B32, args.repeats)
    t_sim = median_time(lambda: mma.gemm(A, B, instruction="wgmma.m64n128k16.f32.bf16.bf16"), 1)
    ratio = t_sim / t_np
    print(f"GEMM {n}x{n}x128 bf16 in wgmma k16 steps: simulator {t_sim:.3f} s, "
          f"numpy float32 matmul {t_np * 1e3:.2f} ms -> {ratio:.0f}x (target <= 30x): "
          f"{'MET' if ratio <= 30 else 'MISSED'}")


if __name__ == "__main__":
    main()
