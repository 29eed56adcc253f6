"""FlashAttention-2's forward kernels (``flash_fwd_kernel.h``) at the kernel level, for a call
already decided by the host (:mod:`simulator.fa2`): the unsplit kernel, or the split-KV kernel
whose partials the host merges (:func:`simulator.fa2.combine.combine_partials`), through the
shared scheduler with FA2's mainloop (:mod:`.mainloop_fwd_fa2`)."""

from __future__ import annotations

import numpy as np

from ..gpus import DEFAULT_GPU
from ..numerics.philox import dropout_keep
from . import chunks, scheduler
from .config import ForwardResult, make_config
from .mainloop_fwd_fa2 import PYTORCH, Fa2Build, Fa2Dropout, fa2_tile, mainloop, splitkv_tile


def forward_fa2(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), dropout_p=0.0,
                philox=None, num_splits: int = 1, build: Fa2Build = PYTORCH, gpu=DEFAULT_GPU,
                executor=None, memory_budget=None, progress=None) -> ForwardResult:
    """FlashAttention-2's forward kernel, emulated bit for bit: the unsplit kernel, or with
    ``num_splits > 1`` the split-KV kernel (its partials, for the combine kernel).

    Args:
        q: [batch, seqlen_q, heads, head_dim]; k, v: [batch, seqlen_k, heads_kv, head_dim];
            all ml_dtypes.bfloat16 or all numpy.float16; head_dim a multiple of 8 up to 256;
            heads_kv divides heads.
        softmax_scale: default ``head_dim ** -0.5``; causal, window: the kernel's flags after
            ``mha_fwd``'s normalisation (:func:`simulator.fa2.plan_forward`).
        dropout_p: the probability of dropping (0: no dropout); it picks the tile too.
        philox: ``(seed, offset)``, the launch's Philox state (required with dropout): the mask
            is :func:`simulator.numerics.philox.dropout_keep` of it.
        num_splits: the host's split-KV count (:func:`simulator.fa2.plan_forward`; 1 with
            dropout, which has no split-KV kernel).
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
            dtype other than bf16 / fp16; dropout without ``philox`` or with splits.
    Source: csrc/flash_attn/src/flash_fwd_kernel.h, softmax.h, dropout.h,
    flash_fwd_launch_template.h.
    """
    drop = _dropout(q, k, dropout_p, philox, num_splits)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray) or x.dtype.name not in ("bfloat16", "float16"):
            raise ValueError(f"{name}: expected a bfloat16 or float16 numpy array (FlashAttention-2 "
                             f"takes no other), got {getattr(x, 'dtype', type(x).__name__)}")
    executor = chunks.check_executor(executor)
    budget = chunks.check_budget(memory_budget)
    chunks.check_progress(progress)
    split = int(num_splits) > 1
    m, n, _ = splitkv_tile(q.shape[-1]) if split else fa2_tile(q.shape[-1], bool(causal),
                                                                 drop is not None)
    cfg = make_config(q, k, v, softmax_scale=softmax_scale, causal=causal, window=window,
                      kblock_m=m, kblock_n=n, schedule="plain", gpu=gpu, pack_gqa=False,
                      num_splits=int(num_splits) if split else None)
    out, lse = scheduler.launch(cfg, mainloop(build, drop), (q, k, v, None), None, None, None,
                                executor, budget, progress)
    return ForwardResult(out, lse, None)


def _dropout(q, k, dropout_p, philox, num_splits) -> Fa2Dropout | None:
    """The launch's :class:`Fa2Dropout` (None without dropout), its arguments checked."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or \
            not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p: expected a number in [0, 1), got {dropout_p!r}")
    if dropout_p == 0.0:
        return None
    if philox is None or len(philox) != 2:
        raise ValueError(f"philox: dropout needs the launch's (seed, offset), got {philox!r}")
    if int(num_splits) > 1:
        raise ValueError(f"num_splits: FlashAttention-2 has no split-KV kernel with dropout, "
                         f"got {num_splits}")
    seed, offset = (int(x) for x in philox)
    b, sq, h, _ = q.shape
    keep = dropout_keep(seed, offset, b, h, sq, k.shape[1], dropout_p)
    p_keep = np.float32(1.0) - np.float32(dropout_p)
    return Fa2Dropout(keep, np.float32(np.float32(1.0) / p_keep))
