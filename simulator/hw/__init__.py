"""Warpgroup execution model: threads, quads, register fragments, layouts, shuffles, reductions.

Public API:
    thread_index, warp_of, lane_of, quad_of, lane_in_quad, thread_of, split_warps, split_quads,
    check_thread_axis, WARP_SIZE, QUAD_SIZE, WARPGROUP_SIZE         -- :mod:`.threads`
    parse_shape, accumulator_layout, a_operand_layout, b_operand_layout, rowcol_view,
    Layout, RowColView, MmaShape                                   -- :mod:`.layouts`
    Fragment                                                        -- :mod:`.fragment`
    shfl_sync, shfl_xor, shfl_idx, shfl_up, shfl_down, source_lanes, c_for_width,
    ShuffleResult, FULL_MASK                                        -- :mod:`.shuffle`
    allreduce, quad_allreduce, thread_reduce, reduce_max, reduce_sum, resolve_op
                                                                    -- :mod:`.reduce`

Arrays follow one convention: a fragment is ``[..., thread, register]`` with a thread axis of
128 (warpgroup) or 32 (warp); leading axes are batch axes. See docs/hw.md.
"""

from .fragment import Fragment
from .layouts import (
    Layout,
    MmaShape,
    RowColView,
    a_operand_layout,
    accumulator_layout,
    b_operand_layout,
    parse_shape,
    rowcol_view,
)
from .reduce import (
    allreduce,
    quad_allreduce,
    reduce_max,
    reduce_sum,
    resolve_op,
    rows_allreduce,
    thread_reduce,
)
from .shuffle import (
    FULL_MASK,
    ShuffleResult,
    c_for_width,
    shfl_down,
    shfl_idx,
    shfl_sync,
    shfl_up,
    shfl_xor,
    source_lanes,
)
from .threads import (
    QUAD_SIZE,
    WARP_SIZE,
    WARPGROUP_SIZE,
    ThreadIndex,
    check_thread_axis,
    lane_in_quad,
    lane_of,
    quad_of,
    split_quads,
    split_warps,
    thread_index,
    thread_of,
    warp_of,
)

__all__ = [
    "FULL_MASK", "QUAD_SIZE", "WARPGROUP_SIZE", "WARP_SIZE",
    "Fragment", "Layout", "MmaShape", "RowColView", "ShuffleResult", "ThreadIndex",
    "a_operand_layout", "accumulator_layout", "allreduce", "b_operand_layout", "c_for_width",
    "check_thread_axis", "lane_in_quad", "lane_of", "parse_shape", "quad_allreduce", "quad_of",
    "rows_allreduce", "reduce_max", "reduce_sum", "resolve_op", "rowcol_view", "shfl_down", "shfl_idx",
    "shfl_sync",
    "shfl_up", "shfl_xor", "source_lanes", "split_quads", "split_warps", "thread_index",
    "thread_of", "thread_reduce", "warp_of",
]
