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
stays :func:`simulator.flash.forward`; this package is the host side over it.
"""

from .interface import (
    flash_attn_combine,
    flash_attn_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
)

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
           "flash_attn_combine"]
