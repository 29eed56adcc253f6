"""flash-attn 2.x's Python API (``flash_attn/flash_attn_interface.py``) as its prebuilt kernels
compute it on a Hopper GPU: ``--use_fast_math``, the exp2 argument as one FFMA
(:data:`simulator.flash.mainloop_fwd_fa2.FLASH_ATTN`), checked bit for bit against PyPI
flash-attn-jax 0.6.2 on an H100 (``simulator/data/device/fa2_jax/``,
``python -m simulator verify --topic fa2``).

    from simulator import fa2
    out = fa2.flash_attn_func(q, k, v, causal=True)
    out, lse, _ = fa2.flash_attn_func(q, k, v, return_attn_probs=True)
    dq, dk, dv = fa2.flash_attn_backward(dout, q, k, v, out, lse, causal=True)

Arrays are NumPy ``ml_dtypes.bfloat16`` or ``numpy.float16`` in flash-attn's layout
``[batch, seqlen, heads, head_dim]`` (varlen: ``[total, heads, head_dim]``). Every entry point
takes ``gpu=`` (:mod:`simulator.gpus`): the split-KV count and the deterministic backward's
grid read its SM count.
"""

from __future__ import annotations

import math

import numpy as np

from ..flash.backward_fa2 import backward_fa2
from ..flash.forward_fa2 import forward_fa2
from ..flash.mainloop_bwd_fa2 import FLASH_ATTN_BWD
from ..flash.mainloop_fwd_fa2 import FLASH_ATTN
from ..gpus import DEFAULT_GPU, get_gpu, mufu_model_name
from ..numerics import format_of
from .combine import combine_partials
from .host import plan_forward

__all__ = ["backward_spread", "flash_attn_backward", "flash_attn_func", "flash_attn_kvpacked_func",
           "flash_attn_qkvpacked_func", "flash_attn_varlen_func"]


def _check_qkv(q, k, v, rank: int) -> None:
    layout = "[batch, seqlen, heads, head_dim]" if rank == 4 else "[total, heads, head_dim]"
    for name, x in (("q", q), ("k", k), ("v", v)):
        if type(x) is not np.ndarray or x.ndim != rank:
            raise ValueError(f"{name}: expected a {rank}-d numpy array {layout}, got "
                             f"{getattr(x, 'shape', type(x).__name__)}")
        if x.dtype.name not in ("bfloat16", "float16"):
            raise ValueError(f"{name}: FlashAttention only support fp16 and bf16 data type, got "
                             f"{x.dtype}")
        if x.dtype != q.dtype:
            raise ValueError(f"{name}: expected dtype {q.dtype} (q's), got {x.dtype}")
    d = q.shape[-1]
    if k.shape[-1] != d or v.shape != k.shape or (rank == 4 and k.shape[0] != q.shape[0]):
        raise ValueError(f"k, v: expected the same shape, head dim {d} and batch of q, got "
                         f"k {k.shape}, v {v.shape} (q {q.shape})")
    if d % 8 or not 8 <= d <= 256:
        raise ValueError(f"q: FlashAttention forward only supports head dimension at most 256, "
                         f"a multiple of 8 (the Python wrapper pads others), got {d}")
    if k.shape[-2] < 1 or q.shape[-2] % k.shape[-2]:
        raise ValueError(f"k: number of heads in key/value ({k.shape[-2]}) must divide number "
                         f"of heads in query ({q.shape[-2]})")


def _check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                   philox) -> tuple[int, int]:
    if softcap not in (0, 0.0) or isinstance(softcap, bool):
        raise ValueError(f"softcap: not modelled for FlashAttention-2 (its recorded build has no "
                         f"softcap entry), expected 0.0, got {softcap!r}")
    if alibi_slopes is not None:
        raise ValueError("alibi_slopes: ALiBi is not modelled for FlashAttention-2, expected None")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or \
            not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p: expected a number in [0, 1), got {dropout_p!r}")
    if dropout_p > 0 and (philox is None or len(philox) != 2):
        raise ValueError(f"philox: dropout_p > 0 needs the launch's Philox (seed, offset) "
                         f"(torch's CUDA generator state), got {philox!r}")
    if softmax_scale is not None and (isinstance(softmax_scale, bool) or not isinstance(
            softmax_scale, (int, float)) or not math.isfinite(softmax_scale)):
        raise ValueError(f"softmax_scale: expected None or a finite number, got {softmax_scale!r}")
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal: expected True or False, got {causal!r}")
    try:
        left, right = (int(window_size[0]), int(window_size[1]))
    except (TypeError, ValueError, IndexError):
        raise ValueError(f"window_size: expected (left, right) ints, got {window_size!r}") from None
    if len(window_size) != 2:
        raise ValueError(f"window_size: expected (left, right), got {window_size!r}")
    return left, right


def _forward(q, k, v, dropout_p, softmax_scale, causal, window, philox, gpu):
    """One batch of the forward: (out [B, Sq, H, d], lse [B, H, Sq])."""
    record = get_gpu(gpu)
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    launch = plan_forward(b, sq, sk, h, hk, d, causal=bool(causal), window=window,
                          dropout_p=float(dropout_p), gpu=record)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    res = forward_fa2(q, k, v, softmax_scale=scale, causal=launch.causal, window=launch.window,
                      dropout_p=float(dropout_p), philox=philox, num_splits=launch.num_splits,
                      build=FLASH_ATTN, gpu=record)
    out, lse = res.out, res.lse
    if launch.num_splits > 1:
        out, lse = combine_partials(out, lse, launch.kernel_head_dim, format_of(q.dtype).name,
                                    mufu_model_name(record), fast_math=FLASH_ATTN.fast_math)
    return out, lse


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False, *, philox=None, gpu=DEFAULT_GPU):
    """flash-attn 2.x's ``flash_attn_func`` (forward), bit for bit.

    Args:
        q: [batch, seqlen_q, heads, head_dim]; k, v: [batch, seqlen_k, heads_kv, head_dim];
            bf16 / fp16 NumPy arrays (one dtype); head_dim a multiple of 8 up to 256;
            heads_kv divides heads.
        dropout_p: dropping probability (needs ``philox``); softmax_scale: default
            ``head_dim ** -0.5``; causal: bottom-right aligned; window_size: (left, right),
            -1 unbounded (``mha_fwd``'s normalisation: :func:`simulator.fa2.plan_forward`).
        softcap, alibi_slopes: only 0.0 / None (not modelled: ValueError otherwise).
        deterministic: accepted (the forward has no such switch).
        return_attn_probs: also return ``softmax_lse`` and ``None`` (the attention
            probabilities are not returned, as flash-attn returns them only for tests).
        philox: keyword-only, with dropout: ``(seed, offset)`` of the launch.
        gpu: keyword-only: the GPU (its SM count picks the split-KV count).
    Returns:
        out [batch, seqlen_q, heads, head_dim] in q's dtype; with ``return_attn_probs``
        ``(out, softmax_lse float32 [batch, heads, seqlen_q], None)``.
    Raises:
        ValueError: naming the argument (dtypes, shapes, head dims, options, an unknown GPU).
    Source: csrc/flash_attn/flash_api.cpp (mha_fwd), flash_fwd_kernel.h; the build's
    arithmetic measured on flash-attn-jax 0.6.2 (simulator/data/device/fa2_jax/).
    """
    _check_qkv(q, k, v, 4)
    window = _check_options(dropout_p, softmax_scale, causal, window_size, softcap,
                            alibi_slopes, philox)
    out, lse = _forward(q, k, v, dropout_p, softmax_scale, causal, window, philox, gpu)
    return (out, lse, None) if return_attn_probs else out


def _unpack(x, name: str, count: int, axis: int) -> tuple[np.ndarray, ...]:
    """The ``count`` arrays stacked along ``axis`` of a packed input (copies: the kernels read
    contiguous operands)."""
    if type(x) is not np.ndarray or x.ndim != 5 or x.shape[axis] != count:
        raise ValueError(f"{name}: expected a 5-d numpy array with {count} stacked along axis "
                         f"{axis}, got {getattr(x, 'shape', type(x).__name__)}")
    return tuple(np.ascontiguousarray(np.take(x, i, axis=axis)) for i in range(count))


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False, *, philox=None,
                              gpu=DEFAULT_GPU):
    """flash-attn 2.x's ``flash_attn_qkvpacked_func``: :func:`flash_attn_func` of
    ``qkv[:, :, 0]``, ``qkv[:, :, 1]``, ``qkv[:, :, 2]`` (the same kernel: packing changes only
    how the backward writes its gradients).

    Args:
        qkv: [batch, seqlen, 3, heads, head_dim], bf16 / fp16; the rest as
            :func:`flash_attn_func`.
    Raises:
        ValueError: ``qkv`` not so stacked, and what :func:`flash_attn_func` refuses.
    Source: flash_attn/flash_attn_interface.py (flash_attn_qkvpacked_func).
    """
    q, k, v = _unpack(qkv, "qkv", 3, 2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs, philox=philox, gpu=gpu)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False, *, philox=None,
                             gpu=DEFAULT_GPU):
    """flash-attn 2.x's ``flash_attn_kvpacked_func``: :func:`flash_attn_func` of ``q``,
    ``kv[:, :, 0]``, ``kv[:, :, 1]`` (GQA / MQA: fewer KV heads than query heads).

    Args:
        q: [batch, seqlen_q, heads, head_dim]; kv: [batch, seqlen_k, 2, heads_kv, head_dim];
            the rest as :func:`flash_attn_func`.
    Raises:
        ValueError: ``kv`` not so stacked, and what :func:`flash_attn_func` refuses.
    Source: flash_attn/flash_attn_interface.py (flash_attn_kvpacked_func).
    """
    k, v = _unpack(kv, "kv", 2, 2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs, philox=philox, gpu=gpu)


def _offsets(cu, name: str, total: int) -> np.ndarray:
    a = np.asarray(cu)
    if a.ndim != 1 or a.size < 2 or a.dtype != np.int32 or a[0] != 0 or a[-1] != total or \
            np.any(np.diff(a) < 0):
        raise ValueError(f"{name}: expected int32 [batch + 1] offsets from 0 to {total}, "
                         f"non-decreasing, got {a.dtype} {a.tolist()[:8]}")
    return a


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, *, gpu=DEFAULT_GPU):
    """flash-attn 2.x's ``flash_attn_varlen_func`` (forward): packed sequences, each its own
    attention (causal and windows aligned per sequence); no split-KV (``mha_varlen_fwd``
    splits only its GQA decode swap, not modelled: seqlen_q 1 with GQA is refused).

    Args:
        q: [total_q, heads, head_dim]; k, v: [total_k, heads_kv, head_dim]; cu_seqlens_q,
            cu_seqlens_k: int32 [batch + 1] offsets; max_seqlen_q, max_seqlen_k: at least
            the longest sequence (``max_seqlen_k`` sets the one-sided window rule); the rest
            as :func:`flash_attn_func`. Dropout and ``block_table`` are not modelled here.
    Returns:
        out [total_q, heads, head_dim]; with ``return_attn_probs`` ``(out, softmax_lse
        float32 [heads, total_q], None)`` (upstream's unpadded layout).
    Raises:
        ValueError: naming the argument.
    Source: csrc/flash_attn/flash_api.cpp (mha_varlen_fwd); recorded on flash-attn-jax's
    ``flash_mha_varlen_fwd`` (simulator/data/device/fa2_jax/).
    """
    _check_qkv(q, k, v, 3)
    window = _check_options(dropout_p, softmax_scale, causal, window_size, softcap,
                            alibi_slopes, None)
    if dropout_p > 0 or block_table is not None:
        raise ValueError("dropout_p, block_table: varlen dropout and paged KV are not modelled "
                         "for FlashAttention-2; expected 0.0 and None")
    cq = _offsets(cu_seqlens_q, "cu_seqlens_q", q.shape[0])
    ck = _offsets(cu_seqlens_k, "cu_seqlens_k", k.shape[0])
    if cq.size != ck.size:
        raise ValueError(f"cu_seqlens_k: expected {cq.size} offsets (cu_seqlens_q's), got {ck.size}")
    lens_q, lens_k = np.diff(cq), np.diff(ck)
    for name, m, lens in (("max_seqlen_q", max_seqlen_q, lens_q), ("max_seqlen_k", max_seqlen_k, lens_k)):
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < max(lens.max(), 1):
            raise ValueError(f"{name}: expected an int at least the longest sequence "
                             f"({int(lens.max())}), got {m!r}")
    if max_seqlen_q == 1 and q.shape[1] > k.shape[1]:
        raise ValueError("max_seqlen_q: 1 with GQA runs mha_varlen_fwd's swapped split-KV "
                         "launch, not modelled; expected max_seqlen_q > 1 or heads_kv == heads")
    is_causal = bool(causal) and max_seqlen_q > 1  # mha_varlen_fwd: max_seqlen_q == 1
    left, right = window
    left = -1 if left >= max_seqlen_k else left
    right = -1 if right >= max_seqlen_k else right
    if is_causal:
        right = 0
    elif left < 0 <= right:  # set_params_fprop, with the launch's max_seqlen_k
        left = int(max_seqlen_k)
    elif right < 0 <= left:
        right = int(max_seqlen_k)
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    out = np.zeros_like(q)
    lse = np.full((q.shape[1], q.shape[0]), np.inf, np.float32)
    record = get_gpu(gpu)
    for i in range(lens_q.size):
        (a, b), (c, e) = cq[i:i + 2], ck[i:i + 2]
        if b == a:
            continue
        if e == c:  # no key: FA2 writes zeros and LSE +inf
            continue
        res = forward_fa2(q[None, a:b], k[None, c:e], v[None, c:e], softmax_scale=scale,
                          causal=is_causal, window=(left, right), build=FLASH_ATTN, gpu=record)
        out[a:b] = res.out[0]
        lse[:, a:b] = res.lse[0]
    return (out, lse, None) if return_attn_probs else out


def flash_attn_backward(dout, q, k, v, out, softmax_lse, softmax_scale=None, causal=False,
                        window_size=(-1, -1), deterministic=False, *, gpu=DEFAULT_GPU):
    """flash-attn 2.x's backward (``_flash_attn_backward``): (dq, dk, dv) at a forward's
    ``out`` and ``softmax_lse``.

    Args:
        dout, q, out: [batch, seqlen_q, heads, head_dim]; k, v: [batch, seqlen_k, heads_kv,
            head_dim]; bf16 / fp16; softmax_lse float32 [batch, heads, seqlen_q].
        deterministic: ``mha_bwd``'s flag: dQ from ``ceil(SMs / (batch * heads))`` per-CTA
            accumulators summed in order (the GPU's SM count); False: one accumulator taking
            float32 atomicAdds in any order: the bits returned are those of ascending key
            blocks, :func:`backward_spread` gives what any order gives.
        gpu: keyword-only: the GPU.
    Returns:
        (dq, dk, dv) like q, k, v; with GQA dK / dV summed over each group of query heads as
        ``at::sum`` adds them (:func:`simulator.flash.backward_fa2.group_sum`).
    Raises:
        ValueError: naming the argument.
    Source: csrc/flash_attn/flash_api.cpp (mha_bwd), flash_bwd_kernel.h; measured on
    flash-attn-jax 0.6.2 (simulator/data/device/fa2_jax/).
    """
    window = _check_options(0.0, softmax_scale, causal, window_size, 0.0, None, None)
    res = backward_fa2(dout, q, k, v, out, softmax_lse, softmax_scale=softmax_scale,
                       causal=bool(causal), window=window, deterministic=bool(deterministic),
                       build=FLASH_ATTN_BWD, gpu=gpu)
    return res.dq, res.dk, res.dv


def backward_spread(dout, q, k, v, out, softmax_lse, softmax_scale=None, causal=False,
                    window_size=(-1, -1), *, gpu=DEFAULT_GPU) -> dict:
    """What the default (non-deterministic) backward can give: ``{"dq": (lo, hi), "dk": ...,
    "dv": ...}`` per value (dK / dV have one order; dQ's float32 atomicAdds any order).

    Args, Raises: as :func:`flash_attn_backward`, without ``deterministic``.
    """
    window = _check_options(0.0, softmax_scale, causal, window_size, 0.0, None, None)
    res = backward_fa2(dout, q, k, v, out, softmax_lse, softmax_scale=softmax_scale,
                       causal=bool(causal), window=window, spread=True, build=FLASH_ATTN_BWD,
                       gpu=gpu)
    return res.spread
