"""float64 reference attention with the same masks, softcap and descales as the forward.

For measuring the emulated kernel's error against exact math; not bit-exact by design.
"""

from __future__ import annotations

import numpy as np

from ..gpus import DEFAULT_GPU
from .config import make_config
from .masks import allowed

# scores held at once, in float64 elements: bounds memory on long sequences
_CHUNK_ELEMENTS = 1 << 24


def reference(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
              seqlens_k=None, q_descale=None, k_descale=None, v_descale=None,
              kblock_m=None, kblock_n=None, schedule=None, gpu=DEFAULT_GPU, mufu=None, qv=None,
              attention_chunk=0):
    """Attention in float64 on the exact input values (with ``qv``: scores
    ``q K^T + qv V^T``, FA3's MLA form).

    Args: as :func:`simulator.flash.forward`; ``kblock_m``, ``kblock_n``, ``schedule`` and
        ``gpu``, ``mufu`` are validated the same way but do not change the exact result.
    Returns:
        ``(out, lse)``: float64 [batch, seqlen_q, heads, head_dim_v] and [batch, heads, seqlen_q]
        (natural log); rows that see no key give 0 and -inf; rows with a NaN among their visible
        scores give NaN in both (exact math; the kernel gives NaN O but LSE -inf there). Keys at
        or after ``seqlens_k[b]`` are absent: their values (even NaN) do not matter. Query rows
        are processed in chunks, so memory stays bounded for long sequences.
    Raises:
        ValueError: invalid arguments, as :func:`simulator.flash.forward`.
    """
    cfg = make_config(q, k, v, softmax_scale=softmax_scale, causal=causal, window=window,
                      softcap=softcap, seqlens_k=seqlens_k, q_descale=q_descale,
                      k_descale=k_descale, v_descale=v_descale, kblock_m=kblock_m,
                      kblock_n=kblock_n, schedule=schedule, gpu=gpu, mufu=mufu, qv=qv,
                      attention_chunk=attention_chunk)
    group = cfg.heads // cfg.heads_kv
    kvh = np.arange(cfg.heads) // group
    present = np.arange(cfg.seqlen_k)[None, :] < cfg.seqlens_k[:, None]       # [B, Sk]
    kd = np.where(present[:, :, None, None], k.astype(np.float64), 0.0)[:, :, kvh]
    vd = np.where(present[:, :, None, None], v.astype(np.float64), 0.0)[:, :, kvh]
    descale_qk = (cfg.q_descale.astype(np.float64) * cfg.k_descale)[:, kvh]   # [B, H]
    descale_v = cfg.v_descale.astype(np.float64)[:, kvh]
    scale = float(cfg.consts["softmax_scale"])
    out = np.zeros((cfg.batch, cfg.seqlen_q, cfg.heads, cfg.head_dim_v))
    lse = np.full((cfg.batch, cfg.heads, cfg.seqlen_q), -np.inf)
    if cfg.seqlen_k == 0:
        return out, lse
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // (cfg.batch * cfg.heads * cfg.seqlen_k))
    for r0 in range(0, cfg.seqlen_q, rows_per_chunk):  # a few chunks: bounds memory only
        r1 = min(cfg.seqlen_q, r0 + rows_per_chunk)
        qv_c = None if qv is None else qv[:, r0:r1].astype(np.float64)
        o_c, l_c = _rows(cfg, q[:, r0:r1].astype(np.float64), kd, vd, descale_qk, descale_v,
                         scale, np.arange(r0, r1), qv_c)
        out[:, r0:r1], lse[:, :, r0:r1] = o_c, l_c
    return out, lse


def _rows(cfg, qd, kd, vd, descale_qk, descale_v, scale, rows, qvd=None):
    s = np.einsum("bqhd,bkhd->bhqk", qd, kd)
    if qvd is not None:  # qv is bf16 / fp16 only: no descale applies
        s = s + np.einsum("bqhd,bkhd->bhqk", qvd, vd)
    s = s * descale_qk[:, :, None, None] * scale
    if cfg.softcap > 0:
        s = cfg.softcap * np.tanh(s / cfg.softcap)
    cols = np.arange(cfg.seqlen_k)[None, :]
    ok = allowed(rows[None, :, None], cols[None], cfg.seqlen_q, cfg.seqlens_k[:, None, None],
                 cfg.window, cfg.chunk)
    s = np.where(ok[:, None], s, -np.inf)                        # [B, H, rows, Sk]
    with np.errstate(invalid="ignore"):
        m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - m_safe)
    total = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(total > 0, e / total, 0.0)
        lse = np.where(total[..., 0] > 0, m_safe[..., 0] + np.log(total[..., 0]), -np.inf)
    out = np.einsum("bhqk,bkhd->bqhd", p, vd) * descale_v[:, None, :, None]
    nan_rows = np.isnan(s).any(axis=-1)                          # [B, H, rows]
    lse = np.where(nan_rows, np.nan, lse)
    out = np.where(nan_rows.transpose(0, 2, 1)[..., None], np.nan, out)
    return out, lse


def reference_backward(dout, q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1),
                       softcap=0.0):
    """The exact gradients of attention in float64 on the exact input values.

    ``P = softmax(S)`` under the masks with ``S = scale * Q K^T`` (with softcap ``c``:
    ``S = c * tanh(scale * Q K^T / c)``), ``O = P V``; ``dV = P^T dO``,
    ``dS = P * (dO V^T - rowsum(dO * O))`` (with softcap times ``1 - tanh^2``),
    ``dQ = scale * dS K``, ``dK = scale * dS^T Q``, summed over the query heads of each kv head
    (GQA). O is the exact one, not the kernel's.

    Args: as :func:`simulator.flash.backward` (bf16 / fp16 arrays).
    Returns:
        (dq, dk, dv) float64 of q's, k's and v's shapes; rows that see no key give zeros.
    Raises:
        ValueError: invalid arguments, as :func:`simulator.flash.forward`.
    """
    cfg = make_config(q, k, v, softmax_scale=softmax_scale, causal=causal, window=window,
                      softcap=softcap)
    group = cfg.heads // cfg.heads_kv
    kvh = np.arange(cfg.heads) // group
    kd, vd = k.astype(np.float64)[:, :, kvh], v.astype(np.float64)[:, :, kvh]
    scale = float(cfg.consts["softmax_scale"])
    dq = np.zeros(q.shape)
    dk_h = np.zeros(kd.shape)
    dv_h = np.zeros(vd.shape)
    if cfg.seqlen_k == 0:
        return dq, np.zeros(k.shape), np.zeros(v.shape)
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // (cfg.batch * cfg.heads * cfg.seqlen_k))
    cols = np.arange(cfg.seqlen_k)[None, :]
    for r0 in range(0, cfg.seqlen_q, rows_per_chunk):
        r1 = min(cfg.seqlen_q, r0 + rows_per_chunk)
        qd = q[:, r0:r1].astype(np.float64)
        g = dout[:, r0:r1].astype(np.float64)
        s = np.einsum("bqhd,bkhd->bhqk", qd, kd) * scale
        dtanh = 1.0
        if cfg.softcap > 0:
            t = np.tanh(s / cfg.softcap)
            s, dtanh = cfg.softcap * t, 1.0 - t * t
        ok = allowed(np.arange(r0, r1)[None, :, None], cols[None], cfg.seqlen_q,
                     cfg.seqlens_k[:, None, None], cfg.window)
        s = np.where(ok[:, None], s, -np.inf)
        with np.errstate(invalid="ignore"):
            m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
        total = e.sum(axis=-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(total > 0, e / total, 0.0)                       # [B, H, rows, Sk]
        o = np.einsum("bhqk,bkhd->bqhd", p, vd)
        dp = np.einsum("bqhd,bkhd->bhqk", g, vd)
        ds = p * (dp - np.einsum("bqhd,bqhd->bhq", g, o)[..., None]) * dtanh
        dq[:, r0:r1] = scale * np.einsum("bhqk,bkhd->bqhd", ds, kd)
        dk_h += scale * np.einsum("bhqk,bqhd->bkhd", ds, qd)
        dv_h += np.einsum("bhqk,bqhd->bkhd", p, g)
    shape = (cfg.batch, cfg.seqlen_k, cfg.heads_kv, group, -1)
    return dq, dk_h.reshape(shape).sum(axis=3), dv_h.reshape(shape).sum(axis=3)
