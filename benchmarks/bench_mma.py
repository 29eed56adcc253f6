"""Benchmark: emulated tensor-core instructions and GEMMs, as ratios measured side by side.

1. one wgmma m64n128k16 bf16 instruction against the `mmasim` package's Hopper model on the
   same operands, where it is installed (``pip install -e '.[bench]'``; its outputs are checked
   bit-identical first). Target: at least 100x faster.
2. a 1024 x 1024 x 128 bf16 GEMM chained in wgmma k16 steps against NumPy's float32 matmul on
   the same values, under the same BLAS thread count. Target: at most 30x.

Run: ``python benchmarks/bench_mma.py [--size 1024] [--threads 1]``.
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np
from timing import add_common_args, blas_threads, emit, interleaved_medians, machine, median_time, ratio_row

from simulator import mma

BF16 = ml_dtypes.bfloat16


def mmasim_instruction(a, b, c, threads: int):
    """A callable running mmasim's Hopper wgmma model on (a, b, c), or None when mmasim is
    missing; raises AssertionError when its bits differ from the emulator's."""
    try:
        import torch
        from mmasim.nv_ptx.sim import WGMMA
    except ImportError:
        return None
    torch.set_num_threads(threads)
    op = WGMMA("Hopper", "m64n128k16.f32.bf16.bf16")
    ta = torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    tb = torch.from_numpy(b.astype(np.float32)).to(torch.bfloat16)
    tc = torch.from_numpy(c)
    ref = op(ta, tb, tc).numpy()
    ours = mma.wgmma("m64n128k16.f32.bf16.bf16", a, b, c)
    assert np.array_equal(ref.view(np.uint32), ours.view(np.uint32)), "mmasim and simulator differ"
    return lambda: op(ta, tb, tc)


def measure(size=1024, threads=1, repeats=7) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    a = rng.standard_normal((64, 16)).astype(BF16)
    b = rng.standard_normal((16, 128)).astype(BF16)
    c = rng.standard_normal((64, 128)).astype(np.float32)
    with blas_threads(threads):
        one = lambda: mma.wgmma("m64n128k16.f32.bf16.bf16", a, b, c)  # noqa: E731
        t_one = median_time(one, 5 * repeats)
        ref = mmasim_instruction(a, b, c, threads)
        if ref is not None:
            t_one, t_ref = interleaved_medians([one, ref], repeats, inner=[5, 1])
            rows.append(ratio_row("bench_mma.py", "one wgmma m64n128k16 bf16 vs mmasim (same bits)",
                                  t_one, t_ref, "mmasim", ">= 100x faster", faster=True))
            # the exact path's floor: its three float64 BLAS products (K = 16) and nothing else
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            floor = lambda: (a64 @ b64, a64 @ b64, a64 @ b64)  # noqa: E731
            t_floor, t_ref2 = interleaved_medians([floor, ref], repeats, inner=[50, 1])
            rows.append(ratio_row("bench_mma.py", "one wgmma m64n128k16 bf16: the exact path's "
                                  "three float64 BLAS products alone (its floor) vs mmasim",
                                  t_floor, t_ref2, "mmasim", faster=True))
        else:
            rows.append({"script": "bench_mma.py", "measures": "one wgmma m64n128k16 bf16",
                         "ours_s": t_one, "anchor": None, "ratio": None, "target": ">= 100x faster"})
        n = size
        A = rng.standard_normal((n, 128)).astype(BF16)
        B = rng.standard_normal((128, n)).astype(BF16)
        A32, B32 = A.astype(np.float32), B.astype(np.float32)
        t_sim, t_np = interleaved_medians(
            [lambda: mma.gemm(A, B, instruction="wgmma.m64n128k16.f32.bf16.bf16"),
             lambda: A32 @ B32], max(3, repeats // 2), inner=[1, 20])
        rows.append(ratio_row("bench_mma.py", f"GEMM {n}x{n}x128 bf16 in wgmma k16 steps vs NumPy "
                              "float32 matmul", t_sim, t_np, "numpy float32 matmul", "<= 30x"))
        from simulator import engine
        from simulator.mma import fast

        # both sides on the NumPy engine: "auto" hands a GEMM this large to the compiled one
        def gemm():
            with engine.use_engine("numpy"):
                return mma.gemm(A, B, instruction="wgmma.m64n128k16.f32.bf16.bf16")

        def per_term():
            with fast.per_term_model():
                return gemm()

        assert np.array_equal(gemm().view(np.uint32), per_term().view(np.uint32)), "bits differ"
        t_fast, t_ref = interleaved_medians([gemm, per_term], max(3, repeats // 2))
        rows.append(ratio_row("bench_mma.py", f"GEMM {n}x{n}x128 bf16: BLAS tensor-core path vs the "
                              "per-term model (same bits)", t_fast, t_ref, "per-term model",
                              faster=True))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="GEMM M = N (K = 128)")
    add_common_args(ap)
    args = ap.parse_args()
    print(f"{machine()}; BLAS threads {args.threads} on both sides")
    rows = measure(args.size, args.threads, args.repeats or 7)
    for r in rows:
        if r["anchor"] is None:
            print(f"{r['measures']}: {r['ours_s'] * 1e3:.3f} ms; mmasim not installed "
                  "(pip install -e '.[bench]'): ratio not measured")
        elif r["faster"]:
            verdict = (f" (target {r['target']}): {'MET' if r['ratio'] >= 100 else 'MISSED'}"
                       if r["target"] != "-" else "")
            print(f"{r['measures']}: {r['ours_s'] * 1e3:.3f} ms vs {r['anchor_s'] * 1e3:.2f} ms -> "
                  f"{r['ratio']:.1f}x faster{verdict}")
        else:
            print(f"{r['measures']}: {r['ours_s']:.3f} s vs {r['anchor_s'] * 1e3:.2f} ms -> "
                  f"{r['ratio']:.0f}x (target {r['target']}): {'MET' if r['ratio'] <= 30 else 'MISSED'}")
    emit(rows, args.json)


if __name__ == "__main__":
    main()
