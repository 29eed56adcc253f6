"""The FlashAttention-3 backward on the GPU: ``kernels/fa3_backward.cu`` launched through CuPy.

This is the device twin of :func:`simulator.flash.backward.backward`: the arguments are checked
and resolved by the emulator's own :func:`simulator.flash.backward.make_backward_config` (FA3's
tiles, window, constants), and the kernels execute the emulator's operation sequence
(docs/backward.md; the twin's layout: docs/backward_twin.md), so the outputs can be compared
bit for bit. The dQ reduce-adds arrive in FA3's deterministic order
(:func:`simulator.flash.backward.dq_order`): the mainloop is launched once per n_block, in that
order. One NVRTC module per input dtype is cached; CuPy is imported on first use only.
"""

from __future__ import annotations

import numpy as np

from ..flash.backward import BackwardResult, make_backward_config
from ..flash.backward_trace import make_tracer
from ..flash.block_info import m_block_range
from ..gpus import DEFAULT_GPU
from . import runtime

KERNEL = "fa3_backward.cu"
DTYPE_CODE = {"bf16": 0, "f16": 1}
MAX_SMEM_BYTES = 227 * 1024  # opt-in dynamic shared memory per block on sm_90
_INT32_MAX = 2**31 - 1
_POISON_F32 = 0x7FBADBAD  # a NaN no arithmetic produces: unwritten float32 outputs show it


def kernel_options(fmt: str) -> tuple[str, ...]:
    """NVRTC options of the module for input format ``fmt`` ("bf16" or "f16"):
    :data:`simulator.device.runtime.DEFAULT_OPTIONS` plus ``-DBW_DTYPE``."""
    return tuple(runtime.DEFAULT_OPTIONS) + (f"-DBW_DTYPE={DTYPE_CODE[fmt]}",)


def smem_bytes(kblock_m: int, kblock_n: int, kernel_head_dim: int) -> int:
    """Dynamic shared memory of the mainloop: Q, dO, K, V tiles and P, dS (2 bytes each)."""
    return 2 * (2 * (kblock_m + kblock_n) * kernel_head_dim + 2 * kblock_m * kblock_n)


def _padded(x: np.ndarray, kd: int) -> np.ndarray:
    """[B, S, H, d] 16-bit values as uint16 bits with zero columns up to ``kd``."""
    out = np.zeros(x.shape[:-1] + (kd,), np.uint16)
    out[..., : x.shape[-1]] = np.ascontiguousarray(x).view(np.uint16)
    return out


def backward(dout, q, k, v, out, lse, *, softmax_scale=None, causal=False, window=(-1, -1),
             softcap=0.0, deterministic=False, max_seqlen_q=None, max_seqlen_k=None,
             gpu=DEFAULT_GPU, trace=None) -> BackwardResult:
    """FlashAttention-3's backward on the GPU, the device twin of
    :func:`simulator.flash.backward.backward` (same arguments, same checks).

    Args:
        dout, q, out: [batch, seqlen_q, heads, head_dim]; k, v: [batch, seqlen_k, heads_kv,
            head_dim]; all ml_dtypes.bfloat16 or all numpy.float16 (zero-padded to FA3's kernel
            head dim, as the emulator does).
        lse: the forward's softmax_lse, float32 [batch, heads, seqlen_q].
        softmax_scale, causal, window, softcap, max_seqlen_q, max_seqlen_k: as the emulator's.
        deterministic: accepted and checked as the emulator does; the twin always adds dQ in
            FA3's deterministic order.
        gpu: the GPU record the arguments are checked against, as the emulator's ``gpu=`` (the
            kernel runs on the GPU present; the emulator's ``mufu="ideal"`` has no twin).
        trace: None or ``(batch, head, n_block)``: that CTA's steps, as the emulator's
            ``trace=`` records them (:class:`simulator.flash.backward_trace.CtaTrace`; the
            kernel's trace hooks, docs/backward_twin.md).
    Returns:
        :class:`simulator.flash.backward.BackwardResult` with dq, dk, dv (input dtype),
        dpsum and lse_log2 (float32 [batch, heads, m_blocks * kBlockM]), the tiles, and with
        ``trace`` a dict of float32 arrays (the emulator's names and shapes).
    Raises:
        ValueError: invalid arguments (the emulator's messages, ``trace`` included), or sizes
            past the kernel's 32-bit indexing.
        DeviceUnavailable: no CuPy or no CUDA GPU.
    """
    cfg = make_backward_config(dout, q, k, v, out, lse, softmax_scale=softmax_scale,
                               causal=causal, window=window, softcap=softcap,
                               deterministic=deterministic, max_seqlen_q=max_seqlen_q,
                               max_seqlen_k=max_seqlen_k, gpu=gpu)
    tracer = make_tracer(cfg, trace)  # validates trace as the emulator does
    kd, M, N = cfg.tiles.kernel_head_dim, cfg.tiles.kblock_m, cfg.tiles.kblock_n
    rows, keys = cfg.m_blocks * M, cfg.n_blocks * N
    big = max(cfg.batch * cfg.heads * max(rows, keys) * kd, q.size, k.size)
    if big > _INT32_MAX // 2:
        raise ValueError(f"q, k: too large for the kernel's 32-bit indexing ({q.shape}, {k.shape})")
    cupy = runtime.require_gpu()
    mod = runtime.load_module(KERNEL, kernel_options(cfg.fmt))
    b, h, hk = cfg.batch, cfg.heads, cfg.heads_kv
    gq, gk, gv, gdo, go = (cupy.asarray(_padded(x, kd)) for x in (q, k, v, dout, out))
    dlse = cupy.asarray(np.ascontiguousarray(lse, np.float32))
    dpsum = cupy.full((b, h, rows), _POISON_F32, cupy.uint32).view(cupy.float32)
    lse_log2 = cupy.full((b, h, rows), _POISON_F32, cupy.uint32).view(cupy.float32)
    total_rows = b * h * rows
    lanes = (128 if kd % 128 == 0 else (64 if kd % 64 == 0 else 32)) // 8
    blocks = -(-total_rows * lanes // 128)
    mod.get_function("bwd_preprocess")(
        (blocks,), (128,), (go, gdo, dlse, dpsum, lse_log2, np.int32(b), np.int32(cfg.seqlen_q),
                            np.int32(h), np.int32(kd), np.int32(rows)))
    dq_accum = cupy.zeros((b, h, rows, kd), cupy.float32)
    dk_acc = cupy.zeros((b, h, keys, kd), cupy.float32)
    dv_acc = cupy.zeros((b, h, keys, kd), cupy.float32)
    fn = mod.get_function("bwd_mainloop")
    smem = smem_bytes(M, N, kd)
    if smem > MAX_SMEM_BYTES:
        raise ValueError(f"q: kernel head dim {kd} with {cfg.tiles.describe()} needs {smem} bytes "
                         f"of shared memory, more than {MAX_SMEM_BYTES}")
    runtime.allow_dynamic_smem(cupy, fn, smem)
    consts = tuple(runtime.f32_bits(x) for x in (cfg.scale_log2, cfg.softcap_val, cfg.softmax_scale))
    trace_args, trace_buf, m_lo, steps = _trace_buffer(cupy, cfg, tracer)
    order = range(cfg.n_blocks - 1, -1, -1) if cfg.causal else range(cfg.n_blocks)  # dq_order
    for n in order:
        fn((b * h,), (128,),
           (gq, gk, gv, gdo, dpsum, lse_log2, dq_accum, dk_acc, dv_acc,
            *(np.int32(x) for x in (cfg.seqlen_q, cfg.seqlen_k, h, hk, kd, M, N, cfg.m_blocks,
                                    cfg.n_blocks, n, cfg.causal, cfg.local,
                                    *cfg.kernel_window, *cfg.window, cfg.softcap_val > 0)),
            *consts, *trace_args), shared_mem=smem)
    dq = cupy.full((b, cfg.seqlen_q, h, kd), 0xFFFF, cupy.uint16)
    mod.get_function("bwd_postprocess_dq")(
        (min(4096, -(-dq.size // 128)),), (128,),
        (dq_accum, dq, np.int32(b), np.int32(cfg.seqlen_q), np.int32(h), np.int32(kd),
         np.int32(rows), consts[2]))
    grads = [dq]
    for acc in (dk_acc, dv_acc):
        g = cupy.full((b, cfg.seqlen_k, hk, kd), 0xFFFF, cupy.uint16)
        mod.get_function("bwd_postprocess_kv")(
            (min(4096, -(-g.size // 128)),), (128,),
            (acc, g, np.int32(b), np.int32(cfg.seqlen_k), np.int32(h), np.int32(hk),
             np.int32(kd), np.int32(keys)))
        grads.append(g)
    cupy.cuda.get_current_stream().synchronize()
    dtype = q.dtype
    dq, dk, dv = (np.ascontiguousarray(x.get()[..., : cfg.head_dim]).view(dtype) for x in grads)
    traced = None if tracer is None else _trace_arrays(cfg, trace_buf.get(), m_lo, steps)
    return BackwardResult(dq, dk, dv, dpsum.get(), lse_log2.get(), cfg.tiles, trace=traced)


_STEP_ARRAYS = ("s", "dp", "dtanh", "scores", "p", "ds")


def _trace_buffer(cupy, cfg, tracer):
    """(the mainloop's trace arguments, the poisoned float32 buffer or None, the traced CTA's
    first m_block, its m_block count)."""
    if tracer is None:  # a one-value buffer no CTA writes (trace_bh -1 matches none)
        return (cupy.zeros(1, cupy.float32), *(np.int32(x) for x in (-1, -1, 0, 0))), None, 0, 0
    b, h, n = tracer.where
    m_min, m_max = (int(x[0]) for x in m_block_range(cfg, np.array([n])))
    steps = max(0, m_max - m_min)
    M, N, kd = cfg.tiles.kblock_m, cfg.tiles.kblock_n, cfg.tiles.kernel_head_dim
    size = steps * (6 * M * N + M * kd) + 2 * N * kd
    buf = cupy.full(size, _POISON_F32, cupy.uint32).view(cupy.float32)
    args = (buf, *(np.int32(x) for x in (b * cfg.heads + h, n, m_min, steps)))
    return args, buf, m_min, steps


def _trace_arrays(cfg, buf: np.ndarray, m_min: int, steps: int) -> dict:
    """The trace buffer as the emulator's ``CtaTrace.arrays()``: per step [M, N] arrays (dtanh
    only with softcap) and the [M, kd] dQ partial, then dk_accum / dv_accum and m_blocks."""
    M, N, kd = cfg.tiles.kblock_m, cfg.tiles.kblock_n, cfg.tiles.kernel_head_dim
    per = buf[: steps * (6 * M * N + M * kd)].reshape(steps, 6 * M * N + M * kd)
    out = {name: per[:, i * M * N:(i + 1) * M * N].reshape(steps, M, N)
           for i, name in enumerate(_STEP_ARRAYS)}
    if not cfg.softcap_val > 0:
        del out["dtanh"]
    out["dq_partial"] = per[:, 6 * M * N:].reshape(steps, M, kd)
    fin = buf[steps * (6 * M * N + M * kd):].reshape(2, N, kd)
    return {**{k: np.ascontiguousarray(v) for k, v in out.items()}, "dk_accum": fin[0].copy(),
            "dv_accum": fin[1].copy(), "m_blocks": np.arange(m_min, m_min + steps, dtype=np.int64)}
