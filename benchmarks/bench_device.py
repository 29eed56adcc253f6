"""Throughput of kernels/fa3_forward.cu against torch's scaled_dot_product_attention (on a GPU).

    python3 benchmarks/bench_device.py [--out benchmarks/results/bench_device.json]

Batch 4, 16 heads, seqlen 4096 (q and k), head_dim 128, bf16, non-causal and causal; our kernel
with its defaults (kblock_m 128, kblock_n 128, intra_wg_overlap), inputs already on the GPU
(no host copies timed). CUDA events around each call, warm-up runs first, the median of
several runs. TFLOP/s count 4 B H Sq Sk d multiply-adds x 2 (half of it for causal). Our kernel
is written for bit-exactness, not speed (one stage, synchronous copies, no TMA, no producer
warpgroup): it is expected to be far slower than torch's fused kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.device import forward as dev  # noqa: E402
from simulator.device import runtime  # noqa: E402

B, H, S, D = 4, 16, 4096, 128


def _time(fn, start, stop, sync, warmup: int, runs: int) -> list[float]:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(runs):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(stop_minus_start(start, stop))
    return times


def stop_minus_start(start, stop) -> float:
    """Milliseconds between two recorded events (cupy or torch)."""
    if hasattr(start, "elapsed_time"):  # torch.cuda.Event
        return float(start.elapsed_time(stop))
    import cupy  # noqa: PLC0415

    return float(cupy.cuda.get_elapsed_time(start, stop))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bench_device.json"))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args(argv)

    import cupy  # noqa: PLC0415
    import torch  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: PLC0415

    info = runtime.device_info()
    info["kernel_sha256"] = runtime.source_sha256(dev.KERNEL)
    info["torch"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
    torch.manual_seed(0)
    # [B, S, H, D] for our kernel; the same values as [B, H, S, D] for torch
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    dq, dk, dv = (cupy.from_dlpack(x.view(torch.int16)) for x in (q, k, v))
    torch.cuda.synchronize()

    rows = []
    for causal in (False, True):
        z = np.zeros((B, S, H, D), dtype=ml_dtypes.bfloat16)
        cfg = dev.make_launch_config(z, z, z, causal=causal)
        del z
        fn = dev.compile_kernel(cfg.options).get_function(dev.KERNEL_NAME)
        runtime.allow_dynamic_smem(cupy, fn, cfg.smem_bytes)
        out = cupy.empty((B, S, H, D), dtype=cupy.uint16)
        lse = cupy.empty((B, H, S), dtype=cupy.float32)
        ones = cupy.ones((B, H), dtype=cupy.float32)
        kargs = (dq, dk, dv, out, lse, cupy.full((B,), S, dtype=cupy.int32), ones, ones, ones,
                 np.int32(S), np.int32(S), np.int32(H), np.int32(H), np.int32(cfg.window[0]),
                 np.int32(cfg.window[1]), runtime.f32_bits(cfg.consts["scale_log2"]),
                 runtime.f32_bits(cfg.consts["softcap_val"]))

        def ours(fn=fn, cfg=cfg, kargs=kargs):
            fn(cfg.grid, (cfg.threads,), kargs, shared_mem=cfg.smem_bytes)

        def theirs(causal=causal):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

        t_ours = _time(ours, cupy.cuda.Event(), cupy.cuda.Event(),
                       cupy.cuda.get_current_stream().synchronize, args.warmup, args.runs)
        t_torch = _time(theirs, torch.cuda.Event(enable_timing=True),
                        torch.cuda.Event(enable_timing=True), torch.cuda.synchronize,
                        args.warmup, args.runs)
        # sanity: the two outputs agree to bf16 accuracy
        ref = theirs().transpose(1, 2).float()
        mine = torch.from_dlpack(out.view(cupy.int16)).view(torch.bfloat16).float()
        rel = float((mine - ref).norm() / ref.norm())
        flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
        m_ours, m_torch = statistics.median(t_ours), statistics.median(t_torch)
        rows.append({"causal": causal, "ours_ms": m_ours, "torch_sdpa_ms": m_torch,
                     "ours_tflops": flops / m_ours / 1e9, "torch_tflops": flops / m_torch / 1e9,
                     "ratio_ours_over_torch_throughput": m_torch / m_ours,
                     "ours_runs_ms": t_ours, "torch_runs_ms": t_torch,
                     "rel_err_ours_vs_torch": rel, "kernel_options": list(cfg.options),
                     "registers": int(fn.num_regs) if hasattr(fn, "num_regs") else None})

    print(f"{'case':12s} {'ours ms':>10s} {'torch ms':>10s} {'ours TF/s':>10s} "
          f"{'torch TF/s':>10s} {'ratio':>8s} {'rel err':>9s}")
    for r in rows:
        print(f"{'causal' if r['causal'] else 'non-causal':12s} {r['ours_ms']:10.3f} "
              f"{r['torch_sdpa_ms']:10.3f} {r['ours_tflops']:10.1f} {r['torch_tflops']:10.1f} "
              f"{r['ratio_ours_over_torch_throughput']:8.3f} {r['rel_err_ours_vs_torch']:9.2e}")
    result = {"shape": {"batch": B, "heads": H, "seqlen_q": S, "seqlen_k": S, "head_dim": D,
                        "dtype": "bf16"},
              "method": f"CUDA events, {args.warmup} warm-up runs, median of {args.runs}",
              "flops": "4 B H S S d (x 0.5 causal)", "device": info, "results": rows}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
