"""FlashAttention-2's split-KV combine kernel (``combine_attn_seqk_parallel`` in
``flash_fwd_kernel.h``), bit for bit: the partial outputs and LSEs of the splits merged per row.

Per row of ``batch * heads * seqlen_q`` (``kBlockM`` rows per CTA of 128 threads: 4 for a head
dim divisible by 128, 8 by 64, else 16):

1. The split LSEs are spread over ``kRowsPerLoadTranspose = min(128 / kBlockM, kMaxSplits)``
   lanes (``kMaxSplits`` the next power of two of ``num_splits``, at least 2): lane ``t`` holds
   splits ``t, t + T, t + 2T, ...`` (-inf past ``num_splits``).
2. ``lse_max``: the lane's maximum in that order, then ``Allreduce<T>`` (butterfly, offsets
   T/2 .. 1); 0 when it is -inf.
3. ``lse_sum``: ``expf(lse - lse_max)`` summed in the lane's order from its first term, then
   ``Allreduce<T>``; ``lse_logsum = logf(lse_sum) + lse_max`` (one FADD after ``logf``), +inf
   for a 0 or NaN sum: the output LSE.
4. Each split's scale ``expf(lse - lse_logsum)``; ``O = sum over splits in order of scale *
   O_split`` (one FFMA each, from 0), rounded to the output type.

``expf`` / ``logf`` are the build's: PyTorch compiles FlashAttention-2 without fast math, so
they are libdevice's accurate sequences (:mod:`simulator.numerics.libdevice`), and no step
flushes subnormals; with ``fast_math`` (flash-attn's own build, ``--use_fast_math``) they are
``__expf`` (FMUL by log2 e, MUFU.EX2) and ``__logf`` (MUFU.LG2 times ln 2) and the float32 steps
flush. Measured: simulator/data/device/sdpa/ (PyTorch 2.11's flash backend on an H100: every
recorded split-KV call's LSE and O bits; the fast forms miss hundreds of LSE bits there).
"""

from __future__ import annotations

import numpy as np

from ..hw import rows_allreduce
from ..numerics import convert, fadd, ffma, fmax, fmul, fsub, libdevice
from ..numerics.mufu import LN2_F32, LOG2E_F32, ex2, lg2

__all__ = ["combine", "combine_partials", "combine_shape"]

_NEG_INF = np.float32(-np.inf)
_POS_INF = np.float32(np.inf)


def combine_shape(kernel_head_dim: int, num_splits: int) -> tuple[int, int, int]:
    """``(kBlockM, kMaxSplits, kRowsPerLoadTranspose)`` of the combine kernel launched for
    ``num_splits`` splits (``run_flash_splitkv_fwd``: ``Log_max_splits`` by ``num_splits``)."""
    block_m = 4 if kernel_head_dim % 128 == 0 else 8 if kernel_head_dim % 64 == 0 else 16
    max_splits = max(2, 1 << (num_splits - 1).bit_length())
    return block_m, max_splits, min(128 // block_m, max_splits)


def _expf(x: np.ndarray, mufu: str, fast_math: bool) -> np.ndarray:
    """``expf``: ``__expf`` (FMUL.FTZ by log2(e), then MUFU.EX2) under fast math, else
    libdevice's."""
    if fast_math:
        return ex2(fmul(x, LOG2E_F32, ftz=True), model=mufu, ftz=True)
    return libdevice.expf(x, model=mufu)


def _log_add(x: np.ndarray, y: np.ndarray, mufu: str, fast_math: bool) -> np.ndarray:
    """``logf(x) + y``. Under fast math ``__logf(x)`` is MUFU.LG2 times ln 2, and the compiler
    contracts that product with the addition into one FFMA (``fma.rn.ftz.f32 lg2, ln2, y`` in
    flash-attn-jax 0.6.2's PTX of ``flash_fwd_splitkv_combine_kernel``); else libdevice's
    ``logf`` rounded, then FADD."""
    if fast_math:
        return ffma(lg2(x, model=mufu, ftz=True), LN2_F32, y, ftz=True)
    return fadd(libdevice.logf(x), y, ftz=False)


def combine(o_partial: np.ndarray, lse_partial: np.ndarray, kernel_head_dim: int, out_fmt: str,
            mufu: str, fast_math: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Merge the split-KV kernel's partials.

    Args:
        o_partial: float32 [num_splits, R, head_dim]: each split's O of each row (normalised by
            the split's own row sum; 0 where the split saw no key).
        lse_partial: float32 [num_splits, R]: each split's LSE (-inf where it saw no key).
        kernel_head_dim: the kernel's kHeadDim (it sets the combine's rows per CTA).
        out_fmt: the output format (``"bf16"``, ``"f16"``).
        mufu: the MUFU model (a GPU key, :mod:`simulator.gpus`).
        fast_math: the build's ``--use_fast_math`` (False: PyTorch's build).
    Returns:
        ``(out, lse)``: [R, head_dim] in ``out_fmt``, float32 [R].
    Source: csrc/flash_attn/src/flash_fwd_kernel.h (combine_attn_seqk_parallel).
    """
    num, rows = lse_partial.shape
    _, kmax, width = combine_shape(kernel_head_dim, num)
    per_lane = kmax // width if kmax >= width else 1
    full = np.full((max(kmax, width * per_lane), rows), _NEG_INF, np.float32)
    full[:num] = lse_partial
    regs = full[: per_lane * width].reshape(per_lane, width, rows).transpose(0, 2, 1)  # [l, R, T]
    ftz = fast_math
    m = regs[0]
    for j in range(1, per_lane):
        m = fmax(m, regs[j], ftz=ftz)
    lse_max = rows_allreduce(m, "max", width)
    lse_max = np.where(lse_max == _NEG_INF, np.float32(0), lse_max)
    total = _expf(fsub(regs[0], lse_max, ftz=ftz), mufu, fast_math)
    for j in range(1, per_lane):
        total = fadd(total, _expf(fsub(regs[j], lse_max, ftz=ftz), mufu, fast_math), ftz=ftz)
    total = rows_allreduce(total, "sum", width)
    empty = (total == 0) | np.isnan(total)
    logsum = _log_add(np.where(empty, np.float32(1), total), lse_max, mufu, fast_math)
    logsum = np.where(empty, _POS_INF, logsum)[:, 0]                                   # [R]
    scales = _expf(fsub(lse_partial, logsum[None, :], ftz=ftz), mufu, fast_math)       # [S, R]
    acc = np.zeros(o_partial.shape[1:], np.float32)
    for s in range(num):
        acc = ffma(scales[s][:, None], o_partial[s], acc, ftz=ftz)
    return convert(acc, out_fmt), logsum


def combine_partials(o_part: np.ndarray, lse_part: np.ndarray, kernel_head_dim: int,
                     out_fmt: str, mufu: str, fast_math: bool = False
                     ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`combine` over every (batch, row, head) of the split-KV kernel's partials in the
    kernel-level layout (:func:`simulator.flash.forward_fa2.forward_fa2`).

    Args:
        o_part: float32 [S, batch, seqlen_q, heads, d]; lse_part: float32 [S, batch, heads,
            seqlen_q]; the rest as :func:`combine`.
    Returns:
        ``(out [batch, seqlen_q, heads, d] in out_fmt, lse float32 [batch, heads, seqlen_q])``.
    """
    s, b, sq, h, d = o_part.shape
    lse_rows = np.swapaxes(lse_part, 2, 3).reshape(s, -1)                     # [S, B*Sq*H]
    o, lse = combine(o_part.reshape(s, -1, d), lse_rows, kernel_head_dim, out_fmt, mufu,
                     fast_math)
    return o.reshape(b, sq, h, d), np.ascontiguousarray(np.swapaxes(lse.reshape(b, sq, h), 1, 2))
