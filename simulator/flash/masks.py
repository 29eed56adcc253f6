"""Which keys a query row may see, and which K/V blocks a CTA visits (docs/forward.md).

Bottom-right alignment: with ``offset = seqlen_k - seqlen_q``, query row ``i`` may attend key
``j`` iff ``j < seqlen_k`` and ``i + offset - wl <= j <= i + offset + wr`` for the window
``(wl, wr)``, where -1 means unbounded and ``causal`` is ``(-1, 0)``.
"""

from __future__ import annotations

import numpy as np


def normalize_window(causal: bool, window) -> tuple[int, int]:
    """Validate ``window=(left, right)`` (-1 = unbounded) and fold ``causal`` into it.

    Raises:
        ValueError: a window that is not two ints >= -1, or causal with a right window > 0.
    """
    try:
        ok = len(window) == 2 and all(isinstance(w, (int, np.integer)) and not isinstance(w, bool)
                                      for w in window)
        left, right = (int(w) for w in window)
        ok = ok and left >= -1 and right >= -1
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"window: expected (left, right) ints >= -1 (-1 = unbounded), got {window!r}")
    if causal:
        if right not in (-1, 0):
            raise ValueError(f"window: causal=True fixes the right window at 0, got window={window!r}")
        right = 0
    return left, right


def clamp_window(window: tuple[int, int], seqlen_q: int, seqlen_k: int) -> tuple[int, int]:
    """A window side at least ``seqlen_q + seqlen_k`` wide excludes nothing: make it unbounded
    (-1), so that no index arithmetic sees huge values."""
    span = seqlen_q + seqlen_k
    return tuple(-1 if w >= span else w for w in window)


def block_range(m_block: int, seqlen_q: int, seqlen_k: int, kblock_m: int, kblock_n: int,
                window: tuple[int, int]) -> tuple[int, int]:
    """``(n_block_min, n_block_max)`` of a CTA; blocks are visited from max - 1 down to min."""
    left, right = window
    offset = seqlen_k - seqlen_q
    hi = seqlen_k
    if right >= 0:
        hi = min(seqlen_k, (m_block + 1) * kblock_m + offset + right)
    n_max = max(0, -(-hi // kblock_n))
    n_min = 0
    if left >= 0:
        n_min = max(0, (m_block * kblock_m + offset - left) // kblock_n)
    return n_min, n_max


def allowed(rows: np.ndarray, cols: np.ndarray, seqlen_q: int, seqlen_k: np.ndarray,
            window: tuple[int, int]) -> np.ndarray:
    """Boolean mask: may query ``rows`` attend keys ``cols`` (broadcast together)?

    ``seqlen_k`` may be an array broadcasting against rows/cols (one value per CTA).
    """
    left, right = window
    offset = np.asarray(seqlen_k) - seqlen_q
    ok = cols < seqlen_k
    if right >= 0:
        ok = ok & (cols <= rows + offset + right)
    if left >= 0:
        ok = ok & (cols >= rows + offset - left)
    return ok
