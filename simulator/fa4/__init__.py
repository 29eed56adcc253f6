"""FlashAttention-4's sm90 forward (``flash_attn.cute``, PyPI flash-attn-4) on emulated Hopper
warpgroups: :func:`flash_attn_func`, :func:`flash_attn_varlen_func` (:mod:`.interface`), the
host rules in :mod:`.host` (docs/fa4.md)."""

from .interface import (
    flash_attn_backward,
    flash_attn_func,
    flash_attn_varlen_backward,
    flash_attn_varlen_func,
)

__all__ = ["flash_attn_backward", "flash_attn_func", "flash_attn_varlen_backward",
           "flash_attn_varlen_func"]
