"""``Softmax`` of hopper/softmax.h on emulated warpgroups, with the H200's arithmetic.

State per warpgroup thread: ``row_max`` and ``row_sum``, float32 ``[..., 128, kNRows]``
(``kNRows = 2`` rows per thread for one m64nNk16 accumulator tile). Score tensors are the
row/column view of the accumulator, ``[..., 128, kNRows, ncol]``
(:func:`simulator.hw.rowcol_view`). Every float32 operation is the ``.ftz`` instruction that
``--use_fast_math`` produces, and exp2 / 1/x / log2 are the MUFU models of
:mod:`simulator.numerics.mufu` (a GPU's calibrated ones, or ``"ideal"`` for correctly rounded ones).
The exact sequence is docs/forward.md, steps 4, 5 and "finalize"; hopper/softmax.h is the
source, and the SASS of FA3's sm_90 kernels shows how it compiles (the fused row_sum rescale).

The specification of each step is written here. The per-element parts of a step (the row
maximum, P and its row sums, the O rescale, the fused block step) are first offered to the
launch's evaluator (:mod:`simulator.flash.evaluator`): the compiled one evaluates them with the
same bits, the specification's returns None and the NumPy below runs. Row-state operations (one
value per thread and row) stay here. With ``exact`` the steps take the generic path of
:mod:`simulator.flash.exact`.
"""

from __future__ import annotations

import numpy as np

from ..gpus import DEFAULT_GPU
from ..hw import quad_allreduce, thread_reduce
from ..numerics import ffma, fmul, fsub
from ..numerics.mufu import ex2, lg2, rcp
from . import exact as _exact
from .constants import LN2_F32
from .evaluator import SPECIFICATION, Exact

_NEG_INF = np.float32(-np.inf)
_SUM_SCALE_FP8 = np.float32(2.0**-8)


class Softmax:
    """Online-softmax state of a batch of warpgroups (``Softmax<kNRows, Max_offset>``).

    Args:
        batch_shape: leading axes (e.g. ``(ctas, warpgroups)``).
        nrow: kNRows (2 for one m64 tile).
        scale_log2: float32 ``softmax_scale_log2``, a scalar or an array broadcasting against
            ``batch_shape + (1, 1)`` (one value per CTA when FP8 descales are folded in).
        max_offset: 0, or 8 for FP8 (``Max_offset``).
        mufu: the MUFU model, a GPU key (:mod:`simulator.gpus`) or ``"ideal"``.
        exact: None (the H200's arithmetic), or a :class:`simulator.flash.exact.Exactness`:
            the methods take :mod:`simulator.flash.exact`'s generic path, with float64 where
            its switches say.
        evaluator: keyword-only: the launch's evaluator (:mod:`simulator.flash.evaluator`;
            its ``exact`` is taken when ``exact`` is None); default the NumPy specification.
    Attributes:
        row_max, row_sum: float32 ``batch_shape + (128, nrow)``; ``row_sum`` holds thread-local
            partial sums until :meth:`finalize` reduces it over the quad; between
            :meth:`max_get_scale` and :meth:`online_softmax` it is the previous block's sum.
        lse: after :meth:`finalize`, float32 ``batch_shape + (128, nrow)``, natural log.
    """

    def __init__(self, batch_shape: tuple[int, ...], nrow: int, scale_log2, max_offset: int = 0,
                 mufu: str = DEFAULT_GPU, exact=None, *, evaluator=None):
        if max_offset not in (0, 8):
            raise ValueError(f"max_offset: expected 0 or 8, got {max_offset!r}")
        evaluator = _evaluator(exact, evaluator)
        exact = evaluator.exact
        self.evaluator = evaluator
        shape = tuple(batch_shape) + (128, nrow)
        self.row_max = np.full(shape, _NEG_INF, dtype=np.float32)
        self.row_sum = np.zeros(shape, dtype=np.float32)
        self.ops = None if exact is None else _exact.Ops(exact, mufu)
        self.scale_log2 = np.asarray(scale_log2, dtype=np.float32) if exact is None else \
            self.ops.regs(scale_log2)
        self.max_offset = max_offset
        self.mufu = mufu
        self.lse: np.ndarray | None = None
        self._row_sum_scale: np.ndarray | None = None  # scores_scale waiting for online_softmax
        # scale_log2 per batch entry, where it is one value for all threads and rows (what
        # the compiled block step takes)
        wide = np.broadcast_to(self.scale_log2, shape) if exact is None else None
        self._entry_scale = (np.ascontiguousarray(wide[..., 0, 0]) if wide is not None and
                             (wide == wide[..., :1, :1]).all() else None)

    # ---- max_get_scale -------------------------------------------------------------------------
    def max_get_scale(self, scores: np.ndarray, is_first: bool, check_inf: bool = True) -> np.ndarray:
        """Update ``row_max`` with ``scores`` [..., 128, nrow, ncol]; return ``scores_scale``.

        First block: ``row_max`` = quad-allreduced row maximum, scale 1. Later blocks:
        ``scale = ex2((prev - cur) * scale_log2)`` with ``cur`` = 0 when the new max is -inf
        and ``check_inf``. ``row_sum *= scale`` is not done here: the compiled kernel fuses it
        into the first add of :meth:`online_softmax` (one FFMA), so ``row_sum`` still holds the
        previous block's sum after this step (docs/forward.md, step 4).
        """
        if self.ops is not None:
            return _exact.max_get_scale(self, scores, is_first, check_inf)
        if is_first:
            self.row_max = _row_max(self.evaluator, scores, None)
            self._row_sum_scale = None
            return np.ones_like(self.row_max)
        prev = self.row_max
        self.row_max = _row_max(self.evaluator, scores, prev)
        cur = self.row_max
        if check_inf:
            cur = np.where(cur == _NEG_INF, np.float32(0), cur)
        scale = ex2(fmul(fsub(prev, cur, ftz=True), self._scale(), ftz=True), model=self.mufu)
        self._row_sum_scale = scale
        return scale

    # ---- online_softmax ------------------------------------------------------------------------
    def online_softmax(self, scores: np.ndarray, is_first: bool, check_inf: bool = True) -> np.ndarray:
        """scale_apply_exp2 then a thread-local reduce_sum; returns P (float32, same shape).

        ``p = ex2(ffma(s, scale_log2, -max_scaled))`` with ``max_scaled = fmul(max, scale_log2)``
        (``ffma(max, scale_log2, -8)`` with Max_offset 8), 0 for a -inf max under ``check_inf``.
        First block: ``row_sum = p[0] + p[1] + ...``. Later blocks: ``row_sum =
        ffma(scores_scale, row_sum, p[0]) + p[1] + ...``: the compiler contracts softmax.h's
        ``row_sum *= scores_scale`` with the first add of ``reduce_sum`` (FFMA.FTZ in the SASS
        of every sm_90 kernel of FA3; docs/forward.md, step 5).
        """
        if self.ops is not None:
            return _exact.online_softmax(self, scores, is_first, check_inf)
        scale = self._scale()
        if self.max_offset:
            max_scaled = ffma(self.row_max, scale, np.float32(-self.max_offset), ftz=True)
        else:
            max_scaled = fmul(self.row_max, scale, ftz=True)
        if check_inf:
            max_scaled = np.where(self.row_max == _NEG_INF, np.float32(0), max_scaled)
        p = self.evaluator.scaled_exp2(scores, scale, -max_scaled, self.mufu)  # a twin, or None
        if p is None:
            p = ex2(ffma(scores, scale[..., None], -max_scaled[..., None], ftz=True),
                    model=self.mufu)
        self.add_row_sum(p, is_first)
        return p

    def add_row_sum(self, p: np.ndarray, is_first: bool) -> None:
        """``reduce_sum`` of P into ``row_sum``, thread-local: the thread's columns in order;
        for a later block ``row_sum * scores_scale`` fused with the first add (one FFMA.FTZ,
        as the compiled kernels contract softmax.h's rescale and the first add)."""
        twin = self.evaluator.row_sum(p, None if is_first else self._row_sum_scale,
                                      None if is_first else self.row_sum)
        if twin is not None:
            self.row_sum = twin
        elif is_first:
            self.row_sum = thread_reduce(p, op="sum", zero_init=True)
        else:
            start = ffma(self._row_sum_scale, self.row_sum, p[..., 0], ftz=True)
            self.row_sum = start if p.shape[-1] == 1 else thread_reduce(
                p[..., 1:], start, op="sum", zero_init=False)

    # ---- the compiled block step ---------------------------------------------------------------
    def fusable(self) -> bool:
        """Whether :meth:`block_step` runs: the H200's arithmetic (no ``exact``), one
        scale_log2 per batch entry, an evaluator with a fused step for the MUFU model (the
        compiled one, where the model's table packs)."""
        return (self.ops is None and self._entry_scale is not None
                and self.evaluator.block_step_ready(self.mufu))

    def block_step(self, s: np.ndarray, positions: np.ndarray, is_first: bool,
                   check_inf: bool, fmt: str, emin: int):
        """:meth:`max_get_scale`, :meth:`online_softmax` and P's conversion to ``fmt`` in one
        call of the evaluator (the compiled one: ``simulator.engine.softmax_step``), reading
        the scores in matrix order; only where :meth:`fusable`.

        Args:
            s: float32 ``batch_shape + (M, N)``: the scores of each batch entry's M x N tile
                (batch_shape ``(ctas, warpgroups)``).
            positions: int ``[128, nrow, ncol]``: the tile position of each thread's register
                (``rowcol_view``'s ``row * N + col``).
            is_first, check_inf: as :meth:`max_get_scale`.
            fmt, emin: P's format and the P V instruction's exponent floor.
        Returns:
            ``(scores_scale, p)``: float32 ``batch_shape + (128, nrow)``, and P converted and
            decoded as the P V GEMM's A (``engine.operands.Decoded`` [ctas, warpgroups * M,
            N]). The state is updated as by the two steps.
        """
        self.row_max, self.row_sum, scale, p = self.evaluator.block_step(
            s, positions, self._entry_scale, self.row_max, self.row_sum, is_first, check_inf,
            self.max_offset, fmt, emin, self.mufu)
        self._row_sum_scale = None if is_first else scale
        return scale, p

    # ---- finalize ------------------------------------------------------------------------------
    def finalize(self, final_scale=1.0) -> np.ndarray:
        """Quad-allreduce ``row_sum``, compute ``lse``; return ``scores_scale`` (1/sum * final).

        ``inv = 0`` when the sum is 0 or NaN, else ``rcp(sum)``; with Max_offset the sum is
        multiplied by 2^-8 before the LSE; ``lse = ffma(row_max, scale_log2 * ln2,
        lg2(sum) * ln2)``, -inf when the (scaled) sum is 0 or NaN.
        """
        if self.ops is not None:
            return _exact.finalize(self, final_scale)
        total = quad_allreduce(self.row_sum, "sum")
        self.row_sum = total
        empty = (total == 0) | np.isnan(total)
        inv = np.where(empty, np.float32(0), rcp(np.where(empty, np.float32(1), total), model=self.mufu))
        scores_scale = fmul(inv, np.asarray(final_scale, dtype=np.float32), ftz=True)
        if self.max_offset:
            total = fmul(total, _SUM_SCALE_FP8, ftz=True)
        empty = (total == 0) | np.isnan(total)
        ln2_scale = fmul(self._scale(), LN2_F32, ftz=True)
        log_sum = fmul(lg2(np.where(empty, np.float32(1), total), model=self.mufu), LN2_F32, ftz=True)
        lse = ffma(self.row_max, ln2_scale, log_sum, ftz=True)
        self.lse = np.where(empty, _NEG_INF, lse).astype(np.float32)
        return scores_scale

    def _scale(self) -> np.ndarray:
        """scale_log2 broadcast to ``[..., 128, nrow]``-compatible shape."""
        return np.broadcast_to(self.scale_log2, self.row_max.shape) if self.scale_log2.ndim else \
            np.full(self.row_max.shape, self.scale_log2, dtype=np.float32)


def rescale_o(acc_o: np.ndarray, scores_scale_rows: np.ndarray, exact=None, *,
              evaluator=None) -> np.ndarray:
    """``acc_o[row, :] *= scores_scale[row]`` with FMUL.FTZ.

    Args:
        acc_o: float32 accumulator as a matrix ``[..., rows, d]``.
        scores_scale_rows: float32 ``[..., rows]``: each row's scale (the quad-identical value
            its owner threads hold).
        exact: None, or a :class:`simulator.flash.exact.Exactness` (float64 when its ``ffma``).
        evaluator: keyword-only: the launch's evaluator (:mod:`simulator.flash.evaluator`);
            default the NumPy specification (or the exact one, with ``exact``).
    """
    out = _evaluator(exact, evaluator).scale_rows(acc_o, scores_scale_rows)  # a twin, or None
    return out if out is not None else fmul(acc_o, scores_scale_rows[..., None], ftz=True)


def _row_max(evaluator, scores, prev):
    """The row maximum over a thread's columns (after ``prev``, none when None), then its
    quad: the evaluator's twin, or ``thread_reduce`` + ``quad_allreduce``."""
    twin = evaluator.row_max(scores, prev)
    if twin is not None:
        return twin
    if prev is None:
        return quad_allreduce(thread_reduce(scores, op="max", zero_init=True), "max")
    return quad_allreduce(thread_reduce(scores, prev, op="max", zero_init=False), "max")


def _evaluator(exact, evaluator):
    """The evaluator a step runs on: ``evaluator``, else the specification's, made exact by
    ``exact`` (a caller outside a launch names one or the other).

    Raises:
        ValueError: both given, with different Exactness.
    """
    if evaluator is None:
        return SPECIFICATION if exact is None else Exact(exact, SPECIFICATION)
    if exact is not None and exact != evaluator.exact:
        raise ValueError("exact: give the Exactness or an evaluator that holds it, not both")
    return evaluator
