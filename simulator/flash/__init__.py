"""The FlashAttention-3 forward, emulated on Hopper warpgroups (docs/forward.md).

    forward(q, k, v, ...)   -> ForwardResult(out, lse, trace), bit-exact model of the kernel
    reference(q, k, v, ...) -> (out, lse) in float64, for error measurement
    Softmax                 -> hopper/softmax.h's state and methods on emulated threads
"""

from .config import ForwardResult, make_config
from .constants import host_constants
from .forward import forward
from .reference import reference
from .softmax import Softmax, rescale_o

__all__ = ["ForwardResult", "Softmax", "forward", "host_constants", "make_config", "reference",
           "rescale_o"]
