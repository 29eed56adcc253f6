"""``simulator.fa3.flash_attn_func`` as ``torch.library`` custom ops, for ``torch.compile`` and
``torch.export``: ``simulator_fa3::fwd`` (out, softmax_lse) and ``simulator_fa3::bwd`` (dq, dk,
dv), each with a fake (meta) implementation giving the output shapes and dtypes, and the
forward's autograd formula, as FA3's own interface registers ``flash_attn_3::_flash_attn_forward``
(hopper/flash_attn_interface.py).

A compiled model traces through these ops (the emulation itself, NumPy, runs when the graph
runs); an eager call keeps the plain path (:mod:`.autograd`). The same bits either way: the ops
call the same functions. Registered on first use (torch is optional).
"""


import functools

_REGISTERED = False

__all__ = ["compiling", "flash_attn_func_op", "flash_attn_varlen_func_op",
           "outside_compiled_graphs", "register"]


def compiling() -> bool:
    """Whether torch is tracing this call (``torch.compile`` / ``torch.export``)."""
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


def outside_compiled_graphs(fn):
    """``fn`` (an entry point without custom ops: ``flash_attn_varlen_func``,
    ``flash_attn_with_kvcache``) as ``torch.compile`` can call it: run eagerly, outside the
    graph (a graph break), instead of traced into its NumPy code, which fails on fake tensors;
    its autograd and its writes into a KV cache happen as in an eager call. Not under
    ``fullgraph=True`` nor ``torch.export``, which allow no graph break."""

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        if compiling():
            import torch

            return torch.compiler.disable(fn)(*args, **kwargs)
        return fn(*args, **kwargs)

    return entry


def register(forward, varlen) -> None:
    """Register the ops (once per process) over ``forward`` and ``varlen``
    (:func:`simulator.fa3.flash_attn_func`, :func:`simulator.fa3.flash_attn_varlen_func`,
    passed in: this module sits below the interface). :mod:`simulator.fa3` calls it at import
    when torch is already imported; otherwise the first compiled call does, outside the trace
    (a graph break, once: under ``fullgraph=True`` import torch before :mod:`simulator.fa3`)."""
    if _REGISTERED:
        return
    import torch

    torch.compiler.disable(_register)(forward, varlen)


def _register(flash_attn_func, flash_attn_varlen_func) -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    import torch
    from torch import Tensor

    from .backward import flash_attn_backward

    @torch.library.custom_op("simulator_fa3::fwd", mutates_args=())
    def fwd(q: Tensor, k: Tensor, v: Tensor, softmax_scale: float | None, causal: bool,
            window_left: int, window_right: int, softcap: float, num_splits: int,
            pack_gqa: bool | None, sm_margin: int, num_sms: int | None, gpu: str,
            qv: Tensor | None, q_descale: Tensor | None, k_descale: Tensor | None,
            v_descale: Tensor | None, attention_chunk: int,
            deterministic: bool) -> tuple[Tensor, Tensor]:
        # deterministic is the backward's flag (setup_context keeps it); the forward's bits
        # do not depend on it
        out, lse = flash_attn_func(q, k, v, softmax_scale, causal, qv, q_descale, k_descale,
                                   v_descale, (window_left, window_right), attention_chunk,
                                   softcap, num_splits, pack_gqa, False, sm_margin, True,
                                   num_sms=num_sms, gpu=gpu)
        return out, lse

    @fwd.register_fake
    def _fwd_fake(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                  num_splits, pack_gqa, sm_margin, num_sms, gpu, qv, q_descale, k_descale,
                  v_descale, attention_chunk, deterministic):
        b, sq, h, _ = q.shape
        dtype = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
        return (q.new_empty((b, sq, h, v.shape[-1]), dtype=dtype),
                q.new_empty((b, h, sq), dtype=torch.float32))

    @torch.library.custom_op("simulator_fa3::bwd", mutates_args=())
    def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
            softmax_scale: float | None, causal: bool, window_left: int, window_right: int,
            softcap: float, deterministic: bool, gpu: str) -> tuple[Tensor, Tensor, Tensor]:
        return tuple(flash_attn_backward(dout.contiguous(), q, k, v, out, lse, softmax_scale,
                                         causal, (window_left, window_right), softcap,
                                         deterministic, gpu=gpu))

    @bwd.register_fake
    def _bwd_fake(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right,
                  softcap, deterministic, gpu):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup_context(ctx, inputs, output):
        q, k, v, softmax_scale, causal, wl, wr, softcap = inputs[:8]
        qv, attention_chunk, deterministic = inputs[13], inputs[17], inputs[18]
        ctx.save_for_backward(q, k, v, *output)
        ctx.flags = (softmax_scale, causal, wl, wr, softcap, deterministic, inputs[12])
        ctx.refused = qv is not None or attention_chunk != 0

    def backward(ctx, dout, _dlse):
        if ctx.refused:  # as FA3's FlashAttnFunc: the forward ran, its backward cannot
            raise ValueError("qv, attention_chunk: FA3 has no backward with them")
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.simulator_fa3.bwd(dout, q, k, v, out, lse, *ctx.flags)
        return (dq, dk, dv) + (None,) * 16

    fwd.register_autograd(backward, setup_context=setup_context)
    _register_varlen(flash_attn_varlen_func)
    _REGISTERED = True


def _register_varlen(flash_attn_varlen_func) -> None:
    """``simulator_fa3::varlen_fwd`` / ``::varlen_bwd``: :func:`flash_attn_varlen_func` and its
    backward as ops, as :func:`_register` makes ``fwd`` / ``bwd``."""
    import torch
    from torch import Tensor

    from .backward import flash_attn_backward

    @torch.library.custom_op("simulator_fa3::varlen_fwd", mutates_args=())
    def varlen_fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                   max_seqlen_q: int, max_seqlen_k: int, seqused_q: Tensor | None,
                   seqused_k: Tensor | None, softmax_scale: float | None, causal: bool,
                   window_left: int, window_right: int, softcap: float, num_splits: int,
                   pack_gqa: bool | None, sm_margin: int, num_sms: int | None, gpu: str,
                   qv: Tensor | None, q_descale: Tensor | None, k_descale: Tensor | None,
                   v_descale: Tensor | None, attention_chunk: int,
                   deterministic: bool) -> tuple[Tensor, Tensor]:
        out, lse = flash_attn_varlen_func(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q,
            seqused_k, softmax_scale, causal, qv, q_descale, k_descale, v_descale,
            (window_left, window_right), attention_chunk, softcap, num_splits, pack_gqa, False,
            sm_margin, True, num_sms=num_sms, gpu=gpu)
        return out, lse

    @varlen_fwd.register_fake
    def _varlen_fwd_fake(q, k, v, *rest):
        total, h, _ = q.shape
        dtype = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
        return (q.new_empty((total, h, v.shape[-1]), dtype=dtype),
                q.new_empty((h, total), dtype=torch.float32))

    @torch.library.custom_op("simulator_fa3::varlen_bwd", mutates_args=())
    def varlen_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                   cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int,
                   max_seqlen_k: int, seqused_q: Tensor | None, seqused_k: Tensor | None,
                   softmax_scale: float | None, causal: bool, window_left: int,
                   window_right: int, softcap: float, deterministic: bool,
                   gpu: str) -> tuple[Tensor, Tensor, Tensor]:
        return tuple(flash_attn_backward(
            dout.contiguous(), q, k, v, out, lse, softmax_scale, causal,
            (window_left, window_right), softcap, deterministic, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
            seqused_q=seqused_q, seqused_k=seqused_k, gpu=gpu))

    @varlen_bwd.register_fake
    def _varlen_bwd_fake(dout, q, k, v, *rest):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup_context(ctx, inputs, output):
        q, k, v, cu_q, cu_k, max_q, max_k, used_q, used_k = inputs[:9]
        softmax_scale, causal, wl, wr, softcap = inputs[9:14]
        qv, attention_chunk, deterministic = inputs[19], inputs[23], inputs[24]
        ctx.save_for_backward(q, k, v, *output, cu_q, cu_k, used_q, used_k)
        ctx.flags = (max_q, max_k, softmax_scale, causal, wl, wr, softcap, deterministic,
                     inputs[18])
        ctx.refused = qv is not None or attention_chunk != 0

    def backward(ctx, dout, _dlse):
        if ctx.refused:  # as FA3's FlashAttnVarlenFunc: the forward ran, its backward cannot
            raise ValueError("qv, attention_chunk: FA3 has no backward with them")
        q, k, v, out, lse, cu_q, cu_k, used_q, used_k = ctx.saved_tensors
        max_q, max_k, *flags = ctx.flags
        dq, dk, dv = torch.ops.simulator_fa3.varlen_bwd(dout, q, k, v, out, lse, cu_q, cu_k,
                                                        max_q, max_k, used_q, used_k, *flags)
        return (dq, dk, dv) + (None,) * 22

    varlen_fwd.register_autograd(backward, setup_context=setup_context)


def flash_attn_func_op(forward, varlen, q, k, v, softmax_scale, causal, qv, q_descale,
                       k_descale, v_descale, window_size, attention_chunk, softcap, num_splits,
                       pack_gqa, deterministic, sm_margin, return_attn_probs, num_sms, gpu):
    """:func:`simulator.fa3.flash_attn_func` through the registered ops (what a trace records).

    Args: ``forward``, ``varlen``: :func:`simulator.fa3.flash_attn_func` and
        :func:`simulator.fa3.flash_attn_varlen_func` (for :func:`register`), then the
        former's arguments (already
        checked: ``window_size`` two ints, ``gpu`` a key); executor, progress, memory_budget and
        trace are not taken by the ops.
    """
    import torch

    register(forward, varlen)
    out, lse = torch.ops.simulator_fa3.fwd(
        q, k, v, None if softmax_scale is None else float(softmax_scale), bool(causal),
        int(window_size[0]), int(window_size[1]), float(softcap), int(num_splits), pack_gqa,
        int(sm_margin), num_sms, gpu, qv, q_descale, k_descale, v_descale, int(attention_chunk),
        bool(deterministic))
    return (out, lse) if return_attn_probs else out


# FA3's own op library, as hopper/flash_api.cpp defines it (TORCH_LIBRARY(flash_attn_3, m) at
# Dao-AILab/flash-attention 0251105a): the op names, argument names, types, defaults and
# returns, so that code calling torch.ops.flash_attn_3.* (FA3's flash_attn_interface.py, exported
# graphs) runs on CPU tensors through simulator.fa3. Registered only when asked
# (register_fa3_library / simulator.fa3.register_torch_ops(namespace="flash_attn_3")).
FA3_SCHEMAS = {
    "fwd": (
        "fwd(Tensor q, Tensor k, Tensor v, Tensor(k_new!)? k_new=None, Tensor(v_new!)? v_new=None, "
        "Tensor? q_v=None, Tensor(out!)? out=None, Tensor? cu_seqlens_q=None, "
        "Tensor? cu_seqlens_k=None, Tensor? cu_seqlens_k_new=None, Tensor? seqused_q=None, "
        "Tensor? seqused_k=None, int? max_seqlen_q=None, int? max_seqlen_k=None, "
        "Tensor? page_table=None, Tensor? kv_batch_idx=None, Tensor? leftpad_k=None, "
        "Tensor? rotary_cos=None, Tensor? rotary_sin=None, Tensor? seqlens_rotary=None, "
        "Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None, "
        "float? softmax_scale=None, bool is_causal=False, int window_size_left=-1, "
        "int window_size_right=-1, int attention_chunk=0, float softcap=0.0, "
        "bool is_rotary_interleaved=False, Tensor? scheduler_metadata=None, int num_splits=0, "
        "bool? pack_gqa=None, int sm_margin=0) -> (Tensor(out!), Tensor, Tensor, Tensor)"),
    "bwd": (
        "bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor softmax_lse, "
        "Tensor(dq!)? dq=None, Tensor(dk!)? dk=None, Tensor(dv!)? dv=None, "
        "Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, Tensor? seqused_q=None, "
        "Tensor? seqused_k=None, int? max_seqlen_q=None, int? max_seqlen_k=None, "
        "float? softmax_scale=None, bool is_causal=False, int window_size_left=-1, "
        "int window_size_right=-1, float softcap=0.0, bool deterministic=False, "
        "int sm_margin=0) -> (Tensor, Tensor, Tensor, Tensor, Tensor)"),
    "fwd_combine": (
        "fwd_combine(Tensor out_partial, Tensor lse_partial, Tensor(out!)? out=None, "
        "ScalarType? out_dtype=None) -> (Tensor(out!), Tensor)"),
    "get_scheduler_metadata": (
        "get_scheduler_metadata(int batch_size, int max_seqlen_q, int max_seqlen_k, "
        "int num_heads, int num_heads_k, int headdim, int headdim_v, ScalarType qkv_dtype, "
        "Tensor seqused_k, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, "
        "Tensor? cu_seqlens_k_new=None, Tensor? seqused_q=None, Tensor? leftpad_k=None, "
        "int? page_size=None, int max_seqlen_k_new=0, bool is_causal=False, "
        "int window_size_left=-1, int window_size_right=-1, int attention_chunk=0, "
        "bool has_softcap=False, int num_splits=0, bool? pack_gqa=None, int sm_margin=0) "
        "-> Tensor"),
}
RESERVED_NAMESPACE = "simulator_fa3"
_LIBRARIES: dict = {}  # namespace -> torch.library.Library (kept alive: dropping it unregisters)


def defined_ops(namespace: str) -> list[str]:
    """Which of FA3's op names ``namespace`` already has in torch's dispatcher (imports torch)."""
    import torch

    found = []
    for name in FA3_SCHEMAS:
        try:
            torch._C._dispatch_find_schema_or_throw(f"{namespace}::{name}", "")
        except RuntimeError:
            continue
        found.append(name)
    return found


def register_fa3_library(api: dict, namespace: str = "flash_attn_3") -> None:
    """Register FA3's four library ops (``fwd``, ``bwd``, ``fwd_combine``,
    ``get_scheduler_metadata``, with :data:`FA3_SCHEMAS`) under ``namespace`` for CPU tensors,
    each running the emulation (``api``: simulator.fa3's functions by name, passed in: this
    module sits below the interface). Idempotent per namespace.

    What each op returns, beside FA3's: ``fwd`` -> (out, softmax_lse, out_accum,
    softmax_lse_accum): a KV-cache call (k_new, page_table, kv_batch_idx, leftpad_k, rotary,
    scheduler_metadata, or seqused_k without cu_seqlens_k) runs
    ``flash_attn_with_kvcache`` and returns its split partials; a varlen call
    (``flash_attn_varlen_func``) and a dense one (``flash_attn_func``) return the two
    accumulators empty (0 elements: simulator.fa3 keeps those partials internal). ``bwd``
    writes dq, dk, dv into the tensors given (FA3's mutated arguments; without them the
    gradients are computed and dropped, as FA3 drops its internal buffers) and returns
    (softmax_d, softmax_lse_log2, dq_accum, dk_accum, dv_accum): the preprocess's dPsum and
    LSE * log2(e) for a launch without cu_seqlens or seqused, empty otherwise, the accumulators
    empty (scratch in FA3). ``fwd`` with ``out`` writes into it and
    returns it. The bits are those of the matching simulator.fa3 function.

    Raises:
        ValueError: ``namespace`` not a valid identifier, the reserved ``simulator_fa3``, or
            one already holding one of these op names that this process did not register here
            (a loaded FlashAttention-3 library: never replaced).
    Source: hopper/flash_api.cpp (TORCH_LIBRARY(flash_attn_3, m), mha_fwd, mha_bwd,
        mha_combine, mha_fwd_get_scheduler_metadata).
    """
    if not isinstance(namespace, str) or not namespace.isidentifier():
        raise ValueError(f"namespace: expected an identifier such as 'flash_attn_3', got "
                         f"{namespace!r}")
    if namespace == RESERVED_NAMESPACE:
        raise ValueError(f"namespace: {RESERVED_NAMESPACE!r} holds flash_attn_func's ops (other "
                         f"schemas); pick another for FA3's library ops")
    if namespace in _LIBRARIES:
        return
    taken = defined_ops(namespace)
    if taken:
        raise ValueError(
            f"namespace: {namespace}::{', '.join(taken)} already registered in this process (the "
            f"real FlashAttention-3 library is loaded?); simulator.fa3 never replaces it: pass "
            f"another namespace")
    import torch

    lib = torch.library.Library(namespace, "FRAGMENT")
    for schema in FA3_SCHEMAS.values():
        lib.define(schema)
    for name, fn in _fa3_impls(api).items():
        lib.impl(name, fn, "CPU")
    _LIBRARIES[namespace] = lib


def _fa3_impls(api: dict) -> dict:
    import numpy as np
    import torch

    from .arrays import to_torch
    from .backward import BackwardCall, launch

    def empty():
        return torch.empty(0, dtype=torch.float32)

    def fwd(q, k, v, k_new=None, v_new=None, q_v=None, out=None, cu_seqlens_q=None,
            cu_seqlens_k=None, cu_seqlens_k_new=None, seqused_q=None, seqused_k=None,
            max_seqlen_q=None, max_seqlen_k=None, page_table=None, kv_batch_idx=None,
            leftpad_k=None, rotary_cos=None, rotary_sin=None, seqlens_rotary=None,
            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None,
            is_causal=False, window_size_left=-1, window_size_right=-1, attention_chunk=0,
            softcap=0.0, is_rotary_interleaved=False, scheduler_metadata=None, num_splits=0,
            pack_gqa=None, sm_margin=0):
        common = dict(softmax_scale=softmax_scale, causal=is_causal,
                      q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                      window_size=(window_size_left, window_size_right),
                      attention_chunk=attention_chunk, softcap=softcap, num_splits=num_splits,
                      pack_gqa=pack_gqa, sm_margin=sm_margin)
        cache = (k_new, v_new, page_table, kv_batch_idx, leftpad_k, rotary_cos, rotary_sin,
                 scheduler_metadata, cu_seqlens_k_new)
        if any(x is not None for x in cache) or (seqused_k is not None and cu_seqlens_k is None):
            # flash_attn_with_kvcache's call: k, v are the caches, seqused_k their lengths
            if seqused_q is not None or cu_seqlens_k is not None or max_seqlen_k is not None:
                raise ValueError("seqused_q, cu_seqlens_k, max_seqlen_k: not taken with a KV "
                                 "cache (k_new, page_table, ...) by simulator.fa3")
            o, lse, acc, lse_acc = api["flash_attn_with_kvcache"](
                q, k, v, k_new, v_new, q_v, rotary_cos, rotary_sin, seqused_k, kv_batch_idx,
                leftpad_k, page_table, cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q,
                seqlens_rotary, rotary_interleaved=is_rotary_interleaved,
                scheduler_metadata=scheduler_metadata, return_softmax_lse=True, **common)
            if out is not None:
                out.copy_(o)
                o = out
            return o, lse, acc, lse_acc
        if cu_seqlens_q is not None or cu_seqlens_k is not None or seqused_q is not None:
            o, lse = api["flash_attn_varlen_func"](
                q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q,
                seqused_k, qv=q_v, return_attn_probs=True, **common)
        else:
            o, lse = api["flash_attn_func"](q, k, v, qv=q_v, return_attn_probs=True, **common)
        if out is not None:
            out.copy_(o)
            o = out
        return o, lse, empty(), empty()

    def bwd(dout, q, k, v, out, softmax_lse, dq=None, dk=None, dv=None, cu_seqlens_q=None,
            cu_seqlens_k=None, seqused_q=None, seqused_k=None, max_seqlen_q=None,
            max_seqlen_k=None, softmax_scale=None, is_causal=False, window_size_left=-1,
            window_size_right=-1, softcap=0.0, deterministic=False, sm_margin=0):
        args = dict(dout=dout, q=q, k=k, v=v, out=out, softmax_lse=softmax_lse,
                    softmax_scale=softmax_scale, causal=is_causal,
                    window_size=(window_size_left, window_size_right), softcap=softcap,
                    cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                    max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_q=seqused_q,
                    seqused_k=seqused_k, sm_margin=sm_margin)
        res, _ = launch(BackwardCall(**args), bool(deterministic), spread=False)
        for given, got in ((dq, res.dq), (dk, res.dk), (dv, res.dv)):
            if given is not None:
                given.copy_(to_torch(np.ascontiguousarray(got)))
        dpsum = getattr(res, "dpsum", None)
        if dpsum is None:
            return empty(), empty(), empty(), empty(), empty()
        return (torch.from_numpy(np.array(dpsum)), torch.from_numpy(np.array(res.lse_log2)),
                empty(), empty(), empty())

    def fwd_combine(out_partial, lse_partial, out=None, out_dtype=None):
        o, lse = api["flash_attn_combine"](out_partial, lse_partial, None, out_dtype)
        if out is not None:
            out.copy_(o)
            o = out
        return o, lse

    def get_scheduler_metadata(batch_size, max_seqlen_q, max_seqlen_k, num_heads, num_heads_k,
                               headdim, headdim_v, qkv_dtype, seqused_k, cu_seqlens_q=None,
                               cu_seqlens_k=None, cu_seqlens_k_new=None, seqused_q=None,
                               leftpad_k=None, page_size=None, max_seqlen_k_new=0,
                               is_causal=False, window_size_left=-1, window_size_right=-1,
                               attention_chunk=0, has_softcap=False, num_splits=0,
                               pack_gqa=None, sm_margin=0):
        if cu_seqlens_k is not None or seqused_q is not None:
            raise ValueError("cu_seqlens_k, seqused_q: not taken by simulator.fa3's "
                             "get_scheduler_metadata (flash_attn_interface passes neither)")
        return api["get_scheduler_metadata"](
            batch_size, max_seqlen_q, max_seqlen_k, num_heads, num_heads_k, headdim, seqused_k,
            qkv_dtype, headdim_v, cu_seqlens_q, cu_seqlens_k_new, leftpad_k, page_size,
            max_seqlen_k_new, is_causal, (window_size_left, window_size_right),
            attention_chunk, has_softcap, num_splits, pack_gqa, sm_margin)

    return {"fwd": fwd, "bwd": bwd, "fwd_combine": fwd_combine,
            "get_scheduler_metadata": get_scheduler_metadata}


def flash_attn_varlen_func_op(forward, varlen, q, k, v, cu_seqlens_q, cu_seqlens_k,
                              max_seqlen_q, max_seqlen_k, seqused_q, seqused_k, softmax_scale,
                              causal, qv, q_descale, k_descale, v_descale, window_size,
                              attention_chunk, softcap, num_splits, pack_gqa, deterministic,
                              sm_margin, return_attn_probs, num_sms, gpu):
    """:func:`simulator.fa3.flash_attn_varlen_func` through the registered ops, as
    :func:`flash_attn_func_op` (``window_size`` already two ints, ``gpu`` a key)."""
    import torch

    register(forward, varlen)
    out, lse = torch.ops.simulator_fa3.varlen_fwd(
        q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), seqused_q,
        seqused_k, None if softmax_scale is None else float(softmax_scale), bool(causal),
        int(window_size[0]), int(window_size[1]), float(softcap), int(num_splits), pack_gqa,
        int(sm_margin), num_sms, gpu, qv, q_descale, k_descale, v_descale, int(attention_chunk),
        bool(deterministic))
    return (out, lse) if return_attn_probs else out
