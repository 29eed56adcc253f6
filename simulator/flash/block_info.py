"""Which K/V blocks a forward CTA visits and which m_blocks a backward CTA visits: the block
ranges of both directions in one place (``hopper/block.h``: ``get_n_block_min_max``,
``get_m_block_min_max``, the masking-step bounds), with C's integer division where FA3 uses it.

A forward CTA owns one m_block (kBlockM query rows, or packed rows with PackGQA) and visits K/V
blocks from ``n_block_max - 1`` down to ``n_block_min``; a backward CTA owns one n_block and
visits m_blocks upward. The masks themselves (which (row, key) pairs count) are
:mod:`simulator.flash.masks`.
"""

from __future__ import annotations

import numpy as np

from .grid import ceil_div, trunc_div
from .masks import chunk_start, kernel_flags


def tile_rows(m_block: int, kblock_m: int, qhead_per_khead: int = 1) -> tuple[int, int]:
    """(m_idx_min, m_idx_max): the query positions a tile spans. With PackGQA
    (``qhead_per_khead`` > 1) a tile holds packed rows ``position * g + head_in_group``, so it
    spans positions ``m_block * kBlockM // g`` up to ``((m_block + 1) * kBlockM - 1) // g + 1``
    (hopper/block.h)."""
    g = qhead_per_khead
    return (m_block * kblock_m) // g, ((m_block + 1) * kblock_m - 1) // g + 1



def masking_steps(m_block: int, seqlen_q: int, seqlen_k: int, seqlen_k_max: int, kblock_m: int,
                  kblock_n: int, window: tuple[int, int], n_range: tuple[int, int],
                  qhead_per_khead: int = 1, chunk: int = 0) -> tuple[bool, ...]:
    """Which visited blocks (from n_block_max - 1 down to n_block_min) run with masking, and so
    with ``Check_inf`` (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp, hopper/block.h).

    The first block always masks (seqlen_k and causal / local). Causal or local: the following
    blocks down to ``get_n_block_min_causal_local_mask`` too; then the unmasked blocks
    (``Check_inf`` false); local: the blocks below ``get_n_block_min_before_local_mask`` mask
    again. For local attention FA3 replaces an unbounded side by ``seqlen_k_max - 1`` (left) or
    ``seqlen_q - 1`` (right) before these bounds. ``chunk`` (attention_chunk) > 0 caps the
    causal / local mask's right end at the row's chunk end and raises the local mask's left end
    to its chunk start (``get_n_block_min_causal_local_mask``,
    ``get_n_block_min_before_local_mask``).

    Returns:
        one bool per visited block, in visiting order.
    """
    n_min, n_max = n_range
    causal, local = kernel_flags(window)
    left, right = window
    if local:
        left = seqlen_k_max - 1 if left < 0 else left
        right = seqlen_q - 1 if right < 0 else right
    offset = seqlen_k - seqlen_q
    lo, hi = tile_rows(m_block, kblock_m, qhead_per_khead)
    mask_min = n_max  # no causal / local masking loop
    if causal or local:
        right_end = lo + offset + (right if local else 0)
        if local and chunk > 0:
            right_end = min(right_end, chunk_start(lo + offset - 1, chunk) + chunk)
        mask_min = max(n_min, right_end // kblock_n)
    before_local = n_min
    if local:
        left_end = hi + offset - left
        if chunk > 0:
            left_end = max(left_end, chunk_start(hi + offset, chunk))
        before_local = max(n_min, -(-left_end // kblock_n))
    return tuple(step == 0 or n >= mask_min or n < before_local
                 for step, n in enumerate(range(n_max - 1, n_min - 1, -1)))



def block_range(m_block: int, seqlen_q: int, seqlen_k: int, kblock_m: int, kblock_n: int,
                window: tuple[int, int], qhead_per_khead: int = 1, chunk: int = 0) -> tuple[int, int]:
    """``(n_block_min, n_block_max)`` of a CTA; blocks are visited from max - 1 down to min.
    ``qhead_per_khead`` > 1: a PackGQA tile (:func:`tile_rows`). ``chunk`` > 0: the range also
    ends at the last row's chunk end and starts at the first row's chunk start
    (``get_n_block_min_max``, hopper/block.h)."""
    left, right = window
    offset = seqlen_k - seqlen_q
    lo, hi_row = tile_rows(m_block, kblock_m, qhead_per_khead)
    hi = seqlen_k
    if right >= 0:
        hi = min(seqlen_k, hi_row + offset + right)
        if chunk > 0:
            hi = min(hi, chunk_start(hi_row + offset - 1, chunk) + chunk)
    n_max = max(0, -(-hi // kblock_n))
    n_min = 0
    if left >= 0:
        low = lo + offset - left
        if chunk > 0:
            low = max(low, chunk_start(lo + offset, chunk))
        n_min = max(0, low // kblock_n)
    return n_min, n_max



def m_block_range(cfg, n_block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(m_block_min, m_block_max)`` of n_block CTAs (``get_m_block_min_max`` in
    ``hopper/block.h``, with C's truncating division)."""
    m, n = cfg.tiles.kblock_m, cfg.tiles.kblock_n
    wl, wr = cfg.kernel_window
    sq, sk = cfg.seqlen_q, cfg.seqlen_k
    m_max = np.full(n_block.shape, -(-sq // m), dtype=np.int64)
    if cfg.local:
        m_max = np.minimum(m_max, ceil_div((n_block + 1) * n + sq - sk + wl, m))
    m_min = np.zeros_like(m_max)
    if cfg.causal or cfg.local:
        right = 0 if cfg.causal else wr
        m_min = np.maximum(0, trunc_div(n_block * n + sq - sk - right, m))
    return m_min, m_max
