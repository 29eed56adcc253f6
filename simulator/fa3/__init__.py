"""FlashAttention-3's Python API (``flash_attn_interface``), emulated: swap one import.

::

    # from flash_attn_interface import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache
    from simulator.fa3 import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

The functions take the library's arguments, defaults, shapes and return conventions, run what
FA3's host code (``hopper/flash_api.cpp``) launches (dispatch, varlen, KV cache, split-KV and
its combine), and give the bits the library gives on an H200. Inputs are NumPy arrays
(ml_dtypes bfloat16 / float8_e4m3fn, numpy float16) or CPU torch tensors (returned as torch
tensors). Keyword-only extras for what a host decides on its GPU: ``num_sms`` (132, the
H200's) for the split heuristic. The kernel-level entry point, one launch with explicit tiles,
stays :func:`simulator.flash.forward`; this package is the host side over it. The backward:
:func:`flash_attn_backward` (``_flash_attn_backward``), :func:`backward_spread` (what the default
mode's float32 reduce-adds can give in any order), and ``loss.backward()`` through
``flash_attn_func`` / ``flash_attn_varlen_func`` on CPU torch tensors that require grad.
"""

import sys as _sys

from . import torch_ops as _torch_ops
from .backward import backward_spread, flash_attn_backward
from .interface import (
    flash_attn_combine,
    flash_attn_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
)
from .metadata import get_scheduler_metadata
from .packed import flash_attn_qkvpacked_func

__all__ = ["backward_spread", "flash_attn_backward", "flash_attn_combine", "flash_attn_func",
           "flash_attn_qkvpacked_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
           "get_scheduler_metadata", "register_torch_ops"]



def register_torch_ops(namespace: str | None = None) -> None:
    """Register torch ops over this package (imports torch).

    Without ``namespace``: ``flash_attn_func``'s ``torch.library`` ops (:mod:`.torch_ops`,
    ``simulator_fa3::fwd`` / ``bwd``, ``flash_attn_varlen_func``'s ``::varlen_fwd`` /
    ``varlen_bwd``), done at import when torch was imported first; call it
    after ``import torch`` otherwise, before a ``torch.compile(..., fullgraph=True)`` (without
    fullgraph the first compiled call registers them, with one graph break).

    With ``namespace`` (``"flash_attn_3"`` for code that calls ``torch.ops.flash_attn_3.*``):
    FA3's own library ops ``fwd``, ``bwd``, ``fwd_combine``, ``get_scheduler_metadata`` with
    the schemas of ``hopper/flash_api.cpp``, for CPU tensors, running this package
    (:func:`simulator.fa3.torch_ops.register_fa3_library` says what each returns). Only on
    request, and never over a loaded FlashAttention-3 library.

    Raises:
        ValueError: ``namespace`` refused (not an identifier, ``"simulator_fa3"``, or already
            holding FA3's op names from another library), naming it.
    """
    if namespace is None:
        _torch_ops.register(flash_attn_func, flash_attn_varlen_func)
        return
    _torch_ops.register_fa3_library(
        {"flash_attn_func": flash_attn_func, "flash_attn_varlen_func": flash_attn_varlen_func,
         "flash_attn_with_kvcache": flash_attn_with_kvcache,
         "flash_attn_combine": flash_attn_combine,
         "get_scheduler_metadata": get_scheduler_metadata}, namespace)


if "torch" in _sys.modules:  # torch.compile traces through the registered ops (torch_ops)
    register_torch_ops()
