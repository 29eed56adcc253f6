"""Which keys a query row may see, and which K/V blocks a CTA visits (docs/forward.md).

Bottom-right alignment: with ``offset = seqlen_k - seqlen_q``, query row ``i`` may attend key
``j`` iff ``j < seqlen_k`` and ``i + offset - wl <= j <= i + offset + wr`` for the window
``(wl, wr)``, where -1 means unbounded and ``causal`` is ``(-1, 0)``. With FA3's
``attention_chunk`` ``C`` > 0 the keys are also cut into chunks of ``C``: row ``i`` sees only
the chunk holding key ``i + offset`` (hopper/mask.h, hopper/block.h).
"""

from __future__ import annotations

import operator

import numpy as np


def normalize_window(causal: bool, window, argument: str = "window") -> tuple[int, int]:
    """Validate ``window=(left, right)`` (-1 = unbounded) and fold ``causal`` into it: as
    ``mha_fwd`` (hopper/flash_api.cpp: ``if (is_causal) { window_size_right = 0; }``), causal
    sets the right window to 0 whatever was given. The sides may be anything with an integer
    index (Python and NumPy ints, 0-d integer tensors: FA3's interface reads
    ``window_size[0]``, ``window_size[1]`` as ints), never bools.

    Args:
        argument: the caller's name for the window in error messages (``"window_size"`` for
            FA3's API).
    Raises:
        ValueError: a window that is not two ints in -1 .. 2^63 - 1 (mha_fwd's int64_t; sides
            wider than the sequence become -1 before they reach the kernel's ints).
    """
    try:
        ok = len(window) == 2 and not any(isinstance(w, (bool, np.bool_)) for w in window)
        left, right = (operator.index(w) for w in window)
        ok = ok and -1 <= left < 2**63 and -1 <= right < 2**63
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"{argument}: expected (left, right) ints in -1 .. 2**63 - 1 "
                         f"(-1 = unbounded), got {window!r}")
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


def chunk_start(x, chunk: int):
    """``round_down(attention_chunk, x)``: the first key of the chunk holding key ``x`` (a floor
    for negative ``x`` too: hopper/utils.h ``div_floor``)."""
    return (x // chunk) * chunk


def kernel_flags(window: tuple[int, int]) -> tuple[bool, bool]:
    """(Is_causal, Is_local) of the kernel for a normalised window (hopper/flash_api.cpp)."""
    left, right = window
    causal = left < 0 and right == 0
    return causal, (left >= 0 or right >= 0) and not causal


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
        start = chunk_start(rows + offset, chunk)
        ok = ok & (cols >= start) & (cols < start + chunk)
    return ok
