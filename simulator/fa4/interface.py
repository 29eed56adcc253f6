"""FlashAttention-4's Python API (``flash_attn/cute/interface.py``: ``flash_attn_func``,
``flash_attn_varlen_func``) as its sm90 forward kernel (``FlashAttentionForwardSm90``, CuTe DSL
4.8.1, flash-attn-4 4.0.0b36) computes it on a Hopper GPU, checked bit for bit against the real
library recorded on an H100 (``simulator/data/device/fa4/``, ``python -m simulator verify
--topic fa4``).

    from simulator import fa4
    out, lse = fa4.flash_attn_func(q, k, v, causal=True, return_lse=True)

Arrays are NumPy ``ml_dtypes.bfloat16`` or ``numpy.float16`` in flash-attn's layout
``[batch, seqlen, heads, head_dim]`` (varlen: ``[total, heads, head_dim]``); a learnable sink is
float32, bfloat16 or float16 ``[heads]``. Like the library both entry points return ``(out,
lse)``; ``lse`` is None unless ``return_lse``. What FA4 takes on sm90 and the emulator does not
model (the backward, score_mod / mask_mod, paged KV, block sparsity, qv, seqused) is refused
by name.
"""

from __future__ import annotations

import numpy as np

from ..flash import chunks, scheduler
from ..flash.mainloop_fwd_sm90 import MAINLOOP
from ..gpus import DEFAULT_GPU
from .host import make_fa4_config

__all__ = ["flash_attn_backward", "flash_attn_func", "flash_attn_varlen_backward",
           "flash_attn_varlen_func"]

_SINK_DTYPES = ("float32", "bfloat16", "float16")


def _check_qkv(q, k, v, rank: int) -> None:
    layout = "[batch, seqlen, heads, head_dim]" if rank == 4 else "[total, heads, head_dim]"
    for name, x in (("q", q), ("k", k), ("v", v)):
        if type(x) is not np.ndarray or x.ndim != rank:
            raise ValueError(f"{name}: expected a {rank}-d numpy array {layout}, got "
                             f"{getattr(x, 'shape', type(x).__name__)}")
        if x.dtype.name not in ("bfloat16", "float16"):
            raise ValueError(f"{name}: FA4 on Hopper takes float16 or bfloat16 (its FP8 is "
                             f"Blackwell's only), got {x.dtype}")
        if x.dtype != q.dtype:
            raise ValueError(f"{name}: expected q's dtype {q.dtype}, got {x.dtype}")
    for name, x in (("q", q), ("v", v)):
        d = x.shape[-1]
        if d % 8 or not 8 <= d <= 256:
            raise ValueError(f"{name}: FA4's Hopper kernels take head dims 8..256 in multiples of "
                             f"8, got {d}")
    if k.shape[-1] != q.shape[-1] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"k: expected v's leading dims and q's head dim, got k {k.shape}, "
                         f"v {v.shape}, q {q.shape}")
    if rank == 4 and k.shape[0] != q.shape[0]:
        raise ValueError(f"k: expected batch {q.shape[0]} (q's), got {k.shape[0]}")
    if q.shape[-2] % k.shape[-2]:
        raise ValueError(f"k: its {k.shape[-2]} heads must divide q's {q.shape[-2]}")


def _check_options(num_splits, learnable_sink, heads: int, unsupported: dict):
    for name, value in unsupported.items():
        if value is not None:
            raise ValueError(f"{name}: not emulated for FA4 (its Hopper forward takes it; "
                             "simulator.fa4 models the plain kernel), got a value")
    if isinstance(num_splits, bool) or num_splits != 1:
        raise ValueError(f"num_splits: FA4 has no split-KV on Hopper (its interface asserts "
                         f"'SplitKV not supported'): expected 1, got {num_splits!r}")
    if learnable_sink is None:
        return None
    if type(learnable_sink) is not np.ndarray or learnable_sink.shape != (heads,) or \
            learnable_sink.dtype.name not in _SINK_DTYPES:
        raise ValueError(f"learnable_sink: expected a numpy array [{heads}] of float32, bfloat16 "
                         f"or float16, got {getattr(learnable_sink, 'shape', learnable_sink)!r}"
                         f" {getattr(learnable_sink, 'dtype', '')}")
    return learnable_sink.astype(np.float32)


def _window(window_size) -> tuple[int, int]:
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise ValueError(f"window_size: expected (left, right) with None for an open side, got "
                         f"{window_size!r}") from None
    for side in (left, right):
        if side is not None and (isinstance(side, bool) or not isinstance(side, (int, np.integer))):
            raise ValueError(f"window_size: expected ints or None, got {window_size!r}")
    return (-1 if left is None else int(left), -1 if right is None else int(right))


def _launch(q, k, v, seqlens_k, softmax_scale, causal, window, softcap, sink, pack_gqa, gpu):
    cfg = make_fa4_config(q, k, v, softmax_scale=softmax_scale, causal=causal, window=window,
                          softcap=softcap, sink=sink, pack_gqa=pack_gqa, seqlens_k=seqlens_k,
                          gpu=gpu)
    return scheduler.launch(cfg, MAINLOOP, (q, k, v, None), None, None, None, None,
                            chunks.check_budget(None), None)


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(None, None),
                    learnable_sink=None, softcap=0.0, num_splits=1, pack_gqa=None,
                    deterministic=False, return_lse=False, *, gpu=DEFAULT_GPU, qv=None,
                    score_mod=None, mask_mod=None, block_sparse_tensors=None):
    """FA4's ``flash_attn_func`` forward on sm90.

    Args:
        q: ``[batch, seqlen_q, heads, head_dim]`` bfloat16 / float16; k, v: ``[batch, seqlen_k,
            heads_kv, head_dim(_v)]``, heads_kv dividing heads; head dims 8..256, multiples of 8.
        softmax_scale: default ``1 / sqrt(head_dim)`` (a Python float: FA4 rounds the product
            with log2(e) once to float32). causal, window_size ``(left, right)`` (None: open),
            softcap (0: off), pack_gqa (None: whenever heads differ), deterministic (the
            backward's; no effect here), as FA4.
        learnable_sink: float32 / bfloat16 / float16 ``[heads]`` logits, or None.
        return_lse: also return the LSE.
        gpu: keyword-only, the GPU record (:mod:`simulator.gpus`).
    Returns:
        ``(out, lse)``: out ``[batch, seqlen_q, heads, head_dim_v]`` in q's dtype; lse float32
        ``[batch, heads, seqlen_q]`` (natural log; -inf for a row that sees no key, the sink's
        logit with a learnable sink) or None.
    Raises:
        ValueError: naming the argument (num_splits other than 1, qv, score_mod, mask_mod,
            block_sparse_tensors, a bad shape or dtype).
    """
    _check_qkv(q, k, v, 4)
    sink = _check_options(num_splits, learnable_sink, q.shape[2],
                          {"qv": qv, "score_mod": score_mod, "mask_mod": mask_mod,
                           "block_sparse_tensors": block_sparse_tensors})
    if k.shape[1] == 0 or q.shape[1] == 0:
        return _empty(q, v, sink, return_lse, (q.shape[0], q.shape[2], q.shape[1]))
    out, lse = _launch(q, k, v, None, softmax_scale, bool(causal), _window(window_size),
                       float(softcap), sink, pack_gqa, gpu)
    return out, (lse if return_lse else None)


def _empty(q, v, sink, return_lse, lse_shape):
    """The library's early exit for an empty Q or K: O = 0, LSE -inf (the sink's logit)."""
    out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    lse = np.full(lse_shape, -np.inf, dtype=np.float32)
    if sink is not None:
        lse[...] = sink[:, None] if len(lse_shape) == 2 else sink[None, :, None]
    return out, (lse if return_lse else None)


def _offsets(cu, name: str, total: int, batch: int | None = None) -> np.ndarray:
    arr = np.asarray(cu)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or len(arr) < 2 or arr[0] != 0 or \
            np.any(np.diff(arr) < 0) or arr[-1] > total or (batch is not None and len(arr) != batch + 1):
        raise ValueError(f"{name}: expected int32 offsets [batch + 1] from 0, non-decreasing, "
                         f"at most {total}, got {cu!r}")
    return arr.astype(np.int64)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                           max_seqlen_k=None, softmax_scale=None, causal=False,
                           window_size=(None, None), learnable_sink=None, softcap=0.0,
                           num_splits=1, pack_gqa=None, deterministic=False, return_lse=False,
                           *, gpu=DEFAULT_GPU, seqused_q=None, seqused_k=None, page_table=None):
    """FA4's ``flash_attn_varlen_func`` forward on sm90: sequences packed along the first axis.

    Args:
        q: ``[total_q, heads, head_dim]``; k, v: ``[total_k, heads_kv, head_dim(_v)]``;
        cu_seqlens_q, cu_seqlens_k: int ``[batch + 1]`` offsets; max_seqlen_q / max_seqlen_k:
            accepted (FA4's scheduling hints; each sequence's tiles start at its first row).
        Other arguments as :func:`flash_attn_func`.
    Returns:
        ``(out, lse)``: out ``[total_q, heads, head_dim_v]``; lse float32 ``[heads, total_q]``
        or None.
    Raises:
        ValueError: naming the argument (also seqused_q / seqused_k / page_table: not emulated).
    """
    _check_qkv(q, k, v, 3)
    sink = _check_options(num_splits, learnable_sink, q.shape[1],
                          {"seqused_q": seqused_q, "seqused_k": seqused_k, "page_table": page_table})
    cq = _offsets(cu_seqlens_q, "cu_seqlens_q", q.shape[0])
    ck = _offsets(cu_seqlens_k, "cu_seqlens_k", k.shape[0], len(cq) - 1)
    out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    lse = np.full((q.shape[1], q.shape[0]), -np.inf, dtype=np.float32)
    if sink is not None:
        lse[...] = sink[:, None]
    for i in range(len(cq) - 1):  # each sequence's tiles start at its own first row
        q0, q1, k0, k1 = cq[i], cq[i + 1], ck[i], ck[i + 1]
        if q1 == q0 or k1 == k0:
            continue
        o, lse_i = _launch(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], None, softmax_scale,
                           bool(causal), _window(window_size), float(softcap), sink, pack_gqa, gpu)
        out[q0:q1], lse[:, q0:q1] = o[0], lse_i[0]
    return out, (lse if return_lse else None)


def _backward_one(dout, q, k, v, out, lse, softmax_scale, causal, window, softcap, deterministic,
                  spread, gpu):
    from ..flash import backward  # noqa: PLC0415  (the backward's modules load on first use)

    return backward(dout, q, k, v, out, lse, softmax_scale=softmax_scale, causal=causal,
                    window=window, softcap=softcap, deterministic=deterministic, spread=spread,
                    gpu=gpu, family="fa4")


def _dsink(sink, dpsums, lses, head_dim: int, gpu):
    """FA4's dsink from each batch entry's dPsum and LSE ``[heads, rows]`` (in the sink's
    dtype: float32, or rounded to it)."""
    from ..flash.backward_fa4 import dsink  # noqa: PLC0415
    from ..gpus import get_gpu, mufu_model_name  # noqa: PLC0415
    from ..numerics import convert, format_of  # noqa: PLC0415

    got = dsink(dpsums, lses, sink.astype(np.float32), 128 if head_dim == 96 else 256,
                mufu_model_name(get_gpu(gpu), None))
    return got if sink.dtype == np.float32 else convert(got, format_of(sink.dtype).name)


def flash_attn_backward(dout, q, k, v, out, lse, softmax_scale=None, causal=False,
                        window_size=(None, None), softcap=0.0, deterministic=False, *,
                        gpu=DEFAULT_GPU, spread=False, learnable_sink=None):
    """FA4's sm90 backward (``_flash_attn_bwd``: preprocess, ``FlashAttentionBackwardSm90``,
    postprocess), what ``out.backward(dout)`` runs after :func:`flash_attn_func`.

    Args:
        dout, q, out: ``[batch, seqlen_q, heads, head_dim]``; k, v: ``[batch, seqlen_k,
            heads_kv, head_dim]``, bf16 / fp16, head dims 64, 96, 128, 192 or 256 (the recorded
            kernels); lse: the forward's float32 ``[batch, heads, seqlen_q]`` (a learnable
            sink is already in it: dq, dk, dv need nothing else).
        softmax_scale, causal, window_size, softcap: as the forward's. deterministic: FA4's
            flag: dQ's float32 reduce-adds in its fixed order; without it the library's order
            varies.
        gpu: keyword-only GPU record. spread: also return, per value, the smallest and largest
            result any arrival order of the reduce-adds gives. learnable_sink: the forward's
            ``[heads]`` logits, or None: then dsink is returned too.
    Returns:
        ``(dq, dk, dv)`` in q's dtype, ``(dq, dk, dv, dsink)`` with a learnable sink (dsink in
        the sink's dtype, :func:`simulator.flash.backward_fa4.dsink`); with ``spread`` the
        spread dict ``{"dq": (lo, hi), "dk": ..., "dv": ...}`` last.
    Raises:
        ValueError: naming the argument (shapes, dtypes, head dims).
    """
    _check_qkv(q, k, v, 4)
    res = _backward_one(dout, q, k, v, out, lse, softmax_scale, bool(causal),
                        _window(window_size), float(softcap), bool(deterministic), spread, gpu)
    grads = (res.dq, res.dk, res.dv)
    if learnable_sink is not None:
        sink = _check_options(1, learnable_sink, q.shape[2], {})
        sq = q.shape[1]
        grads += (_dsink(learnable_sink, [res.dpsum[b, :, :sq] for b in range(q.shape[0])],
                         list(lse), q.shape[3], gpu),) if sink is not None else ()
    return grads + ((res.spread,) if spread else ())


def flash_attn_varlen_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                               softmax_scale=None, causal=False, window_size=(None, None),
                               softcap=0.0, deterministic=False, *, gpu=DEFAULT_GPU,
                               learnable_sink=None):
    """:func:`flash_attn_backward` for :func:`flash_attn_varlen_func`'s packed layout
    (``[total, heads, head_dim]``, lse ``[heads, total_q]``): each sequence's CTAs are its own,
    so the sequences run one at a time. Returns ``(dq, dk, dv)`` (and dsink with a learnable
    sink, its sum running over the sequences in order); empty sequences give zeros.

    Raises:
        ValueError: as :func:`flash_attn_backward`, and for the offsets.
    """
    _check_qkv(q, k, v, 3)
    cq = _offsets(cu_seqlens_q, "cu_seqlens_q", q.shape[0])
    ck = _offsets(cu_seqlens_k, "cu_seqlens_k", k.shape[0], len(cq) - 1)
    _check_options(1, learnable_sink, q.shape[1], {})
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    dpsums, lses = [], []
    for i in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[i], cq[i + 1], ck[i], ck[i + 1]
        if q1 == q0 or k1 == k0:  # no gradient; dPsum of O = 0 adds nothing to dsink
            continue
        res = _backward_one(dout[None, q0:q1], q[None, q0:q1], k[None, k0:k1], v[None, k0:k1],
                            out[None, q0:q1], np.ascontiguousarray(lse[None, :, q0:q1]),
                            softmax_scale, bool(causal), _window(window_size), float(softcap),
                            bool(deterministic), False, gpu)
        dq[q0:q1], dk[k0:k1], dv[k0:k1] = res.dq[0], res.dk[0], res.dv[0]
        dpsums.append(res.dpsum[0, :, : q1 - q0])
        lses.append(lse[:, q0:q1])
    if learnable_sink is None:
        return dq, dk, dv
    return dq, dk, dv, _dsink(learnable_sink, dpsums, lses, q.shape[2], gpu)
