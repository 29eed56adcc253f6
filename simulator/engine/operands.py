"""GEMM operands decoded once and shared: the compiled dot-add (:func:`.dotadd.gemm_rows`) on
operands that several GEMMs, or several batch entries of one GEMM, read.

The forward's K and V blocks are read by every CTA of a (batch, kv head) that visits them, and
a CTA's Q by each of its K/V blocks; decoding them once (values and exponent codes) instead of
once per CTA and block leaves the per-output arithmetic as it is, so the bits are
:func:`.dotadd.gemm`'s.

Importing this module imports numba (through :mod:`.dotadd`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import dotadd
from .decode import operand as _values_and_codes
from .decode import step_maxima


@dataclass
class Decoded:
    """A GEMM operand decoded for :func:`gemm`: ``vals`` [R, rows, cols] (the exact values:
    float32 for a narrow format, float64 for float64 / float32 input), ``codes`` int16 of the
    same shape (the exponent pass's codes, ``decode.exp_or_code``), ``index`` int64 [B]: the
    entry of ``vals`` that each of the GEMM's B batch entries reads."""

    vals: np.ndarray
    codes: np.ndarray
    index: np.ndarray
    _step_max: np.ndarray | None = field(default=None, repr=False)

    def step_max(self) -> np.ndarray:
        """int32 [R, rows // 16]: the largest code of each 16 rows (``decode.step_maxima``;
        read where the operand is a GEMM's B, its rows the K positions), computed once."""
        if self._step_max is None:
            self._step_max = step_maxima(self.codes, 16)
        return self._step_max


def supports(p, kblock: int) -> bool:
    """Whether :func:`gemm` evaluates the parameters ``p`` (a ``FusedDotAdd``) with k =
    ``kblock``: one fused step per k-block with C inside the sum (every wgmma family)."""
    return dotadd.supports(p) and not p.k_steps and p.c_in_sum and kblock in (16, 32)


def decode(x: np.ndarray, p, index=None) -> Decoded:
    """``x`` [R, rows, cols] (a narrow format: bf16, f16, e4m3, e5m2; or float64 exact values)
    decoded once for :func:`gemm`, as :func:`.dotadd.gemm` decodes its operands (emin of
    ``p``); ``index`` [B] int64 maps the GEMM's batch entries to entries of ``x`` (default
    ``arange(R)``).

    Raises:
        ValueError: ``x`` not 3-dimensional, or an ``index`` entry outside ``[0, R)``.
    """
    if x.ndim != 3:
        raise ValueError(f"x: expected an operand [R, rows, cols], got shape {x.shape}")
    index = np.arange(x.shape[0], dtype=np.int64) if index is None else \
        np.ascontiguousarray(index, dtype=np.int64)
    if index.ndim != 1 or (index.size and (index.min() < 0 or index.max() >= x.shape[0])):
        raise ValueError(f"index: expected entries of [0, {x.shape[0]}) in one axis, got "
                         f"shape {index.shape}")
    vals, codes = _values_and_codes(x, x.shape[0], p.emin, coded=True)
    return Decoded(vals, codes, index)


def gemm(a: Decoded, b: Decoded, c: np.ndarray, p, kblock: int, c_index=None) -> np.ndarray:
    """D = A B + C of :func:`.dotadd.gemm` (K in sequential fused blocks of ``kblock``) on
    decoded operands: batch entry r of D reads ``a.vals[a.index[r]]``,
    ``b.vals[b.index[r]]`` and ``c[c_index[r]]``.

    Args:
        a: :class:`Decoded` [Ra, M, K]; b: :class:`Decoded` [Rb, K, N], with indices of one
            length R.
        c: float32 [Rc, M, N]; c_index: int64 [R] (default ``arange(R)``, then Rc = R).
        p, kblock: as :func:`.dotadd.gemm`, with :func:`supports` true.
    Returns:
        float32 [R, M, N], the bits of :func:`.dotadd.gemm` on the operands each entry reads.
    Raises:
        ValueError: shapes that do not chain, indices of different lengths, parameters
            :func:`supports` refuses.
    """
    r = a.index.size
    m, k = a.vals.shape[1:]
    n = b.vals.shape[2]
    c_index = np.arange(r, dtype=np.int64) if c_index is None else \
        np.ascontiguousarray(c_index, dtype=np.int64)
    if b.index.size != r or c_index.shape != (r,):
        raise ValueError(f"a, b, c_index: batch entries {r}, {b.index.size}, {c_index.shape} "
                         "differ")
    if b.vals.shape[1] != k or c.ndim != 3 or c.shape[1:] != (m, n) or c.dtype != np.float32:
        raise ValueError(f"a, b, c: shapes {a.vals.shape}, {b.vals.shape}, {c.shape} (c "
                         f"{c.dtype}) do not chain as float32 C")
    if r and (c_index.min() < 0 or c_index.max() >= c.shape[0]):
        raise ValueError(f"c_index: expected entries of [0, {c.shape[0]})")
    if not supports(p, kblock) or k % kblock:
        raise ValueError(f"p, kblock: not one fused step of {kblock} per block over K = {k}")
    out = np.empty((r, m, n), dtype=np.float32)
    if out.size == 0:
        return out
    out_round = dotadd._RZ if p.out_round == "rz" else dotadd._RN
    av, bv = dotadd.same_width(a.vals, b.vals)
    dotadd.gemm_rows(av, a.codes, a.index, bv, b.codes, b.index, b.step_max(),
                     np.ascontiguousarray(c), c_index, kblock, p.frac_bits, out_round,
                     p.out_bits, out, out.view(np.uint32))
    return out
