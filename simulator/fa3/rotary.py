"""Rotary embeddings in ``flash_attn_with_kvcache`` (``rotary_cos`` / ``rotary_sin``): FA3
rotates the new keys before AppendKV stores them, and the queries before the attention
(hopper/rotary.h, hopper/flash_api.cpp ``mha_fwd``).

A rotated pair ``(x0, x1)`` (interleaved: features ``2j, 2j + 1``; otherwise ``j, j +
rotary_dim / 2``) at position ``p`` becomes ``(x0 cos - x1 sin, x0 sin + x1 cos)`` with ``cos``
/ ``sin`` row ``p`` of the tables, in float32, then rounded to the input's type; features past
``rotary_dim`` are unchanged. Both products are exact in float32 (16-bit inputs: at most 11 x
11 significant bits), so the one rounding is that of the float32 sum, whatever FMA contraction
nvcc chose. New key ``i`` of batch ``b`` sits at position ``base[b] + i``; the queries too with
a causal or local kernel, else every query row at ``base[b]``; ``base`` is ``rotary_seqlens``
when given, else ``cache_seqlens``. Measured: ``fa3_rotary_report.json`` /
``fa3_rotary_sample.npz`` (the rotated keys as the kernel stored them, and out / lse).
"""

from __future__ import annotations

import numpy as np

from .arrays import to_numpy
from .checks import int_array


def check_rotary(cos, sin, seqlens, *, q_dtype, head_dim: int, batch: int, appends: bool,
                 paged: bool, seqlen_k: int):
    """(cos, sin, rotary_seqlens) as NumPy arrays after mha_fwd's checks, or None when no
    rotary embedding is asked for.

    Raises:
        ValueError: naming rotary_cos, rotary_sin or rotary_seqlens (FA3's rules: new k / v
            given, rotary_dim = 2 * cos.shape[1] <= head_dim and a multiple of 16, cos / sin
            [seqlen_ro, rotary_dim / 2] in q's dtype, seqlen_ro >= seqlen_k for a paged cache,
            rotary_seqlens int32 [batch]; without rotary_cos / rotary_sin, rotary_seqlens is
            ignored, as flash_api.cpp reads it only inside ``if (rotary_cos_.has_value())``).
    """
    if cos is None and sin is None:  # mha_fwd reads rotary_seqlens only with rotary_cos
        return None
    if cos is None or sin is None:
        raise ValueError("rotary_cos, rotary_sin: give both or neither")
    if not appends:
        raise ValueError("rotary_cos: FA3 requires new k, v with it (\"If rotary cos/sin are "
                         "provided, new key / value to be appended to KV cache must also be "
                         "provided\")")
    c, s = to_numpy(cos, "rotary_cos")[0], to_numpy(sin, "rotary_sin")[0]
    for name, x in (("rotary_cos", c), ("rotary_sin", s)):
        if not isinstance(x, np.ndarray) or x.ndim != 2:
            raise ValueError(f"{name}: expected [seqlen_ro, rotary_dim / 2], got "
                             f"{getattr(x, 'shape', type(x).__name__)}")
        if x.dtype != q_dtype:
            raise ValueError(f"{name}: expected q's dtype {q_dtype}, got {x.dtype}")
    rdim = 2 * c.shape[1]
    if s.shape != c.shape:
        raise ValueError(f"rotary_sin: expected rotary_cos's shape {list(c.shape)}, got "
                         f"{list(s.shape)}")
    if rdim == 0 or rdim > head_dim or rdim % 16:
        raise ValueError(f"rotary_cos: rotary_dim = 2 * {c.shape[1]} = {rdim} must be a multiple "
                         f"of 16 and at most head_dim {head_dim}")
    if paged and c.shape[0] < seqlen_k:
        raise ValueError(f"rotary_cos: a paged cache needs seqlen_ro >= the cache's length "
                         f"{seqlen_k}, got {c.shape[0]}")
    base = int_array(to_numpy(seqlens, "rotary_seqlens")[0], "rotary_seqlens", batch)
    return c, s, base


def positions_past(table_rows: int, positions: np.ndarray, name: str) -> None:
    """Refuse positions outside the tables (FA3 would read past them)."""
    if positions.size and (positions.min() < 0 or positions.max() >= table_rows):
        raise ValueError(f"{name}: rotary positions {int(positions.min())}..{int(positions.max())} "
                         f"need rotary_cos / rotary_sin rows 0..{int(positions.max())}, the "
                         f"tables have {table_rows}")


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, positions: np.ndarray,
           interleaved: bool) -> np.ndarray:
    """``x`` [batch, rows, heads, head_dim] rotated at ``positions`` [batch, rows], in x's dtype."""
    half = cos.shape[1]
    c = cos[positions].astype(np.float32)[:, :, None, :]
    s = sin[positions].astype(np.float32)[:, :, None, :]
    xf = x.astype(np.float32)
    if interleaved:
        i0, i1 = slice(0, 2 * half, 2), slice(1, 2 * half, 2)
    else:
        i0, i1 = slice(0, half), slice(half, 2 * half)
    x0, x1 = xf[..., i0], xf[..., i1]
    out = xf.copy()
    out[..., i0] = x0 * c - x1 * s  # exact float32 products, one rounding of the difference
    out[..., i1] = x0 * s + x1 * c
    return out.astype(x.dtype)
