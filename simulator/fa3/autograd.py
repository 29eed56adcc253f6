"""``loss.backward()`` through ``flash_attn_func`` / ``flash_attn_varlen_func`` on CPU torch
tensors that require grad, as FA3's ``FlashAttnFunc`` / ``FlashAttnVarlenFunc``
(``hopper/flash_attn_interface.py``) do it: the forward saves q, k, v, out and softmax_lse,
and the backward runs :func:`simulator.fa3.backward.flash_attn_backward` on them with the
forward's softmax_scale, causal, window_size, softcap and deterministic. torch stays
optional: nothing here imports it until a tensor that requires grad arrives.
"""

from __future__ import annotations

_FUNCTION = None


def needs_grad(*xs) -> bool:
    """Whether any of ``xs`` is a torch tensor that requires grad while grad mode is on."""
    hits = [x for x in xs if type(x).__module__.startswith("torch") and getattr(x, "requires_grad", False)]
    if not hits:
        return False
    import torch  # noqa: PLC0415

    return torch.is_grad_enabled()


def apply(run_forward, backward_kwargs: dict, q, k, v, return_lse: bool):
    """``run_forward(q, k, v) -> (out, lse)`` (detached torch tensors) recorded in torch's graph,
    with :func:`flash_attn_backward` as its backward. Returns out, or (out, lse).

    Raises:
        ValueError: before any work, for what the backward would refuse (see :func:`check`).
    """
    check(q, k, v, backward_kwargs)
    out, lse = _function().apply(q, k, v, run_forward, backward_kwargs)
    return (out, lse) if return_lse else out


def check(q, k, v, kw: dict) -> None:
    """What :func:`flash_attn_backward` would refuse, raised up front (the forward is not run):
    q, k and v all torch tensors, bf16 or fp16, V's head dim equal to Q's, softcap 0, no
    seqused_*, no deterministic backward for kernel head dim 256.

    Raises:
        ValueError: naming the argument.
    """
    import torch  # noqa: PLC0415

    from ..flash.dispatch import kernel_head_dim  # noqa: PLC0415

    for name, x in (("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name}: expected a torch tensor like q (q requires grad), got "
                             f"{type(x).__name__}")
    if q.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"q: FA3's backward takes bfloat16 or float16, got {q.dtype} (q requires grad)")
    if v.shape[-1] != q.shape[-1]:
        raise ValueError(f"v: the backward takes V's head dim equal to Q's ({q.shape[-1]}), got "
                         f"{v.shape[-1]} (q requires grad)")
    if kw.get("softcap"):
        raise ValueError("softcap: the backward with softcap is not emulated; pass softcap=0.0 or "
                         "inputs that do not require grad")
    for name in ("seqused_q", "seqused_k"):
        if kw.get(name) is not None:
            raise ValueError(f"{name}: not emulated in the backward (q requires grad)")
    if kw.get("deterministic") is True and 8 <= q.shape[-1] <= 256 \
            and kernel_head_dim(q.shape[-1]) == 256:
        raise ValueError("deterministic: FA3's backward has no deterministic kernel for head dim "
                         "256 (mha_bwd refuses it)")


def _function():
    """The ``torch.autograd.Function`` (defined on first use: torch is optional)."""
    global _FUNCTION
    if _FUNCTION is None:
        import torch  # noqa: PLC0415

        from .backward import flash_attn_backward  # noqa: PLC0415

        class FlashAttnFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v, run_forward, backward_kwargs):
                out, lse = run_forward(q.detach(), k.detach(), v.detach())
                ctx.save_for_backward(q, k, v, out, lse)
                ctx.backward_kwargs = backward_kwargs
                ctx.mark_non_differentiable(lse)
                return out, lse

            @staticmethod
            def backward(ctx, dout, _dlse):
                q, k, v, out, lse = ctx.saved_tensors
                dq, dk, dv = flash_attn_backward(dout.contiguous(), q.detach(), k.detach(),
                                                 v.detach(), out, lse, **ctx.backward_kwargs)
                return dq, dk, dv, None, None

        _FUNCTION = FlashAttnFunction
    return _FUNCTION
