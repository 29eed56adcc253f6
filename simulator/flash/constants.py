"""Host-side float32 constants of the forward, shared by the emulator and the CUDA kernel.

docs/forward.md ("Inputs and host-side constants") is the contract; both executions take their
constants from :func:`host_constants`, so they cannot drift apart.
"""

from __future__ import annotations

import math

import numpy as np

# float32 nearest ln 2 (0x3f317218), the multiplier of ``__logf`` under --use_fast_math: one
# definition, beside the MUFU forms that use it
from ..numerics.mufu import LN2_F32  # noqa: F401

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
    if not _is_finite_number(scale) or scale <= 0:
        raise ValueError(f"softmax_scale: expected a finite positive number, got {_short(softmax_scale)}")
    if not _is_finite_number(softcap) or softcap < 0:
        raise ValueError(f"softcap: expected a finite number >= 0 (0 = off), got {_short(softcap)}")
    log2e = math.log2(math.e)
    tiny = np.finfo(np.float32).tiny
    with np.errstate(over="ignore", under="ignore"):
        scale32 = np.float32(scale)
        softcap32 = np.float32(softcap)
    # the kernel receives float32: every constant must stay a normal float32 number
    _check_f32("softmax_scale", scale32, softmax_scale, tiny)
    with np.errstate(over="ignore", under="ignore"):
        if softcap > 0:
            _check_f32("softcap", softcap32, softcap, tiny)
            softcap_val = np.float32(float(scale32) / float(softcap32))
            scale_log2 = np.float32(float(softcap32) * log2e)
            _check_f32("softcap", softcap_val, softcap, tiny, "softmax_scale / softcap")
        else:
            softcap_val = np.float32(0.0)
            scale_log2 = np.float32(float(scale32) * log2e)
    _check_f32("softmax_scale", scale_log2, softmax_scale, tiny, "scale * log2(e)")
    return {"softmax_scale": scale32, "scale_log2": scale_log2, "softcap_val": softcap_val}


def _check_f32(name: str, value, given, tiny, what: str = "") -> None:
    if not (np.isfinite(value) and abs(value) >= tiny):
        why = ("an overflow" if not np.isfinite(value) else "an underflow" if value == 0 else
               "a subnormal float32, which the kernel's .ftz arithmetic flushes to 0")
        raise ValueError(f"{name}: {given!r} does not survive the float32 cast the kernel uses "
                         f"({what + ' ' if what else ''}becomes {value!r}: {why}); use a "
                         "value nearer 1")


def _is_number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _is_finite_number(x) -> bool:
    """A number whose float64 value is finite (an int beyond float64's range is not)."""
    if not _is_number(x):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _short(x) -> str:
    """repr of an argument for a message; an int beyond float64's range as its magnitude."""
    if isinstance(x, int) and not isinstance(x, bool):
        try:
            float(x)
        except OverflowError:
            exponent = int(math.log10(abs(x)))
            return f"an int of about {'-' if x < 0 else ''}10**{exponent} (beyond float64's range)"
    return repr(x)
