"""float64 reference attention with the same masks, softcap and descales as the forward.

For measuring the emulated kernel's error against exact math; not bit-exact by design.
"""

from __future__ import annotations

import numpy as np

from .forward import make_config
from .masks import allowed


def reference(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
              seqlens_k=None, q_descale=None, k_descale=None, v_descale=None):
    """Attention in float64 on the exact input values.

    Args: as :func:`simulator.flash.forward` (block sizes and schedule do not apply).
    Returns:
        ``(out, lse)``: float64 [batch, seqlen_q, heads, head_dim] and [batch, heads, seqlen_q]
        (natural log); rows that see no key give 0 and -inf; rows with a NaN among their visible
        scores give NaN in both (exact math; the kernel gives NaN O but LSE -inf there).
    Raises:
        ValueError: invalid arguments, as :func:`simulator.flash.forward`.
    """
    cfg = make_config(q, k, v, softmax_scale=softmax_scale, causal=causal, window=window,
                      softcap=softcap, seqlens_k=seqlens_k, q_descale=q_descale,
                      k_descale=k_descale, v_descale=v_descale)
    group = cfg.heads // cfg.heads_kv
    kvh = np.arange(cfg.heads) // group
    qd = q.astype(np.float64)
    kd = k.astype(np.float64)[:, :, kvh]                        # [B, Sk, H, d]
    vd = v.astype(np.float64)[:, :, kvh]
    descale_qk = (cfg.q_descale.astype(np.float64) * cfg.k_descale)[:, kvh]   # [B, H]
    descale_v = cfg.v_descale.astype(np.float64)[:, kvh]
    scale = float(cfg.consts["softmax_scale"])
    s = np.einsum("bqhd,bkhd->bhqk", qd, kd) * descale_qk[:, :, None, None] * scale
    if cfg.softcap > 0:
        s = cfg.softcap * np.tanh(s / cfg.softcap)
    rows = np.arange(cfg.seqlen_q)[:, None]
    cols = np.arange(cfg.seqlen_k)[None, :]
    ok = allowed(rows[None], cols[None], cfg.seqlen_q, cfg.seqlens_k[:, None, None], cfg.window)
    s = np.where(ok[:, None], s, -np.inf)                        # [B, H, Sq, Sk]
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m_safe)
    total = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(total > 0, e / total, 0.0)
        lse = np.where(total[..., 0] > 0, m_safe[..., 0] + np.log(total[..., 0]), -np.inf)
    out = np.einsum("bhqk,bkhd->bqhd", p, vd) * descale_v[:, None, :, None]
    nan_rows = np.isnan(s).any(axis=-1)                          # [B, H, Sq]
    lse = np.where(nan_rows, np.nan, lse)
    out = np.where(nan_rows.transpose(0, 2, 1)[..., None], np.nan, out)
    return out, lse
