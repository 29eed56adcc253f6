"""One CTA of the emulated backward, step by step (``trace=(batch, head, n_block)`` of
:func:`simulator.flash.backward`): what ``mainloop_bwd_sm90_tma_gmma_ws.hpp`` holds in its
registers per m_block, as float32 arrays."""

from __future__ import annotations

import numpy as np


class CtaTrace:
    """The steps of one backward CTA (``trace=(batch, head, n_block)`` of :func:`backward`):
    per visited m_block, in visiting order, float32 arrays [kBlockM, kBlockN] ``s`` (Q K^T),
    ``dtanh`` (softcap only: 1 - tanh^2 before the mask), ``scores`` (after softcap and mask,
    -inf where masked), ``p``, ``dp`` (dO V^T), ``ds`` (before rounding) and [kBlockM, kd]
    ``dq_partial`` (dS K, before the reduce-add); after the loop ``dk_accum`` / ``dv_accum``
    [kBlockN, kd] (dK before ``* softmax_scale``). ``m_blocks`` lists the visited m_blocks."""

    def __init__(self, cta: int, where: tuple[int, int, int]):
        self.cta = cta
        self.where = where
        self.m_blocks: list[int] = []
        self.steps: dict[str, list[np.ndarray]] = {}
        self.final: dict[str, np.ndarray] = {}

    def record(self, m_block: int, ctas: np.ndarray, arrays: dict) -> None:
        hit = np.flatnonzero(ctas == self.cta)
        if hit.size == 0:
            return
        self.m_blocks.append(int(m_block))
        for name, x in arrays.items():
            self.steps.setdefault(name, []).append(np.array(x[hit[0]], np.float32))

    def finish(self, dk: np.ndarray, dv: np.ndarray, first: int = 0) -> None:
        """Keep the final accumulators when this CTA is among ``dk`` / ``dv`` [C, kBlockN,
        kd], the CTAs ``first`` to ``first + C - 1`` (a chunk's)."""
        if first <= self.cta < first + len(dk):
            self.final = {"dk_accum": dk[self.cta - first].copy(),
                          "dv_accum": dv[self.cta - first].copy()}

    def arrays(self) -> dict[str, np.ndarray]:
        """``{name: [steps, ...] float32}`` for the per-m_block steps (empty [0] when the CTA
        visits no m_block), the final accumulators and ``m_blocks`` (int64)."""
        out = {name: np.stack(v) for name, v in self.steps.items()}
        return {**out, **self.final, "m_blocks": np.array(self.m_blocks, np.int64)}


def make_tracer(cfg, trace):
    """A :class:`CtaTrace` for ``trace = (batch, head, n_block)`` of a backward on ``cfg``
    (a :class:`simulator.flash.backward.BackwardConfig`), or None when ``trace`` is None.

    Raises:
        ValueError: not a tuple of three ints, or a CTA outside the launch's grid.
    """
    if trace is None:
        return None
    if (not isinstance(trace, tuple) or len(trace) != 3
            or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in trace)):
        raise ValueError(f"trace: expected a tuple (batch, head, n_block) of ints, got {trace!r}")
    b, h, n = (int(i) for i in trace)
    for name, i, size in (("batch", b, cfg.batch), ("head", h, cfg.heads),
                          ("n_block", n, cfg.n_blocks)):
        if not 0 <= i < size:
            raise ValueError(f"trace: {name} {i} out of range: this call has {size} "
                             f"({cfg.tiles.describe()})")
    return CtaTrace((b * cfg.heads + h) * cfg.n_blocks + n, (b, h, n))
