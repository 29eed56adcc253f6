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


def apply(run_forward, backward_kwargs: dict, q, k, v, return_lse: bool,
          refusal: str | None = None):
    """``run_forward(q, k, v) -> (out, lse)`` (detached torch tensors) recorded in torch's graph,
    with :func:`flash_attn_backward` as its backward. Returns out, or (out, lse).

    As FA3's ``FlashAttnFunc``, the forward runs whenever the forward itself can; what only the
    backward refuses (``refusal``, or :func:`check`'s reason: an e4m3 input, head dim 256 with
    deterministic, ...) is raised when ``loss.backward()`` reaches it.

    Raises:
        ValueError: now, for q, k or v not a torch tensor like the others; at backward time, the
            backward's refusal.
    """
    check_tensors(q, k, v)
    if refusal is None:
        try:
            check(q, k, v, backward_kwargs)
        except ValueError as exc:
            refusal = str(exc)
    out, lse = _function().apply(q, k, v, run_forward, backward_kwargs, refusal)
    return (out, lse) if return_lse else out


def check_tensors(q, k, v) -> None:
    """q, k and v all torch tensors (some of them require grad).

    Raises:
        ValueError: naming the first that is not.
    """
    import torch  # noqa: PLC0415

    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name}: expected a torch tensor like the others (some of q, k, v "
                             f"require grad), got {type(x).__name__}")


def check(q, k, v, kw: dict) -> None:
    """What :func:`flash_attn_backward` would refuse (:func:`apply` defers it to the backward):
    q, k or v not a torch tensor like the others, then the backward's own checks
    (:func:`simulator.flash.backward.make_backward_config` on zero-length slices of the
    inputs: dtypes, head dims, heads, softcap, softmax_scale, deterministic at head dim 256;
    V's head dim unlike Q's as :func:`simulator.fa3.backward.common_head_dim` runs it).

    Raises:
        ValueError: naming the argument.
    """
    import numpy as np  # noqa: PLC0415

    from ..flash.backward import make_backward_config  # noqa: PLC0415
    from ..flash.constants import default_softmax_scale  # noqa: PLC0415
    from .arrays import from_torch  # noqa: PLC0415
    from .backward import common_head_dim  # noqa: PLC0415

    check_tensors(q, k, v)
    # no rows: the checks see the shapes and dtypes, and nothing is copied
    q0, k0, v0 = (from_torch(x[:0] if x.dim() == 3 else x[:, :0], n)
                  for x, n in ((q, "q"), (k, "k"), (v, "v")))
    if q0.ndim == 3:  # a varlen launch: one sequence of no rows
        q0, k0, v0 = q0[None], k0[None], v0[None]
    lse0 = np.zeros((q0.shape[0], q0.shape[2], 0), np.float32)
    o0 = np.zeros(q0.shape[:-1] + v0.shape[-1:], q0.dtype)  # out and dout: V's head dim
    a, dims = common_head_dim({"q": q0, "k": k0, "v": v0, "out": o0, "dout": o0})
    scale = kw.get("softmax_scale")
    if dims is not None and scale is None:
        scale = float(default_softmax_scale(dims[0]))
    try:
        make_backward_config(a["dout"], a["q"], a["k"], a["v"], a["out"], lse0,
                             softmax_scale=scale,
                             causal=bool(kw.get("causal")), window=kw.get("window_size", (-1, -1)),
                             softcap=kw.get("softcap", 0.0),
                             deterministic=bool(kw.get("deterministic")))
    except ValueError as exc:  # the shapes in the message are the slices': name the inputs'
        raise ValueError(f"{exc} (the backward's checks, on slices without rows of q "
                         f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)})") from None


def _function():
    """The ``torch.autograd.Function`` (defined on first use: torch is optional)."""
    global _FUNCTION
    if _FUNCTION is None:
        import torch  # noqa: PLC0415

        from .backward import flash_attn_backward  # noqa: PLC0415

        class FlashAttnFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v, run_forward, backward_kwargs, refusal):
                out, lse = run_forward(q.detach(), k.detach(), v.detach())
                ctx.save_for_backward(q, k, v, out, lse)
                ctx.backward_kwargs = backward_kwargs
                ctx.refusal = refusal
                ctx.mark_non_differentiable(lse)
                return out, lse

            @staticmethod
            def backward(ctx, dout, _dlse):
                if ctx.refusal is not None:  # as FA3's backward asserts: at backward time
                    raise ValueError(ctx.refusal)
                q, k, v, out, lse = ctx.saved_tensors
                dq, dk, dv = flash_attn_backward(dout.contiguous(), q.detach(), k.detach(),
                                                 v.detach(), out, lse, **ctx.backward_kwargs)
                return dq, dk, dv, None, None, None

        _FUNCTION = FlashAttnFunction
    return _FUNCTION
