"""``Softmax`` of FlashAttention-4's sm90 forward (``flash_attn/cute/softmax.py``, ``Softmax``
with ``arch=90``), on the same warpgroup state as FA3's (:class:`simulator.flash.softmax.Softmax`).

The algorithm is FA3's; the compiled arithmetic differs where CuTe DSL lowers it differently
from nvcc's ``--use_fast_math`` (read in the PTX and SASS of FA4 4.0.0b36's sm90 kernels,
``scripts/fa4_ptx.sh``; docs/fa4.md):

* no ``.ftz`` on the float32 arithmetic: ``mul.f32`` / ``sub.f32`` / ``add.f32`` /
  ``fma.rn.f32`` (ptxas contracts ``s * scale_log2 - max_scaled`` into one FFMA, and the
  row-sum rescale with the first add into one ``fma.rn``), while the MUFU forms keep theirs
  (``ex2.approx.ftz``, ``lg2.approx.ftz``, ``rcp.approx.ftz``);
* the quad sum of ``finalize`` shuffles at offset 1 then 2 (``utils.warp_reduce``: offsets
  ``1 << i``), FA3's at 2 then 1;
* ``finalize``: ``1/sum`` is ``rcp(sum)``, or ``rcp(1)`` for an empty (0 or NaN) sum, times
  ``final_scale``; ``lse = (row_max * scale_log2 + lg2(sum)) * ln2`` with the first two
  contracted, ``fma.rn(scale_log2, row_max, lg2(sum))``, then ``mul`` by ln2; -inf when empty;
* a learnable sink enters at ``finalize``: ``sink_l2 = sink * log2(e)``, ``m = row_max *
  scale_log2`` (``sink_l2`` for a row whose max is -inf), ``sum += ex2(sink_l2 - m)`` and
  ``lse = (m + lg2(sum)) * ln2`` (no contraction: ``m`` is a select).

Every block's softmax runs with Check_inf (FA4 passes no flag to ``online_softmax``).
"""

from __future__ import annotations

import numpy as np

from ..hw import FULL_MASK, shfl_sync, thread_reduce
from ..numerics import fadd, ffma, fmul, fsub
from ..numerics.mufu import ex2, lg2, rcp
from .constants import LN2_F32
from .softmax import Softmax

_NEG_INF = np.float32(-np.inf)
LOG2E_F32 = np.float32(1.4426950408889634)


class Fa4Softmax(Softmax):
    """FA4's sm90 online softmax (module docstring); constructor and state as
    :class:`~simulator.flash.softmax.Softmax` (``max_offset`` 0: FA4 has no FP8 on sm90). Only
    the NumPy specification evaluates it: the compiled twins hold FA3's ``.ftz`` forms."""

    def fusable(self) -> bool:
        return False

    def max_get_scale(self, scores: np.ndarray, is_first: bool, check_inf: bool = True) -> np.ndarray:
        """``row_max`` over the thread's columns then its quad (max is exact in any order);
        later blocks: ``scale = ex2((prev - cur) * scale_log2)``, ``cur`` 0 for a -inf max."""
        if is_first:
            self.row_max = _quad_max(thread_reduce(scores, op="max", zero_init=True, ftz=False))
            self._row_sum_scale = None
            return np.ones_like(self.row_max)
        prev = self.row_max
        self.row_max = _quad_max(thread_reduce(scores, prev, op="max", zero_init=False, ftz=False))
        cur = np.where(self.row_max == _NEG_INF, np.float32(0), self.row_max) if check_inf \
            else self.row_max
        scale = ex2(fmul(fsub(prev, cur), self._scale()), model=self.mufu)
        self._row_sum_scale = scale
        return scale

    def online_softmax(self, scores: np.ndarray, is_first: bool, check_inf: bool = True) -> np.ndarray:
        """``p = ex2(fma(s, scale_log2, -max_scaled))``, ``max_scaled = max * scale_log2`` (0
        for a -inf max); the row sum ``0 + p0 + p1 + ...`` (first block) or
        ``fma(row_sum, scale, p0) + p1 + ...``, thread-local, in column order."""
        scale = self._scale()
        cur = np.where(self.row_max == _NEG_INF, np.float32(0), self.row_max) if check_inf \
            else self.row_max
        max_scaled = fmul(cur, scale)
        p = ex2(ffma(scores, scale[..., None], -max_scaled[..., None]), model=self.mufu)
        if is_first:
            self.row_sum = thread_reduce(p, np.zeros(p.shape[:-1], np.float32), op="sum",
                                         zero_init=False, ftz=False)
        else:
            start = ffma(self.row_sum, self._row_sum_scale, p[..., 0])
            self.row_sum = start if p.shape[-1] == 1 else thread_reduce(
                p[..., 1:], start, op="sum", zero_init=False, ftz=False)
        return p

    def finalize(self, final_scale=1.0, sink=None) -> np.ndarray:
        """Quad-sum ``row_sum`` (offsets 1 then 2), fold the ``sink`` logits in (float32
        broadcasting against ``row_max``, or None), compute ``lse``; return the O scale."""
        total = _quad_sum(self.row_sum)
        scale = self._scale()
        if sink is None:
            m = None
        else:
            sink_l2 = fmul(np.asarray(sink, np.float32), LOG2E_F32)
            m = np.where(self.row_max == _NEG_INF, sink_l2, fmul(self.row_max, scale))
            total = fadd(total, ex2(fsub(sink_l2, m), model=self.mufu))
        self.row_sum = total
        empty = ~(total != 0)  # setp.ne: false for 0 and NaN
        inv = rcp(np.where(empty, np.float32(1), total), model=self.mufu)
        scores_scale = fmul(inv, np.asarray(final_scale, dtype=np.float32))
        log_sum = lg2(total, model=self.mufu)
        with np.errstate(invalid="ignore"):
            lse = ffma(scale, self.row_max, log_sum) if m is None else fadd(m, log_sum)
            lse = fmul(lse, LN2_F32)
        self.lse = np.where(empty, _NEG_INF, lse).astype(np.float32)
        return scores_scale


def empty_row_lse(sink, mufu: str) -> np.ndarray:
    """The LSE :meth:`Fa4Softmax.finalize` gives a row that saw no key (max -inf, sum 0) with
    the learnable ``sink`` logits (float32, any shape): ``(sink_l2 + lg2(0 + ex2(0))) * ln2``."""
    sink_l2 = fmul(np.asarray(sink, np.float32), LOG2E_F32)
    total = fadd(np.zeros_like(sink_l2), ex2(fsub(sink_l2, sink_l2), model=mufu))
    return fmul(fadd(sink_l2, lg2(total, model=mufu)), LN2_F32)


def rescale_o_fa4(acc_o: np.ndarray, scores_scale_rows: np.ndarray) -> np.ndarray:
    """``acc_O[row, :] *= row_scale[row]``: ``mul.f32`` (no ``.ftz``) of ``[..., rows, d]`` by
    ``[..., rows]``."""
    return fmul(acc_o, scores_scale_rows[..., None])


def _quad_max(x: np.ndarray) -> np.ndarray:
    """``warp_reduction_max`` over a quad (any order gives the same maximum)."""
    for offset in (2, 1):
        x = np.fmax(x, shfl_sync(x, "bfly", offset, 0x1F, FULL_MASK, axis=-2))
    return x.astype(np.float32)


def _quad_sum(x: np.ndarray) -> np.ndarray:
    """``utils.warp_reduce(row_sum, add, width=4)``: offsets 1 then 2, own value first."""
    for offset in (1, 2):
        x = fadd(x, shfl_sync(x, "bfly", offset, 0x1F, FULL_MASK, axis=-2))
    return x
