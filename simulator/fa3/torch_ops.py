"""``simulator.fa3.flash_attn_func`` as ``torch.library`` custom ops, for ``torch.compile`` and
``torch.export``: ``simulator_fa3::fwd`` (out, softmax_lse) and ``simulator_fa3::bwd`` (dq, dk,
dv), each with a fake (meta) implementation giving the output shapes and dtypes, and the
forward's autograd formula, as FA3's own interface registers ``flash_attn_3::_flash_attn_forward``
(hopper/flash_attn_interface.py).

A compiled model traces through these ops (the emulation itself, NumPy, runs when the graph
runs); an eager call keeps the plain path (:mod:`.autograd`). The same bits either way: the ops
call the same functions. Registered on first use (torch is optional).
"""


_REGISTERED = False

__all__ = ["compiling", "flash_attn_func_op", "register"]


def compiling() -> bool:
    """Whether torch is tracing this call (``torch.compile`` / ``torch.export``)."""
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


def register(forward) -> None:
    """Register the ops (once per process) over ``forward`` (:func:`simulator.fa3.flash_attn_func`,
    passed in: this module sits below the interface). :mod:`simulator.fa3` calls it at import
    when torch is already imported; otherwise the first compiled call does, outside the trace
    (a graph break, once: under ``fullgraph=True`` import torch before :mod:`simulator.fa3`)."""
    if _REGISTERED:
        return
    import torch

    torch.compiler.disable(_register)(forward)


def _register(flash_attn_func) -> None:
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
    _REGISTERED = True


def flash_attn_func_op(forward, q, k, v, softmax_scale, causal, qv, q_descale, k_descale,
                       v_descale, window_size, attention_chunk, softcap, num_splits, pack_gqa,
                       deterministic, sm_margin, return_attn_probs, num_sms, gpu):
    """:func:`simulator.fa3.flash_attn_func` through the registered ops (what a trace records).

    Args: ``forward`` :func:`simulator.fa3.flash_attn_func` itself, then its arguments (already
        checked: ``window_size`` two ints, ``gpu`` a key); executor, progress, memory_budget and
        trace are not taken by the ops.
    """
    import torch

    register(forward)
    out, lse = torch.ops.simulator_fa3.fwd(
        q, k, v, None if softmax_scale is None else float(softmax_scale), bool(causal),
        int(window_size[0]), int(window_size[1]), float(softcap), int(num_splits), pack_gqa,
        int(sm_margin), num_sms, gpu, qv, q_descale, k_descale, v_descale, int(attention_chunk),
        bool(deterministic))
    return (out, lse) if return_attn_probs else out
