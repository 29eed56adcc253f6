"""What the forward and backward launches share: operands padded to whole tiles, and C's
integer division where FA3's block bounds use it.

Both kernels read Q / K / V / dO through bounded bulk copies (TMA): rows past the sequence and
columns past the head dim arrive as zeros, so the emulation pads the operands once with zeros
to whole blocks and to the kernel's head dim.
"""

from __future__ import annotations

import numpy as np


def pad_rows(x: np.ndarray, length: int, width: int) -> np.ndarray:
    """``x`` [batch, seqlen, heads, d] zero-padded to [batch, length, heads, width] (same dtype;
    ``length >= seqlen``, ``width >= d``)."""
    out = np.zeros((x.shape[0], length, x.shape[2], width), x.dtype)
    out[:, : x.shape[1], :, : x.shape[3]] = x
    return out


def trunc_div(a, b: int) -> np.ndarray:
    """C's integer division (toward zero) of int arrays by a positive int."""
    a = np.asarray(a, dtype=np.int64)
    return np.sign(a) * (np.abs(a) // b)


def ceil_div(a, b: int) -> np.ndarray:
    """``cute::ceil_div``: ``(a + b - 1) / b`` in C ints."""
    return trunc_div(np.asarray(a, dtype=np.int64) + b - 1, b)
