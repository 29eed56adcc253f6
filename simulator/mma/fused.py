"""The fused dot-add the emulator runs: :mod:`simulator.mma.spec`'s arithmetic, evaluated by
the fastest exact path for the instruction family.

Per sequential fused step (``spec.k_step_positions``), families whose clean window is wide
(bf16: :func:`simulator.mma.fast.preferred`) go through the BLAS path of
:mod:`simulator.mma.fast`; the others through the per-term loop of
:mod:`simulator.mma.termloop`. Both give the bits of :func:`simulator.mma.spec.spec_dot_add`
(``tests/test_mma.py``, ``tests/test_mma_fast.py``, and ``verify --topic mma`` on every
recorded probe tile).
"""

from __future__ import annotations

import numpy as np

from .. import engine
from . import fast
from .spec import FusedDotAdd, dot_add_by_steps, round_to_float32
from .termloop import term_loop_step

__all__ = ["FusedDotAdd", "fused_dot_add", "fused_step", "round_to_float32"]


def fused_dot_add(a: np.ndarray, b: np.ndarray, c: np.ndarray, p: FusedDotAdd, *,
                  compiled: bool | None = None) -> np.ndarray:
    """``d[..., m, n] = fused(sum_k a[..., m, k] * b[..., k, n] + c[..., m, n])``.

    Args:
        a: float64 array [..., M, K] holding the exact values of the narrow A operands.
        b: float64 array [..., K, N].
        c: float32 array [..., M, N].
        p: the arithmetic parameters (``simulator.mma.instructions.PARAMS``).
        compiled: keyword-only: None (the engine setting decides for this call's work:
            :mod:`simulator.engine`), True (the compiled dot-add where it takes ``p``) or
            False (the NumPy evaluation): what a launch's evaluator passes.
    Returns:
        float32 array [..., M, N], the bits of :func:`simulator.mma.spec.spec_dot_add`.
    Raises:
        ValueError: ``p.k_steps`` does not cover K.
    """
    k = a.shape[-1]
    if compiled is None:
        compiled = engine.numba_dot_add(p, a.size * b.shape[-1])
    if compiled and k and engine.dot_add_supported(p):
        return engine.dot_add(a, b, np.asarray(c, dtype=np.float32), p, k)
    return dot_add_by_steps(a, b, c, p, fused_step)


def fused_step(a: np.ndarray, b: np.ndarray, c: np.ndarray, p: FusedDotAdd) -> np.ndarray:
    """One fused step (C inside the sum) by the path :func:`fast.preferred` picks for ``p``,
    where its operands are narrow values (:func:`fast.holds_operands`; else the per-term loop,
    which takes any float64 values)."""
    if fast.preferred(p) and fast.holds_operands(a, b, p):
        return fast.fused_step(a, b, c, p)
    return term_loop_step(a, b, c, p)
