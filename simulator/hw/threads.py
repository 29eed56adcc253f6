"""Thread hierarchy of a Hopper warpgroup: warpgroup -> warp -> quad -> lane, vectorised.

A warpgroup is 128 consecutive threads of a CTA (4 warps of 32 lanes; PTX ISA "Warpgroup" in
"Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"). Inside a warp, the
MMA fragment layouts group lanes in *quads*: 4 consecutive lanes that hold the same rows of an
accumulator. The PTX ISA fragment figures call the quad index ``groupID = laneid >> 2`` and the
lane within the quad ``threadID_in_group = laneid % 4`` (section "Matrix Fragments for
mma.m16n8k16 with floating point type").

In the emulator a warpgroup is an array axis of 128 threads (a warp alone: 32). Every helper
here is a pure index computation on integer arrays of any shape, so leading batch axes
(batch, head, m_block: many CTAs) come for free. Nothing loops over threads.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..numerics.bits import is_int

WARP_SIZE = 32
QUAD_SIZE = 4
WARPS_PER_WARPGROUP = 4
WARPGROUP_SIZE = WARP_SIZE * WARPS_PER_WARPGROUP  # 128
QUADS_PER_WARP = WARP_SIZE // QUAD_SIZE  # 8


class ThreadIndex(NamedTuple):
    """Where threads sit in the hierarchy; every field is an int64 array of the input's shape.

    Fields:
        thread: thread index in the warpgroup, 0..127.
        warp: warp index in the warpgroup, 0..3 (``thread // 32``).
        lane: lane index in the warp, 0..31 (``%laneid``, ``thread % 32``).
        quad: quad index in the warp, 0..7 (PTX ``groupID``, ``lane >> 2``).
        lane_in_quad: lane index in the quad, 0..3 (PTX ``threadID_in_group``, ``lane % 4``).
        quad_in_warpgroup: quad index in the warpgroup, 0..31 (``thread >> 2``).
    """

    thread: np.ndarray
    warp: np.ndarray
    lane: np.ndarray
    quad: np.ndarray
    lane_in_quad: np.ndarray
    quad_in_warpgroup: np.ndarray


def _as_index(name: str, t, limit: int) -> np.ndarray:
    t = np.asarray(t)
    if t.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer thread indices, got dtype {t.dtype}")
    t = t.astype(np.int64)
    if t.size and (t.min() < 0 or t.max() >= limit):
        raise ValueError(f"{name}: thread indices must lie in 0..{limit - 1}, "
                         f"got min {int(t.min())}, max {int(t.max())}")
    return t


def thread_index(t=None, *, threads: int = WARPGROUP_SIZE) -> ThreadIndex:
    """Decompose thread indices into (warp, lane, quad, lane_in_quad), vectorised.

    Args:
        t: integer array (any shape) of thread indices; default ``arange(threads)``.
        threads: 128 for a warpgroup, 32 for a single warp.
    Returns:
        :class:`ThreadIndex` of int64 arrays shaped like ``t``.
    Raises:
        ValueError: ``threads`` is not 32 or 128, or an index is out of range.
        TypeError: ``t`` is not an integer array.
    """
    if not is_int(threads) or threads not in (WARP_SIZE, WARPGROUP_SIZE):
        raise ValueError(f"threads must be {WARPGROUP_SIZE} (warpgroup) or {WARP_SIZE} (warp), "
                         f"got {threads!r}")
    threads = int(threads)
    t = np.arange(threads) if t is None else _as_index("t", t, threads)
    lane = t % WARP_SIZE
    return ThreadIndex(thread=t, warp=t // WARP_SIZE, lane=lane, quad=lane // QUAD_SIZE,
                       lane_in_quad=lane % QUAD_SIZE, quad_in_warpgroup=t // QUAD_SIZE)


def warp_of(t) -> np.ndarray:
    """Warp index (0..3) of warpgroup thread indices ``t`` (int array, any shape)."""
    return _as_index("t", t, WARPGROUP_SIZE) // WARP_SIZE


def lane_of(t) -> np.ndarray:
    """Lane index (0..31, PTX ``%laneid``) of warpgroup thread indices ``t``."""
    return _as_index("t", t, WARPGROUP_SIZE) % WARP_SIZE


def quad_of(t) -> np.ndarray:
    """Quad index within the warp (0..7, PTX ``groupID``) of warpgroup thread indices ``t``."""
    return (_as_index("t", t, WARPGROUP_SIZE) % WARP_SIZE) // QUAD_SIZE


def lane_in_quad(t) -> np.ndarray:
    """Lane within the quad (0..3, PTX ``threadID_in_group``) of warpgroup thread indices."""
    return _as_index("t", t, WARPGROUP_SIZE) % QUAD_SIZE


def thread_of(warp, lane) -> np.ndarray:
    """Warpgroup thread index ``32 * warp + lane`` (broadcast; ValueError when out of range)."""
    w = _as_index("warp", warp, WARPS_PER_WARPGROUP)
    ln = _as_index("lane", lane, WARP_SIZE)
    return w * WARP_SIZE + ln


def check_thread_axis(x, axis: int = -2, allowed=(WARPGROUP_SIZE,), what: str = "x") -> int:
    """Check that axis ``axis`` of ``x`` is a thread axis of an allowed length.

    Args:
        x: array whose ``axis`` is the thread axis.
        axis: which axis (default -2: the thread axis of a ``[..., thread, register]`` array).
        allowed: permitted lengths, e.g. ``(128,)`` for a warpgroup, ``(32, 128)`` for shuffles.
        what: the argument's name, for the error message.
    Returns:
        the non-negative axis index.
    Raises:
        ValueError: ``x`` has too few dimensions or the thread axis has another length.
        TypeError: ``axis`` is not an int.
    """
    if not is_int(axis):
        raise TypeError(f"axis: expected an int (the thread axis of {what}), got {axis!r} "
                        f"({type(axis).__name__})")
    axis = int(axis)
    x = np.asarray(x)
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{what}: expected a thread axis at axis {axis}, but the array has "
                         f"shape {x.shape}")
    ax = axis % x.ndim
    if x.shape[ax] not in allowed:
        names = " or ".join(
            f"{n} ({'warpgroup' if n == WARPGROUP_SIZE else 'warp' if n == WARP_SIZE else 'threads'})"
            for n in allowed)
        raise ValueError(f"{what}: thread axis {axis} has length {x.shape[ax]}, expected {names}; "
                         f"shape {x.shape}")
    return ax


def split_warps(x, axis: int = -2) -> np.ndarray:
    """View a ``[..., 128, ...]`` array as ``[..., 4 warps, 32 lanes, ...]`` (no copy when possible).

    Raises:
        ValueError: the thread axis is not 128 long.
    """
    x = np.asarray(x)
    ax = check_thread_axis(x, axis, (WARPGROUP_SIZE,))
    return x.reshape(x.shape[:ax] + (WARPS_PER_WARPGROUP, WARP_SIZE) + x.shape[ax + 1:])


def split_quads(x, axis: int = -2) -> np.ndarray:
    """View a ``[..., T, ...]`` array (T = 32 or 128) as ``[..., T/4 quads, 4 lanes, ...]``.

    Quads are numbered through the warpgroup (quad ``q`` of warp ``w`` is ``8 * w + q``).

    Raises:
        ValueError: the thread axis is not 32 or 128 long.
    """
    x = np.asarray(x)
    ax = check_thread_axis(x, axis, (WARP_SIZE, WARPGROUP_SIZE))
    n = x.shape[ax]
    return x.reshape(x.shape[:ax] + (n // QUAD_SIZE, QUAD_SIZE) + x.shape[ax + 1:])
