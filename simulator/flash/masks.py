"""Which keys a query row may see, and which K/V blocks a CTA visits (docs/forward.md).

Bottom-right alignment: with ``offset = seqlen_k - seqlen_q``, query row ``i`` may attend key
``j`` iff ``j < seqlen_k`` and ``i + offset - wl <= j <= i + offset + wr`` for the window
``(wl, wr)``, where -1 means unbounded and ``causal`` is ``(-1, 0)``. With FA3's
``attention_chunk`` ``C`` > 0 the keys are also cut into chunks of ``C``: row ``i`` sees only
the chunk holding key ``i + offset`` (hopper/mask.h, hopper/block.h).
"""

from __future__ import annotations

import numpy as np


def normalize_window(causal: bool, window) -> tuple[int, int]:
    """Validate ``window=(left, right)`` (-1 = unbounded) and fold ``causal`` into it: as
    ``mha_fwd`` (hopper/flash_api.cpp: ``if (is_causal) { window_size_right = 0; }``), causal
    sets the right window to 0 whatever was given.

    Raises:
        ValueError: a window that is not two ints in -1 .. 2^63 - 1 (mha_fwd's int64_t; sides
            wider than the sequence become -1 before they reach the kernel's ints).
    """
    try:
        ok = len(window) == 2 and all(isinstance(w, (int, np.integer)) and not isinstance(w, bool)
                                      for w in window)
        left, right = (int(w) for w in window)
        ok = ok and -1 <= left < 2**63 and -1 <= right < 2**63
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"window: expected (left, right) ints in -1 .. 2**63 - 1 (-1 = unbounded), "
                         f"got {window!r}")
    if causal:
        right = 0
    return left, right


def fa3_window(window: tuple[int, int], seqlen_q: int, seqlen_k: int) -> tuple[int, int]:
    """FA3's window normalisation (``mha_fwd``): a left side of at least ``seqlen_k - 1`` or a
    right side of at least ``seqlen_q - 1`` excludes nothing and becomes -1 (unbounded).
    Applied before the causal / local decision, so it decides which kernel runs."""
    left, right = window
    return (-1 if left >= seqlen_k - 1 else left, -1 if right >= seqlen_q - 1 else right)


def chunk_window(causal: bool, window, seqlen_q: int, seqlen_k: int, chunk: int) -> tuple[int, int]:
    """The window ``mha_fwd`` hands a kernel with ``attention_chunk`` ``chunk`` > 0
    (hopper/flash_api.cpp): sides normalised as :func:`fa3_window`, causal setting the right
    side to 0, then unbounded sides replaced by ``seqlen_k - 1`` / ``seqlen_q - 1`` and both
    capped at ``chunk - 1``. Both sides are then >= 0, so the kernel is local (never causal:
    ``is_causal`` requires ``attention_chunk == 0``)."""
    left, right = fa3_window(normalize_window(False, window), seqlen_q, seqlen_k)
    if causal:
        right = 0
    left = seqlen_k - 1 if left < 0 else left
    right = seqlen_q - 1 if right < 0 else right
    return max(0, min(left, chunk - 1)), max(0, min(right, chunk - 1))


def _chunk_start(x, chunk: int):
    """``round_down(attention_chunk, x)``: the first key of the chunk holding key ``x`` (a floor
    for negative ``x`` too: hopper/utils.h ``div_floor``)."""
    return (x // chunk) * chunk


def kernel_flags(window: tuple[int, int]) -> tuple[bool, bool]:
    """(Is_causal, Is_local) of the kernel for a normalised window (hopper/flash_api.cpp)."""
    left, right = window
    causal = left < 0 and right == 0
    return causal, (left >= 0 or right >= 0) and not causal


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
            right_end = min(right_end, _chunk_start(lo + offset - 1, chunk) + chunk)
        mask_min = max(n_min, right_end // kblock_n)
    before_local = n_min
    if local:
        left_end = hi + offset - left
        if chunk > 0:
            left_end = max(left_end, _chunk_start(hi + offset, chunk))
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
            hi = min(hi, _chunk_start(hi_row + offset - 1, chunk) + chunk)
    n_max = max(0, -(-hi // kblock_n))
    n_min = 0
    if left >= 0:
        low = lo + offset - left
        if chunk > 0:
            low = max(low, _chunk_start(lo + offset, chunk))
        n_min = max(0, low // kblock_n)
    return n_min, n_max


def allowed(rows: np.ndarray, cols: np.ndarray, seqlen_q: int, seqlen_k: np.ndarray,
            window: tuple[int, int], chunk: int = 0) -> np.ndarray:
    """Boolean mask: may query ``rows`` attend keys ``cols`` (broadcast together)?

    ``seqlen_k`` may be an array broadcasting against rows/cols (one value per CTA);
    ``chunk`` > 0: only keys of the chunk holding key ``row + offset`` (hopper/mask.h).
    """
    left, right = window
    offset = np.asarray(seqlen_k) - seqlen_q
    ok = cols < seqlen_k
    if right >= 0:
        ok = ok & (cols <= rows + offset + right)
    if left >= 0:
        ok = ok & (cols >= rows + offset - left)
    if chunk > 0:
        start = _chunk_start(rows + offset, chunk)
        ok = ok & (cols >= start) & (cols < start + chunk)
    return ok
