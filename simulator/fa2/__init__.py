"""FlashAttention-2's host side (``csrc/flash_attn/flash_api.cpp``, ``mha_fwd``) as it decides a
launch on a Hopper GPU: the normalised mask flags, the GQA decode swap, the kernel's tile and
head dim, and the split-KV count from the GPU's SM count. :mod:`simulator.sdpa` (PyTorch's build,
``torch.nn.functional.scaled_dot_product_attention``'s flash backend) runs its calls through it;
:mod:`.interface` is flash-attn 2.x's own API (``flash_attn_func``, ``flash_attn_varlen_func``,
``flash_attn_backward``, ``backward_spread``) as its fast-math build computes it.
"""

from .combine import combine_partials
from .host import Fa2Launch, num_splits_heuristic, plan_forward
from .interface import (
    backward_spread,
    flash_attn_backward,
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
)

__all__ = ["Fa2Launch", "backward_spread", "combine_partials", "flash_attn_backward",
           "flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func",
           "flash_attn_varlen_func", "num_splits_heuristic", "plan_forward"]
