"""FlashAttention-2's host side (``csrc/flash_attn/flash_api.cpp``, ``mha_fwd``) as it decides a
launch on a Hopper GPU: the normalised mask flags, the GQA decode swap, the kernel's tile and
head dim, and the split-KV count from the GPU's SM count. :mod:`simulator.sdpa` (PyTorch's build,
``torch.nn.functional.scaled_dot_product_attention``'s flash backend) runs its calls through it.
"""

from .combine import combine_partials
from .host import Fa2Launch, num_splits_heuristic, plan_forward

__all__ = ["Fa2Launch", "combine_partials", "num_splits_heuristic", "plan_forward"]
