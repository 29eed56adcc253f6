"""FlashAttention-4's host-side rules for its sm90 forward (``flash_attn/cute/interface.py``,
``_flash_attn_fwd`` with ``arch // 10 == 9``): the tile table, the kernel head dims, the
schedule flags, the float32 constants the kernel receives, PackGQA's default, and the launch
configuration they make for the shared sm90 mainloop (:mod:`simulator.flash.mainloop_fwd_sm90`
with ``family="fa4"``).

What FA4 does on sm90 and FA3 does not: tiles from ``_tile_size_fwd_sm90`` (benchmarked by FA4
on an H100, not hopper/tile_size.h's); the head dim rounded up to a multiple of 16 (not to
64 / 96 / 128 / 192 / 256); IntraWGOverlap always, with ``rescale_O_before_gemm`` when the
rounded V head dim is over 128; PackGQA whenever heads differ; no split-KV (``"SplitKV not
supported on SM 9.0"``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..flash.config import Config, make_config
from ..flash.constants import host_constants as fa3_host_constants
from ..flash.dispatch import Dispatch
from ..numerics import fmul

LOG2E_F32 = np.float32(math.log2(math.e))


def tile_size_fwd_sm90(head_dim: int, head_dim_v: int, causal: bool, local: bool
                       ) -> tuple[int, int, bool, bool]:
    """``_tile_size_fwd_sm90`` (flash_attn/cute/interface.py, no block sparsity): ``(tile_m,
    tile_n, mma_pv_is_rs, intra_wg_overlap)`` for the caller's head dims."""
    if head_dim <= 64:
        return 192, 128, True, True
    if head_dim <= 96:
        return 192, 128 if (causal or local) else 144, False, True
    if head_dim <= 128:
        return 128, 128, True, True
    if head_dim <= 192:
        return 128, 96 if local else (128 if head_dim_v <= 128 else 112), True, True
    return 128, 64 if local else 80, True, True


def tile_hdim(head_dim: int) -> int:
    """The kernel's head dim: ``ceil(head_dim / 16) * 16`` (flash_attn/cute/flash_fwd.py)."""
    return -(-head_dim // 16) * 16


def fa4_dispatch(head_dim: int, head_dim_v: int, causal: bool, local: bool) -> Dispatch:
    """FA4's choices for a call, with the rule behind each (:class:`Dispatch`)."""
    m, n, rs, overlap = tile_size_fwd_sm90(head_dim, head_dim_v, causal, local)
    kd, kdv = tile_hdim(head_dim), tile_hdim(head_dim_v)
    rescale = kdv > 128 and overlap
    reasons = (
        f"kernel head dims {kd}, {kdv}: head dims rounded up to 16 (flash_attn/cute/flash_fwd.py)",
        f"tile_m {m}, tile_n {n}, mma_pv_is_rs {rs}, intra_wg_overlap {overlap}: "
        f"_tile_size_fwd_sm90({head_dim}, {head_dim_v}, causal {causal}, local {local}) "
        "(flash_attn/cute/interface.py)",
        f"rescale_O_before_gemm {rescale}: tile_hdimv > 128 and intra_wg_overlap "
        "(flash_attn/cute/flash_fwd_sm90.py)")
    return Dispatch(head_dim, kd, bool(causal), m, n, rs, overlap, rescale, reasons, head_dim_v, kdv)


def host_constants(head_dim: int, softmax_scale: float | None, softcap: float) -> dict:
    """The float32 constants FA4's sm90 kernel receives. ``softmax_scale`` (default
    ``1 / sqrt(head_dim)``, a Python float) reaches the kernel's host code as a Float32, where
    ``utils.compute_softmax_scale_log2`` multiplies it by log2(e) in float32:
    ``scale_log2 = fmul(float32(scale), float32(log2 e))`` (the recorded calls at head dims 80,
    160 and 192 tell this apart from FA3's ``float32(float32(scale) * log2 e)`` and from one
    rounding of the float64 product). With softcap: ``scale_log2 = float32(log2 e)``, and
    ``softmax_scale`` and ``softcap32`` as float32 for the score_mod.

    Raises:
        ValueError: as :func:`simulator.flash.constants.host_constants` (its checks run first).
    """
    consts = dict(fa3_host_constants(head_dim, softmax_scale, softcap))
    scale = np.float32(1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale)
    consts["softmax_scale"] = scale
    consts["softcap32"] = np.float32(softcap)
    consts["scale_log2"] = LOG2E_F32 if softcap > 0 else fmul(scale, LOG2E_F32)
    return consts


def resolve_window(causal: bool, window) -> tuple[bool, bool, tuple[int, int]]:
    """``_resolve_causal_local_window`` (flash_attn/cute/interface.py): ``(causal, local,
    (left, right))`` with -1 for an open side. Two negative sides are no window; ``causal``
    closes the right side at 0; a window whose only closed side is right = 0 is causal; any
    other closed side makes the kernel local (FA4 keeps a window that covers every key local:
    its tile and masking steps are the local kernel's)."""
    left, right = (None if w is None or w < 0 else int(w) for w in window)
    if causal:
        right = 0
    if left is None and right is None:
        return False, False, (-1, -1)
    if left is None and right == 0:
        return True, False, (-1, 0)
    return False, True, (-1 if left is None else left, -1 if right is None else right)


def make_fa4_config(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
                    sink=None, pack_gqa=None, seqlens_k=None, gpu=None) -> Config:
    """The launch configuration of one FA4 sm90 forward call (arrays ``[batch, seqlen, heads,
    head_dim]``; ``window`` with -1 for an open side; ``sink`` float32 [heads] or None), for
    :func:`simulator.flash.scheduler.launch` with FA3's sm90 mainloop.

    Raises:
        ValueError: naming the argument, as :func:`simulator.flash.config.make_config`.
    """
    d, dv = q.shape[-1], v.shape[-1]
    heads, heads_kv = q.shape[2], k.shape[2]
    is_causal, is_local, win = resolve_window(causal, window)
    base = make_config(q, k, v, softmax_scale=softmax_scale, causal=is_causal, window=win,
                       softcap=softcap, seqlens_k=seqlens_k, gpu=gpu,
                       pack_gqa=heads != heads_kv if pack_gqa is None else pack_gqa)
    disp = fa4_dispatch(d, dv, is_causal, is_local)
    return dataclasses.replace(
        base, kernel_head_dim=disp.kernel_head_dim, kernel_head_dim_v=disp.kernel_head_dim_v,
        kblock_m=disp.kblock_m, kblock_n=disp.kblock_n, schedule="intra_wg_overlap",
        dispatch=disp, consts=host_constants(d, softmax_scale, softcap), family="fa4",
        sink=None if sink is None else np.asarray(sink, dtype=np.float32))
