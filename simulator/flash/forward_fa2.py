"""FlashAttention-2's forward kernels (``flash_fwd_kernel.h``) at the kernel level, for a call
already decided by the host (:mod:`simulator.fa2`): the unsplit kernel, or the split-KV kernel
whose partials the host merges (:func:`simulator.fa2.combine.combine_partials`), through the
shared scheduler with FA2's mainloop (:mod:`.mainloop_fwd_fa2`)."""

from __future__ import annotations

import numpy as np

from ..gpus import DEFAULT_GPU
from . import chunks, scheduler
from .config import ForwardResult, make_config
from .mainloop_fwd_fa2 import PYTORCH, Fa2Build, fa2_tile, mainloop, splitkv_tile


def forward_fa2(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), dropout=False,
                num_splits: int = 1, build: Fa2Build = PYTORCH, gpu=DEFAULT_GPU, executor=None,
                memory_budget=None, progress=None) -> ForwardResult:
    """FlashAttention-2's forward kernel, emulated bit for bit: the unsplit kernel, or with
    ``num_splits > 1`` the split-KV kernel (its partials, for the combine kernel).

    Args:
        q: [batch, seqlen_q, heads, head_dim]; k, v: [batch, seqlen_k, heads_kv, head_dim];
            all ml_dtypes.bfloat16 or all numpy.float16; head_dim a multiple of 8 up to 256;
            heads_kv divides heads.
        softmax_scale: default ``head_dim ** -0.5``; causal, window: the kernel's flags after
            ``mha_fwd``'s normalisation (:func:`simulator.fa2.plan_forward`).
        dropout: whether the launch has dropout (it picks the tile); the mask itself is not
            emulated, so True raises.
        num_splits: the host's split-KV count (:func:`simulator.fa2.plan_forward`).
        build: the build's arithmetic (:class:`.mainloop_fwd_fa2.Fa2Build`); gpu: the GPU
            (:mod:`simulator.gpus`); executor, memory_budget, progress: as
            :func:`simulator.flash.forward`.
    Returns:
        :class:`simulator.flash.ForwardResult`: out [batch, seqlen_q, heads, head_dim] in the
        input dtype, lse [batch, heads, seqlen_q] float32 (natural log; +inf for a row with no
        key); with splits out float32 [num_splits, batch, seqlen_q, heads, head_dim] (each
        split's O normalised by its own row sum) and lse [num_splits, batch, heads, seqlen_q]
        (-inf for a split that saw no key).
    Raises:
        ValueError: what :func:`simulator.flash.make_config` refuses, naming the argument; a
            dtype other than bf16 / fp16; dropout.
    Source: csrc/flash_attn/src/flash_fwd_kernel.h, softmax.h, flash_fwd_launch_template.h.
    """
    if dropout:
        raise ValueError("dropout: FlashAttention-2's dropout (Philox) is not emulated yet")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray) or x.dtype.name not in ("bfloat16", "float16"):
            raise ValueError(f"{name}: expected a bfloat16 or float16 numpy array (FlashAttention-2 "
                             f"takes no other), got {getattr(x, 'dtype', type(x).__name__)}")
    executor = chunks.check_executor(executor)
    budget = chunks.check_budget(memory_budget)
    chunks.check_progress(progress)
    split = int(num_splits) > 1
    m, n, _ = splitkv_tile(q.shape[-1]) if split else fa2_tile(q.shape[-1], bool(causal), dropout)
    cfg = make_config(q, k, v, softmax_scale=softmax_scale, causal=causal, window=window,
                      kblock_m=m, kblock_n=n, schedule="plain", gpu=gpu, pack_gqa=False,
                      num_splits=int(num_splits) if split else None)
    out, lse = scheduler.launch(cfg, mainloop(build), (q, k, v, None), None, None, None,
                                executor, budget, progress)
    return ForwardResult(out, lse, None)
