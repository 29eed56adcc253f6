"""The expert rungs of the ladder: one step of FlashAttention-3's forward as the H200 computes it.

Each function below is a stub: copy it, fill it in with the float32 instructions of
:mod:`simulator.numerics` (``fadd fsub fmul ffma fmax``, each with ``ftz=``; ``ex2 lg2 rcp``
for MUFU) and the warp model of :mod:`simulator.hw` (``shfl_xor``, ``rowcol_view``), then run
``simulator.exercises.check(N, your_function)``. The checker runs your function in place of
the emulator's step on recorded H200 cases and prints PASS, or the first place where your bits
differ from the device's: the step, the warpgroup / thread / lane / quad, the tile row and
column, and both values in hex. Every value is float32; compare bits, not closeness.

Shapes follow softmax.h's row/column view of an ``m64nNk16`` accumulator: a warpgroup's 128
threads each hold ``kNRows = 2`` rows (``mi``) of ``N / 4`` columns (``ni``), so scores are
``[..., 128, 2, N/4]`` and row state (``row_max``, ``row_sum``, ``scores_scale``) is
``[..., 128, 2]``; the thread axis is -3 for scores and -2 for row state. The four threads of a
quad (lanes ``4q .. 4q + 3``) own the same rows.

A stub says what to compute; which instructions the device runs, in which order, is the
puzzle: ``python -m simulator.exercises check N --hint K`` (or
``simulator.exercises.hints(N, K)``) reveals the first K hints, and docs/forward.md and
docs/combine.md describe the kernel. The solutions are in ``simulator/exercises/solutions.py``
(look last).
"""

from __future__ import annotations

import numpy as np

NOT_WRITTEN = ("puzzle {name} is a stub: copy simulator.exercises.puzzles.{func}, fill it "
               "in, then run simulator.exercises.check('{name}', your_function)")


def reduce_max(scores: np.ndarray, row_max: np.ndarray | None) -> np.ndarray:
    """Puzzle reduce_max (expert rung): softmax.h's ``reduce_max``: each row's maximum (about 6 lines).

    Every thread first takes the maximum of its own columns of a row (and of the running
    maximum, when there is one); then the four threads of the quad that owns the row exchange
    what they found, until all four hold the row's maximum.

    Args:
        scores: float32 ``[..., 128, 2, ncol]``: the masked scores of one K/V block, each
            thread's part of its two rows (the row/column view of ``acc_s``).
        row_max: float32 ``[..., 128, 2]``: the running maximum of the earlier blocks, or None
            on a CTA's first block (``zero_init``).
    Returns:
        float32 ``[..., 128, 2]``: every row's maximum over all its columns (and ``row_max``),
        the same value in the four threads of the quad that owns the row.

    Checked on the 7 recorded step traces (``max_get_scale``'s ``row_max``) and on the
    reduction probe's adversarial fragments (subnormals, +-0, inf, NaN): how a maximum treats
    those is part of the puzzle.
    """
    raise NotImplementedError(NOT_WRITTEN.format(n=1, name="reduce_max", func="reduce_max"))


def online_rescale(scores: np.ndarray, row_max_prev: np.ndarray, row_max: np.ndarray,
                   row_sum_prev: np.ndarray, acc_o: np.ndarray, scale_log2: np.float32):
    """Puzzle online_rescale (expert rung): the online update of a later K/V block (about 10 lines).

    On a block that is not the CTA's first, the kernel computes the factor by which the
    earlier blocks' row sum and O shrink now that the maximum may have grown
    (``2^((row_max_prev - row_max) scale_log2)``), the block's P (as in puzzle
    scale_apply_exp2), the new per-thread row sum (the old one rescaled, plus this block's P
    in column order) and O rescaled by the factor.

    Args:
        scores: float32 ``[..., 128, 2, ncol]``: this block's masked scores (row/column view).
        row_max_prev: float32 ``[..., 128, 2]``: the row maximum before this block.
        row_max: float32 ``[..., 128, 2]``: the row maximum including this block (the output
            of puzzle reduce_max, quad-uniform); may be -inf for a row that saw no key yet.
        row_sum_prev: float32 ``[..., 128, 2]``: each thread's partial row sum of the earlier
            blocks (not yet reduced over the quad).
        acc_o: float32 ``[..., 128, 2, ncol_o]``: the O accumulator the kernel rescales (its
            row/column view; ``ncol_o`` = head dim / 4).
        scale_log2: float32 scalar: ``softmax_scale * log2(e)`` (FP8 descales folded in).
    Returns:
        ``(scores_scale, p, row_sum, acc_o)``: float32 ``[..., 128, 2]``, ``[..., 128, 2,
        ncol]``, ``[..., 128, 2]``, ``[..., 128, 2, ncol_o]``.

    Checked on every later block of the 5 recorded bf16 / f16 traces (docs/forward.md steps
    4, 5 and 6 describe them): which of the multiplies and adds the compiler contracts is the
    puzzle.
    """
    raise NotImplementedError(NOT_WRITTEN.format(n=2, name="online_rescale", func="online_rescale"))


def fp8_exp2(scores: np.ndarray, row_max: np.ndarray, scale_log2: np.float32) -> np.ndarray:
    """Puzzle fp8_exp2 (expert rung): P of an FP8 (e4m3) kernel, ``Max_offset = 8`` (about 4 lines).

    FP8 keeps 3 mantissa bits and nothing below ``2^-9``: a probability in ``[0, 1]`` would
    waste most of e4m3's range, so an FP8 kernel computes ``P' = 2^8 P`` instead of P: the
    largest element of a row becomes 256 instead of 1 (docs/forward.md "FP8: Max_offset",
    notebooks/05). Puzzle finalize undoes the factor in the LSE.

    Args:
        scores: float32 ``[..., 128, 2, ncol]``: one block's masked scores (row/column view).
        row_max: float32 ``[..., 128, 2]``: the row maximum including this block.
        scale_log2: float32 scalar: ``softmax_scale * log2(e)`` times the q and k descales.
    Returns:
        float32 ``[..., 128, 2, ncol]``: ``P' = 2^8 P``, what the kernel converts to e4m3.

    Checked on every block of the 2 recorded e4m3 traces: where the 8 enters, and how many
    roundings that costs, is the puzzle.
    """
    raise NotImplementedError(NOT_WRITTEN.format(n=3, name="fp8_exp2", func="fp8_exp2"))


def combine(lse: np.ndarray, o: np.ndarray, allreduce):
    """Puzzle combine (expert rung): the split-KV combine of a row's splits (about 15 lines).

    Each split computed its rows' O (normalised by its own row sum) and LSE over part of the
    keys. The combined row is ``sum_s w[s] o[s]`` with weights ``w[s] = exp(lse[s]) /
    sum_t exp(lse[t])``, and the combined LSE is ``log(sum_s exp(lse[s]))``, computed so that
    an LSE of 100 does not overflow, as hopper/flash_fwd_combine_kernel.h does under fast math.

    Args:
        lse: float32 ``[S, R]``: the LSE (natural log) of each of ``S`` splits for ``R`` query
            rows; -inf for a split that saw no key.
        o: float32 ``[S, R, dv]``: each split's O, already divided by that split's row sum.
        allreduce: ``allreduce(x, op)`` with ``x`` float32 ``[S, R]`` and ``op`` "max" or
            "sum": the kernel's reduction over a row's splits (each thread folds its own splits
            in order, from ``+0`` for "sum", then a butterfly over the row's threads, all
            ``.ftz``), returns float32 ``[R]``. Use it: the order of that tree sets the bits.
    Returns:
        ``(out, lse_out)``: float32 ``[R, dv]`` (the checker converts it to the call's output
        type with ``cvt.rn``) and float32 ``[R]``.

    Checked on 29 recorded calls of the real FA3 library (2 to 100 splits, bf16, f16 and
    float32 outputs, empty splits, rows with no split); docs/combine.md shows the kernel's
    SASS.
    """
    raise NotImplementedError(NOT_WRITTEN.format(n=4, name="combine", func="combine"))


def finalize(row_max: np.ndarray, row_sum: np.ndarray, scale_log2: np.float32, max_offset: int,
             final_scale: np.float32):
    """Puzzle finalize (expert rung): softmax.h's ``finalize``: sum, ``1 / sum``, LSE (about 12 lines).

    After the last K/V block each thread holds a partial sum of its own columns of a row; the
    quad adds them into the row's total, O is multiplied by ``final_scale / total`` (0 for an
    empty row), and the row's natural-log LSE is ``row_max * softmax_scale + log(total)``,
    with an FP8 kernel's factor ``2^max_offset`` taken back out of the total first.

    Args:
        row_max: float32 ``[..., 128, 2]``: the final row maximum (quad-uniform).
        row_sum: float32 ``[..., 128, 2]``: each thread's partial row sum after the last block
            (a sum of its own columns only).
        scale_log2: float32 scalar, as in puzzle online_rescale.
        max_offset: 0, or 8 in an FP8 kernel (puzzle fp8_exp2).
        final_scale: float32 scalar that O's scale is multiplied by (the v descale in FP8, else 1).
    Returns:
        ``(row_sum, scores_scale, lse)``, float32 ``[..., 128, 2]`` each: the sum over the
        quad (before the FP8 correction), what O is multiplied by, the natural-log LSE (-inf
        for a row whose total is 0 or NaN).

    Checked on the finalize step of the 7 recorded traces (2 of them e4m3); docs/forward.md
    "finalize" describes it.
    """
    raise NotImplementedError(NOT_WRITTEN.format(n=5, name="finalize", func="finalize"))
