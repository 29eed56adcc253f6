"""``flash_attn_qkvpacked_func``: FA3's entry point for Q, K, V stacked in one tensor
(hopper/flash_attn_interface.py ``FlashAttnQKVPackedFunc``): the packed tensor is split into
q, k, v and the call is :func:`simulator.fa3.flash_attn_func`'s (unsplit, FA3's default
``num_splits=1``), so the bits are those of the same unpacked call.
"""

from __future__ import annotations

import numpy as np

from ..gpus import DEFAULT_GPU
from .checks import check_int
from .interface import flash_attn_func


def unpack_qkv(qkv, num_heads_q):
    """(q, k, v) views of ``qkv``: [batch, seqlen, 3, heads, head_dim] (MHA), or [batch, seqlen,
    num_heads_q + 2 * heads_kv, head_dim] with ``num_heads_q`` (MQA / GQA, FA3's split along
    the heads).

    Raises:
        ValueError: another rank, a middle axis other than 3, a missing or impossible
            ``num_heads_q``, naming qkv or num_heads_q.
    """
    shape = tuple(getattr(qkv, "shape", ()))
    if not (type(qkv).__module__.startswith("torch") or isinstance(qkv, np.ndarray)):
        raise ValueError(f"qkv: expected a NumPy array or a CPU torch tensor, got "
                         f"{type(qkv).__name__}")
    if len(shape) == 5:
        if shape[2] != 3:
            raise ValueError(f"qkv: expected [batch, seqlen, 3, heads, head_dim], got {list(shape)}")
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    if len(shape) != 4:
        raise ValueError(f"qkv: expected [batch, seqlen, 3, heads, head_dim] or [batch, seqlen, "
                         f"heads + 2 * heads_kv, head_dim] with num_heads_q, got {list(shape)}")
    if num_heads_q is None:
        raise ValueError("num_heads_q: required for a 4-d qkv [batch, seqlen, num_heads_q + 2 * "
                         "heads_kv, head_dim] (FA3: 'assert num_heads_q is not None')")
    hq = check_int("num_heads_q", num_heads_q, 1, shape[2] - 2)
    hkv = (shape[2] - hq) // 2
    if hkv < 1 or 2 * hkv + hq != shape[2]:
        raise ValueError(f"num_heads_q: {hq} leaves {shape[2] - hq} heads of qkv's {shape[2]}, "
                         "expected an even number >= 2 (heads_kv for k and for v)")
    return qkv[:, :, :hq], qkv[:, :, hq: hq + hkv], qkv[:, :, hq + hkv:]


def flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, q_descale=None,
                              k_descale=None, v_descale=None, window_size=(-1, -1),
                              attention_chunk=0, softcap=0.0, deterministic=False,
                              num_heads_q=None, sm_margin=0, return_attn_probs=False, *,
                              num_sms=None, gpu=DEFAULT_GPU, trace=None, executor=None, progress=None,
                              memory_budget=None):
    """FA3's ``flash_attn_qkvpacked_func``.

    Args:
        qkv: [batch, seqlen, 3, heads, head_dim], or [batch, seqlen, num_heads_q + 2 *
            heads_kv, head_dim] with ``num_heads_q``; NumPy or CPU torch (autograd flows back
            into qkv through the split, as in FA3).
        softmax_scale: default ``head_dim ** -0.5``; the others as
            :func:`simulator.fa3.flash_attn_func`.
    Returns:
        out [batch, seqlen, heads, head_dim], and softmax_lse [batch, heads, seqlen] with
        ``return_attn_probs``.
    Raises:
        ValueError: a qkv or num_heads_q FA3 cannot split (:func:`unpack_qkv`), and
            whatever flash_attn_func refuses.
    Source: hopper/flash_attn_interface.py (``flash_attn_qkvpacked_func``,
    ``FlashAttnQKVPackedFunc``).
    """
    q, k, v = unpack_qkv(qkv, num_heads_q)
    return flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal,
                           q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                           window_size=window_size, attention_chunk=attention_chunk,
                           softcap=softcap, num_splits=1, deterministic=deterministic,
                           sm_margin=sm_margin, return_attn_probs=return_attn_probs,
                           num_sms=num_sms, gpu=gpu, trace=trace, executor=executor, progress=progress,
                           memory_budget=memory_budget)
