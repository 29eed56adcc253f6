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
quad (lanes ``4q .. 4q + 3``) own the same rows. docs/forward.md and docs/combine.md give the
sequences; the solutions are in ``simulator/exercises/solutions.py`` (look last).

Hints common to all: FA3 is built with ``--use_fast_math``, so every float32 add, multiply,
FMA and max is the ``.ftz`` form; an expression the compiler contracts into one FFMA rounds
once, so ``ffma(a, b, c)`` and ``fadd(fmul(a, b), c)`` give different bits.
"""

from __future__ import annotations

import numpy as np

NOT_WRITTEN = ("puzzle {name} is a stub: copy simulator.exercises.puzzles.{func}, fill it "
               "in, then run simulator.exercises.check('{name}', your_function)")


def reduce_max(scores: np.ndarray, row_max: np.ndarray | None) -> np.ndarray:
    """Puzzle reduce_max (expert rung): softmax.h's ``reduce_max``: a row's maximum, with shuffles.

    Args:
        scores: float32 ``[..., 128, 2, ncol]``: the masked scores of one K/V block, each
            thread's part of its two rows (the row/column view of ``acc_s``).
        row_max: float32 ``[..., 128, 2]``: the running maximum of the earlier blocks, or None
            on a CTA's first block (``zero_init``).
    Returns:
        float32 ``[..., 128, 2]``: every row's maximum over all its columns (and ``row_max``),
        the same value in the four threads of the quad that owns the row.

    The H200's sequence (``thread_reduce_`` then ``quad_allreduce_``, hopper/softmax.h and
    hopper/utils.h ``Allreduce<4>``):

    1. per thread, fold the columns in order ``ni = 0, 1, ...``: start from column 0 (from
       ``max(row_max, column 0)`` when ``row_max`` is given), then ``m = max(m, column ni)``;
    2. butterfly over the quad: ``m = max(m, shfl_xor(m, 2))``, then
       ``m = max(m, shfl_xor(m, 1))``.

    Hints: ``simulator.numerics.fmax(a, b, ftz=True)`` is ``max.ftz.f32`` (a subnormal input
    counts as zero of its sign; NaN loses to a number); ``simulator.hw.shfl_xor(x, lane_mask,
    axis=-2)`` is ``__shfl_xor_sync(0xffffffff, x, lane_mask)`` with the thread axis -2 of
    ``[..., 128, 2]``. Checked on the 7 recorded step traces (``max_get_scale``'s ``row_max``)
    and on the reduction probe's adversarial fragments (subnormals, +-0, inf, NaN).
    """
    raise NotImplementedError(NOT_WRITTEN.format(n=1, name="reduce_max", func="reduce_max"))


def online_rescale(scores: np.ndarray, row_max_prev: np.ndarray, row_max: np.ndarray,
                   row_sum_prev: np.ndarray, acc_o: np.ndarray, scale_log2: np.float32):
    """Puzzle online_rescale (expert rung): the online rescale of a later K/V block (not a CTA's first).

    Args:
        scores: float32 ``[..., 128, 2, ncol]``: this block's masked scores (row/column view).
        row_max_prev: float32 ``[..., 128, 2]``: the row maximum before this block.
        row_max: float32 ``[..., 128, 2]``: the row maximum including this block (the output
            of exercise 1, quad-uniform); may be -inf for a row that saw no key yet.
        row_sum_prev: float32 ``[..., 128, 2]``: each thread's partial row sum of the earlier
            blocks (not yet reduced over the quad).
        acc_o: float32 ``[..., 128, 2, ncol_o]``: the O accumulator the kernel rescales (its
            row/column view; ``ncol_o`` = head dim / 4).
        scale_log2: float32 scalar: ``softmax_scale * log2(e)`` (FP8 descales folded in).
    Returns:
        ``(scores_scale, p, row_sum, acc_o)``: float32 ``[..., 128, 2]``, ``[..., 128, 2,
        ncol]``, ``[..., 128, 2]``, ``[..., 128, 2, ncol_o]``.

    The H200's sequence (docs/forward.md steps 4, 5 and 6):

    - ``max_get_scale``: ``cur = row_max`` with -inf replaced by 0 (Check_inf);
      ``scores_scale = MUFU.EX2((row_max_prev - cur) * scale_log2)``: an FSUB, then an FMUL
      (the compiler does not contract this one);
    - ``online_softmax``: ``max_scaled = row_max * scale_log2`` (0 where ``row_max`` is -inf);
      ``p = MUFU.EX2(FFMA(scores, scale_log2, -max_scaled))``: the scale is folded into one
      FFMA, one rounding;
    - ``row_sum = FFMA(scores_scale, row_sum_prev, p[..., 0])``, then ``+ p[..., ni]`` for
      ``ni = 1, 2, ...`` in order: softmax.h writes ``row_sum *= scores_scale`` and then a
      sum, and the compiler fuses the multiply with the first add;
    - ``rescale_o``: every element of a row of O is multiplied by that row's scale (FMUL).

    Hints: ``simulator.numerics.ex2(x)`` is MUFU.EX2 as the H200 computes it;
    ``ffma(a, b, c, ftz=True)`` rounds once; broadcast row state against columns with
    ``[..., None]``. Checked on every later block of the 5 recorded bf16 / f16 traces.
    """
    raise NotImplementedError(NOT_WRITTEN.format(n=2, name="online_rescale", func="online_rescale"))


def fp8_exp2(scores: np.ndarray, row_max: np.ndarray, scale_log2: np.float32) -> np.ndarray:
    """Puzzle fp8_exp2 (expert rung): P in an FP8 (e4m3) kernel, with softmax.h's ``Max_offset = 8``.

    Args:
        scores: float32 ``[..., 128, 2, ncol]``: one block's masked scores (row/column view).
        row_max: float32 ``[..., 128, 2]``: the row maximum including this block.
        scale_log2: float32 scalar: ``softmax_scale * log2(e)`` times the q and k descales.
    Returns:
        float32 ``[..., 128, 2, ncol]``: ``P' = 2^8 P``, what the kernel converts to e4m3.

    FP8 keeps 3 mantissa bits and nothing below ``2^-9``: a probability in ``[0, 1]`` would
    waste most of e4m3's range, so the kernel shifts the exponent by 8 inside the FFMA that
    already subtracts the maximum: ``max_scaled = FFMA(row_max, scale_log2, -8)`` (0 where the
    row max is -inf), then ``P' = MUFU.EX2(FFMA(scores, scale_log2, -max_scaled))``. The
    largest element of a row becomes 256 instead of 1 (docs/forward.md "FP8: Max_offset",
    notebooks/05). Puzzle finalize undoes the factor in the LSE.

    Hints: ``-8`` is the ``c`` operand of an FFMA, not a separate add; without the offset the
    result is 256 times too small. Checked on every block of the 2 recorded e4m3 traces.
    """
    raise NotImplementedError(NOT_WRITTEN.format(n=3, name="fp8_exp2", func="fp8_exp2"))


def combine(lse: np.ndarray, o: np.ndarray, allreduce):
    """Puzzle combine (expert rung): the split-KV combine: merge a row's split outputs by their LSE.

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

    The H200's sequence (hopper/flash_fwd_combine_kernel.h; SASS in docs/combine.md):

    1. ``m = allreduce(lse, "max")``; ``cur = m`` with -inf replaced by 0;
    2. ``e = MUFU.EX2(FMUL(FADD(lse, -cur), log2(e)))``: ``expf`` under fast math, with the
       float32 constant ``simulator.numerics.mufu.LOG2E_F32`` (an FMUL, not an FFMA);
    3. ``total = allreduce(e, "sum")``;
    4. ``lse_out = FFMA(MUFU.LG2(total), ln 2, m)`` (``mufu.LN2_F32``; ``logf(total) + m``
       contracted: one rounding, and ``m``, not ``cur``);
    5. ``inv = MUFU.RCP(total)`` where ``total != 0`` (a flushed subnormal and NaN count as
       0), else 0; weights ``w = FMUL(e, inv)``;
    6. ``out = +0``; for each split ``s`` in order, where ``w[s] > 0``:
       ``out = FFMA(w[s], o[s], out)``.

    Hints: subtracting the maximum is what keeps ``e`` finite: without it an LSE of 100 gives
    ``e = inf``. Checked on 29 recorded calls of the real FA3 library (2 to 100 splits, bf16,
    f16 and float32 outputs, empty splits, rows with no split).
    """
    raise NotImplementedError(NOT_WRITTEN.format(n=4, name="combine", func="combine"))


def finalize(row_max: np.ndarray, row_sum: np.ndarray, scale_log2: np.float32, max_offset: int,
             final_scale: np.float32):
    """Puzzle finalize (expert rung): softmax.h's ``finalize``: the quad sum, ``1 / sum`` and the LSE.

    Args:
        row_max: float32 ``[..., 128, 2]``: the final row maximum (quad-uniform).
        row_sum: float32 ``[..., 128, 2]``: each thread's partial row sum after the last block
            (a sum of its own columns only).
        scale_log2: float32 scalar, as in exercise 2.
        max_offset: 0, or 8 in an FP8 kernel (exercise 3).
        final_scale: float32 scalar that O's scale is multiplied by (the v descale in FP8, else 1).
    Returns:
        ``(row_sum, scores_scale, lse)``, float32 ``[..., 128, 2]`` each: the sum over the
        quad, what O is multiplied by, the natural-log LSE.

    The H200's sequence (docs/forward.md "finalize"):

    1. ``total``: butterfly over the quad, ``x = x + shfl_xor(x, 2)`` then
       ``x = x + shfl_xor(x, 1)`` (FADD.FTZ; here the order changes the bits);
    2. ``scores_scale = FMUL(RCP(total), final_scale)``, with 0 instead of ``RCP`` where the
       total is 0 or NaN;
    3. with ``max_offset``, ``total = FMUL(total, 2^-max_offset)``: every P was ``2^8`` too
       large;
    4. ``lse = FFMA(row_max, FMUL(scale_log2, ln 2), FMUL(LG2(total), ln 2))``, -inf where
       the (scaled) total is 0 or NaN.

    Returned ``row_sum`` is ``total`` before step 3. Hints: ``mufu.LN2_F32`` is the float32
    ``ln 2``; ``rcp`` and ``lg2`` default to the H200 too. Checked on the finalize step of the 7
    recorded traces (2 of them e4m3).
    """
    raise NotImplementedError(NOT_WRITTEN.format(n=5, name="finalize", func="finalize"))
