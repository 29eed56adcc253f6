"""FlashAttention-4's sm90 backward rules (``flash_attn/cute/flash_bwd_sm90.py``,
``flash_bwd_preprocess.py``, ``flash_bwd_postprocess.py`` and ``interface.py``'s
``_flash_attn_bwd``, flash-attn-4 4.0.0b36) where they differ from FA3's; the launch is FA3's
sm90 backward (:func:`simulator.flash.backward` with ``family="fa4"``), whose P, dP, dS and
GEMM order FA4's port keeps.

* tiles (``_tile_size_bwd_sm90``): head dim 64 128 x 128, 96 64 x 128, 128 64 x 128 (causal or
  local) else 80 x 128, 192 64 x 96, 256 64 x 48; a deterministic kernel at every head dim;
* preprocess: ``dPsum`` per thread over its 8-value chunks element by element, each element's
  chunks in order (the reduce's ``reduction_profile=(0, None, 1)``), starting from 0, without
  ``.ftz``; FFMA in the SASS of head dims 64, 128, 192, 256, FMUL then FADD at 96; the row's
  threads combine at offsets 1, 2, 4, ... (FA3: half the group first). ``LSE_log2 = LSE *
  log2(e)`` (``mul.f32``), 0 for a -inf LSE;
* softcap: the forward's score_mod recomputed (``mul``, ``div.rn``, ``tanh.approx``, ``mul``),
  P from ``log2 e``, and dS times ``1 - t * t`` of the same ``t`` (one FFMA);
* scale: ``scale_log2 = fmul(float32(scale), float32(log2 e))`` as the forward's; dK times
  softmax_scale per CTA without GQA, after the sum of the query heads with GQA (the
  postprocess, ``mul.f32`` then the conversion); dQ ``dQaccum * scale`` (``mul.f32``).

The recorded head dims are 64, 96, 128, 192 and 256: others (whose padded width and SASS
were not read) are refused by the API.
"""

from __future__ import annotations

import numpy as np

from ..numerics import fadd, ffma, fmul, fsub
from ..numerics.mufu import ex2

LOG2E_F32 = np.float32(1.4426950408889634)
#: the head dims whose backward kernels were compiled and read, and recorded on the device
HEAD_DIMS = (64, 96, 128, 192, 256)
#: head dims whose preprocess SASS multiplies and adds apart (FMUL, FADD) instead of FFMA
_UNFUSED_DPSUM = (96,)


def bwd_tiles(head_dim: int, causal: bool, local: bool) -> tuple[int, int, int]:
    """``(padded head dim, kBlockM, kBlockN)`` of ``_tile_size_bwd_sm90`` for a head dim of
    :data:`HEAD_DIMS` (the padding: a multiple of 64 with dKV_swapAB, at 192 and 256, else of
    32, ``hdim_multiple_of`` in ``_flash_attn_bwd``)."""
    if head_dim <= 64:
        return 64, 128, 128
    if head_dim <= 96:
        return 96, 64, 128
    if head_dim <= 128:
        return 128, 64 if causal or local else 80, 128
    if head_dim <= 192:
        return 192, 64, 96
    return 256, 64, 48


def launch(head_dim: int, flags: tuple[bool, bool], softcap: float, consts: dict):
    """``(bwd_tiles(...), consts)`` for a backward call: the tiles for the kernel's (causal,
    local) ``flags`` and the host constants with FA4's float32 ``scale_log2``; with softcap
    (a score_mod: ``softcap * tanh(s * scale / softcap)``) ``scale_log2 = float32(log2 e)``
    and ``softcap_val`` the float32 softcap itself.

    Raises:
        ValueError: a head dim outside :data:`HEAD_DIMS`.
    """
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"q: FA4's backward is emulated at head dims {HEAD_DIMS}, got "
                         f"head_dim {head_dim}")
    if softcap:
        return bwd_tiles(head_dim, *flags), dict(consts, scale_log2=LOG2E_F32,
                                                 softcap_val=np.float32(softcap))
    return (bwd_tiles(head_dim, *flags),
            dict(consts, scale_log2=fmul(consts["softmax_scale"], LOG2E_F32)))


def preprocess_dpsum(out: np.ndarray, dout: np.ndarray, padded_hdim: int) -> np.ndarray:
    """``dPsum = rowsum(O * dO)`` as FA4's preprocess sums it (module docstring).

    Args:
        out, dout: [..., head_dim] bf16 / fp16; padded_hdim: :func:`bwd_tiles`' first value.
    Returns:
        float32 [...].
    """
    d = out.shape[-1]
    o = np.zeros(out.shape[:-1] + (padded_hdim,), np.float32)
    g = np.zeros_like(o)
    o[..., :d] = out.astype(np.float32)
    g[..., :d] = dout.astype(np.float32)
    width = 128 if padded_hdim % 128 == 0 else (64 if padded_hdim % 64 == 0 else 32)
    threads, chunks = width // 8, padded_hdim // width
    # [..., chunk, thread, 8] -> per thread [element, chunk]: each element's chunks in order
    o = np.swapaxes(np.moveaxis(o.reshape(o.shape[:-1] + (chunks, threads, 8)), -2, -3), -1, -2)
    g = np.swapaxes(np.moveaxis(g.reshape(g.shape[:-1] + (chunks, threads, 8)), -2, -3), -1, -2)
    o = o.reshape(o.shape[:-2] + (8 * chunks,))
    g = g.reshape(g.shape[:-2] + (8 * chunks,))
    acc = np.zeros(o.shape[:-1], np.float32)
    fused = padded_hdim not in _UNFUSED_DPSUM
    for i in range(8 * chunks):
        acc = ffma(o[..., i], g[..., i], acc) if fused else fadd(acc, fmul(o[..., i], g[..., i]))
    lane, offset = np.arange(threads), 1
    while offset < threads:
        acc = fadd(acc[..., lane ^ offset], acc)
        offset *= 2
    return acc[..., 0]


def preprocess_lse_log2(lse: np.ndarray) -> np.ndarray:
    """``LSE * log2(e)`` (``mul.f32``, no ``.ftz``); 0 where LSE is -inf."""
    scaled = fmul(lse.astype(np.float32), LOG2E_F32)
    return np.where(lse == -np.inf, np.float32(0), scaled).astype(np.float32)


def dsink(dpsum, lse, sink, threads: int, mufu: str) -> np.ndarray:
    """The learnable sinks' gradient as FA4's dQ postprocess reduces it (``reduce_sink`` in
    ``flash_bwd_postprocess.py``; one CTA per query head): ``dsink[h] = -sum over rows of
    p * dPsum`` with ``p = ex2((sink[h] - lse) * log2 e)`` (``sub``, ``mul``, MUFU.EX2; 1 where
    the LSE is -inf). Thread ``t`` of ``threads`` takes rows ``t, t + threads, ...`` of each
    batch entry in turn, accumulating ``fma(-dPsum, p, acc)`` (the SASS) from 0; the CTA then
    sums its threads: a butterfly within each warp (offsets 1 to 16), the warps' sums in warp
    0's lanes, the same butterfly.

    Args:
        dpsum, lse: float32 lists of ``[heads, seqlen]`` arrays, one per batch entry (varlen:
            each sequence's rows), the preprocess's dPsum and the forward's natural-log LSE.
        sink: float32 ``[heads]`` logits. threads: the postprocess's (128 at head dim 96, else
            256). mufu: the MUFU model (a GPU key).
    Returns:
        float32 ``[heads]``.
    """
    sink = np.asarray(sink, np.float32)
    acc = np.zeros((len(sink), threads), np.float32)
    for d_b, l_b in zip(dpsum, lse, strict=True):
        rows = d_b.shape[-1]
        pad = -(-rows // threads) * threads
        d_p = np.zeros((len(sink), pad), np.float32)
        l_p = np.zeros((len(sink), pad), np.float32)
        d_p[:, :rows], l_p[:, :rows] = d_b, l_b
        for start in range(0, rows, threads):  # the threads' rows of this batch entry, in turn
            live = (start + np.arange(threads)) < rows
            d_t, l_t = d_p[:, start:start + threads], l_p[:, start:start + threads]
            with np.errstate(invalid="ignore"):
                p = ex2(fmul(fsub(sink[:, None], l_t), LOG2E_F32), model=mufu)
            p = np.where(l_t == -np.inf, np.float32(1), p)
            acc = np.where(live, ffma(-d_t, p, acc), acc)
    lane = np.arange(32)
    warps = acc.reshape(len(sink), threads // 32, 32)
    for offset in (1, 2, 4, 8, 16):
        warps = fadd(warps, warps[..., lane ^ offset])
    first = np.zeros((len(sink), 32), np.float32)
    first[:, : threads // 32] = warps[..., 0]
    for offset in (1, 2, 4, 8, 16):
        first = fadd(first, first[..., lane ^ offset])
    return first[:, 0]
