"""Row reductions of hopper/softmax.h: thread_reduce_, quad Allreduce, reduce_max, reduce_sum.

FlashAttention-3 reduces an accumulator fragment row by row in two stages (hopper/softmax.h):

1. ``thread_reduce_<zero_init>(tensor, summary, op)``: each thread folds its own columns of the
   row/column view ``tensor(mi, ni)`` (see :func:`~simulator.hw.layouts.rowcol_view`)::

       for ni in 0..ncol-1:              # outer: the sequential order that sets the bits
           for mi in 0..nrow-1:
               summary(mi) = (zero_init && ni == 0) ? tensor(mi, ni) : op(summary(mi), tensor(mi, ni))

2. ``quad_allreduce_`` = ``Allreduce<4>::run`` (hopper/utils.h): a butterfly over the 4 lanes of
   a quad, ``x = op(x, __shfl_xor_sync(0xffffffff, x, offset))`` for offset = 2, 1.

``reduce_max<zero_init>`` = 1 + 2 with ``MaxOp<float>`` (``max(x, y)``, i.e. fmaxf);
``reduce_sum<zero_init, warp_reduce>`` = 1, then 2 if ``warp_reduce``, with ``SumOp`` (x + y).

Emulation: the ``ni`` loop runs in Python over the few register columns (N/4 for one m64nNk16
tile), in exactly that order, because that order *is* the float semantics being emulated; the
``mi`` loop, all threads and all batch axes are one vectorised array operation per step.
The butterfly is a shuffle (:mod:`.shuffle`), i.e. fancy indexing on the thread axis.

Arithmetic comes from :mod:`simulator.numerics`: sum -> :func:`~simulator.numerics.fadd`,
max -> :func:`~simulator.numerics.fmax`. FA3 is compiled with ``--use_fast_math``, which makes
every float32 add ``add.ftz.f32`` and fmaxf ``max.ftz.f32``; hence ``ftz=True`` by default.
``ftz=False`` gives what the same source does without fast-math. Both were measured on the H200
by ``python -m simulator measure hw_probe`` (the ``reduce`` section of ``hw_report.json``,
outputs in ``simulator/data/device/hw_reduce.npz``; tests in ``tests/test_hw_reduce.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ..numerics import fadd, fmax, fmin, require_float32
from ..numerics.bits import reject_subclass, require_bool
from .fragment import Fragment
from .layouts import rowcol_view
from .shuffle import FULL_MASK, check_width, shfl_sync
from .threads import WARP_SIZE, WARPGROUP_SIZE, check_thread_axis

_OPS = {"sum": fadd, "add": fadd, "max": fmax, "min": fmin}


def resolve_op(op, ftz: bool = True) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Return the binary float32 operator for ``op``.

    Args:
        op: "sum" (alias "add": ``add.rn{.ftz}.f32``), "max" (``max{.ftz}.f32``), "min", or a
            callable ``(a, b) -> array`` used as is (``ftz`` then does not apply).
        ftz: the ``.ftz`` modifier for the named operators (default True: ``--use_fast_math``).
    Raises:
        ValueError: unknown operator name.
        TypeError: ``ftz`` is not a bool.
    """
    ftz = require_bool("ftz", ftz)
    if callable(op):
        return op
    try:
        fn = _OPS[op]
    except (KeyError, TypeError):
        raise ValueError(f"op must be one of {sorted(_OPS)} or a callable, got {op!r}") from None
    return functools.partial(fn, ftz=ftz)


def allreduce(x, op="sum", width: int = 4, *, axis: int = -2, ftz: bool = True) -> np.ndarray:
    """``Allreduce<width>::run(x, op)``: butterfly all-reduce over groups of ``width`` lanes.

    For offset = width/2, width/4, ..., 1: ``x = op(x, shfl.sync.bfly(x, offset))`` with the full
    membermask and ``c = 0x1f`` (``__shfl_xor_sync(uint32_t(-1), x, offset)``), the own value as
    the first operand (FA3 hopper/utils.h ``Allreduce``).

    Args:
        x: float32 array with a thread axis of 32 or 128 at ``axis`` (default -2).
        op: "sum", "max", "min" or a callable (see :func:`resolve_op`).
        width: 2, 4 (a quad: ``quad_allreduce_``), 8, 16 or 32.
        axis: the thread axis.
        ftz: ``.ftz`` for named operators (default True).
    Returns:
        float32 array of the same shape: every lane of a group holds the group's result.
    Raises:
        ValueError: width not a power of two in 2..32; thread axis not 32/128; unknown op.
        TypeError: ``x`` not float32 (for the named operators) or an ndarray subclass (a
            masked array); ``width`` not an int; ``ftz`` not a bool.
    """
    width = check_width(width, (2, 4, 8, 16, 32))
    fn = resolve_op(op, ftz)
    reject_subclass("x", x)
    x = np.asarray(x)
    check_thread_axis(x, axis, (WARP_SIZE, WARPGROUP_SIZE), "x")
    offset = width // 2
    while offset >= 1:
        x = fn(x, shfl_sync(x, "bfly", offset, 0x1F, FULL_MASK, axis=axis))
        offset //= 2
    return x


def rows_allreduce(x, op: str, width: int) -> np.ndarray:
    """``Allreduce<width>`` over the last axis of ``x`` [rows, width] (each row's values on
    ``width`` lanes), as the warps of a kernel run it: ``32 // width`` rows share a warp, which
    the butterfly (offsets width/2 .. 1) never mixes. Used by the split-KV combine kernels."""
    per = 32 // width
    rows = x.shape[0]
    pad = -rows % per
    if pad:
        x = np.concatenate([x, np.zeros((pad, width), dtype=x.dtype)])
    y = allreduce(x.reshape(-1, 32), op, width, axis=-1, ftz=True).reshape(-1, width)
    return y[:rows]


def quad_allreduce(x, op="sum", *, axis: int = -2, ftz: bool = True) -> np.ndarray:
    """``quad_allreduce_``: :func:`allreduce` with width 4 (offsets 2 then 1)."""
    return allreduce(x, op, 4, axis=axis, ftz=ftz)


def _as_rowcol(tensor) -> np.ndarray:
    if isinstance(tensor, Fragment):
        return rowcol_view(tensor.layout).apply(tensor.data)
    reject_subclass("tensor", tensor)
    t = np.asarray(tensor)
    if t.ndim < 3:
        raise ValueError(f"tensor: expected a Fragment or a row/col array [..., thread, nrow, "
                         f"ncol], got shape {t.shape}")
    check_thread_axis(t, -3, (WARP_SIZE, WARPGROUP_SIZE), "tensor")
    return t


def thread_reduce(tensor, summary=None, *, op="sum", zero_init: bool = True,
                  ftz: bool = True) -> np.ndarray:
    """``thread_reduce_<zero_init>(tensor, summary, op)``: fold each thread's columns, in order.

    Args:
        tensor: a :class:`~simulator.hw.fragment.Fragment` with an accumulator layout, or a
            float32 row/column array ``[..., thread, nrow, ncol]`` (thread = 128 or 32).
        summary: float32 ``[..., thread, nrow]``: the running value; required when
            ``zero_init`` is False (then the first column is combined with it), ignored (may be
            None) when True (then the first column is copied).
        op: "sum", "max", "min" or a callable (see :func:`resolve_op`).
        zero_init: FA3's template flag.
        ftz: ``.ftz`` for named operators (default True, FA3's --use_fast_math).
    Returns:
        new float32 array ``[..., thread, nrow]`` (``summary`` is not modified).
    Raises:
        ValueError: bad shapes (the message names the axis), or summary missing with
            ``zero_init=False``.
        TypeError: non-float32 input for a named operator, an ndarray subclass (a masked
            array), or a flag that is not a bool.
    Source: hopper/softmax.h ``thread_reduce_``; device check: ``hw_reduce.npz``.
    """
    zero_init = require_bool("zero_init", zero_init)
    t = _as_rowcol(tensor)
    fn = resolve_op(op, ftz)
    if not callable(op):
        require_float32("tensor", t)
    want = t.shape[:-1]  # [..., thread, nrow]
    if zero_init:
        acc = t[..., 0].copy()
    else:
        if summary is None:
            raise ValueError("thread_reduce: zero_init=False needs a summary [..., thread, nrow]")
        reject_subclass("summary", summary)
        s = np.asarray(summary)
        if s.shape[-2:] != want[-2:]:
            raise ValueError(f"summary: expected [..., {want[-2]}, {want[-1]}] (thread, nrow), "
                             f"got shape {s.shape}")
        acc = fn(s, t[..., 0])
    for ni in range(1, t.shape[-1]):  # sequential: the order hopper/softmax.h adds in
        acc = fn(acc, t[..., ni])
    return acc


def reduce_max(tensor, summary=None, *, zero_init: bool = True, warp_reduce: bool = True,
               ftz: bool = True) -> np.ndarray:
    """``reduce_max<zero_init>``: :func:`thread_reduce` with max, then the quad allreduce.

    ``warp_reduce=False`` stops after the thread stage (FA3's reduce_max always allreduces; the
    flag is here for symmetry with :func:`reduce_sum`). Arguments, shapes, errors: see
    :func:`thread_reduce`. Returns float32 ``[..., thread, nrow]``.
    """
    warp_reduce = require_bool("warp_reduce", warp_reduce)
    out = thread_reduce(tensor, summary, op="max", zero_init=zero_init, ftz=ftz)
    return quad_allreduce(out, "max", axis=-2, ftz=ftz) if warp_reduce else out


def reduce_sum(tensor, summary=None, *, zero_init: bool = True, warp_reduce: bool = True,
               ftz: bool = True) -> np.ndarray:
    """``reduce_sum<zero_init, warp_reduce>``: :func:`thread_reduce` with add, then (if
    ``warp_reduce``) the quad allreduce. ``online_softmax`` calls it with warp_reduce=False and
    ``finalize`` runs the quad allreduce on row_sum later. See :func:`thread_reduce`.
    """
    warp_reduce = require_bool("warp_reduce", warp_reduce)
    out = thread_reduce(tensor, summary, op="sum", zero_init=zero_init, ftz=ftz)
    return quad_allreduce(out, "sum", axis=-2, ftz=ftz) if warp_reduce else out
