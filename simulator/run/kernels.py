"""``run --kernel fa2`` / ``sdpa`` / ``fa4``: the main job through FlashAttention-2's kernels
instead of FA3's, as flash-attn 2.x builds them (:mod:`simulator.fa2`) or as PyTorch's
``scaled_dot_product_attention`` flash backend does (:mod:`simulator.sdpa`), or through
FlashAttention-4's sm90 kernels (:mod:`simulator.fa4`), on the same input; the error against
float64, and where and by how much the bits part from FA3's on that input (what "why do two
kernels differ on my input" asks).

The FA3-only options (trace, step, tiles, schedule, softcap, FP8, the device comparison,
the backward, varlen, plots) are refused with the option named.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from ..errors import UsageError
from .workload import Workload, is_varlen, varlen_lengths

#: kernel -> what it is, for the summary
KERNELS = {"fa3": "FlashAttention-3 (hopper/, fa3-fwd's build)",
           "fa2": "FlashAttention-2 as flash-attn 2.x builds it (--use_fast_math; simulator.fa2)",
           "sdpa": "FlashAttention-2 as PyTorch's SDPA flash backend builds it (UNFUSE_FMA, no "
                   "fast math; simulator.sdpa)",
           "fa4": "FlashAttention-4's Hopper kernels (flash_attn.cute, CuTe DSL; simulator.fa4)"}

_FA3_ONLY = (("trace_cta", "--trace-cta"), ("step", "--step"), ("device", "--device"),
             ("backward", "--backward"), ("kblock_m", "--kblock-m"), ("kblock_n", "--kblock-n"),
             ("schedule", "--schedule"), ("plot", "--plot"), ("explain", "--explain"))


def check_args(args, work: Workload) -> None:
    """Refuse what ``--kernel fa2 / sdpa`` does not take, naming the option.

    Raises:
        UsageError: an FA3-only option, a softcap, FP8, varlen / seqlens_k input, workers, or a
            window with ``sdpa`` (SDPA has none).
    """
    kernel = args.kernel
    for attr, flag in _FA3_ONLY:
        if getattr(args, attr, None) not in (None, False, [], 0) or \
                (attr == "explain" and args.explain is not None):
            raise UsageError(f"{flag}: FA3 only; not with --kernel {kernel}")
    if args.softcap and kernel != "fa4":
        raise UsageError(f"--softcap: not modelled for --kernel {kernel} (FA2's recorded builds "
                         "have no softcap)")
    if work.fmt == "e4m3":
        raise UsageError(f"--dtype e4m3: --kernel {kernel} takes bf16 or f16 (FP8 is FA3's on "
                         "Hopper)")
    if work.seqlens_k is not None and not is_varlen(work):
        raise UsageError("--input: seqlens_k without per-sequence rows runs with --kernel fa3 "
                         "only (FA2 takes it as packed sequences: simulator.fa2."
                         "flash_attn_varlen_func)")
    if args.workers > 1:
        raise UsageError(f"--workers: --kernel {kernel} runs in this process")
    if kernel == "sdpa" and tuple(args.window) != (-1, -1):
        raise UsageError("--window: scaled_dot_product_attention has no local window (is_causal "
                         "or none); use --kernel fa2")


def forward(kernel: str, work: Workload, args):
    """``(out [B, S, H, d], lse [B, H, S])`` of ``kernel`` on the workload. Sequences of their
    own lengths (the embedded sentences) run as one ``flash_attn_varlen_func`` launch with
    ``fa2`` and one SDPA call each with ``sdpa``; padding rows are 0 / -inf, as FA3's run
    writes them."""
    if kernel == "fa4":
        return _fa4(work, args)
    if is_varlen(work):
        return _sequences(kernel, work, args)
    q, k, v = work.q, work.k, work.v
    if kernel == "fa2":
        from .. import fa2

        out, lse, _ = fa2.flash_attn_func(q, k, v, softmax_scale=args.softmax_scale,
                                          causal=bool(args.causal), window_size=tuple(args.window),
                                          return_attn_probs=True, gpu=args.gpu)
        return out, lse
    from .. import sdpa

    t = lambda x: np.ascontiguousarray(np.swapaxes(x, 1, 2))  # noqa: E731
    out, lse = sdpa.flash_attention_forward(t(q), t(k), t(v), 0.0, bool(args.causal),
                                            args.softmax_scale, gpu=args.gpu)
    return t(out), lse


def _fa4(work: Workload, args):
    """FA4's forward: one ``flash_attn_func`` call, or one ``flash_attn_varlen_func`` launch
    for sequences of their own lengths."""
    from .. import fa4

    window = tuple(None if w < 0 else int(w) for w in args.window)
    kw = dict(softmax_scale=args.softmax_scale, causal=bool(args.causal), window_size=window,
              softcap=float(args.softcap or 0.0), return_lse=True, gpu=args.gpu)
    if not is_varlen(work):
        return fa4.flash_attn_func(work.q, work.k, work.v, **kw)
    rows, keys = varlen_lengths(work)
    b, s, h, _ = work.q.shape
    q = np.concatenate([work.q[i, : rows[i]] for i in range(b)])
    k = np.concatenate([work.k[i, : keys[i]] for i in range(b)])
    v = np.concatenate([work.v[i, : keys[i]] for i in range(b)])
    cq = np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(keys)]).astype(np.int32)
    o, l_ = fa4.flash_attn_varlen_func(q, k, v, cq, ck, **kw)
    out = np.zeros(work.q.shape[:3] + (work.v.shape[-1],), work.q.dtype)
    lse = np.full((b, h, s), -np.inf, np.float32)
    for i in range(b):
        out[i, : rows[i]] = o[cq[i]:cq[i + 1]]
        lse[i, :, : rows[i]] = l_[:, cq[i]:cq[i + 1]]
    return out, lse


def _sequences(kernel: str, work: Workload, args):
    from .. import fa2, sdpa

    rows, keys = varlen_lengths(work)
    b, s, h, d = work.q.shape
    out = np.zeros(work.q.shape[:3] + (work.v.shape[-1],), work.q.dtype)
    lse = np.full((b, h, s), -np.inf, np.float32)
    if kernel == "fa2":
        q = np.concatenate([work.q[i, : rows[i]] for i in range(b)])
        k = np.concatenate([work.k[i, : keys[i]] for i in range(b)])
        v = np.concatenate([work.v[i, : keys[i]] for i in range(b)])
        cq = np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)
        ck = np.concatenate([[0], np.cumsum(keys)]).astype(np.int32)
        o, l_, _ = fa2.flash_attn_varlen_func(q, k, v, cq, ck, int(rows.max()), int(keys.max()),
                                              softmax_scale=args.softmax_scale,
                                              causal=bool(args.causal),
                                              window_size=tuple(args.window),
                                              return_attn_probs=True, gpu=args.gpu)
        for i in range(b):
            out[i, : rows[i]] = o[cq[i]:cq[i + 1]]
            lse[i, :, : rows[i]] = l_[:, cq[i]:cq[i + 1]]
        return out, lse
    t = lambda x: np.ascontiguousarray(np.swapaxes(x, 1, 2))  # noqa: E731
    for i in range(b):
        o, l_ = sdpa.flash_attention_forward(t(work.q[i:i + 1, : rows[i]]),
                                             t(work.k[i:i + 1, : keys[i]]),
                                             t(work.v[i:i + 1, : keys[i]]), 0.0,
                                             bool(args.causal), args.softmax_scale, gpu=args.gpu)
        out[i, : rows[i]], lse[i, :, : rows[i]] = t(o)[0], l_[0]
    return out, lse


def _fa4_launch_text(work: Workload, args) -> str:
    from ..fa4.host import fa4_dispatch, resolve_window
    from ..gpus import get_gpu

    d, dv = work.q.shape[-1], work.v.shape[-1]
    causal, local, _ = resolve_window(bool(args.causal), tuple(args.window))
    disp = fa4_dispatch(d, dv, causal, local)
    many = (f"\n          {len(varlen_lengths(work)[0])} sequences: one flash_attn_varlen_func "
            "launch (no split-KV on Hopper)" if is_varlen(work) else "")
    return (f"kernel    {KERNELS['fa4']}\n"
            f"launch    tile_hdim {disp.kernel_head_dim}, tile_m x tile_n {disp.kblock_m} x "
            f"{disp.kblock_n}, IntraWGOverlap, {'RescaleOBeforeGemm, ' if disp.rescale_o_before_gemm else ''}"
            f"MmaPV {'from registers' if disp.mma_pv_is_rs else 'from shared memory'}, "
            f"{'causal' if causal else 'local' if local else 'no mask'}, {get_gpu(args.gpu).name}{many}")


def launch_text(kernel: str, work: Workload, args) -> str:
    """The kernel's launch for the input: FA2's kernel head dim, tile, split-KV count (from the
    SM count); FA4's tile and schedule flags."""
    from ..fa2 import plan_forward
    from ..gpus import get_gpu

    if kernel == "fa4":
        return _fa4_launch_text(work, args)

    b, sq, h, d = work.q.shape
    sk, hk = work.k.shape[1], work.k.shape[2]
    gpu = get_gpu(args.gpu)
    how = ""
    if is_varlen(work):
        rows, keys = varlen_lengths(work)
        b, sq, sk = 1, int(rows.max()), int(keys.max())
        how = (f"\n          {len(rows)} sequences: one flash_attn_varlen_func launch (no split-KV)"
               if kernel == "fa2" else
               f"\n          {len(rows)} sequences: one SDPA call each (batch 1: the split-KV "
               "count is each call's own)")
    launch = plan_forward(b, sq, sk, h, hk, d, causal=bool(args.causal),
                          window=tuple(args.window), gpu=gpu)
    m, n, warps = launch.tile
    ctas = b * launch.heads * -(-launch.seqlen_q // 64)
    splits = (f"split-KV {launch.num_splits} (num_splits_heuristic: {ctas} CTAs on 2 x "
              f"{gpu.sm_count} SMs)" if launch.num_splits > 1 else "no split-KV")
    return (f"kernel    {KERNELS[kernel]}\n"
            f"launch    kHeadDim {launch.kernel_head_dim}, kBlockM x kBlockN {m} x {n}, {warps} "
            f"warps (mma.sync m16n8k16), {splits}, window {launch.window}, {gpu.name}{how}")


def versus_fa3(out, lse, work: Workload, kwargs: dict, fmt: str, kernel: str = "fa2") -> str:
    """Where ``out`` / ``lse`` part from FA3's bits on the same input (FA3's own launch for
    it, as ``run`` without ``--kernel``)."""
    from .emulation import emulate

    fa3_out, fa3_lse, _ = emulate(work, kwargs, [])
    a, b = out.view(np.uint16), np.asarray(fa3_out).view(np.uint16)
    o_diff = a != b
    d32 = lse.astype(np.float32).view(np.uint32) != np.asarray(fa3_lse, np.float32).view(np.uint32)
    x, y = out.astype(np.float64), np.asarray(fa3_out).astype(np.float64)
    row_max = np.abs(y).max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(o_diff, np.abs(x - y) / np.where(row_max > 0, row_max, 1.0), 0.0)
    worst = float(np.nanmax(rel)) if rel.size else 0.0
    return (f"vs FA3    O: {int(o_diff.sum()):,} of {o_diff.size:,} {fmt} values differ (at most "
            f"{100 * worst:.3g}% of the row max apart); LSE: {int(d32.sum()):,} of {d32.size:,} "
            "rows differ. What parts them: " + (
                "docs/fa4.md (tiles, the quad sum's order, the LSE's form, no .ftz)"
                if kernel == "fa4" else "docs/fa2.md (the exp2 argument's form, the "
                "reciprocal, tiles and split-KV, the LSE's log)"))


def run(args, work: Workload, kwargs: dict, out_path: Path) -> int:
    """The job through ``args.kernel``: emulate, measure against float64, compare with FA3,
    print, write ``out_path`` (``simulator.run.load_result`` reads it). Returns the exit code."""
    from .emulation import reference_result
    from .metrics import measure, measure_varlen
    from .results import save_result

    check_args(args, work)
    t0 = time.perf_counter()
    try:
        out, lse = forward(args.kernel, work, args)
    except ValueError as exc:
        raise UsageError(f"{work.label}: {exc}") from None
    t1 = time.perf_counter()
    ref_out, ref_lse = reference_result(work, kwargs, args.causal)
    if is_varlen(work):
        m = measure_varlen(out, lse, ref_out, ref_lse, work.fmt, varlen_lengths(work)[0])
    else:
        m = measure(out, lse, ref_out, ref_lse, work.fmt)
    lines = [f"input     {work.source}", launch_text(args.kernel, work, args)]
    def num(x, f):
        return "n/a" if x is None else format(x, f)

    rel = m.get("out_max_row_rel")
    lines.append(f"error     O vs float64: max |error| {num(None if rel is None else 100 * rel, '.3f')}% "
                 f"of the row max |ref|, relative Frobenius {num(m.get('out_rel_frobenius'), '.3g')}; "
                 f"{work.fmt} ulps: mean {num(m.get('out_mean_ulp'), '.3f')}, 99th percentile "
                 f"{num(m.get('out_p99_ulp'), '.3g')}")
    lines.append(f"          LSE: max |error| {num(m.get('lse_max_abs'), '.3g')}; emulated in "
                 f"{t1 - t0:.2f} s")
    lines.append(versus_fa3(out, lse, work, kwargs, work.fmt, args.kernel))
    scale = args.softmax_scale if args.softmax_scale is not None else 1 / math.sqrt(work.q.shape[-1])
    params = {"kernel": args.kernel, "source": work.source, "dtype": work.fmt,
              "heads": work.heads, "causal": bool(args.causal), "window": list(args.window),
              "softmax_scale": float(scale), "gpu": args.gpu, "metrics": m,
              "provenance": work.provenance}
    save_result(out_path, out, lse, ref_out, ref_lse, None, params)
    print("\n".join(lines))
    print(f"wrote     {out_path}: out, lse, ref_out, ref_lse, params")
    return 0
