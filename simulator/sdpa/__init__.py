"""``torch.nn.functional.scaled_dot_product_attention``'s flash backend as a Hopper GPU computes
it: FlashAttention-2 as PyTorch builds it (``aten/src/ATen/native/transformers/cuda/flash_attn``:
``UNFUSE_FMA``, no softcap, no ALiBi), on NumPy arrays in PyTorch's layout.

    from simulator import sdpa
    out, lse = sdpa.flash_attention_forward(query, key, value, is_causal=True)

What runs is FA2's host side (:mod:`simulator.fa2`: mask normalisation, the GQA decode swap,
tiles, the split-KV count from the GPU's SM count) and its forward kernels
(:func:`simulator.flash.forward_fa2.forward_fa2`: the unsplit kernel, or the split-KV kernel and
its combine). Dropout draws FA2's Philox mask from the Philox state the caller gives (the
``philox_seed`` / ``philox_offset`` the op returns: :mod:`simulator.numerics.philox`).
"""

from __future__ import annotations

import math

import numpy as np

from ..fa2 import combine_partials, plan_forward
from ..flash.forward_fa2 import forward_fa2
from ..gpus import DEFAULT_GPU, get_gpu, mufu_model_name
from ..numerics import format_of
from .backward import backward_spread, flash_attention_backward

__all__ = ["backward_spread", "flash_attention_backward", "flash_attention_forward",
           "scaled_dot_product_attention"]

_DTYPES = ("bfloat16", "float16")


def _check(query, key, value, dropout_p, is_causal, scale, enable_gqa) -> None:
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, np.ndarray) or type(x) is not np.ndarray or x.ndim != 4:
            raise ValueError(f"{name}: expected a 4-d numpy array [batch, heads, seqlen, head_dim], "
                             f"got {getattr(x, 'shape', type(x).__name__)}")
        if x.dtype.name not in _DTYPES:
            raise ValueError(f"{name}: the flash backend takes bfloat16 or float16, got {x.dtype}")
    if not (query.dtype == key.dtype == value.dtype):
        raise ValueError(f"query, key, value: expected one dtype, got {query.dtype}, {key.dtype}, "
                         f"{value.dtype}")
    b, h, _, d = query.shape
    if key.shape[0] != b or value.shape[0] != b:
        raise ValueError(f"key, value: expected batch {b} (query's), got {key.shape[0]}, {value.shape[0]}")
    if key.shape[1:] != value.shape[1:3] + (d,) or value.shape[3] != d:
        raise ValueError(f"key, value: expected [batch, heads_kv, seqlen_k, {d}] each (the flash "
                         f"backend takes V's head dim equal to Q's), got {key.shape}, {value.shape}")
    if d % 8 or not 8 <= d <= 256:
        raise ValueError(f"query: head_dim must be a multiple of 8 from 8 to 256 (the flash "
                         f"backend's; other sizes are padded by torch first), got {d}")
    hk = key.shape[1]
    if hk != h and (not enable_gqa or h % hk):
        raise ValueError(f"key: heads_kv = {hk} must equal heads = {h}, or divide it with "
                         "enable_gqa=True")
    if not isinstance(is_causal, (bool, np.bool_)):
        raise ValueError(f"is_causal: expected True or False, got {is_causal!r}")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or \
            not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p: expected a number in [0, 1), got {dropout_p!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not math.isfinite(scale) or scale <= 0):
        raise ValueError(f"scale: expected None or a finite positive number, got {scale!r}")


def _philox(dropout_p, philox_seed, philox_offset):
    if dropout_p == 0:
        return None
    for name, x in (("philox_seed", philox_seed), ("philox_offset", philox_offset)):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < 1 << 64:
            raise ValueError(f"{name}: dropout_p > 0 needs the Philox state as a 64-bit unsigned "
                             f"int (what the op returns), got {x!r}")
    return int(philox_seed), int(philox_offset)


def flash_attention_forward(query, key, value, dropout_p=0.0, is_causal=False, scale=None, *,
                            philox_seed=None, philox_offset=None, enable_gqa=True,
                            gpu=DEFAULT_GPU):
    """``aten._scaled_dot_product_flash_attention``'s out and logsumexp.

    Args:
        query: [batch, heads, seqlen_q, head_dim]; key, value: [batch, heads_kv, seqlen_k,
            head_dim]; ml_dtypes.bfloat16 or numpy.float16 arrays (one dtype); head_dim a
            multiple of 8 up to 256; heads_kv == heads, or dividing it (GQA / MQA).
        dropout_p: the probability of dropping a score (FA2's 8-bit keep test); > 0 needs
            ``philox_seed`` and ``philox_offset``.
        is_causal: bottom-right aligned causal mask (FA2's; ignored for seqlen_q == 1).
        scale: default ``1 / sqrt(head_dim)`` (computed in double, passed as float).
        philox_seed, philox_offset: keyword-only: the Philox state of the call (the op's
            ``philox_seed`` / ``philox_offset`` outputs; after ``torch.manual_seed(s)`` torch's
            CUDA generator gives seed ``s``); ignored without dropout.
        enable_gqa: keyword-only: accept heads_kv < heads.
        gpu: keyword-only: the GPU (:mod:`simulator.gpus`): its SM count decides FA2's split-KV
            count, its arithmetic the bits.
    Returns:
        ``(out, logsumexp)``: out [batch, heads, seqlen_q, head_dim] in the input dtype,
        logsumexp float32 [batch, heads, seqlen_q] (natural log; +inf for a row that sees no
        key).
    Raises:
        ValueError: what the flash backend refuses (dtypes, shapes, head dims), naming the
            argument; dropout without the Philox state; an unknown GPU.
    Source: aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp (mha_fwd),
    csrc/flash_attn/src/flash_fwd_kernel.h; PyTorch's build flags
    (aten/src/ATen/native/transformers/cuda/flash_attn/CMakeLists.txt: UNFUSE_FMA).
    """
    _check(query, key, value, dropout_p, is_causal, scale, enable_gqa)
    philox = _philox(dropout_p, philox_seed, philox_offset)
    record = get_gpu(gpu)
    b, h, sq, d = query.shape
    hk, sk = key.shape[1], key.shape[2]
    launch = plan_forward(b, sq, sk, h, hk, d, causal=bool(is_causal), dropout_p=float(dropout_p),
                          gpu=record)
    q, k, v = (np.ascontiguousarray(np.swapaxes(x, 1, 2)) for x in (query, key, value))
    softmax_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    res = forward_fa2(q, k, v, softmax_scale=softmax_scale, causal=launch.causal,
                      window=launch.window, dropout_p=float(dropout_p), philox=philox,
                      num_splits=launch.num_splits, gpu=record)
    out, lse = res.out, res.lse
    if launch.num_splits > 1:  # the combine kernel
        out, lse = combine_partials(out, lse, launch.kernel_head_dim, format_of(q.dtype).name,
                                    mufu_model_name(record))
    return np.ascontiguousarray(np.swapaxes(out, 1, 2)), lse


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 philox_seed=None, philox_offset=None, gpu=DEFAULT_GPU):
    """``torch.nn.functional.scaled_dot_product_attention`` under
    ``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``: the output of :func:`flash_attention_forward`.

    Args: as torch's (``attn_mask`` must be None: the flash backend takes no mask);
    ``philox_seed``, ``philox_offset``, ``gpu`` as :func:`flash_attention_forward`.
    Returns: out [batch, heads, seqlen_q, head_dim] in the input dtype.
    Raises: ValueError as :func:`flash_attention_forward`; ``attn_mask`` given.
    """
    if attn_mask is not None:
        raise ValueError("attn_mask: the flash backend takes no attention mask (torch would "
                         "pick another backend)")
    return flash_attention_forward(query, key, value, dropout_p, is_causal, scale,
                                   philox_seed=philox_seed, philox_offset=philox_offset,
                                   enable_gqa=enable_gqa, gpu=gpu)[0]
