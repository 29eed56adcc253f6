"""Warp shuffles with the semantics of PTX ``shfl.sync``, as fancy indexing along the thread axis.

PTX ISA, "Data Movement and Conversion Instructions: shfl.sync"::

    shfl.sync.mode.b32 d[|p], a, b, c, membermask;   mode = up | down | bfly | idx

Every lane computes a source lane ``j`` from ``b`` (lane or offset, only ``b[4:0]`` counts) and
``c`` (``c[4:0]`` the clamp value, ``c[12:8]`` the segment mask; other bits are ignored)::

    maxLane = (lane & segmask) | (cval & ~segmask);   minLane = lane & segmask
    up:   j = lane - bval;   p = (j >= maxLane)
    down: j = lane + bval;   p = (j <= maxLane)
    bfly: j = lane ^ bval;   p = (j <= maxLane)
    idx:  j = minLane | (bval & ~segmask);   p = (j <= maxLane)
    if !p: j = lane          (copy from its own lane)
    d = a[j]

The CUDA intrinsics ``__shfl_*_sync(mask, v, b, width)`` pass ``c = ((32 - width) << 8) | 0x1f``
(``| 0`` for ``__shfl_up_sync``): see :func:`c_for_width`. ``membermask`` names the lanes taking
part: a thread that executes ``shfl.sync`` must be named in it, and reading ``a`` from a lane
that does not execute the instruction gives an unpredictable value (PTX ISA). The emulator
raises ValueError for the first case and flags the second in ``ShuffleResult.defined``; the
value it returns there follows ``undefined=``: ``"zero"`` (default) is what the H200 returned in
every such read we probed (lanes that had exited, and lanes branched around the shuffle; see
``hw_report.json``, section ``shuffle``), with ``p`` still true. Do not rely on it: PTX does not.

All of it is checked against the H200 lane by lane, including partial masks, widths, odd clamp
values and out-of-range ``b``: ``python -m simulator measure hw_probe`` (recorded in
``simulator/data/device/hw_shuffle.npz``; tests in ``tests/test_hw_shuffle.py``).

Arrays: the thread axis (``axis``, default -2 as in ``[..., thread, register]``) is 32 long (a
warp) or 128 long (a warpgroup: four independent warps). Values are 32-bit (float32, uint32,
int32): a shuffle moves bits, never converts them. Leading axes are batch axes (many CTAs).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..numerics.bits import is_int, reject_subclass, require_bool
from .threads import WARP_SIZE, WARPGROUP_SIZE, check_thread_axis

FULL_MASK = 0xFFFFFFFF
MODES = ("up", "down", "bfly", "idx")


class ShuffleResult(NamedTuple):
    """What ``shfl.sync`` leaves in each lane.

    Fields:
        value: ``d``, same shape and dtype as the input.
        pred: ``p``, bool array ``(threads,)``: True where the computed source lane was in range.
        defined: bool array broadcast of ``active`` (``[..., threads]``): False where PTX leaves
            ``d`` unpredictable (the source lane did not execute) or the lane did not execute
            (then ``value`` holds its own input).
    """

    value: np.ndarray
    pred: np.ndarray
    defined: np.ndarray


def c_for_width(width: int, mode: str) -> int:
    """The ``c`` operand the CUDA ``__shfl_*_sync(..., width)`` intrinsics pass.

    ``((32 - width) << 8) | 0x1f`` for idx, bfly, down and ``(32 - width) << 8`` for up
    (CUDA C++ Programming Guide "Warp Shuffle Functions"; sm_90 headers).

    Raises:
        ValueError: width not a power of two in 1..32, or unknown mode.
        TypeError: width not an int.
    """
    _check_mode(mode)
    width = check_width(width, (1, 2, 4, 8, 16, 32))
    return ((WARP_SIZE - width) << 8) | (0 if mode == "up" else 0x1F)


def _check_mode(mode) -> str:
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return mode


def check_width(width, allowed: tuple[int, ...]) -> int:
    """``width`` as an int when it is one of ``allowed`` (ascending powers of two: the
    ``width`` / ``c`` clamp of ``shfl.sync``, PTX ISA "shfl.sync"; a reduction's lane group).

    Raises:
        TypeError: ``width`` is not an int; ValueError: an int outside ``allowed``.
    """
    lo, hi = allowed[0], allowed[-1]
    if not is_int(width):
        raise TypeError(f"width: expected an int (a power of two in {lo}..{hi}), got {width!r} "
                        f"({type(width).__name__})")
    if int(width) not in allowed:
        raise ValueError(f"width must be a power of two in {lo}..{hi}, got {width}")
    return int(width)


def _u32_operand(name: str, v, threads: int) -> np.ndarray:
    reject_subclass(name, v)
    a = np.asarray(v)
    if a.dtype == object:
        odd = next((e for e in a.flat if not is_int(e)), None) if a.size else None
        if odd is not None:
            raise TypeError(f"{name}: expected an int or a per-lane int array, got an element "
                            f"{odd!r} ({type(odd).__name__})")
    elif a.dtype.kind not in "iu":
        got = f"{v!r} ({type(v).__name__})" if a.ndim == 0 else f"an array of dtype {a.dtype}"
        raise TypeError(f"{name}: expected an int or a per-lane int array, got {got}")
    if a.ndim > 1 or (a.ndim == 1 and a.shape[0] != threads):
        raise ValueError(f"{name}: expected an int or a per-thread array of shape ({threads},), "
                         f"got shape {a.shape}")
    if a.size:
        lo, hi = a.min(), a.max()
        if lo < 0 or hi > FULL_MASK:
            raise ValueError(f"{name}: a 32-bit operand must be in 0..0xffffffff, got "
                             f"{int(lo) if lo < 0 else int(hi)}")
    return np.broadcast_to(a.astype(np.int64), (threads,))


def source_lanes(mode: str, b, c, threads: int = WARP_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """Source lane ``j`` and predicate ``p`` of every lane, per the PTX pseudocode.

    Args:
        mode: "up", "down", "bfly" or "idx".
        b, c: ints or per-thread int arrays ``(threads,)`` (32-bit operands).
        threads: 32 or 128 (a warpgroup is four warps, each shuffling within itself).
    Returns:
        ``(j, p)``: int64 ``(threads,)`` lane in the warp (0..31), bool ``(threads,)``.
    Raises:
        ValueError: unknown mode, threads not 32/128, operands out of 32-bit range.
        TypeError: an operand that is not an int or an int array.
    """
    _check_mode(mode)
    if not is_int(threads) or threads not in (WARP_SIZE, WARPGROUP_SIZE):
        raise ValueError(f"threads must be 32 (warp) or 128 (warpgroup), got {threads!r}")
    threads = int(threads)
    bb = _u32_operand("b", b, threads)
    cc = _u32_operand("c", c, threads)
    lane = np.arange(threads, dtype=np.int64) % WARP_SIZE
    bval = bb & 0x1F
    cval = cc & 0x1F
    seg = (cc >> 8) & 0x1F
    max_lane = (lane & seg) | (cval & ~seg & 0x1F)
    min_lane = lane & seg
    if mode == "up":
        j = lane - bval
        p = j >= max_lane
    elif mode == "down":
        j = lane + bval
        p = j <= max_lane
    elif mode == "bfly":
        j = lane ^ bval
        p = j <= max_lane
    else:
        j = min_lane | (bval & ~seg & 0x1F)
        p = j <= max_lane
    return np.where(p, j, lane), p


def _lane_bits(mask: int) -> np.ndarray:
    return ((np.int64(mask) >> np.arange(WARP_SIZE)) & 1).astype(bool)


def _active_lanes(active, lead: tuple[int, ...]) -> np.ndarray:
    reject_subclass("active", active)
    a = np.asarray(active)
    if a.dtype != bool:
        raise TypeError(f"active: expected a bool array (lanes that execute), got dtype {a.dtype}")
    try:
        return np.broadcast_to(a, lead)
    except ValueError:
        raise ValueError(f"active: shape {a.shape} does not broadcast to the lanes of x "
                         f"{lead} ([..., threads])") from None


def _over_registers(lanes: np.ndarray, trailing: int) -> np.ndarray:
    """A per-lane mask ``[..., threads]`` (or ``(threads,)``) with the axes after the thread
    axis appended, so that it broadcasts against ``x``."""
    return lanes.reshape(lanes.shape + (1,) * trailing)


UNDEFINED_POLICIES = ("zero", "source", "raise")


def shfl_sync(x, mode: str, b, c=None, membermask: int = FULL_MASK, *, active=None,
              axis: int = -2, full: bool = False, undefined: str = "zero"):
    """Emulate ``shfl.sync.<mode>.b32 d|p, x, b, c, membermask`` for every lane at once.

    Args:
        x: array of 32-bit values (float32/uint32/int32) with a thread axis ``axis`` of 32 or
            128 threads; other axes are batch or register axes.
        mode: "up", "down", "bfly" or "idx".
        b: source lane / offset: an int or per-thread int array ``(threads,)``.
        c: clamp and segment mask; default ``c_for_width(32, mode)`` (whole warp).
        membermask: 32-bit lane mask of the participating lanes (same for every warp).
        active: bool array broadcastable to ``x.shape[:axis+1]`` (``[..., threads]``): the lanes
            that execute the instruction; default: the lanes named in ``membermask``.
        axis: the thread axis (default -2).
        full: return a :class:`ShuffleResult` (value, pred, defined) instead of the value.
        undefined: what an executing lane gets when its source lane did not execute (PTX:
            unpredictable): "zero" (all bits 0, as observed on the H200), "source" (the source
            lane's ``x``), or "raise" (ValueError).
    Returns:
        the shuffled array (same shape and dtype as ``x``), or a :class:`ShuffleResult`.
    Raises:
        ValueError: thread axis not 32 or 128, bad mode/operands (out of 32-bit range, wrong
            shape), an active lane that is not named in ``membermask`` (undefined in PTX), or an
            undefined read with ``undefined="raise"``.
        TypeError: ``x`` is not a 4-byte dtype or is an ndarray subclass (a masked array);
            ``b``, ``c``, ``membermask`` or ``axis`` not integers; ``active`` not bool;
            ``full`` not a bool.
    """
    if not isinstance(undefined, str) or undefined not in UNDEFINED_POLICIES:
        raise ValueError(f"undefined must be one of {UNDEFINED_POLICIES}, got {undefined!r}")
    full = require_bool("full", full)
    _check_mode(mode)
    reject_subclass("x", x)
    x = np.asarray(x)
    if x.dtype.itemsize != 4:
        raise TypeError(f"x: shfl.sync moves 32-bit values; got dtype {x.dtype}")
    ax = check_thread_axis(x, axis, (WARP_SIZE, WARPGROUP_SIZE), "x")
    threads = x.shape[ax]
    if c is None:
        c = c_for_width(WARP_SIZE, mode)
    want = "membermask: expected a 32-bit lane mask (an int in 0..0xffffffff), got"
    if not is_int(membermask):
        raise TypeError(f"{want} {membermask!r} ({type(membermask).__name__})")
    if not 0 <= membermask <= FULL_MASK:
        raise ValueError(f"{want} {membermask!r} ({type(membermask).__name__})")
    mm = int(membermask)
    j, p = source_lanes(mode, b, c, threads)
    src = (np.arange(threads) // WARP_SIZE) * WARP_SIZE + j
    value = np.take(x, src, axis=ax)
    if not full and active is None and mm == FULL_MASK:
        return value
    named = np.tile(_lane_bits(mm), threads // WARP_SIZE)
    lead = x.shape[:ax + 1]
    act = named if active is None else _active_lanes(active, lead)
    stray = act & ~named
    if stray.any():
        lanes = sorted({int(t) % WARP_SIZE for t in np.nonzero(stray.reshape(-1, threads).any(0))[0]})
        raise ValueError(f"lanes {lanes} execute shfl.sync but are not named in membermask "
                         f"0x{mm:08x} (undefined behaviour in PTX)")
    src_active = np.take(act, src, axis=-1)
    defined = act & (src_active | ~p)
    bad = act & ~defined
    if bad.any():
        if undefined == "raise":
            lanes = sorted({int(t) % WARP_SIZE for t in np.nonzero(bad.reshape(-1, threads).any(0))[0]})
            raise ValueError(f"lanes {lanes} read from lanes that do not execute shfl.sync "
                             f"(membermask 0x{mm:08x}): unpredictable in PTX")
        if undefined == "zero":
            zap = _over_registers(bad, x.ndim - ax - 1)
            value = np.where(zap, np.zeros((), dtype=x.dtype), value)
    if not act.all():
        keep = _over_registers(~act, x.ndim - ax - 1)
        value = np.where(keep, x, value)
    if full:
        return ShuffleResult(value, p, defined)
    return value


def shfl_xor(x, lane_mask: int, width: int = 32, membermask: int = FULL_MASK, *,
             axis: int = -2) -> np.ndarray:
    """``__shfl_xor_sync(membermask, x, lane_mask, width)`` = shfl.sync.bfly (see :func:`shfl_sync`)."""
    return shfl_sync(x, "bfly", lane_mask, c_for_width(width, "bfly"), membermask, axis=axis)


def shfl_idx(x, src_lane, width: int = 32, membermask: int = FULL_MASK, *,
             axis: int = -2) -> np.ndarray:
    """``__shfl_sync(membermask, x, src_lane, width)`` = shfl.sync.idx (see :func:`shfl_sync`)."""
    return shfl_sync(x, "idx", src_lane, c_for_width(width, "idx"), membermask, axis=axis)


def shfl_up(x, delta, width: int = 32, membermask: int = FULL_MASK, *,
            axis: int = -2) -> np.ndarray:
    """``__shfl_up_sync(membermask, x, delta, width)`` = shfl.sync.up (see :func:`shfl_sync`)."""
    return shfl_sync(x, "up", delta, c_for_width(width, "up"), membermask, axis=axis)


def shfl_down(x, delta, width: int = 32, membermask: int = FULL_MASK, *,
              axis: int = -2) -> np.ndarray:
    """``__shfl_down_sync(membermask, x, delta, width)`` = shfl.sync.down (see :func:`shfl_sync`)."""
    return shfl_sync(x, "down", delta, c_for_width(width, "down"), membermask, axis=axis)
