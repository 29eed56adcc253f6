"""Benchmark: the emulated FA3 forward against NumPy float32 attention on the same data.

Default shape: batch 1, seqlen 1024 (queries and keys), 4 heads, head_dim 128, bf16 non-causal
and causal, and e4m3 non-causal. Both sides are warmed up (the emulator's first call loads the
MUFU tables), run under the same BLAS thread count, and timed as the median of several runs.
The NumPy anchor does equal work: with a causal mask it computes, per block of 128 query rows,
only the keys up to the block's last row (the emulator likewise skips K/V blocks the mask
removes). Where torch and triton are installed (``pip install -e '.[bench]'``), a
FlashAttention-style Triton kernel run by the Triton interpreter (``TRITON_INTERPRET=1``, not
bit-exact: float32 softmax with ``exp``) is timed on the same data as a second anchor.
With ``--processes N`` (default 2) the bf16 non-causal forward is also timed with
``executor=ProcessPoolExecutor(N)`` (the pool started and warmed up first; its bits are checked
equal to the serial run's). Target: at most 10x NumPy.
Run: ``python benchmarks/bench_flash.py [--seqlen 1024] [--heads 4] [--processes 2]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import ml_dtypes
import numpy as np
from timing import (
    add_common_args,
    blas_info,
    blas_threads,
    emit,
    interleaved_medians,
    machine,
    median_time,
    ratio_row,
)

from simulator import flash
from simulator.flash.dispatch import fa3_dispatch

TARGET = 10.0
ROW_BLOCK = 128


def numpy_attention(q, k, v, causal):
    """float32 softmax(Q K^T / sqrt(d)) V, [B, S, H, D] in and out. With ``causal`` only the
    keys up to each block of 128 query rows' last row are computed (bottom-right aligned, as
    FA3's mask), so the work matches a kernel that skips masked blocks."""
    q, k, v = (np.asarray(x, np.float32).transpose(0, 2, 1, 3) for x in (q, k, v))  # [B, H, S, D]
    scale = np.float32(1.0 / np.sqrt(q.shape[-1]))
    sq, sk = q.shape[2], k.shape[2]
    out = np.empty_like(q[..., : v.shape[-1]])
    blocks = range(0, sq, ROW_BLOCK) if causal else [0]
    for m0 in blocks:  # a handful of row blocks: the work a causal kernel does
        m1 = min(sq, m0 + ROW_BLOCK) if causal else sq
        n1 = min(sk, m1 + sk - sq) if causal else sk
        s = (q[:, :, m0:m1] * scale) @ k[:, :, :n1].transpose(0, 1, 3, 2)
        if causal:
            rows = np.arange(m0, m1)[:, None] + (sk - sq)
            s = np.where(np.arange(n1)[None, :] <= rows, s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        out[:, :, m0:m1] = (s / s.sum(-1, keepdims=True)) @ v[:, :, :n1]
    return out.transpose(0, 2, 1, 3)


def triton_attention(threads: int):
    """A callable (q, k, v, causal) -> O running a FlashAttention-style Triton kernel in the
    Triton interpreter on CPU torch tensors, or None when torch or triton is missing."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        import torch
        import triton_flash
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return triton_flash.attention


def _inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(3))


def _fast_path_row(q, k, v, causal: bool, repeats: int, label: str) -> dict:
    """The same forward with the per-term tensor-core model everywhere, in turns with the
    default (simulator.mma.fast for bf16): the speed-up of the exact BLAS path alone."""
    from simulator import engine
    from simulator.mma import fast

    # both sides on the NumPy engine: the compiled one ("auto", large calls) has no BLAS path
    def forward():
        with engine.use_engine("numpy"):
            return flash.forward(q, k, v, causal=causal)

    def per_term():
        with fast.per_term_model():
            return forward()

    assert np.array_equal(per_term().out.view(np.uint16), forward().out.view(np.uint16)), "bits differ"
    t_fast, t_ref = interleaved_medians([forward, per_term], repeats)
    return ratio_row("bench_flash.py", f"{label}: BLAS tensor-core path vs the per-term model "
                     "(same bits)", t_fast, t_ref, "per-term model", faster=True)


def blas_floor(seqlen: int, heads: int, head_dim: int, rng=None):
    """A callable doing only the float64 BLAS products that the exact tensor-core path
    (simulator/mma/fast.py) needs for a non-causal bf16 forward of this shape: per k16 step of
    QK^T and of P V, on every CTA and K/V block, three products of K = 16 (the clean test's two
    exponent-weight sums and the value product), on random data of the same shapes. No
    exponent work, no rounding, no softmax: a lower bound on the path's time."""
    rng = rng or np.random.default_rng(0)
    d = fa3_dispatch("bf16", head_dim, seqlen, causal=False)
    m, n = d.kblock_m, d.kblock_n
    ctas = heads * -(-seqlen // m)
    blocks = -(-seqlen // n)
    qk = [rng.standard_normal((ctas, m, 16)), rng.standard_normal((1, 16, n))]
    pv = [rng.standard_normal((ctas, m, 16)), rng.standard_normal((1, 16, d.kernel_head_dim_v))]

    def run():
        for _ in range(blocks):
            for a, b, steps in ((*qk, d.kernel_head_dim // 16), (*pv, n // 16)):
                for _ in range(3 * steps):
                    np.matmul(a, b)
    return run


def _floor_row(seqlen, heads, head_dim, repeats, label) -> dict:
    q, k, v = (x.astype(np.float32) for x in _inputs((1, seqlen, heads, head_dim), ml_dtypes.bfloat16))
    t_floor, t_np = interleaved_medians([blas_floor(seqlen, heads, head_dim),
                                         lambda: numpy_attention(q, k, v, False)], repeats,
                                        inner=[1, 5])
    return ratio_row("bench_flash.py", f"{label}: the exact path's float64 BLAS products alone "
                     "(its floor) vs NumPy float32 attention", t_floor, t_np,
                     "numpy float32 attention")


def _outside_gemm_row(q, k, v, repeats: int, label: str) -> dict:
    """The forward's time outside ``mma.gemm`` (softmax, masks, MUFU, conversions, fragment
    bookkeeping: everything but the tensor-core arithmetic), measured by timing every
    ``mma.gemm`` call inside the forward and subtracting, in turns with the anchor: what the
    forward would take if its GEMMs were free."""
    fw = sys.modules["simulator.flash.forward"]
    spent = [0.0]
    gemm = fw.mma.gemm

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return gemm(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t0

    def outside():
        spent[0] = 0.0
        t0 = time.perf_counter()
        flash.forward(q, k, v)
        return time.perf_counter() - t0 - spent[0]

    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    fw.mma.gemm = timed
    try:
        outside()  # warm-up
        samples, anchors = [], []
        for _ in range(max(1, repeats)):
            samples.append(outside())
            anchors.append(median_time(lambda: numpy_attention(q32, k32, v32, False), 5, warmup=0))
    finally:
        fw.mma.gemm = gemm
    return ratio_row("bench_flash.py", f"{label}: the forward's time outside mma.gemm alone vs NumPy "
                     "float32 attention", statistics.median(samples), statistics.median(anchors),
                     "numpy float32 attention")


_LIMITS = []


def _limit_worker(threads: int) -> None:
    """Worker initializer: the same BLAS thread count as the parent's side of the ratio."""
    from threadpoolctl import threadpool_limits

    _LIMITS.append(threadpool_limits(limits=threads))


def _executor_row(q, k, v, processes: int, threads: int, repeats: int, label: str) -> dict:
    serial = flash.forward(q, k, v)
    with ProcessPoolExecutor(processes, initializer=_limit_worker, initargs=(threads,)) as ex:
        par = flash.forward(q, k, v, executor=ex)  # also the warm-up: tables load in the workers
        assert np.array_equal(par.out.view(np.uint16), serial.out.view(np.uint16)), "bits differ"
        q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
        t, t_np = interleaved_medians([lambda: flash.forward(q, k, v, executor=ex),
                                       lambda: numpy_attention(q32, k32, v32, False)],
                                      repeats, inner=[1, 5])
    return ratio_row("bench_flash.py", f"{label}, executor with {processes} processes vs NumPy "
                     "float32 attention", t, t_np, "numpy float32 attention")


def measure(seqlen=1024, heads=4, head_dim=128, threads=1, repeats=3, triton=True,
            processes=2) -> list[dict]:
    """Time every configuration; returns one row per ratio (see timing.ratio_row)."""
    shape = (1, seqlen, heads, head_dim)
    tri = triton_attention(threads) if triton else None
    rows = []
    configs = [("bf16", ml_dtypes.bfloat16, False), ("bf16", ml_dtypes.bfloat16, True),
               ("e4m3", ml_dtypes.float8_e4m3fn, False)]
    with blas_threads(threads):
        for name, dtype, causal in configs:
            q, k, v = _inputs(shape, dtype)
            # the anchor gets float32 copies made outside its timing: only attention is timed
            q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
            # in turns, the anchor 5 times per turn (it is 50-100x faster)
            t_sim, t_np = interleaved_medians(
                [lambda: flash.forward(q, k, v, causal=causal),  # noqa: B023
                 lambda: numpy_attention(q32, k32, v32, causal)], repeats, inner=[1, 5])  # noqa: B023
            label = (f"forward {name}{' causal' if causal else ''}, 1 x {seqlen} x {heads} heads x "
                     f"{head_dim}")
            rows.append(ratio_row("bench_flash.py", label + " vs NumPy float32 attention", t_sim,
                                  t_np, "numpy float32 attention", f"<= {TARGET:g}x"))
            if name == "bf16":
                rows.append(_fast_path_row(q, k, v, causal, repeats, label))
            if name == "bf16" and not causal:
                rows.append(_floor_row(seqlen, heads, head_dim, repeats, label))
                rows.append(_outside_gemm_row(q, k, v, repeats, label))
            if processes > 1 and name == "bf16" and not causal:
                rows.append(_executor_row(q, k, v, processes, threads, repeats, label))
            if tri is not None and name == "bf16":
                t_tri, t_np = interleaved_medians(
                    [lambda: tri(q32, k32, v32, causal),  # noqa: B023
                     lambda: numpy_attention(q32, k32, v32, causal)], 2, inner=[1, 5])  # noqa: B023
                rows.append(ratio_row("bench_flash.py", label + ": Triton interpreter vs NumPy",
                                      t_tri, t_np, "numpy float32 attention"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--no-triton", action="store_true", help="skip the Triton interpreter anchor")
    ap.add_argument("--processes", type=int, default=2, help="executor processes (0: skip)")
    add_common_args(ap)
    args = ap.parse_args()
    print(f"{machine()}; BLAS threads {args.threads} on both sides")
    rows = measure(args.seqlen, args.heads, args.head_dim, args.threads, args.repeats or 3,
                   not args.no_triton, args.processes)
    with blas_threads(args.threads):
        print(f"BLAS: {blas_info()}")
    if not any("Triton" in r["measures"] for r in rows) and not args.no_triton:
        print("Triton interpreter anchor: torch / triton not installed (pip install -e '.[bench]')")
    for r in rows:
        verdict = ""
        if r["target"] != "-":
            verdict = f" (target {r['target']}): {'MET' if r['ratio'] <= TARGET else 'MISSED'}"
        print(f"{r['measures']}: {r['ours_s']:.3f} s vs {r['anchor_s']:.3f} s -> "
              f"{r['ratio']:.1f}x{' faster' if r['faster'] else ''}{verdict}")
    emit(rows, args.json)


if __name__ == "__main__":
    main()
