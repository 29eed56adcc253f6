"""FlashAttention-3 with its backward on the GPU: the ``flash-attn3-jax`` build.

PyPI ``flash-attn3-jax`` 0.2.3 (Kyutai) is Dao-AILab's ``hopper/`` compiled for JAX's FFI:
head dim 128, bf16 and fp16, forward and backward (``flash_bwd_hdim128_{bf16,fp16}_sm90``),
causal and local windows, varlen; no softcap. This module calls its two FFI targets
(``flash_mha_fwd``, ``flash_mha_bwd``) directly rather than through the wheel's Python glue,
which has two defects in its backward lowering (neither in FA3 itself):

1. it allocates the backward's ``softmax_d`` / ``softmax_lse_log2`` with seqlen_q rounded up
   to 128 where FA3 writes them with its own ``seqlen_q_rounded`` (a multiple of the
   backward's kBlockM, 64 or 80 for hdim 128), so the heads overlap when the latter is larger;
   here they are allocated at FA3's size (``mha_bwd`` in ``hopper/flash_api.cpp``);
2. it hard-codes ``deterministic=False``; here the argument is passed through.

The FFI call returns ``softmax_d`` (dPsum) and ``softmax_lse_log2`` too: the preprocess
kernel's outputs, recorded beside dQ, dK, dV.

Needs jax with a CUDA plugin and the wheel importable (``pip install --no-deps
flash-attn3-jax==0.2.3`` plus ``einops``); :func:`provenance` records versions and hashes.
"""

from __future__ import annotations

import hashlib
import importlib
import math
from pathlib import Path

import numpy as np

from .runtime import DeviceUnavailable

WHEEL = "flash-attn3-jax"
VERSION = "0.2.3"
INSTALL_HINT = ("pip install --no-deps flash-attn3-jax==0.2.3 einops (needs jax with CUDA on "
                "an sm_90 GPU)")


def _import():
    """(jax, jax.numpy) with the wheel's FFI targets registered, or DeviceUnavailable."""
    try:
        jax = importlib.import_module("jax")
        jnp = importlib.import_module("jax.numpy")
    except ImportError as exc:
        raise DeviceUnavailable(f"jax is not installed ({exc}); {INSTALL_HINT}") from exc
    try:
        importlib.import_module("flash_attn3_jax.flash_hlo")  # registers the FFI targets
    except ImportError as exc:
        raise DeviceUnavailable(f"flash-attn3-jax is not importable ({exc}); {INSTALL_HINT}") from exc
    if not any(d.platform == "gpu" for d in jax.devices()):
        raise DeviceUnavailable("jax sees no GPU; flash-attn3-jax needs an sm_90 GPU")
    return jax, jnp


def provenance() -> dict:
    """Wheel, version, sha256 of the FFI extension, jax, GPU, and how the FFI is called."""
    jax, _ = _import()
    lib = importlib.import_module("flash_attn3_jax_lib.flash_api")
    so = Path(lib.__file__)
    return {"wheel": WHEEL, "version": VERSION,
            "extension": so.name, "extension_sha256": hashlib.sha256(so.read_bytes()).hexdigest(),
            "jax": jax.__version__, "gpu": str(jax.devices()[0].device_kind),
            "glue": "FFI targets flash_mha_fwd / flash_mha_bwd called directly: softmax_d and "
                    "softmax_lse_log2 allocated at FA3's seqlen_q_rounded (glue defect 1 fixed), "
                    "deterministic passed through (glue defect 2 fixed)"}


def bwd_kblock_m(causal: bool, local: bool, head_dim: int = 128) -> int:
    """The sm90 backward's kBlockM for hdim 128 (``mha_bwd``): 64 causal / local, else 80."""
    return 64 if (causal or local) else 80


def window_flags(causal, window, seqlen_q, seqlen_k):
    """mha_fwd / mha_bwd's window normalisation -> (is_causal, left, right, is_local)."""
    left, right = int(window[0]), int(window[1])
    if left >= seqlen_k - 1:
        left = -1
    if right >= seqlen_q - 1:
        right = -1
    if causal:
        right = 0
    is_causal = left < 0 and right == 0
    return is_causal, left, right, (left >= 0 or right >= 0) and not is_causal


def _launch(q, k, softmax_scale, cu_seqlens_q, max_seqlen_q, max_seqlen_k):
    """(varlen, batch, seqlen_q, seqlen_k, heads, softmax_scale) of a launch, as the FFI
    attributes take them (maxima for varlen; scale default 1/sqrt(head_dim))."""
    varlen = cu_seqlens_q is not None
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if varlen:
        return True, len(cu_seqlens_q) - 1, int(max_seqlen_q), int(max_seqlen_k), q.shape[1], scale
    return False, q.shape[0], q.shape[1], k.shape[1], q.shape[2], scale


def forward(q, k, v, *, causal=False, window=(-1, -1), softmax_scale=None, cu_seqlens_q=None,
            cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, softcap=0.0,
            attention_chunk=0):
    """The library's forward: (out, lse) as NumPy arrays (lse [batch, heads, seqlen_q], or FA3's
    varlen [heads, total_q]); ``attention_chunk`` passed to the FFI (the wheel's own glue
    always passes 0)."""
    jax, jnp = _import()
    varlen, b, sq, sk, h, scale = _launch(q, k, softmax_scale, cu_seqlens_q, max_seqlen_q,
                                          max_seqlen_k)
    lse_shape = (h, q.shape[0]) if varlen else (b, h, sq)
    e32 = jnp.zeros((0,), jnp.int32)
    ef = jnp.zeros((0,), jnp.float32)
    eq = jnp.zeros((0,), q.dtype)
    cq = jnp.asarray(cu_seqlens_q) if varlen else e32
    ck = jnp.asarray(cu_seqlens_k) if varlen else e32
    out, lse, _, _ = jax.ffi.ffi_call(
        "flash_mha_fwd",
        result_shape_dtypes=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                             jax.ShapeDtypeStruct(lse_shape, jnp.float32),
                             jax.ShapeDtypeStruct((1, 1, 1, 1), jnp.float32),
                             jax.ShapeDtypeStruct((1, 1, 1), jnp.float32)],
        has_side_effect=False, input_layouts=[None] * 21, output_layouts=[None] * 4,
    )(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), eq, eq, eq, cq, ck, e32, e32, e32, e32,
      e32, e32, eq, eq, e32, ef, ef, ef, e32,
      max_seqlen_q=sq, max_seqlen_q_has_value=True, max_seqlen_k=sk, max_seqlen_k_has_value=True,
      softmax_scale_val=scale, softmax_scale_has_value=True, pack_gqa_val=False,
      pack_gqa_has_value=False, is_causal=bool(causal), window_size_left=int(window[0]),
      window_size_right=int(window[1]), attention_chunk=int(attention_chunk),
      softcap=float(softcap), is_rotary_interleaved=False, num_splits=1, sm_margin=0)
    return np.asarray(out), np.asarray(lse)


def backward(dout, q, k, v, out, lse, *, causal=False, window=(-1, -1), softmax_scale=None,
             deterministic=False, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
             max_seqlen_k=None, softcap=0.0, seqused_q=None, seqused_k=None) -> dict:
    """The library's backward on NumPy arrays (``seqused_*``: int32 [batch], passed in the FFI
    inputs after the cu_seqlens, as ``mha_bwd`` takes them).

    Returns:
        dict with ``dq``, ``dk``, ``dv`` (the input dtype, q / k / v's shapes), ``dpsum`` and
        ``lse_log2`` (float32 [batch, heads, seqlen_q_rounded], or [heads, total_q_padded_rounded]
        for varlen: FA3's layouts, rows it leaves unwritten as returned).
    """
    jax, jnp = _import()
    varlen, b, sq, sk, h, scale = _launch(q, k, softmax_scale, cu_seqlens_q, max_seqlen_q,
                                          max_seqlen_k)
    is_causal, left, right, local = window_flags(causal, window, sq, sk)
    km = bwd_kblock_m(is_causal, local)
    if varlen:
        rows = -(-(q.shape[0] + b * km) // km) * km
        stat_shape = (h, rows)
    else:
        stat_shape = (b, h, -(-sq // km) * km)
    e32 = jnp.zeros((0,), jnp.int32)
    cq = jnp.asarray(cu_seqlens_q) if varlen else e32
    ck = jnp.asarray(cu_seqlens_k) if varlen else e32
    dq, dk, dv, dpsum, lse2 = jax.ffi.ffi_call(
        "flash_mha_bwd",
        result_shape_dtypes=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                             jax.ShapeDtypeStruct(k.shape, k.dtype),
                             jax.ShapeDtypeStruct(v.shape, v.dtype),
                             jax.ShapeDtypeStruct(stat_shape, jnp.float32),
                             jax.ShapeDtypeStruct(stat_shape, jnp.float32)],
        has_side_effect=False, input_layouts=[None] * 10, output_layouts=[None] * 5,
    )(jnp.asarray(dout), jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(out),
      jnp.asarray(lse), cq, ck,
      e32 if seqused_q is None else jnp.asarray(seqused_q, jnp.int32),
      e32 if seqused_k is None else jnp.asarray(seqused_k, jnp.int32),
      max_seqlen_q_val=sq, max_seqlen_q_has_value=True, max_seqlen_k_val=sk,
      max_seqlen_k_has_value=True, softmax_scale_val=scale, softmax_scale_has_value=True,
      is_causal=bool(causal), window_size_left=int(window[0]), window_size_right=int(window[1]),
      softcap=float(softcap), deterministic=bool(deterministic), sm_margin=0)
    return {"dq": np.asarray(dq), "dk": np.asarray(dk), "dv": np.asarray(dv),
            "dpsum": np.asarray(dpsum), "lse_log2": np.asarray(lse2)}


def kvcache(q, k_cache, v_cache, *, k=None, v=None, cache_seqlens=None, page_table=None,
            cache_batch_idx=None, cache_leftpad=None, causal=False, window_size=(-1, -1),
            softmax_scale=None, num_splits=1, rotary_cos=None, rotary_sin=None,
            rotary_seqlens=None, rotary_interleaved=True) -> dict:
    """The library's ``flash_attn_with_kvcache`` on NumPy arrays, through the FFI target
    ``flash_mha_fwd`` as the wheel's ``flash_mha_with_kvcache`` calls it (``cache_seqlens``
    as seqused_k, ``page_table`` with the pool as k / v, max_seqlen_k left to mha_fwd for a
    paged cache), but with ``num_splits`` > 1 given its partial-output buffers, the caches
    read back after the call, and the rotary arguments (``rotary_cos`` / ``rotary_sin``
    [seqlen_ro, rotary_dim / 2] in q's dtype, ``rotary_seqlens`` int32 [batch],
    ``rotary_interleaved``) passed through.

    Returns:
        dict with ``out`` [batch, seqlen_q, heads, head_dim], ``lse`` [batch, heads, seqlen_q],
        ``k_cache`` / ``v_cache``: the input buffers after the kernel ran (AppendKV writes the
        new keys into them; whether XLA handed the kernel the caller's buffer or a copy is
        XLA's choice, so an unchanged cache after an append says nothing), and
        ``cache_written``: whether they differ from before.
    """
    jax, jnp = _import()
    b, sq, h, d = q.shape
    paged = page_table is not None
    seqlen_k = k_cache.shape[1]
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(d)
    e32 = jnp.zeros((0,), jnp.int32)
    ef = jnp.zeros((0,), jnp.float32)
    eq = jnp.zeros((0,), q.dtype)
    splits = int(num_splits)
    acc = ([(splits, b, h, sq, d), (splits, b, h, sq)] if splits > 1
           else [(1, 1, 1, 1), (1, 1, 1)])
    kc, vc = jax.device_put(k_cache), jax.device_put(v_cache)

    def opt(x):
        return e32 if x is None else jnp.asarray(np.asarray(x, np.int32))
    out, lse, _, _ = jax.ffi.ffi_call(
        "flash_mha_fwd",
        result_shape_dtypes=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                             jax.ShapeDtypeStruct((b, h, sq), jnp.float32),
                             jax.ShapeDtypeStruct(acc[0], jnp.float32),
                             jax.ShapeDtypeStruct(acc[1], jnp.float32)],
        has_side_effect=True, input_layouts=[None] * 21, output_layouts=[None] * 4,
    )(jnp.asarray(q), kc, vc, eq if k is None else jnp.asarray(k),
      eq if v is None else jnp.asarray(v), eq, e32, e32, e32, e32, opt(cache_seqlens),
      opt(page_table), opt(cache_batch_idx), opt(cache_leftpad),
      eq if rotary_cos is None else jnp.asarray(rotary_cos),
      eq if rotary_sin is None else jnp.asarray(rotary_sin), opt(rotary_seqlens), ef, ef, ef, e32,
      max_seqlen_q=sq, max_seqlen_q_has_value=True, max_seqlen_k=0 if paged else seqlen_k,
      max_seqlen_k_has_value=not paged, softmax_scale_val=scale, softmax_scale_has_value=True,
      pack_gqa_val=False, pack_gqa_has_value=False, is_causal=bool(causal),
      window_size_left=int(window_size[0]), window_size_right=int(window_size[1]),
      attention_chunk=0, softcap=0.0, is_rotary_interleaved=bool(rotary_interleaved),
      num_splits=splits, sm_margin=0)
    out, lse = np.asarray(out), np.asarray(lse)
    k_after, v_after = np.asarray(kc), np.asarray(vc)
    written = not (np.array_equal(k_after.view(np.uint16), np.asarray(k_cache).view(np.uint16))
                   and np.array_equal(v_after.view(np.uint16), np.asarray(v_cache).view(np.uint16)))
    return {"out": out, "lse": lse, "k_cache": k_after, "v_cache": v_after,
            "cache_written": written}
