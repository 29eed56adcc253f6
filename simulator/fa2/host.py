"""``mha_fwd``'s decisions before FlashAttention-2's forward kernel runs (``flash_api.cpp``), for
one call on one GPU.

* ``seqlen_q == 1`` makes a causal call non-causal; causal sets the right window to 0; window
  sides at least ``seqlen_k`` become -1; then (``set_params_fprop``) a window with one side
  open (-1) and the other set gets ``seqlen_k`` on its open side, which masks keys when
  ``seqlen_q > seqlen_k`` (the window is aligned to the bottom right).
* A decode call with GQA (``seqlen_q == 1``, more query heads than key heads, no window or
  dropout) is run as ``ngroups`` query rows of each key head (``seqlenq_ngroups_swapped``): the
  same rows, another tiling and split count.
* ``head_size_rounded``: a multiple of 32 up to 128, of 64 above; the kernel's kHeadDim is
  the next of 32, 64, ..., 256, and its tile is :func:`simulator.flash.mainloop_fwd_fa2.fa2_tile`.
* Without dropout the split-KV count is :func:`num_splits_heuristic` of
  ``batch * heads * ceil(seqlen_q / 64)`` CTAs, twice the GPU's SM count and
  ``ceil(seqlen_k / block_n)`` key blocks (``block_n`` 256 up to head dim 64, 128 up to 128,
  else 64): ``set_params_splitkv``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..flash.mainloop_fwd_fa2 import fa2_tile, kernel_head_dim
from ..gpus import get_gpu

__all__ = ["Fa2Launch", "num_splits_heuristic", "plan_forward"]


@dataclass(frozen=True)
class Fa2Launch:
    """What ``mha_fwd`` launches for a call.

    Attributes:
        causal: the kernel's Is_causal after normalisation; window: (left, right).
        swapped: ``seqlenq_ngroups_swapped`` (rows = the query heads of a key head).
        seqlen_q, heads: the launch's (after the swap).
        kernel_head_dim: kHeadDim; tile: (kBlockM, kBlockN, warps) of the unsplit kernel.
        num_splits: the split-KV count (1: the unsplit kernel).
    """

    causal: bool
    window: tuple[int, int]
    swapped: bool
    seqlen_q: int
    heads: int
    kernel_head_dim: int
    tile: tuple[int, int, int]
    num_splits: int


def num_splits_heuristic(batch_nheads_mblocks: int, num_sms: int, num_n_blocks: int,
                         max_splits: int) -> int:
    """FA2's ``num_splits_heuristic`` (flash_api.cpp): 1 when the CTAs almost fill the SMs (in
    float32: ``>= 0.8f * num_SMs``), else the fewest eligible splits whose wave efficiency is at
    least 0.85 of the best (a split count is eligible when it changes the blocks per split).

    Args:
        batch_nheads_mblocks: CTAs of the unsplit launch; num_sms: what the host passes (twice
            the SM count); num_n_blocks: key blocks; max_splits: 128.
    """
    if np.float32(batch_nheads_mblocks) >= np.float32(0.8) * np.float32(num_sms):
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)

    def eligible(s: int) -> bool:
        return s == 1 or -(-num_n_blocks // s) != -(-num_n_blocks // (s - 1))

    eff = []
    for s in range(1, max_splits + 1):
        if not eligible(s):
            eff.append(np.float32(0))
            continue
        waves = np.float32(batch_nheads_mblocks * s) / np.float32(num_sms)
        eff.append(np.float32(waves / np.float32(math.ceil(waves))))
    best = max(eff, default=np.float32(0))
    for s in range(1, max_splits + 1):
        if eligible(s) and float(eff[s - 1]) >= 0.85 * float(best):
            return s
    return 1


def plan_forward(batch: int, seqlen_q: int, seqlen_k: int, heads: int, heads_kv: int,
                 head_dim: int, *, causal: bool, window=(-1, -1), dropout_p: float = 0.0,
                 gpu=None) -> Fa2Launch:
    """``mha_fwd``'s launch for a call (the module docstring's rules) on ``gpu``.

    Raises:
        ValueError: an unknown GPU (named ``gpu``).
    """
    record = get_gpu() if gpu is None else get_gpu(gpu)
    left, right = (int(window[0]), int(window[1]))
    if left >= seqlen_k:
        left = -1
    if right >= seqlen_k:
        right = -1
    if seqlen_q == 1:
        causal = False
    if causal:
        right = 0
    swapped = (seqlen_q == 1 and heads > heads_kv and left < 0 and right < 0
               and dropout_p == 0.0 and head_dim % 8 == 0)
    if swapped:
        seqlen_q, heads = heads // heads_kv, heads_kv
    if not causal:  # set_params_fprop: a one-sided window's open side becomes seqlen_k
        if left < 0 <= right:
            left = seqlen_k
        elif right < 0 <= left:
            right = seqlen_k
    hd = kernel_head_dim(head_dim)
    splits = 1
    if dropout_p == 0.0:
        block_n = 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64
        splits = num_splits_heuristic(batch * heads * -(-seqlen_q // 64), record.sm_count * 2,
                                      -(-seqlen_k // block_n), 128)
    return Fa2Launch(causal, (left, right), swapped, seqlen_q, heads, hd,
                     fa2_tile(head_dim, causal, dropout_p > 0), splits)
