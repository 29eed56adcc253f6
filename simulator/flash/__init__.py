"""The FlashAttention-3 forward, emulated on Hopper warpgroups (docs/forward.md).

    forward(q, k, v, ...)   -> ForwardResult(out, lse, trace), bit-exact model of the kernel
    reference(q, k, v, ...) -> (out, lse) in float64, for error measurement
    backward(dout, q, k, v, out, lse, ...) -> BackwardResult(dq, dk, dv, ...), bit-exact model
    Softmax                 -> hopper/softmax.h's state and methods on emulated threads
    Exactness               -> forward(..., exact=): approximations run exact (simulator.budget)
"""

from .backward import BackwardResult, backward
from .config import ForwardResult, make_config
from .constants import host_constants
from .exact import Exactness
from .forward import forward
from .reference import reference, reference_backward
from .softmax import Softmax, rescale_o

__all__ = ["BackwardResult", "Exactness", "ForwardResult", "Softmax", "backward", "forward", "host_constants",
           "make_config", "reference", "reference_backward", "rescale_o"]
