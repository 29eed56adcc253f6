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
    with :func:`flash_attn_backward` as its backward. Returns out, or (out, lse)."""
    out, lse = _function().apply(q, k, v, run_forward, backward_kwargs)
    return (out, lse) if return_lse else out


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
