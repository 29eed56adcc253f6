"""``flash_attn_func``, ``flash_attn_varlen_func``, ``flash_attn_with_kvcache``,
``flash_attn_combine``: FA3's ``hopper/flash_attn_interface.py`` and the host code of
``hopper/flash_api.cpp`` (``mha_fwd``), over the kernel-level :func:`simulator.flash.forward`.

What the host side decides, as FA3 does:

* ``softmax_scale`` default ``head_dim ** -0.5`` (computed in Python by the interface);
* ``num_splits <= 0``: FA3's split heuristic (``get_num_splits``); above 1: the Split kernel
  (partial O and LSE in float32 per split) and the combine kernel;
* varlen launches (``cu_seqlens_*``, ``seqused_*``, ``cache_seqlens``, ``cache_leftpad``): each
  sequence runs with the launch's ``max_seqlen_q`` / ``max_seqlen_k`` (window normalisation, the
  seqlen_q == 1 rule) and, when split, its own split count (``simulator.fa3.scheduler``);
* the KV cache: ``cache_batch_idx`` picks the cache row, ``cache_leftpad`` its first key,
  ``cache_seqlens`` its length; new ``k`` / ``v`` are written into the caches in place at
  ``cache_seqlens`` and attended to.

PackGQA (``pack_gqa``) changes which rows share a tile, never a row's arithmetic
(docs/forward.md, "PackGQA"): accepted, with no effect on the bits. ``qv`` (MLA) and
``attention_chunk`` reach :func:`simulator.flash.forward`; varlen queries and new keys in the
KV cache and ``scheduler_metadata``: :mod:`simulator.fa3.kvcache`,
:mod:`simulator.fa3.metadata`. Paged KV caches and rotary appends: :mod:`simulator.fa3.paged`,
:mod:`simulator.fa3.rotary`.

Each entry point checks its arguments once, in FA3's order, into the records of
:mod:`simulator.fa3.arguments` (``Options``, ``Launch``, the arrays with their cu_seqlens /
seqused), then runs the launch from those records (:func:`run_dense`, :func:`run_varlen`).
"""

from __future__ import annotations

import numpy as np

from .. import engine, flash
from ..flash.config import check_chunk
from ..gpus import DEFAULT_GPU, get_gpu, mufu_model_name
from ..trace import Trace
from . import autograd, torch_ops
from .arguments import DenseArrays, Launch, Options, Parallel, VarlenArrays
from .arrays import returned, to_numpy
from .checks import check_window_size, gpu_sms
from .combine import combine
from .kvcache import flash_attn_with_kvcache
from .launch import output_dtype, run_forward, traced_forward, with_trace

__all__ = ["flash_attn_combine", "flash_attn_func", "flash_attn_varlen_func",
           "flash_attn_with_kvcache"]


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None,
                    k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0,
                    softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0,
                    return_attn_probs=False, *, num_sms=None, gpu=DEFAULT_GPU, trace=None, executor=None,
                    progress=None, memory_budget=None):
    """FA3's ``flash_attn_func`` (forward).

    Args:
        q: [batch, seqlen_q, heads, head_dim]; k: [batch, seqlen_k, heads_kv, head_dim];
            v: [batch, seqlen_k, heads_kv, head_dim_v]; bf16 / float16 / float8_e4m3fn NumPy
            arrays or CPU torch tensors; head_dim a multiple of 8 (16 for e4m3) up to 256;
            head_dim_v = head_dim, or a pair FA3 compiles (Q/K in (128, 192] with V in
            (96, 128]; Q/K <= 64 with V <= 512, bf16;
            :func:`simulator.flash.dispatch.check_head_dim_v`).
        softmax_scale: default ``head_dim ** -0.5`` (``(head_dim + head_dim_v) ** -0.5`` with
            qv); causal, window_size, softcap: as FA3.
        qv: None, or [batch, seqlen_q, heads, head_dim_v] in q's dtype: FA3's MLA scores
            ``q K^T + qv V^T`` (head_dim <= 64, head_dim_v >= 256, bf16 / fp16;
            :func:`simulator.flash.forward`); no backward (FA3 has none with qv).
        q_descale, k_descale, v_descale: e4m3, float32 [batch, heads_kv] (or scalars).
        num_splits: 1 (default) the unsplit kernel; > 1 that many K/V splits and the combine
            kernel; <= 0 FA3's heuristic (``get_num_splits``, with ``num_sms - sm_margin``).
        pack_gqa, deterministic: accepted, no effect on the forward's bits (deterministic is
            passed to the backward under autograd).
        return_attn_probs: also return softmax_lse.
        gpu: keyword-only, not FA3's: the GPU the call runs on, a key of
            :data:`simulator.gpus.GPUS` (``"h200"``, ``"h100"``, ``"h100-pcie"``) or a record:
            its SM count (the split heuristic), MUFU tables and tensor-core parameters.
        num_sms: keyword-only, not FA3's: None (the GPU's SM count), or an override of it.
        trace: keyword-only, not FA3's: None, or CTAs ``(batch, head, m_block)`` whose steps to
            record; unsplit launches only (``num_splits=1``).
        executor, progress, memory_budget: keyword-only, not FA3's: passed to every
            :func:`simulator.flash.forward` call of the launch (a ``concurrent.futures``
            executor for its CTA chunks, None / True / a callable ``progress(done, total)``
            called by each forward call with its own K/V block visits, a working-memory budget
            in bytes), and to the backward that ``loss.backward()`` runs when q requires
            grad; the bits are the serial run's. An executor does not record ``trace``.
    Returns:
        out [batch, seqlen_q, heads, head_dim_v] (bf16 for e4m3 inputs), and with
        ``return_attn_probs`` also softmax_lse float32 [batch, heads, seqlen_q]; with
        ``trace`` a :class:`simulator.trace.Trace` is appended to the returned tuple.
    Raises:
        ValueError: what FA3 refuses, with its rule, and the arguments not emulated.
        TypeError: ``executor`` or ``progress`` of the wrong type (as flash.forward).
        With CPU torch tensors that require grad (and grad mode on), out is part of torch's
        graph: ``loss.backward()`` runs :func:`simulator.fa3.flash_attn_backward` with this
        call's softmax_scale, causal, window_size, softcap and deterministic (FA3's
        ``FlashAttnFunc``); not with ``trace``.
    Source: hopper/flash_attn_interface.py, hopper/flash_api.cpp (mha_fwd).
    """
    chunk = check_chunk(attention_chunk)
    window_size = check_window_size(window_size)
    if trace is None and torch_ops.compiling():  # torch.compile / export: the custom ops
        return torch_ops.flash_attn_func_op(
            flash_attn_func, flash_attn_varlen_func, q, k, v, softmax_scale, causal, qv,
            q_descale, k_descale, v_descale, window_size, chunk, softcap, num_splits, pack_gqa,
            deterministic, sm_margin, return_attn_probs, num_sms, get_gpu(gpu).key)
    if trace is None and autograd.needs_grad(q, k, v):
        refusal = backward_refusal(qv, chunk)  # FA3 runs the forward; its backward refuses
        bwd = dict(softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                   softcap=softcap, deterministic=deterministic, executor=executor,
                   progress=progress, memory_budget=memory_budget, gpu=gpu)

        def run(q_, k_, v_):
            return flash_attn_func(
                q_, k_, v_, softmax_scale, causal, qv, q_descale, k_descale, v_descale,
                window_size, attention_chunk, softcap, num_splits, pack_gqa, deterministic,
                sm_margin, True, num_sms=num_sms, gpu=gpu, executor=executor, progress=progress,
                memory_budget=memory_budget)

        return autograd.apply(run, bwd, q, k, v, return_attn_probs, refusal)
    if trace is None and autograd.needs_grad(qv):  # its gradient would be silently dropped
        refuse_qv_grad(qv, chunk)
    parallel = Parallel.checked(executor, progress, memory_budget, trace)
    num_sms = gpu_sms(gpu, num_sms)
    arrays = DenseArrays.of(q, k, v, qv, (q_descale, k_descale, v_descale))
    opts = Options.checked(
        softmax_scale=softmax_scale, causal=causal, window_size=window_size,
        attention_chunk=chunk, softcap=softcap, num_splits=num_splits, pack_gqa=pack_gqa,
        sm_margin=sm_margin, num_sms=num_sms, gpu=gpu, return_attn_probs=return_attn_probs,
        deterministic=deterministic)
    return run_dense(arrays, arrays.launch(opts, parallel, trace))


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           seqused_q=None, seqused_k=None, softmax_scale=None, causal=False,
                           qv=None, q_descale=None, k_descale=None, v_descale=None,
                           window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                           pack_gqa=None, deterministic=False, sm_margin=0,
                           return_attn_probs=False, *, num_sms=None, gpu=DEFAULT_GPU, trace=None,
                           executor=None, progress=None, memory_budget=None):
    """FA3's ``flash_attn_varlen_func`` (forward): packed sequences.

    Args:
        q: [total_q, heads, head_dim]; k: [total_k, heads_kv, head_dim]; v: [total_k,
            heads_kv, head_dim_v].
        cu_seqlens_q, cu_seqlens_k: int32 [batch + 1] offsets of each sequence.
        max_seqlen_q, max_seqlen_k: ints at least every sequence's length (FA3 takes them as
            given: they set the dispatch and the window normalisation).
        seqused_q, seqused_k: int32 [batch] or None: rows / keys of each sequence actually
            used (later query rows are not written by FA3: their out rows are 0 here and their
            LSE -inf; compare them only where FA3 writes).
        others: as :func:`flash_attn_func`.
        trace: keyword-only, not FA3's: None, or CTAs ``(sequence, head, m_block)`` (m_block
            within the sequence) whose steps to record; unsplit launches only
            (``num_splits=1``).
        executor, progress, memory_budget: as :func:`flash_attn_func`; each sequence is one
            forward call.
    Returns:
        out [total_q, heads, head_dim_v], and with ``return_attn_probs`` softmax_lse float32
        [heads, total_q]; with ``trace`` a :class:`simulator.trace.Trace` is appended to the
        returned tuple (``(out, trace)`` or ``(out, lse, trace)``).
    Raises:
        ValueError: bad offsets or lengths (naming the argument), what FA3 refuses.
        TypeError: ``executor`` or ``progress`` of the wrong type (as flash.forward).
        With CPU torch tensors that require grad, out is part of torch's graph as for
        :func:`flash_attn_func` (FA3's ``FlashAttnVarlenFunc``, seqused_* included).
    Source: hopper/flash_api.cpp (mha_fwd, is_varlen), hopper/seqlen.h.
    """
    chunk = check_chunk(attention_chunk)
    window_size = check_window_size(window_size)
    if trace is None and torch_ops.compiling():  # torch.compile / export: the custom ops
        return torch_ops.flash_attn_varlen_func_op(
            flash_attn_func, flash_attn_varlen_func, q, k, v, cu_seqlens_q, cu_seqlens_k,
            max_seqlen_q, max_seqlen_k, seqused_q, seqused_k, softmax_scale, causal, qv,
            q_descale, k_descale, v_descale, window_size, chunk, softcap, num_splits, pack_gqa,
            deterministic, sm_margin, return_attn_probs, num_sms, get_gpu(gpu).key)
    if trace is None and autograd.needs_grad(q, k, v):
        refusal = backward_refusal(qv, chunk)  # FA3 runs the forward; its backward refuses
        bwd = dict(softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                   softcap=softcap, deterministic=deterministic, cu_seqlens_q=cu_seqlens_q,
                   cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                   max_seqlen_k=max_seqlen_k, seqused_q=seqused_q, seqused_k=seqused_k,
                   executor=executor, progress=progress, memory_budget=memory_budget, gpu=gpu)

        def run(q_, k_, v_):
            return flash_attn_varlen_func(
                q_, k_, v_, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q,
                seqused_k, softmax_scale, causal, qv, q_descale, k_descale, v_descale,
                window_size, attention_chunk, softcap, num_splits, pack_gqa, deterministic,
                sm_margin, True, num_sms=num_sms, gpu=gpu, executor=executor, progress=progress,
                memory_budget=memory_budget)

        return autograd.apply(run, bwd, q, k, v, return_attn_probs, refusal)
    if trace is None and autograd.needs_grad(qv):  # its gradient would be silently dropped
        refuse_qv_grad(qv, chunk)
    parallel = Parallel.checked(executor, progress, memory_budget, trace)
    num_sms = gpu_sms(gpu, num_sms)
    arrays = VarlenArrays.of(q, k, v, qv, (q_descale, k_descale, v_descale),
                             cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                             max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                             seqused_q=seqused_q, seqused_k=seqused_k)
    opts = Options.checked(
        softmax_scale=softmax_scale, causal=causal, window_size=window_size,
        attention_chunk=chunk, softcap=softcap, num_splits=num_splits, pack_gqa=pack_gqa,
        sm_margin=sm_margin, num_sms=num_sms, gpu=gpu, return_attn_probs=return_attn_probs,
        deterministic=deterministic)
    return run_varlen(arrays, arrays.launch(opts, parallel, trace))


def run_dense(arrays: DenseArrays, launch: Launch):
    """``flash_attn_func``'s launch: the unsplit kernel, or the Split kernel then the combine
    (the whole batch in one forward call); FA3's return value (with the Trace when asked)."""
    q, k, v = arrays.q, arrays.k, arrays.v
    kw = launch.forward_kwargs(qv=arrays.qv)
    record = None if launch.trace is None else Trace()
    if k.shape[1] == 0 and v.shape[:3] == k.shape[:3]:  # total_k == 0: O = 0, LSE = +inf
        flash.forward(q, k, v, **kw)  # validates every argument
        b, sq, h, _ = q.shape
        out = np.zeros((b, sq, h, launch.head_dim_v), dtype=output_dtype(q.dtype))
        lse = np.full((b, h, sq), np.inf, dtype=np.float32)
    elif launch.trace:
        res = flash.forward(q, k, v, **kw, trace=launch.trace)
        out, lse = res.out, res.lse
        record.events.extend(res.trace)
    else:
        static = launch.kernel.num_splits
        out, lse = run_forward(q, k, v, kw, static if static > 1 else None)
    full = launch.options.return_lse
    return with_trace(returned((out, lse) if full else (out,), arrays.torch), record, full)


def run_varlen(arrays: VarlenArrays, launch: Launch):
    """``flash_attn_varlen_func``'s launch: one forward call per sequence (its rows, its used
    keys, its split count), under one ``engine.launching`` decision; FA3's return value."""
    q, k, v, qv = arrays.q, arrays.k, arrays.v, arrays.qv
    cq, ck, len_q, len_k = arrays.cu_seqlens_q, arrays.cu_seqlens_k, arrays.seqused_q, arrays.seqused_k
    splits, h = launch.batch_splits, launch.heads
    record = None if launch.trace is None else Trace()
    out = np.zeros(q.shape[:2] + (launch.head_dim_v,), dtype=output_dtype(q.dtype))
    # total_k == 0: FA3 skips the kernel and fills LSE with +inf (mha_fwd)
    lse = np.full((h, q.shape[0]), np.inf if k.shape[0] == 0 else -np.inf, dtype=np.float32)
    # "auto" decides once for all the sequences: their tiles' products, masks not counted
    with engine.launching(launch.work(len_q, len_k)):
        for bi in range(arrays.batch):
            sq_b = int(len_q[bi])
            if sq_b == 0:
                continue
            qs, ks = slice(cq[bi], cq[bi] + sq_b), slice(ck[bi], ck[bi] + int(len_k[bi]))
            kb, vb = k[None, ks], v[None, ks]
            if kb.shape[1] == 0:  # no key: FA3 writes O = 0, LSE = -inf
                continue
            kw = launch.forward_kwargs(bi, None if qv is None else qv[None, qs])
            o, l_ = traced_forward(q[None, qs], kb, vb, kw, None if splits is None else int(splits[bi]),
                                   bi, launch.trace, record)
            out[qs], lse[:, qs] = o[0], l_[0]
    full = launch.options.return_lse
    return with_trace(returned((out, lse) if full else (out,), arrays.torch), record, full)


def backward_refusal(qv, chunk: int = 0) -> str | None:
    """Why the backward of this forward is refused, or None. attention_chunk: FA3's autograd
    backward asserts on it (hopper/flash_attn_interface.py: 'FA3 backward does not support
    attention_chunk'). qv: FA3's backward takes no qv (``_flash_attn_backward`` has no such
    argument): ``FlashAttnFunc.backward`` runs ``mha_bwd`` on q, k, v alone, so its gradients
    are those of other scores than the forward's, and qv gets none; refused here rather than
    returned. The forward runs; the backward raises."""
    if qv is not None:
        return ("qv: FA3 has no backward with qv (its autograd backward runs mha_bwd without "
                "qv: gradients of scores other than the forward's, none for qv); run the forward "
                "under torch.no_grad() or without qv")
    if chunk:
        return ("attention_chunk: FA3 has no backward with it ('FA3 backward does not "
                "support attention_chunk'); run the forward under torch.no_grad() or without it")
    return None


def refuse_qv_grad(qv, chunk: int = 0) -> None:
    """Raise :func:`backward_refusal`'s reason now: for a qv that requires grad while q, k, v
    do not (its gradient would be silently dropped)."""
    reason = backward_refusal(qv, chunk)
    if reason is not None:
        raise ValueError(reason)


def _combine_out_dtype(out_dtype) -> np.dtype:
    """``out_dtype`` of :func:`flash_attn_combine`: None (float32), a NumPy dtype or a torch
    dtype of float32, bfloat16 or float16 (mha_combine: "Output type must be FP32, FP16 or
    BF16")."""
    import ml_dtypes  # noqa: PLC0415

    names = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
    if out_dtype is None:
        return np.dtype(np.float32)
    key = str(out_dtype).removeprefix("torch.")
    try:
        key = key if key in names else str(np.dtype(out_dtype))
    except TypeError:
        pass
    if key not in names:
        raise ValueError(f"out_dtype: expected None, float32, bfloat16 or float16 (a NumPy or torch "
                         f"dtype), got {out_dtype!r}")
    return np.dtype(names[key])


#: mha_combine's limit on the head dim: "FlashAttention combine only supports head dimension
#: at most 512" (hopper/flash_api.cpp)
COMBINE_MAX_HEAD_DIM = 512


def check_combine_shapes(op: np.ndarray, lp: np.ndarray) -> None:
    """mha_combine's shape rules: out_partial 5-D [num_splits, batch, seqlen, heads, head_dim]
    with head_dim at most 512, lse_partial 4-D [num_splits, batch, seqlen, heads]."""
    if op.ndim != 5:
        raise ValueError(f"out_partial: expected 5 dims [num_splits, batch, seqlen, heads, "
                         f"head_dim] (mha_combine), got shape {list(op.shape)}")
    if lp.ndim != 4:
        raise ValueError(f"lse_partial: expected 4 dims [num_splits, batch, seqlen, heads] "
                         f"(mha_combine), got shape {list(lp.shape)}")
    if op.shape[-1] < 1:
        raise ValueError(f"out_partial: head_dim (its last dim) must be at least 1, got shape "
                         f"{list(op.shape)}")
    if op.shape[-1] > COMBINE_MAX_HEAD_DIM:
        raise ValueError(f"out_partial: head_dim {op.shape[-1]} is over {COMBINE_MAX_HEAD_DIM}: "
                         "\"FlashAttention combine only supports head dimension at most 512\" "
                         "(mha_combine)")


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None, *, gpu=DEFAULT_GPU,
                       memory_budget=None):
    """FA3's ``flash_attn_combine`` (``mha_combine``): merge per-split partial outputs.

    Args:
        out_partial: float32 [num_splits, batch, seqlen, heads, head_dim];
        lse_partial: float32 [num_splits, batch, seqlen, heads] (``mha_combine``'s layouts;
            FA3 also needs the LSE's memory contiguous along seqlen, as the Split kernel writes
            it: NumPy arrays of any memory layout are accepted here).
        out: must be None (results are returned, not written in place).
        out_dtype: float32 (FA3's default: the partials' dtype), bfloat16 or float16.
        gpu: keyword-only, not FA3's: the GPU (:mod:`simulator.gpus`) whose MUFU runs it.
        memory_budget: keyword-only, not FA3's: bytes for the partials, the outputs and the
            combine's working rows (default 4 GiB; :func:`simulator.fa3.combine.combine`).
    Returns:
        (out [batch, seqlen, heads, head_dim] in ``out_dtype``, softmax_lse float32 in the
        layout :func:`simulator.fa3.combine.combine` documents for ``layout="combine"``), as
        FA3's combine kernel computes them.
        With one split FA3's combine kernel returns without writing (``if (num_splits <= 1)
        return;``), so the library returns uninitialised memory. Here the kernel's arithmetic
        runs on the one split (:func:`simulator.fa3.combine.combine`, ``early_return=False``):
        where its LSE is finite, out is the partial (``.ftz``: subnormals and -0 become +0)
        converted to ``out_dtype`` and the LSE is the given one; where it is -inf, out is 0 and
        the LSE -inf (as FA3's tests' ``attention_combine_ref`` expects).
    Raises:
        ValueError: a shape or dtype ``mha_combine`` refuses, or ``out`` given.
        MemoryError: the partials and one row of work exceed ``memory_budget``, with the
            estimate (pass a larger one).
    Source: hopper/flash_api.cpp (mha_combine), hopper/flash_fwd_combine_kernel.h.
    """
    if out is not None:
        raise ValueError("out: not supported (NumPy results are returned, not written in place)")
    (op, t), (lp, _) = to_numpy(out_partial, "out_partial"), to_numpy(lse_partial, "lse_partial")
    for name, x in (("out_partial", op), ("lse_partial", lp)):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32:
            raise ValueError(f"{name}: FA3's combine takes float32 partials, got "
                             f"{getattr(x, 'dtype', type(x).__name__)}")
    check_combine_shapes(op, lp)
    dtype = _combine_out_dtype(out_dtype)
    # one split: FA3's kernel returns unwritten memory; here its arithmetic without that return
    res = combine(op, lp, dtype, head_dim_v=op.shape[-1], layout="combine",
                  mufu=mufu_model_name(gpu), early_return=False, memory_budget=memory_budget)
    return returned(res, t)
