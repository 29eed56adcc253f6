"""The backward of ``torch.nn.functional.scaled_dot_product_attention``'s flash backend:
``aten._scaled_dot_product_flash_attention_backward`` (FlashAttention-2's ``mha_bwd`` as PyTorch
builds it) on NumPy arrays in PyTorch's layout ``[batch, heads, seqlen, head_dim]``.

    dq, dk, dv = sdpa.flash_attention_backward(grad_out, q, k, v, out, lse, 0.0, True, None, None,
                                               deterministic=True)

``deterministic`` is what ``torch.use_deterministic_algorithms(True)`` (``warn_only=False``)
passes to the kernel; without it dQ's float32 atomicAdds arrive in any order, and
:func:`backward_spread` bounds what they can give. The kernels are
:func:`simulator.flash.backward_fa2.backward_fa2`'s.
"""

from __future__ import annotations

import math

import numpy as np

from ..flash.backward_fa2 import backward_fa2
from ..gpus import DEFAULT_GPU

__all__ = ["backward_spread", "flash_attention_backward"]


def flash_attention_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
                             philox_seed, philox_offset, scale=None, *, deterministic,
                             enable_gqa=True, gpu=DEFAULT_GPU):
    """``aten._scaled_dot_product_flash_attention_backward``'s (grad_query, grad_key,
    grad_value).

    Args:
        grad_out, query, out: [batch, heads, seqlen_q, head_dim]; key, value: [batch, heads_kv,
            seqlen_k, head_dim]; ml_dtypes.bfloat16 or numpy.float16 arrays (one dtype); head_dim
            a multiple of 8 up to 256; heads_kv == heads, or dividing it with ``enable_gqa``.
        logsumexp: the forward's float32 [batch, heads, seqlen_q] (natural log; +inf for a row
            that sees no key): :func:`simulator.sdpa.flash_attention_forward`'s second output.
        dropout_p: the forward's; > 0 needs ``philox_seed`` and ``philox_offset`` (the forward
            op's outputs), from which the forward's mask is drawn again.
        is_causal: bottom-right aligned causal mask.
        philox_seed, philox_offset: ints (ignored without dropout; None allowed there).
        scale: default ``1 / sqrt(head_dim)`` (in double, passed as float).
        deterministic: keyword-only, required: ``torch.are_deterministic_algorithms_enabled()``
            (``warn_only=False``). True: dQ from ``ceil(SMs / (batch * heads))`` dQaccum copies
            summed in order (it depends on the GPU's SM count). False: the bits of one order of
            the atomicAdds (ascending key blocks); the GPU may give any value of
            :func:`backward_spread`.
        enable_gqa: keyword-only: accept heads_kv < heads (dK / dV summed over each group of
            query heads as ``mha_bwd`` does, by ``at::sum`` of the rounded per-head values).
        gpu: keyword-only: the GPU (:mod:`simulator.gpus`): its SM count and arithmetic.
    Returns:
        ``(dq, dk, dv)`` like query, key, value (same dtype and layout).
    Raises:
        ValueError: naming the argument: dtypes, shapes, head dims, heads, logsumexp, dropout_p,
            the Philox state with dropout, scale, deterministic not a bool, an unknown GPU.
    Source: aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp (mha_bwd),
    csrc/flash_attn/src/flash_bwd_kernel.h, flash_bwd_preprocess_kernel.h,
    flash_bwd_launch_template.h (FlashAttention-2 2.5.7); PyTorch's UNFUSE_FMA.
    """
    if not isinstance(deterministic, (bool, np.bool_)):
        raise ValueError(f"deterministic: expected True or False, got {deterministic!r}")
    res = _run(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, philox_seed,
               philox_offset, scale, enable_gqa, gpu, bool(deterministic), spread=False)
    return tuple(_torch_layout(x) for x in res)


def backward_spread(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
                    philox_seed, philox_offset, scale=None, *, enable_gqa=True,
                    gpu=DEFAULT_GPU) -> dict:
    """What the default (non-deterministic) backward can give: per value the smallest and
    largest result of any arrival order of dQ's float32 atomicAdds (exact up to five partials,
    a rigorous enclosure beyond: :mod:`simulator.flash.spread`); dK and dV have one value.

    Args: as :func:`flash_attention_backward`, without ``deterministic``.
    Returns:
        ``{"dq": (lo, hi), "dk": (lo, hi), "dv": (lo, hi)}``, arrays like the gradients.
    Raises:
        ValueError: as :func:`flash_attention_backward`.
    """
    res = _run(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, philox_seed,
               philox_offset, scale, enable_gqa, gpu, False, spread=True)
    return {name: tuple(_torch_layout(x) for x in pair) for name, pair in res.spread.items()}


def _run(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, philox_seed,
         philox_offset, scale, enable_gqa, gpu, deterministic, spread):
    _check(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, scale, enable_gqa)
    philox = None
    if dropout_p > 0:
        for name, x in (("philox_seed", philox_seed), ("philox_offset", philox_offset)):
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < 1 << 64:
                raise ValueError(f"{name}: dropout_p > 0 needs the forward's Philox state as a "
                                 f"64-bit unsigned int, got {x!r}")
        philox = (int(philox_seed), int(philox_offset))
    d = query.shape[-1]
    softmax_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    do, q, k, v, o = (np.ascontiguousarray(np.swapaxes(x, 1, 2))
                      for x in (grad_out, query, key, value, out))
    return backward_fa2(do, q, k, v, o, logsumexp, softmax_scale=softmax_scale,
                        causal=bool(is_causal), dropout_p=float(dropout_p), philox=philox,
                        deterministic=deterministic, spread=spread, gpu=gpu)


def _torch_layout(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.swapaxes(x, 1, 2))


def _check(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, scale,
           enable_gqa) -> None:
    """The flash backend's refusals, each naming the argument (shapes in torch's layout)."""
    named = (("grad_out", grad_out), ("query", query), ("key", key), ("value", value), ("out", out))
    for name, x in named:
        if type(x) is not np.ndarray or x.ndim != 4:
            raise ValueError(f"{name}: expected a 4-d numpy array [batch, heads, seqlen, head_dim], "
                             f"got {getattr(x, 'shape', type(x).__name__)}")
        if x.dtype.name not in ("bfloat16", "float16"):
            raise ValueError(f"{name}: the flash backend takes bfloat16 or float16, got {x.dtype}")
        if x.dtype != query.dtype:
            raise ValueError(f"{name}: expected dtype {query.dtype} (query's), got {x.dtype}")
    b, h, sq, d = query.shape
    for name, x in (("grad_out", grad_out), ("out", out)):
        if x.shape != query.shape:
            raise ValueError(f"{name}: expected shape {query.shape} (query's), got {x.shape}")
    if key.shape[0] != b or key.shape[3] != d or value.shape != key.shape:
        raise ValueError(f"key, value: expected [{b}, heads_kv, seqlen_k, {d}] each, got "
                         f"{key.shape}, {value.shape}")
    if d % 8 or not 8 <= d <= 256:
        raise ValueError(f"query: head_dim must be a multiple of 8 from 8 to 256 (the flash "
                         f"backend's), got {d}")
    hk = key.shape[1]
    if hk != h and (not enable_gqa or hk < 1 or h % hk):
        raise ValueError(f"key: heads_kv = {hk} must equal heads = {h}, or divide it with "
                         "enable_gqa=True")
    if not isinstance(logsumexp, np.ndarray) or logsumexp.dtype != np.float32 or \
            logsumexp.shape != (b, h, sq):
        raise ValueError(f"logsumexp: expected float32 [{b}, {h}, {sq}] (the forward's), got "
                         f"{getattr(logsumexp, 'dtype', type(logsumexp).__name__)} "
                         f"{getattr(logsumexp, 'shape', '')}")
    if not isinstance(is_causal, (bool, np.bool_)):
        raise ValueError(f"is_causal: expected True or False, got {is_causal!r}")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or \
            not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p: expected a number in [0, 1), got {dropout_p!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not math.isfinite(scale) or scale <= 0):
        raise ValueError(f"scale: expected None or a finite positive number, got {scale!r}")
