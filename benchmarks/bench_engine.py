"""Benchmark: the compiled engine (numba) against the NumPy engine and NumPy float32
attention, side by side in one process, in turns, 1 thread on every side (BLAS and numba).

Rows: one GEMM 1024 x 1024 x 128 bf16 (numba vs the NumPy engine, bits checked equal), and
the exact forward on the numba engine (GEMMs and softmax steps compiled) vs NumPy float32
attention (``bench_flash.numpy_attention``), bits of O and LSE checked equal to the NumPy
engine's forward: 1 x 1024 x 4 x 128 bf16 non-causal and causal, e4m3 non-causal and causal;
with ``--long`` also 1 x 4096 x 8 x 128 bf16 non-causal and causal (minutes: the NumPy engine's
forward for the bit check alone takes several).
Run: ``python benchmarks/bench_engine.py [--threads 1] [--repeats 3] [--long]``.
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np
from bench_flash import numpy_attention
from timing import add_common_args, blas_info, blas_threads, emit, interleaved_medians, machine, ratio_row

from simulator import engine, flash, mma


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap)
    ap.add_argument("--long", action="store_true", help="add the 1 x 4096 x 8 x 128 rows")
    args = ap.parse_args()
    repeats = args.repeats or 3
    engine.set_threads(args.threads)
    rng = np.random.default_rng(0)
    rows = []
    with blas_threads(args.threads):
        print(machine(), "|", blas_info())
        a = rng.standard_normal((1024, 128)).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((128, 1024)).astype(ml_dtypes.bfloat16)

        def gemm(name):
            with engine.use_engine(name):
                return mma.gemm(a, b)

        assert np.array_equal(gemm("numpy").view(np.uint32), gemm("numba").view(np.uint32))
        t_nb, t_np = interleaved_medians([lambda: gemm("numba"), lambda: gemm("numpy")], repeats)
        rows.append(ratio_row("bench_engine", "GEMM 1024x1024x128 bf16, numba vs numpy engine",
                              t_nb, t_np, "numpy engine", faster=True))
        cases = [((1, 1024, 4, 128), ml_dtypes.bfloat16, "bf16", "<= 10x"),
                 ((1, 1024, 4, 128), ml_dtypes.float8_e4m3fn, "e4m3", "<= 10x")]
        if args.long:
            cases.append(((1, 4096, 8, 128), ml_dtypes.bfloat16, "bf16", "<= 6x"))
        for shape, dtype, fmt, goal in cases:
            q, k, v = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
            for causal in (False, True):
                rows.append(_forward_row(q, k, v, causal, fmt, goal, repeats))
    print("| measures | ours (s) | anchor (s) | ratio |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['measures']} | {r['ours_s']:.3f} | {r['anchor_s']:.3f} | "
              f"{r['ratio']:.1f}{'x faster' if r['faster'] else 'x'} |")
    emit(rows, args.json)


def _forward_row(q, k, v, causal, fmt, goal, repeats):
    """One forward row: numba engine vs NumPy float32 attention, bits checked against the
    NumPy engine's forward first."""
    def fwd(name):
        with engine.use_engine(name):
            return flash.forward(q, k, v, causal=causal)

    ref, got = fwd("numpy"), fwd("numba")
    assert np.array_equal(ref.out.view(np.uint8), got.out.view(np.uint8)), "O bits differ"
    assert np.array_equal(ref.lse.view(np.uint32), got.lse.view(np.uint32)), "LSE bits differ"
    t_fwd, t_att = interleaved_medians(
        [lambda: fwd("numba"), lambda: numpy_attention(q, k, v, causal)], repeats)
    shape = "x".join(str(n) for n in q.shape)
    return ratio_row("bench_engine", f"forward {fmt} {shape} causal={causal}, numba engine",
                     t_fwd, t_att, "NumPy float32 attention", goal)


if __name__ == "__main__":
    main()
