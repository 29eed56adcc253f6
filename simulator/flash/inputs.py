"""Deterministic attention inputs from a seed, reproducible on any machine (CI regenerates them).

The values come from ``numpy.random.PCG64(seed).random_raw`` (the raw 64-bit stream of the bit
generator, fixed by its algorithm and independent of NumPy's distribution code) turned into
floats with exact float64 arithmetic only:

* a uniform is ``(raw >> 11) * 2**-53`` (exact, in [0, 1));
* a "normal-ish" value is the centred sum of four uniforms, ``(u0 + u1 + u2 + u3 - 2) * sqrt(3)``
  (Irwin-Hall: mean 0, variance 1, bounded by +-2 sqrt(3)), scaled by the tensor's std;
* every tensor is cast float64 -> float32 -> its dtype (``astype``, round to nearest even;
  e4m3 values beyond 448 cannot occur with the default scales).

Draw order from one stream: q, k, v, then (``descales=True``) q_descale, k_descale, v_descale
as float32 ``0.5 + 1.5 u`` of shape [batch, heads_kv]. The default standard deviations (q and k
1.5) give scores ``q.k / sqrt(d)`` of standard deviation about 2.25: a softmax that is neither
flat nor one-hot.
"""

from __future__ import annotations

import math

import numpy as np

from .config import DTYPES


class InputStream:
    """Sequential draws from ``PCG64(seed).random_raw``.

    Args:
        seed: a non-negative int (the PCG64 seed; NumPy's SeedSequence spreads it).
    Raises:
        TypeError: ``seed`` is not an int; ValueError: negative.
    """

    def __init__(self, seed: int):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed: expected a non-negative int, got {type(seed).__name__}")
        if seed < 0:
            raise ValueError(f"seed: expected a non-negative int, got {seed}")
        self.seed = int(seed)
        self._bitgen = np.random.PCG64(self.seed)

    def uniform(self, shape) -> np.ndarray:
        """float64 ``[shape]`` in [0, 1): ``(raw >> 11) * 2**-53``."""
        n = int(np.prod(shape, dtype=np.int64))
        raw = np.asarray(self._bitgen.random_raw(n), dtype=np.uint64)
        return ((raw >> np.uint64(11)).astype(np.float64) * 2.0**-53).reshape(shape)

    def normalish(self, shape, std: float = 1.0) -> np.ndarray:
        """float64 ``[shape]``: ``(u0 + u1 + u2 + u3 - 2) * sqrt(3) * std`` (4 uniforms each)."""
        u = self.uniform(tuple(shape) + (4,))
        s = ((u[..., 0] + u[..., 1]) + (u[..., 2] + u[..., 3])) - 2.0
        return s * (math.sqrt(3.0) * float(std))


def _cast(x: np.ndarray, fmt: str) -> np.ndarray:
    return x.astype(np.float32).astype(DTYPES[fmt])


def attention_inputs(seed: int, *, batch: int, seqlen_q: int, seqlen_k: int, heads: int,
                     heads_kv: int, head_dim: int, dtype: str, q_std: float = 1.5,
                     k_std: float = 1.5, v_std: float = 1.0, descales: bool = False,
                     head_dim_v: int | None = None) -> dict:
    """q, k, v (and FP8 descales) for one forward call, from ``seed``.

    Args:
        seed: PCG64 seed (int >= 0).
        batch, seqlen_q, seqlen_k, heads, heads_kv, head_dim: shape (heads_kv divides heads).
        dtype: ``"bf16"`` (ml_dtypes.bfloat16), ``"f16"`` (numpy.float16) or ``"e4m3"``
            (ml_dtypes.float8_e4m3fn).
        q_std, k_std, v_std: standard deviations of the normal-ish values before the cast.
        descales: also draw ``q_descale``, ``k_descale``, ``v_descale`` (float32
            [batch, heads_kv], in [0.5, 2)); otherwise they are None.
        head_dim_v: V's head dim (default head_dim); when it differs, V is drawn after
            everything else, so the other arrays are those of the same call without it.
    Returns:
        dict with ``q`` [batch, seqlen_q, heads, head_dim], ``k``, ``v``
        [batch, seqlen_k, heads_kv, head_dim] (v: head_dim_v) in ``dtype``, and the three
        descales.
    Raises:
        ValueError: unknown dtype, a non-positive size, or heads_kv not dividing heads.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {tuple(DTYPES)}, got {dtype!r}")
    sizes = {"batch": batch, "seqlen_q": seqlen_q, "seqlen_k": seqlen_k, "heads": heads,
             "heads_kv": heads_kv, "head_dim": head_dim}
    for name, val in sizes.items():
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name}: expected a positive int, got {val!r}")
    if heads % heads_kv:
        raise ValueError(f"heads_kv: {heads_kv} must divide heads = {heads}")
    st = InputStream(seed)
    out = {
        "q": _cast(st.normalish((batch, seqlen_q, heads, head_dim), q_std), dtype),
        "k": _cast(st.normalish((batch, seqlen_k, heads_kv, head_dim), k_std), dtype),
        "v": _cast(st.normalish((batch, seqlen_k, heads_kv, head_dim), v_std), dtype),
        "q_descale": None, "k_descale": None, "v_descale": None,
    }
    if descales:
        for name in ("q_descale", "k_descale", "v_descale"):
            out[name] = (0.5 + 1.5 * st.uniform((batch, heads_kv))).astype(np.float32)
    if head_dim_v is not None and head_dim_v != head_dim:
        if isinstance(head_dim_v, bool) or not isinstance(head_dim_v, (int, np.integer)) or head_dim_v < 1:
            raise ValueError(f"head_dim_v: expected a positive int, got {head_dim_v!r}")
        out["v"] = _cast(st.normalish((batch, seqlen_k, heads_kv, head_dim_v), v_std), dtype)
    return out
