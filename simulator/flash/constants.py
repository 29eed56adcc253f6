"""Host-side float32 constants of the forward, shared by the emulator and the CUDA kernel.

docs/forward.md ("Inputs and host-side constants") is the contract; both executions take their
constants from :func:`host_constants`, so they cannot drift apart.
"""

from __future__ import annotations

import math

import numpy as np

#: float32 nearest ln 2 (0x3f317218): the multiplier of ``__logf`` under --use_fast_math
LN2_F32 = np.array(0x3F317218, dtype=np.uint32).view(np.float32)[()]
#: Max_offset of softmax.h: 8 for FP8 P (range of e4m3 used up to 2^8), else 0
MAX_OFFSET = {"bf16": 0, "f16": 0, "e4m3": 8}


def default_softmax_scale(head_dim: int) -> float:
    """``1 / sqrt(head_dim)`` in float64 (FA3's default), before the float32 cast."""
    return 1.0 / math.sqrt(head_dim)


def host_constants(head_dim: int, softmax_scale: float | None, softcap: float) -> dict:
    """float32 constants passed to a CTA before any descale folding.

    Returns:
        dict with ``softmax_scale`` (np.float32), ``scale_log2`` (np.float32),
        ``softcap_val`` (np.float32; 0 when softcap is off).
    Raises:
        ValueError: non-finite or non-positive ``softmax_scale``, negative or non-finite softcap.
    """
    scale = default_softmax_scale(head_dim) if softmax_scale is None else softmax_scale
    if not isinstance(scale, (int, float, np.floating)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"softmax_scale: expected a finite positive number, got {softmax_scale!r}")
    if not isinstance(softcap, (int, float, np.floating)) or not math.isfinite(softcap) or softcap < 0:
        raise ValueError(f"softcap: expected a finite number >= 0 (0 = off), got {softcap!r}")
    scale32 = np.float32(scale)
    log2e = math.log2(math.e)
    if softcap > 0:
        softcap_val = np.float32(float(scale32) / float(np.float32(softcap)))
        scale_log2 = np.float32(float(np.float32(softcap)) * log2e)
    else:
        softcap_val = np.float32(0.0)
        scale_log2 = np.float32(float(scale32) * log2e)
    return {"softmax_scale": scale32, "scale_log2": scale_log2, "softcap_val": softcap_val}
