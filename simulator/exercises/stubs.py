"""The ladder's new rungs: stubs a learner fills in, one step past the last.

Each stub says what to compute, on which shapes and dtypes, and roughly how many lines it
takes; it does not say which instructions the device runs: finding them is the puzzle. The
hints (``python -m simulator.exercises check N FILE --hint``) reveal them one at a time. The
tools are the public float32 instructions of :mod:`simulator.numerics` (``fadd fsub fmul ffma
fmax``, each with ``ftz=``; ``convert``; ``mufu.ex2``, ``mufu.lg2``, ``mufu.rcp``) and the warp
model of :mod:`simulator.hw` (``shfl_xor``). The expert rungs (reduce_max, online_rescale,
fp8_exp2, finalize, combine) are in :mod:`simulator.exercises.puzzles`; the list of all of them
is ``python -m simulator.exercises list``.

Shapes of the softmax rungs follow softmax.h's row/column view of a warpgroup's accumulator: 128
threads, each holding ``2`` rows (``mi``) of ``ncol`` columns: scores ``[..., 128, 2, ncol]``,
row state ``[..., 128, 2]``; the four threads of a quad (lanes ``4q .. 4q + 3``) own the same
two rows.
"""

from __future__ import annotations

import numpy as np

NOT_WRITTEN = ("puzzle {name} is a stub: copy simulator.exercises.stubs.{name} into a file, fill it "
               "in, then run: python -m simulator.exercises check {name} FILE.py")


def _todo(name: str):
    return NotImplementedError(NOT_WRITTEN.format(name=name))


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Puzzle: ``a * b + c`` as FA3's kernels compute it (about 1 line).

    FA3 is compiled with ``--use_fast_math``. Return what its float32 code ``a * b + c``
    gives on the H200.

    Args:
        a, b, c: float32 ``[N]``: operand triples, adversarial ones included (subnormals,
            cancellations, ties, inf, NaN).
    Returns:
        float32 ``[N]``.
    """
    raise _todo("fma")


def to_bf16(x: np.ndarray) -> np.ndarray:
    """Puzzle: float32 -> bf16 as the kernel converts P before the PV GEMM (about 1 line).

    Args:
        x: float32 ``[N]``: every bit pattern of a set of 2^20-pattern chunks (zeros,
            subnormals, ties, the largest finite values, inf, NaN, both signs).
    Returns:
        ``ml_dtypes.bfloat16`` ``[N]``: what ``cvt.rn.bf16.f32`` writes.
    """
    raise _todo("to_bf16")


def to_e4m3(x: np.ndarray) -> np.ndarray:
    """Puzzle: float32 -> FP8 e4m3 as an FP8 kernel converts P (about 1 line).

    Args:
        x: float32 ``[N]``: every bit pattern of a set of 2^20-pattern chunks (both signs,
            around e4m3's smallest subnormal, its largest value 448 and above, inf, NaN).
    Returns:
        ``ml_dtypes.float8_e4m3fn`` ``[N]``: what FA3's conversion writes (which form of
        ``cvt`` is the question).
    """
    raise _todo("to_e4m3")


def exp2_row(x: np.ndarray) -> np.ndarray:
    """Puzzle: ``2 ** x`` as the H200's ``exp2f`` under fast math computes it (about 1 line).

    Args:
        x: float32 ``[N]``: half uniform over all bit patterns, half in softmax's range
            ``[-30, 8]``.
    Returns:
        float32 ``[N]``. Correctly rounded is not the answer: compare bits.
    """
    raise _todo("exp2_row")


def fast_expf(x: np.ndarray) -> np.ndarray:
    """Puzzle: ``expf(x)`` (natural base) as a fast-math build computes it (about 1-2 lines).

    The split-KV combine kernel calls ``expf``; under ``--use_fast_math`` it is not a call to a
    library function. Return its H200 bits.

    Args:
        x: float32 ``[N]``: half uniform over all bit patterns, half in ``[-21, 6]``.
    Returns:
        float32 ``[N]``.
    """
    raise _todo("fast_expf")


def quad_max(m: np.ndarray) -> np.ndarray:
    """Puzzle: the row maximum of a quad, exchanged through shuffles (about 2-3 lines).

    Args:
        m: float32 ``[..., 128, 2]``: each thread's maximum over its own columns of its two
            rows (and the running maximum). Thread axis -2.
    Returns:
        float32 ``[..., 128, 2]``: each row's maximum over the four threads of its quad, the
        same value in all four (``row_max`` after softmax.h's ``reduce_max``).
    """
    raise _todo("quad_max")


def quad_sum(s: np.ndarray) -> np.ndarray:
    """Puzzle: the row sum of a quad, as ``finalize`` adds the four threads' parts (2-3 lines).

    Args:
        s: float32 ``[..., 128, 2]``: each thread's partial row sum (its own columns of every
            K/V block). Thread axis -2.
    Returns:
        float32 ``[..., 128, 2]``: each row's total, the same bits in the four threads of the
        quad. A float32 sum depends on its order: the device's order is the puzzle.
    """
    raise _todo("quad_sum")


def scale_apply_exp2(scores: np.ndarray, row_max: np.ndarray, scale_log2: np.float32) -> np.ndarray:
    """Puzzle: softmax.h's ``scale_apply_exp2``: P of one K/V block (about 3 lines).

    ``P = 2 ** (scores * scale_log2 - row_max * scale_log2)``, a row's largest element giving
    1, as the bf16 / f16 kernel's fast-math code computes it.

    Args:
        scores: float32 ``[..., 128, 2, ncol]``: the block's masked scores (-inf where masked).
        row_max: float32 ``[..., 128, 2]``: the row maximum including this block (quad-uniform);
            -inf for a row that has seen no key yet.
        scale_log2: float32 scalar: ``softmax_scale * log2(e)``.
    Returns:
        float32 ``[..., 128, 2, ncol]``: P (unnormalised).
    """
    raise _todo("scale_apply_exp2")


def max_get_scale(scores: np.ndarray, row_max_prev: np.ndarray | None, scale_log2: np.float32):
    """Puzzle: softmax.h's ``max_get_scale`` on a CTA's first block and on a later one (5-8 lines).

    Args:
        scores: float32 ``[..., 128, 2, ncol]``: the block's masked scores.
        row_max_prev: float32 ``[..., 128, 2]``: the row maximum before this block (quad-uniform,
            may be -inf), or None on the CTA's first K/V block.
        scale_log2: float32 scalar: ``softmax_scale * log2(e)``.
    Returns:
        ``(row_max, scores_scale)``, float32 ``[..., 128, 2]`` each: the new row maximum, and
        the factor ``2 ** ((row_max_prev - row_max) * scale_log2)`` that the earlier blocks'
        sum and O are multiplied by (1 on the first block).
    """
    raise _todo("max_get_scale")


def backward_ds(p: np.ndarray, dp: np.ndarray, dpsum: np.ndarray, dtanh: np.ndarray | None):
    """Puzzle: the backward's dS of one m_block x one key block (about 2-3 lines).

    ``dS = P * (dP - dPsum)``, per element, with ``dPsum`` the row's ``sum(dO * O)``; with a
    softcap, dS also carries tanh's derivative.

    Args:
        p: float32 ``[rows, keys]``: the recomputed probabilities of the tile.
        dp: float32 ``[rows, keys]``: ``dO V^T`` of the tile.
        dpsum: float32 ``[rows]``: each row's ``dPsum``.
        dtanh: float32 ``[rows, keys]``: ``1 - tanh^2`` of the softcapped scores, or None
            without softcap.
    Returns:
        float32 ``[rows, keys]``: dS as the backward kernel computes it on the H200.
    """
    raise _todo("backward_ds")


def rescale_o(acc_o: np.ndarray, scores_scale: np.ndarray) -> np.ndarray:
    """Puzzle: softmax.h's ``rescale_o``: shrink O when a row's maximum grew (about 1 line).

    After a K/V block raised a row's maximum, everything the earlier blocks added into that
    row of O was weighted for the old maximum: each of the row's elements is multiplied by
    the row's ``scores_scale`` (puzzle max_get_scale's second result).

    Args:
        acc_o: float32 ``[..., 128, 2, ncol_o]``: the O accumulator in the row/column view
            (``ncol_o`` = head dim / 4), as the rescale finds it.
        scores_scale: float32 ``[..., 128, 2]``: each thread's two rows' factors.
    Returns:
        float32 ``[..., 128, 2, ncol_o]``: O rescaled, as the H200 computes it.
    """
    raise _todo("rescale_o")


def online_softmax(blocks: list, scale_log2: np.float32):
    """Puzzle: the online softmax over a CTA's first two K/V blocks, carried from one to the next
    (about 10 lines).

    The kernel visits a CTA's key blocks one after another and keeps, per thread, each row's
    running maximum and its partial row sum (its own columns only, not yet added over the
    quad). On the first block the maximum and sum start from that block alone; on the second
    the earlier sum is rescaled for the new maximum before the block's P joins it. Unlike
    the rungs before, nothing is handed back from the device between the two blocks: what
    your first block computes is what your second block reads.

    Args:
        blocks: two float32 arrays ``[..., 128, 2, ncol]``: the masked scores of the CTA's first
            and second K/V blocks, in the order the kernel visits them (the row/column view).
        scale_log2: float32 scalar: ``softmax_scale * log2(e)``.
    Returns:
        ``(row_max, scores_scale, p, row_sum)``, each stacked over the two blocks: float32
        ``[2, ..., 128, 2]``, ``[2, ..., 128, 2]``, ``[2, ..., 128, 2, ncol]``,
        ``[2, ..., 128, 2]``: after each block, the row maximum (quad-uniform), the factor of
        the earlier blocks (1 on the first), P (unnormalised) and each thread's partial sum.
    """
    raise _todo("online_softmax")


def wgmma_dot_add(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Puzzle: one tensor-core instruction, ``wgmma.m64n8k16.f32.bf16.bf16`` (about 15 lines).

    ``D = A B + C`` for a 64 x 8 tile with a reduction of 16: each output is a dot product of
    16 bf16 pairs plus a float32 accumulator. The tensor core does not add them one by one,
    nor exactly: find what it keeps of each term and how it rounds the result.

    Args:
        a: ``ml_dtypes.bfloat16`` ``[T, 64, 16]``: A of T instructions (random values, wide
            exponent spreads, cancellations, subnormals, ties, inf and NaN).
        b: ``ml_dtypes.bfloat16`` ``[T, 16, 8]``.
        c: float32 ``[T, 64, 8]``: the accumulators.
    Returns:
        float32 ``[T, 64, 8]``: D as the H200 computes it (every NaN the canonical
        ``0x7fffffff``).
    """
    raise _todo("wgmma_dot_add")


def cta_mainloop(q: np.ndarray, k_blocks: np.ndarray, v_blocks: np.ndarray, keep: np.ndarray,
                 scale_log2: np.float32):
    """Puzzle: one CTA of FA3's forward, from its Q tile to O and the LSE (about 25 lines).

    The CTA's warpgroups (``W``, 64 query rows each) visit its key blocks in the order given:
    for each block the scores ``Q K^T`` (tensor cores), the mask, the online softmax, O
    rescaled and ``P V`` added (tensor cores, P in the input format); after the last block
    ``finalize`` and O's last scale. Everything before is a tool: ``simulator.mma.gemm`` for
    the GEMMs, ``simulator.hw.rowcol_view`` between a ``64 x N`` tile and each thread's
    rows and columns, and your solutions of the earlier puzzles.

    Args:
        q: ``[W, 64, d]``: the CTA's query rows (bf16 or f16, as the kernel reads them).
        k_blocks: ``[B, N, d]``: the key blocks, in the order the kernel visits them (the
            last first).
        v_blocks: ``[B, N, dv]``: the value blocks, in the same order.
        keep: bool ``[B, W, 64, N]``: False where the mask hides a key from a row (causal,
            past the sequence's end).
        scale_log2: float32 scalar: ``softmax_scale * log2(e)``.
    Returns:
        ``(o, lse)``: float32 ``[W, 64, dv]``: O in float32 before the epilogue's conversion,
        and float32 ``[W, 64]``: each row's natural-log LSE.
    """
    raise _todo("cta_mainloop")
