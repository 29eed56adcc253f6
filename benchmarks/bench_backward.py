"""Benchmark: the emulated FA3 backward against a NumPy float32 backward on the same data.

Default shape: batch 1, seqlen 1024, 4 heads, head_dim 128, bf16, non-causal and causal. The
NumPy anchor is the textbook attention backward in float32 from q, k, v, out, dO and LSE
(``P = exp(S * scale - LSE)``, ``dV = P^T dO``, ``dS = P (dO V^T - rowsum(dO O))``, ``dQ = scale dS K``,
``dK = scale dS^T Q``); with a causal mask it computes, per block of 128 query rows, only the
keys up to the block's last row (the emulator skips the blocks the mask removes). In the same
run and in turns, the emulated forward against NumPy float32 attention, so that the two ratios
can be compared: the backward's target is at most 2.5x the forward's ratio.
Both sides are warmed up and run under the same BLAS thread count; medians of several runs.
``--engine numba`` (or ``numpy``) runs the emulator on that engine (``simulator.engine``; the
compiled one with numba's pool at ``--threads`` too); the default leaves the process setting
(``"auto"``, or ``SIMULATOR_ENGINE``).
Run: ``python benchmarks/bench_backward.py [--seqlen 1024] [--heads 4] [--engine numba]``.
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np
from bench_flash import ROW_BLOCK, numpy_attention
from timing import add_common_args, blas_info, blas_threads, emit, interleaved_medians, machine, ratio_row

from simulator import engine, flash

TARGET_VS_FORWARD = 2.5


def numpy_backward(dout, q, k, v, out, lse, causal):
    """float32 dq, dk, dv of softmax(Q K^T / sqrt(d)) V, [B, S, H, D] in and out; with
    ``causal`` only the keys up to each 128-row block's last row are touched."""
    q, k, v, out, dout = (np.asarray(x, np.float32).transpose(0, 2, 1, 3) for x in (q, k, v, out, dout))
    scale = np.float32(1.0 / np.sqrt(q.shape[-1]))
    sq, sk = q.shape[2], k.shape[2]
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    dpsum = (dout * out).sum(-1)
    blocks = range(0, sq, ROW_BLOCK) if causal else [0]
    for m0 in blocks:
        m1 = min(sq, m0 + ROW_BLOCK) if causal else sq
        n1 = min(sk, m1 + sk - sq) if causal else sk
        s = (q[:, :, m0:m1] @ k[:, :, :n1].transpose(0, 1, 3, 2)) * scale
        if causal:
            rows = np.arange(m0, m1)[:, None] + (sk - sq)
            s = np.where(np.arange(n1)[None, :] <= rows, s, -np.inf)
        p = np.exp(s - lse[:, :, m0:m1, None])
        g = dout[:, :, m0:m1]
        dv[:, :, :n1] += p.transpose(0, 1, 3, 2) @ g
        ds = p * (g @ v[:, :, :n1].transpose(0, 1, 3, 2) - dpsum[:, :, m0:m1, None])
        dq[:, :, m0:m1] = (ds @ k[:, :, :n1]) * scale
        dk[:, :, :n1] += (ds.transpose(0, 1, 3, 2) @ q[:, :, m0:m1]) * scale
    return tuple(x.transpose(0, 2, 1, 3) for x in (dq, dk, dv))


def measure(seqlen=1024, heads=4, head_dim=128, threads=1, repeats=3, engine_name=None) -> list[dict]:
    """One row per configuration for the backward, and the forward's row of the same run; the
    emulator on ``engine_name`` when given (else the process's engine setting)."""
    rng = np.random.default_rng(0)
    shape = (1, seqlen, heads, head_dim)
    rows = []
    if engine_name == "numba":
        engine.set_threads(threads)
    on = f", {engine_name} engine" if engine_name else ""
    with blas_threads(threads), engine.use_engine(engine_name or engine.get_engine()):
        for causal in (False, True):
            q, k, v, dout = (rng.standard_normal(shape).astype(ml_dtypes.bfloat16) for _ in range(4))
            out, lse = flash.forward(q, k, v, causal=causal)
            f32 = [x.astype(np.float32) for x in (dout, q, k, v, out)]
            lse32 = lse.astype(np.float32)
            label = f"1 x {seqlen} x {heads} heads x {head_dim}, bf16{' causal' if causal else ''}{on}"
            t_bwd, t_np_bwd, t_fwd, t_np_fwd = interleaved_medians(
                [lambda: flash.backward(dout, q, k, v, out, lse, causal=causal),  # noqa: B023
                 lambda: numpy_backward(*f32, lse32, causal),  # noqa: B023
                 lambda: flash.forward(q, k, v, causal=causal),  # noqa: B023
                 lambda: numpy_attention(*f32[1:4], causal)],  # noqa: B023
                repeats, inner=[1, 5, 1, 5])
            fwd_ratio = t_fwd / t_np_fwd
            rows.append(ratio_row("bench_backward.py", f"forward {label} vs NumPy float32 attention "
                                  "(the backward's reference run)", t_fwd, t_np_fwd,
                                  "numpy float32 attention"))
            rows.append(ratio_row("bench_backward.py", f"backward {label} vs a NumPy float32 backward",
                                  t_bwd, t_np_bwd, "numpy float32 backward",
                                  f"<= {TARGET_VS_FORWARD * fwd_ratio:.0f}x (2.5x the forward's "
                                  f"{fwd_ratio:.0f}x)"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--engine", choices=engine.ENGINES, default=None,
                    help="the emulator's engine (default: the process setting)")
    add_common_args(ap)
    args = ap.parse_args()
    print(f"{machine()}; {blas_info()}")
    rows = measure(args.seqlen, args.heads, threads=args.threads, repeats=args.repeats or 3,
                   engine_name=args.engine)
    for r in rows:
        print(f"{r['measures']}: {r['ratio']:.1f}x ({r['ours_s']:.3f} s vs {r['anchor_s']:.4f} s)"
              f"{'  target ' + r['target'] if r['target'] != '-' else ''}")
    emit(rows, args.json)


if __name__ == "__main__":
    main()
