"""``get_scheduler_metadata`` and the ``scheduler_metadata`` argument of
``flash_attn_with_kvcache``: the int32 array FA3's prepare kernel fills before a varlen launch
(hopper/flash_api.cpp ``mha_fwd_get_scheduler_metadata``, hopper/flash_prepare_scheduler.cu),
computed once by the caller and handed to later calls so that they skip that kernel.

Layout, ``b_r = round_up(batch, 4)``, one vector of ``b_r`` ints each (entries from ``batch``
to ``b_r`` are never written by FA3: 0 here):

    [0, b_r)        num_splits_dynamic, per virtual batch
    [b_r, 2 b_r)    num_m_blocks, per virtual batch
    [2 b_r, 3 b_r)  varlen_batch_idx: virtual batch -> batch (only when batches are sorted,
                    i.e. not local)
    next b_r        num_nheads_in_l2, per virtual batch (only causal or local: head swizzle)
    last            the tile-count semaphore, 0

Sorting orders batches by their K/V blocks per split, most first (causal: by
``n_blocks * kBlockN - m_blocks * kBlockM``), stably (cub's merge sort). Only the split counts
change bits; the rest orders the persistent scheduler's work.
"""

from __future__ import annotations

import numpy as np

from ..flash.config import check_chunk
from ..flash.dispatch import check_head_dim, check_head_dim_v, should_pack_gqa
from ..gpus import DEFAULT_GPU
from . import paged
from .arrays import returned, to_numpy
from .checks import (
    check_bool,
    check_options,
    check_pack_gqa,
    check_window_size,
    cu_seqlens,
    gpu_sms,
    int_array,
    need_sms,
)
from .launch import kernel_window, launch_flags, static_splits
from .scheduler import dynamic_num_splits

#: the prepare kernel's L2 estimate (hopper/flash_prepare_scheduler.cu: "underestimate seems
#: better in practice")
L2_BYTES = 8 * 1024 * 1024


def _fmt(qkv_dtype) -> str:
    """The format name of a NumPy / ml_dtypes / torch dtype (or its name)."""
    names = {"bfloat16": "bf16", "float16": "f16", "float8_e4m3fn": "e4m3"}
    key = str(qkv_dtype).removeprefix("torch.")
    if key not in names:
        try:
            key = str(np.dtype(qkv_dtype))
        except TypeError:
            pass
    if key not in names:
        raise ValueError(f"qkv_dtype: expected bfloat16, float16 or float8_e4m3fn (NumPy, "
                         f"ml_dtypes or torch), got {qkv_dtype!r}")
    return names[key]


def get_scheduler_metadata(batch_size, max_seqlen_q, max_seqlen_k, num_heads_q, num_heads_kv,
                           headdim, cache_seqlens, qkv_dtype="bfloat16", headdim_v=None,
                           cu_seqlens_q=None, cu_seqlens_k_new=None, cache_leftpad=None,
                           page_size=None, max_seqlen_k_new=0, causal=False,
                           window_size=(-1, -1), attention_chunk=0, has_softcap=False,
                           num_splits=0, pack_gqa=None, sm_margin=0, *, num_sms=None, gpu=DEFAULT_GPU):
    """FA3's ``get_scheduler_metadata``: the prepare kernel's int32 array for a
    ``flash_attn_with_kvcache`` launch of these arguments (module docstring: layout).

    Args:
        batch_size, max_seqlen_q, max_seqlen_k, num_heads_q, num_heads_kv, headdim: ints as
            the launch has them (max_seqlen_k: the cache's length).
        cache_seqlens: int32 [batch_size]; cu_seqlens_q, cu_seqlens_k_new: int32
            [batch_size + 1] or None; cache_leftpad: int32 [batch_size] or None.
        qkv_dtype: bfloat16, float16 or float8_e4m3fn (a NumPy / ml_dtypes / torch dtype or
            its name); headdim_v: default headdim.
        page_size: None (a contiguous cache) or the paged cache's page size.
        max_seqlen_k_new: the new keys' length (0: no append).
        causal, window_size, has_softcap, num_splits, pack_gqa, sm_margin: as the launch.
        gpu: keyword-only, not FA3's: the GPU the call runs on, a key of
            :data:`simulator.gpus.GPUS` (``"h200"``, ``"h100"``, ``"h100-pcie"``) or a record:
            its SM count (the split heuristic), MUFU tables and tensor-core parameters.
        num_sms: keyword-only, not FA3's: None (the GPU's SM count), or an override of it.
    Returns:
        int32 [size], laid out as the module docstring says: a NumPy array, or a CPU torch
        tensor when ``cache_seqlens`` is one (as the library returns a tensor).
    Raises:
        ValueError: a bad argument, naming it (a type or range the launch refuses, lengths
            past max_seqlen_q / max_seqlen_k, cache_leftpad past cache_seqlens, pack_gqa=False
            with splits and GQA); ``attention_chunk`` with ``page_size``.
    Source: hopper/flash_api.cpp (mha_fwd_get_scheduler_metadata), hopper/flash_prepare_scheduler.cu.
    """
    chunk = check_chunk(attention_chunk)
    window_size = check_window_size(window_size)
    for name, x in (("batch_size", batch_size), ("max_seqlen_q", max_seqlen_q),
                    ("max_seqlen_k", max_seqlen_k), ("num_heads_q", num_heads_q),
                    ("num_heads_kv", num_heads_kv), ("headdim", headdim),
                    ("max_seqlen_k_new", max_seqlen_k_new)):
        low = 0 if name in ("max_seqlen_k_new", "max_seqlen_k") else 1
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < low:
            raise ValueError(f"{name}: expected an int >= {low}, got {x!r}")
    for name, x in (("headdim_v", headdim_v), ("page_size", page_size)):
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1):
            raise ValueError(f"{name}: expected None or an int >= 1, got {x!r}")
    fmt = _fmt(qkv_dtype)
    b, sq, sk, h, hkv, d = (int(x) for x in (batch_size, max_seqlen_q, max_seqlen_k, num_heads_q,
                                             num_heads_kv, headdim))
    dv = d if headdim_v is None else int(headdim_v)
    check_bool("has_softcap", has_softcap)
    num_sms = gpu_sms(gpu, num_sms)
    _, _, sms, splits_arg = check_options(1.0 if has_softcap else 0.0, causal, num_sms,
                                          sm_margin, num_splits)
    if h % hkv:
        raise ValueError(f"num_heads_kv: {hkv} must divide num_heads_q {h} (FA3: 'Number of heads "
                         f"in key/value must divide number of heads in query')")
    try:  # named as this function's arguments (headdim, headdim_v)
        check_head_dim(d, fmt)
        check_head_dim_v(d, dv, fmt)
    except ValueError as exc:
        raise ValueError(_renamed(str(exc))) from None
    sms = need_sms(sms, num_sms, sm_margin)
    seqlens_np, torch_in = to_numpy(cache_seqlens, "cache_seqlens")
    seqlens_k = int_array(seqlens_np, "cache_seqlens", b)
    if seqlens_k is None:
        raise ValueError("cache_seqlens: expected int32 [batch_size], got None")
    lens_q = (np.full(b, sq, np.int64) if cu_seqlens_q is None else
              np.diff(_offsets(cu_seqlens_q, "cu_seqlens_q", b)))
    lens_new = (np.full(b, int(max_seqlen_k_new), np.int64) if cu_seqlens_k_new is None else
                np.diff(_offsets(cu_seqlens_k_new, "cu_seqlens_k_new", b)))
    left = (np.zeros(b, np.int64) if cache_leftpad is None else
            int_array(to_numpy(cache_leftpad, "cache_leftpad")[0], "cache_leftpad", b))
    _check_lengths(lens_q, seqlens_k, left, lens_new, sq, sk)
    softcap = 1.0 if has_softcap else 0.0
    launch = None
    if page_size is None:
        is_causal, is_local, (tile_m, tile_n) = launch_flags(fmt, d, dv, causal, window_size, sq,
                                                             sk, softcap, chunk)
    elif chunk:
        raise ValueError("attention_chunk: with page_size not emulated (as flash_attn_with_kvcache)")
    else:
        launch = paged.paged_launch(fmt, d, dv, causal, window_size, sq, sk, softcap, h, hkv,
                                    int(page_size), leftpad=cache_leftpad is not None,
                                    append=max_seqlen_k_new > 0)
        is_causal, is_local = launch.is_causal, launch.is_local
        tile_m, tile_n = launch.kblock_m, launch.kblock_n
    static = static_splits(splits_arg, fmt=fmt, batch=b, heads=h, heads_kv=hkv, seqlen_q=sq,
                           seqlen_k=sk, head_dim=d, head_dim_v=dv, causal=is_causal,
                           local=is_local, softcap=bool(has_softcap), varlen=True, num_sms=sms,
                           window=kernel_window(causal, window_size, sq, sk, chunk), paged=launch)
    check_pack_gqa(pack_gqa, static > 1, True, h, hkv)  # as the launch checks it
    pack = _pack_gqa(pack_gqa, launch, static, h, hkv, cu_seqlens_q is not None, sq, tile_m)
    md = layout(lens_q, seqlens_k, left, lens_new, kblock_m=tile_m, kblock_n=tile_n, heads=h,
                heads_kv=hkv, num_sms=sms, static=static, pack_gqa=pack, causal=is_causal,
                local=is_local, kv_bytes=tile_n * (d + dv) * (1 if fmt == "e4m3" else 2))
    return returned((md,), torch_in)[0]


def _check_lengths(lens_q, seqlens_k, left, lens_new, max_q: int, max_k: int) -> None:
    """The per-batch lengths against the launch's maxima, as flash_attn_with_kvcache checks
    them: a sequence longer than max_seqlen_q, a cache (plus its new keys) longer than
    max_seqlen_k, or a leftpad past cache_seqlens would describe no launch."""
    if np.any(lens_q > max_q):
        raise ValueError(f"cu_seqlens_q: sequences of {lens_q.tolist()[:8]} rows, more than "
                         f"max_seqlen_q = {max_q}")
    if np.any(seqlens_k < 0) or np.any(seqlens_k + lens_new > max_k):
        raise ValueError(f"cache_seqlens: expected 0..{max_k} (max_seqlen_k) minus each batch's "
                         f"new keys {lens_new.tolist()[:8]}, got {seqlens_k.tolist()[:8]}")
    if np.any(left < 0) or np.any(left > seqlens_k):
        raise ValueError(f"cache_leftpad: expected 0..cache_seqlens, got {left.tolist()[:8]}")


def _offsets(cu, name: str, batch: int) -> np.ndarray:
    arr = cu_seqlens(cu, name, np.iinfo(np.int32).max)
    if arr.shape[0] != batch + 1:
        raise ValueError(f"{name}: expected {batch + 1} offsets (batch_size + 1), got {arr.shape[0]}")
    return arr


def _pack_gqa(pack_gqa, launch, static: int, heads: int, heads_kv: int, varlen_q: bool,
              seqlen_q: int, kblock_m: int) -> bool:
    """get_pack_gqa (hopper/flash_api.cpp) as get_scheduler_metadata calls it."""
    if pack_gqa is not None:
        return bool(pack_gqa)
    if (launch is not None and not launch.tma) or static > 1:
        return True
    if heads == heads_kv:
        return False
    return should_pack_gqa(varlen_q, seqlen_q, heads // heads_kv, kblock_m)


def layout(lens_q, seqlens_k, leftpad_k, lens_new, *, kblock_m: int, kblock_n: int, heads: int,
           heads_kv: int, num_sms: int, static: int, pack_gqa: bool, causal: bool, local: bool,
           kv_bytes: int) -> np.ndarray:
    """The prepare kernel's output for per-batch lengths (module docstring)."""
    b = lens_q.shape[0]
    g = -(-heads // heads_kv)
    m_blocks = -(-(lens_q * (g if pack_gqa else 1)) // kblock_m)
    n_blocks = -(-(seqlens_k - leftpad_k + lens_new) // kblock_n)
    splits = dynamic_num_splits(lens_q, seqlens_k, kblock_m=kblock_m, kblock_n=kblock_n,
                                heads=heads, heads_kv=heads_kv, num_sms=num_sms,
                                num_splits_static=static, pack_gqa=pack_gqa, leftpad_k=leftpad_k,
                                seqlens_k_new=lens_new)
    per_split = n_blocks if (static == 1 or b > 992) else -(-n_blocks // splits)
    order = np.arange(b)
    if not local:  # varlen_sort_batches: most K/V blocks per split first, stable
        key = per_split * kblock_n - m_blocks * kblock_m if causal else per_split
        order = np.argsort(-key, kind="stable")
    b_r = -(-b // 4) * 4
    vectors = [splits[order], m_blocks[order]]
    if not local:
        vectors.append(order)
    if causal or local:  # head_swizzle: query heads per L2-resident K/V head
        max_blocks = L2_BYTES // kv_bytes
        n = np.maximum(per_split[order], 1)
        nh = np.select([n * 16 <= max_blocks, n * 8 <= max_blocks, n * 4 <= max_blocks,
                        n * 2 <= max_blocks], [16, 8, 4, 2], 1)
        if not pack_gqa:
            nh = nh * g
        vectors.append(np.minimum(nh, heads_kv if pack_gqa else heads))
    out = np.zeros(b_r * len(vectors) + 1, dtype=np.int32)
    for i, vec in enumerate(vectors):
        out[i * b_r: i * b_r + b] = vec
    return out


def metadata_splits(scheduler_metadata, splits, batch: int, static: int, varlen: bool,
                    causal: bool, local: bool):
    """The per-batch split counts a launch reads from ``scheduler_metadata`` (None: the
    computed ``splits``, unchanged).

    FA3 reads the array only for varlen launches (``use_prepare_varlen``: every KV-cache call
    with ``cache_seqlens``); it must then have mha_fwd's size (``CHECK_SHAPE(
    scheduler_metadata, metadata_size)``) and dtype int32. Without varlen, a causal or local
    unsplit launch still takes it as its tile semaphore (``scheduler_needs_semaphore``), checked
    the same way, with no per-batch vectors but the sort and swizzle ones (no bit changes);
    any other launch ignores it.

    Raises:
        ValueError: naming scheduler_metadata: not int32 1-D, the wrong size, or split counts
            outside 1..num_splits (an array computed for other arguments).
    """
    semaphore_only = not varlen and (causal or local) and static <= 1
    if scheduler_metadata is None or not (varlen or semaphore_only):
        return splits
    md = to_numpy(scheduler_metadata, "scheduler_metadata")[0]
    b_r = -(-batch // 4) * 4
    size = 1 + b_r * (2 * varlen + (not local) + (causal or local))
    if not isinstance(md, np.ndarray) or md.dtype != np.int32 or md.shape != (size,):
        raise ValueError(f"scheduler_metadata: expected int32 [{size}] (get_scheduler_metadata's "
                         f"array for this call), got {getattr(md, 'dtype', type(md).__name__)} "
                         f"{list(getattr(md, 'shape', []))}")
    if not varlen:
        return splits
    virtual = md[:batch].astype(np.int64)
    real = np.empty(batch, np.int64)
    if local:
        real[:] = virtual
    else:
        order = md[2 * b_r: 2 * b_r + batch].astype(np.int64)
        if sorted(order.tolist()) != list(range(batch)):
            raise ValueError("scheduler_metadata: its batch order is not a permutation of the "
                             "batches: computed for other arguments")
        real[order] = virtual
    top = max(static, 1)
    if np.any(real < 1) or np.any(real > top):
        raise ValueError(f"scheduler_metadata: split counts {real.tolist()[:8]} outside 1..{top} "
                         "(this call's num_splits): computed for other arguments")
    return None if top <= 1 else real


def _renamed(message: str) -> str:
    """A head-dim check's message under get_scheduler_metadata's argument names."""
    for ours, theirs in (("head_dim_v", "headdim_v"), ("head_dim", "headdim")):
        if message.startswith(ours + ":"):
            return theirs + message[len(ours):]
    return message
