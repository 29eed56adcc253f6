"""``flash_attn_with_kvcache``: FA3's decode and chunked-prefill entry point against a KV
cache (hopper/flash_attn_interface.py, hopper/flash_api.cpp ``mha_fwd`` with AppendKV):
``cache_batch_idx`` picks the cache row, ``cache_leftpad`` its first key, ``cache_seqlens``
its length; new ``k`` / ``v`` are written into the caches in place at ``cache_seqlens`` and
attended to; a launch with ``cache_seqlens`` or ``cache_leftpad`` is varlen (seqused_k /
leftpad_k), so its per-batch split counts come from FA3's prepare kernel.
"""

from __future__ import annotations

import numpy as np

from .. import engine
from ..flash.config import check_chunk, check_qv
from ..flash.dispatch import check_head_dim, check_head_dim_v
from ..flash.forward import check_memory
from ..gpus import DEFAULT_GPU
from ..trace import Trace
from . import paged, rotary
from .append import append_kv
from .arrays import check_writable, returned, to_numpy
from .checks import (
    check_4d,
    check_bool,
    check_descales,
    check_fmt,
    check_options,
    check_pack_gqa,
    check_parallel,
    check_scale,
    check_window_size,
    gpu_sms,
    int_array,
    need_sms,
    trace_ctas,
)
from .kvcache_rows import NewKeys, QueryRows, cache_lengths
from .launch import (
    descale_rows,
    kernel_window,
    launch_flags,
    output_dtype,
    parallel,
    static_splits,
    traced_forward,
    with_trace,
)
from .metadata import metadata_splits
from .scheduler import dynamic_num_splits


def paged_kwargs(launch, pack_gqa, grouped: bool) -> dict:
    """The forward's keywords for a paged launch: FA3's paged tile, the plain schedule where
    the tile turns IntraWGOverlap off, PackGQA where ``PagedKVNonTMA`` forces it and there is
    a group of query heads to pack (``grouped``; one head per kv head packs nothing), else the
    caller's ``pack_gqa``."""
    kw = dict(kblock_m=launch.kblock_m, kblock_n=launch.kblock_n)
    if not launch.overlap:
        kw["schedule"] = "plain"
    if launch.pack_gqa_forced and grouped:
        kw["pack_gqa"] = True
    elif pack_gqa is not None:
        kw["pack_gqa"] = bool(pack_gqa)
    return kw


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, page_table=None, cu_seqlens_q=None,
                            cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                            rotary_interleaved=True, scheduler_metadata=None, num_splits=0,
                            pack_gqa=None, sm_margin=0, return_softmax_lse=False, *,
                            num_sms=None, gpu=DEFAULT_GPU, trace=None, executor=None, progress=None,
                            memory_budget=None):
    """FA3's ``flash_attn_with_kvcache`` (decode and chunked prefill against a KV cache).

    Args:
        q: [batch, seqlen_q, heads, head_dim]; with ``cu_seqlens_q`` the packed queries
            [total_q, heads, head_dim].
        k_cache, v_cache: [batch_cache, seqlen_cache, heads_kv, head_dim] and [..., head_dim_v];
            updated in place when ``k`` / ``v`` are given (NumPy arrays and CPU torch
            tensors, views included). With ``page_table``: the block pool [num_pages,
            page_size, heads_kv, head_dim] (and head_dim_v).
        k, v: [batch, seqlen_new, heads_kv, head_dim] and [..., head_dim_v], or None:
            appended at ``cache_seqlens``; with ``cu_seqlens_k_new`` packed [total_k_new,
            heads_kv, head_dim] (and head_dim_v), sequence ``b`` owning rows
            ``cu_seqlens_k_new[b] .. cu_seqlens_k_new[b+1] - 1``.
        qv: None, or [batch, seqlen_q, heads, head_dim_v] ([total_q, heads, head_dim_v] with
            ``cu_seqlens_q``) in q's dtype: FA3's MLA decode, scores ``q K^T + qv V^T``
            (head_dim <= 64, head_dim_v >= 256, bf16 / fp16; :func:`simulator.flash.forward`);
            the default softmax_scale becomes ``(head_dim + head_dim_v) ** -0.5``.
        cache_seqlens: int or int32 [batch]: keys in the cache per batch (default: all).
        cache_batch_idx: int32 [batch] or None: the cache row of each batch.
        cache_leftpad: int32 [batch] or None: the first valid key of each cache row.
        cu_seqlens_q: int32 [batch + 1] or None: varlen queries (chunked prefill of several
            sequences at once); needs ``max_seqlen_q`` (an int >= every sequence's length:
            it sets the dispatch, the window normalisation and the seqlen_q == 1 rule).
            Without ``cu_seqlens_q``, ``max_seqlen_q`` is unused by FA3 and must be None or
            seqlen_q.
        cu_seqlens_k_new: int32 [batch + 1] or None: varlen new keys (with ``k``, ``v``).
        rotary_cos, rotary_sin: [seqlen_ro, rotary_dim / 2] in q's dtype, or None: the new keys
            and the queries rotated first (:mod:`simulator.fa3.rotary`); rotary_seqlens: int32
            [batch] or None: the positions' base instead of cache_seqlens;
            rotary_interleaved: pairs (2j, 2j + 1), else (j, j + rotary_dim / 2).
        page_table: int32 [batch_cache, max_num_pages_per_seq] or None: key ``i`` of cache row
            ``r`` is row ``i % page_size`` of page ``page_table[r, i // page_size]``; a cache
            row is ``max_num_pages_per_seq * page_size`` keys. Run with FA3's paged tile
            (:func:`simulator.fa3.paged.paged_launch`); new keys are written into the pages.
        num_splits: 0 (default) FA3's heuristic, 1 unsplit, > 1 at most that many splits;
            with ``cache_seqlens`` each batch's count comes from FA3's prepare kernel
            (:func:`simulator.fa3.scheduler.dynamic_num_splits`).
        scheduler_metadata: None, or the int32 array :func:`simulator.fa3.get_scheduler_metadata`
            returns for these arguments: the per-batch split counts are read from it, as FA3's
            kernels read them (the prepare kernel is skipped). Without ``cache_seqlens``,
            ``cache_leftpad`` and ``cu_seqlens_q`` a causal or local unsplit launch checks it
            as its tile semaphore (int32 [1 + round_up(batch, 4) * (sort + swizzle)]); any
            other launch ignores it (hopper/flash_api.cpp, scheduler_needs_semaphore).
        others: as :func:`simulator.fa3.flash_attn_func`.
        trace: keyword-only, not FA3's: None, or CTAs ``(batch, head, m_block)`` to record;
            unsplit launches only (``num_splits=1``), head_dim_v <= 256 (qv: step ``qv_gemm``), and
            with ``pack_gqa=False`` for ``cu_seqlens_q`` with grouped heads.
        executor, progress, memory_budget: as :func:`simulator.fa3.flash_attn_func`; each
            batch is one forward call. All arguments are checked before the caches are written.
    Returns:
        out [batch, seqlen_q, heads, head_dim_v] ([total_q, heads, head_dim_v] with
        ``cu_seqlens_q``; rows after ``cu_seqlens_q[-1]`` FA3 leaves unwritten: 0 here); with
        ``return_softmax_lse`` FA3's four values (hopper/flash_attn_interface.py:
        ``(out, softmax_lse, *rest)``): out, softmax_lse [batch, heads, seqlen_q] ([heads,
        total_q] with ``cu_seqlens_q``), out_accum float32 [num_splits, batch, heads, seqlen_q,
        head_dim_v] ([num_splits, heads, total_q, head_dim_v]) and softmax_lse_accum
        [num_splits, batch, heads, seqlen_q] ([num_splits, heads, total_q]) (the Split kernel's
        partial outputs; empty (0,) arrays without splits, as the library returns
        ``torch.tensor([])``; entries the kernel leaves unwritten are 0 / -inf here); with
        ``trace`` a :class:`simulator.trace.Trace` is appended.
    Raises:
        ValueError: what FA3 refuses (a cache too short for the new keys, head counts that do
            not divide, ...), naming the argument; the arguments not emulated.
    Source: hopper/flash_attn_interface.py, hopper/flash_api.cpp (mha_fwd, AppendKV),
    hopper/seqlen.h (leftpad, varlen), hopper/flash_prepare_scheduler.cu, hopper/paged_kv.h,
    hopper/rotary.h.
    """
    chunk = check_chunk(attention_chunk)
    window_size = check_window_size(window_size)
    if chunk and page_table is not None:
        raise ValueError("attention_chunk: with page_table not emulated (no paged recording "
                         "covers it); gather the pages into a contiguous cache first")
    check_parallel(executor, progress, memory_budget, trace)
    num_sms = gpu_sms(gpu, num_sms)
    (q, tq), (kc, _), (vc, _) = to_numpy(q, "q"), to_numpy(k_cache, "k_cache"), to_numpy(v_cache, "v_cache")
    (kn, _), (vn, _), (qv, _) = to_numpy(k, "k"), to_numpy(v, "v"), to_numpy(qv, "qv")
    rows_q = QueryRows.of(q, cu_seqlens_q, max_seqlen_q)
    check_4d(rows_q.as_4d(q), kc, vc, ("q", "k_cache", "v_cache"))
    b, sq, h, d = rows_q.batch, rows_q.max_len, q.shape[-2], q.shape[-1]
    bc, s_cache, hkv, _ = kc.shape
    table = None if page_table is None else paged.page_table_array(page_table, None)
    if table is not None:  # the pool's [num_pages, page_size]: a cache row is a page-table row
        if s_cache < 1:
            raise ValueError(f"k_cache: a paged cache needs page_size >= 1, got shape {kc.shape}")
        num_pages, page_size = bc, s_cache
        if num_pages < 1:
            raise ValueError(f"k_cache: a paged cache needs a pool of at least one page, got "
                             f"shape {kc.shape}")
        bc, s_cache = table.shape[0], table.shape[1] * page_size
    if (kn is None) != (vn is None):
        raise ValueError("k, v: give both new keys and new values, or neither")
    if q.dtype != kc.dtype or kc.dtype != vc.dtype:
        raise ValueError(f"q, k_cache, v_cache: dtypes differ ({q.dtype}, {kc.dtype}, {vc.dtype})")
    if kc.shape[:3] != vc.shape[:3]:
        raise ValueError(f"k_cache, v_cache: expected the same [batch_cache, seqlen_cache, heads_kv], "
                         f"got {kc.shape} and {vc.shape}")
    dv = vc.shape[-1]
    if b < 1 or sq < 1 or h < 1:
        raise ValueError(f"q: batch, seqlen_q and heads must be >= 1, got {q.shape}")
    if kc.shape[-1] != d:
        raise ValueError(f"k_cache: expected head_dim {d} (as q), got shape {kc.shape}")
    if hkv < 1 or h % hkv:
        raise ValueError(f"k_cache: heads_kv = {hkv} must divide heads = {h}")
    fmt = check_fmt(q)
    softcap, (return_softmax_lse,), sms, splits_arg = check_options(
        softcap, causal, num_sms, sm_margin, num_splits, return_softmax_lse=return_softmax_lse)
    seqlens = cache_lengths(cache_seqlens, q, b, s_cache, rows_q.varlen)
    rows = (np.arange(b) if cache_batch_idx is None else
            int_array(to_numpy(cache_batch_idx, "cache_batch_idx")[0], "cache_batch_idx", b))
    left = (np.zeros(b, np.int64) if cache_leftpad is None else
            int_array(to_numpy(cache_leftpad, "cache_leftpad")[0], "cache_leftpad", b))
    if cache_batch_idx is None and bc != b:  # before the rows: none were given to blame
        raise ValueError(f"{'k_cache' if table is None else 'page_table'}: expected q's batch "
                         f"{b}, got {bc} (FA3: 'batch_size must be equal to batch_size_k')")
    if np.any((rows < 0) | (rows >= bc)):
        raise ValueError(f"cache_batch_idx: expected rows in 0..{bc - 1}, got {rows.tolist()[:8]}")
    new = NewKeys.of(kn, vn, cu_seqlens_k_new, b, hkv, d, dv, q.dtype)
    if kn is not None:
        check_head_dim(d, check_fmt(q))
        check_head_dim_v(d, dv, check_fmt(q))  # FA3's refusal of the pair comes first
        if dv < d:
            raise ValueError(f"v: appending new values with head_dim_v {dv} < head_dim {d} is not "
                             f"emulated: FA3's AppendKV writes {d} values per V row, past the row's "
                             f"{dv}, zeroing the cache's next values (measured on the H200); to "
                             f"attend to them without that spill, write k, v into the caches "
                             f"yourself and call without k, v, with cache_seqlens + seqlen_new")
        if cache_seqlens is None:
            raise ValueError("cache_seqlens: FA3 requires it when k, v are appended "
                             "('If k_new is supplied, seqlens_k must also be passed in')")
        if sq > s_cache:
            raise ValueError(f"q: with new k, v FA3 requires seqlen_q <= the cache's length "
                             f"({sq} > {s_cache})")
    if np.any(seqlens < 0) or np.any(seqlens + new.lengths > s_cache):
        raise ValueError(f"cache_seqlens: expected 0..{s_cache} minus each batch's new keys "
                         f"{new.lengths.tolist()[:8]} (the cache length), got {seqlens.tolist()[:8]}")
    if np.any(left < 0) or np.any(left > seqlens):
        raise ValueError(f"cache_leftpad: expected 0..cache_seqlens, got {left.tolist()[:8]}")
    check_head_dim(d, fmt)
    check_head_dim_v(d, dv, fmt)
    if qv is not None:
        check_qv(rows_q.qv_4d(qv, dv), rows_q.as_4d(q), dv, fmt)
    if table is not None:
        paged.check_pages(table, rows, left, seqlens + new.lengths, page_size, num_pages)
    varlen = (cache_seqlens is not None or cache_leftpad is not None  # seqused_k / leftpad_k
              or rows_q.varlen)
    is_causal, is_local, (tile_m, tile_n) = launch_flags(fmt, d, dv, causal, window_size, sq,
                                                         s_cache, softcap, chunk)
    launch = None if table is None else paged.paged_launch(
        fmt, d, dv, causal, window_size, sq, s_cache, softcap, h, hkv, page_size,
        leftpad=cache_leftpad is not None, append=kn is not None)
    if launch is not None:
        is_causal, is_local = launch.is_causal, launch.is_local
        tile_m, tile_n = launch.kblock_m, launch.kblock_n
    static = 1 if splits_arg == 1 else static_splits(
        splits_arg, fmt=fmt, batch=b, heads=h, heads_kv=hkv, seqlen_q=sq, seqlen_k=s_cache,
        head_dim=d, head_dim_v=dv, causal=is_causal,
        local=is_local, softcap=softcap > 0, varlen=varlen,
        num_sms=need_sms(sms, num_sms, sm_margin),
        window=kernel_window(causal, window_size, sq, s_cache, chunk), paged=launch)
    check_pack_gqa(pack_gqa, static > 1, varlen, h, hkv)
    descales = check_descales({n: to_numpy(x, n)[0] for n, x in (
        ("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))}, fmt, b, hkv)
    scale = check_scale(softmax_scale, d, softcap, 0 if qv is None else dv)
    wanted = trace_ctas(trace, static, h, rows_q.lengths, tile_m)  # checked before the append
    if wanted is not None and launch is not None and launch.pack_gqa_forced and h > hkv:
        raise ValueError("trace: not recorded for this paged launch: without TMA page loads "
                         "(new keys, cache_leftpad, or page_size not a multiple of kBlockN "
                         f"{launch.kblock_n}) FA3 packs the query heads of a kv head (PackGQA), "
                         "and PackGQA launches are not traced")
    if wanted is not None and dv > 256:  # the forward's refusal, before the append
        raise ValueError(f"trace: not recorded for a V head dim over 256 (got head_dim_v {dv}: "
                         "O spans two m64n256 accumulators)")
    # get_pack_gqa: should_pack_gqa(varlen_q) is always true for packed queries
    packs_varlen = rows_q.varlen and h > hkv and pack_gqa is None
    if wanted is not None and packs_varlen:
        raise ValueError("trace: with cu_seqlens_q and grouped heads FA3 packs the query heads "
                         "of a kv head (PackGQA), and PackGQA launches are not traced; pass "
                         "pack_gqa=False (the same bits)")
    qs = [rows_q.batch_rows(q, bi) for bi in range(b)]   # [1, len_q[bi], heads, head_dim]
    qvs = [None if qv is None else rows_q.batch_rows(qv, bi) for bi in range(b)]
    kns = [new.batch_rows(kn, bi) for bi in range(b)]   # [1, len_new[bi], heads_kv, head_dim]
    vns = [new.batch_rows(vn, bi) for bi in range(b)]
    interleaved = check_bool("rotary_interleaved", rotary_interleaved)
    rot = rotary.check_rotary(rotary_cos, rotary_sin, rotary_seqlens, q_dtype=q.dtype,
                              head_dim=d, batch=b, appends=kn is not None,
                              paged=table is not None, seqlen_k=s_cache)
    if rot is not None and rot[2] is not None and np.any(rot[2] < 0):
        raise ValueError(f"rotary_seqlens: expected positions >= 0, got {rot[2].tolist()[:8]}")
    # no new key at all (an empty k, v: a null pointer to FA3) runs the kernel without AppendKV,
    # and so without rotary: the queries stay as they are (measured on the H200)
    if rot is not None and new.lengths.sum() > 0:  # new keys rotated, then the queries
        qs, kns = rotated(rot, seqlens, qs, kns, is_causal or is_local, interleaved)
    if kn is not None:  # both caches checked before either is written
        for name, orig, c in (("k_cache", k_cache, kc), ("v_cache", v_cache, vc)):
            check_writable(orig, name)
            check_writable(c, name)
    # varlen (seqused_k / leftpad_k / cu_seqlens_q): the prepare kernel's per-batch counts (or
    # scheduler_metadata's, which holds them); else the static one
    splits = None if static <= 1 else np.full(b, static, np.int64) if not varlen else dynamic_num_splits(
        rows_q.lengths, seqlens, kblock_m=tile_m, kblock_n=tile_n, heads=h,
        heads_kv=hkv, num_sms=sms, num_splits_static=static, pack_gqa=True, leftpad_k=left,
        seqlens_k_new=new.lengths)
    splits = metadata_splits(scheduler_metadata, splits, b, static, varlen, is_causal, is_local)

    def call(bi: int):
        """Batch ``bi``'s keys, values and forward arguments (the keys after the append)."""
        keys = slice(int(left[bi]), int(seqlens[bi] + new.lengths[bi]))
        kw = dict(softmax_scale=scale, causal=causal, window=tuple(window_size), softcap=softcap,
                  max_seqlen_q=sq, max_seqlen_k=s_cache, qv=qvs[bi], attention_chunk=chunk,
                  **{n: descale_rows(x, bi) for n, x in descales.items()},
                  gpu=gpu, **parallel(executor, progress, memory_budget))
        if splits is not None and splits[bi] != 1:
            kw["num_splits"] = int(splits[bi])
        if packs_varlen:
            kw["pack_gqa"] = True
        if launch is None:
            return kc[None, rows[bi], keys], vc[None, rows[bi], keys], kw
        kw.update(paged_kwargs(launch, pack_gqa, h > hkv))
        row = table[rows[bi]]
        return (paged.gather(kc, row, keys.start, keys.stop)[None],
                paged.gather(vc, row, keys.start, keys.stop)[None], kw)

    # "auto" decides once for the check and all the batch's calls: their tiles' products, a
    # full cache each
    tiles = sum(-(-x.shape[1] // tile_m) for x in qs) * -(-s_cache // tile_n)
    with engine.launching(tiles * tile_m * tile_n * h * (q.shape[-1] + dv)):
        if kn is not None:  # the memory budget refuses before the cache is written, not after
            for bi in range(b):
                kb, vb, kw = call(bi)
                if kb.shape[1] and qs[bi].shape[1]:
                    check_memory(qs[bi], kb, vb, **kw)
        if kn is not None:  # AppendKV: the new keys land in the cache, in place
            # the attention CTAs write them (hopper/flash_fwd_kernel_sm90.h, store_kv_new): a
            # varlen sequence without query rows has no CTA and appends nothing (measured: H200)
            count = np.where(rows_q.lengths > 0, new.lengths, 0)
            bsel = np.repeat(np.arange(b), count)                              # [appended keys]
            pos = seqlens[bsel] + (np.arange(bsel.shape[0]) - np.repeat(np.cumsum(count) - count, count))
            slots = (rows[bsel], pos)
            if table is not None:
                page, row = paged.slots(table, rows[bsel], pos[:, None], page_size)
                slots = (page[:, 0], row[:, 0])
            append_kv((kc, vc), (k_cache, v_cache), slots,
                      tuple(np.concatenate([x[bi][0, : count[bi]] for bi in range(b)])
                            for x in (kns, vns)))
        record = None if wanted is None else Trace()
        out, lse, out_acc, lse_acc = rows_q.outputs(h, dv, output_dtype(q.dtype), static, s_cache == 0)
        for bi in range(b):
            kb, vb, kw = call(bi)
            if kb.shape[1] == 0 or qs[bi].shape[1] == 0:
                continue
            kw.pop("num_splits", None)
            parts = []
            o, l_ = traced_forward(qs[bi], kb, vb, kw, None if splits is None else int(splits[bi]),
                                   bi, wanted, record, parts)
            rows_q.store(bi, o[0], l_[0], parts, out, lse, out_acc, lse_acc)
    full = (out, lse, out_acc, lse_acc) if return_softmax_lse else (out,)
    return with_trace(returned(full, tq), record, return_softmax_lse)


def rotated(rot, seqlens, qs: list, kns: list, per_row: bool, interleaved: bool):
    """Queries and new keys of every batch rotated at FA3's positions (hopper/rotary.h): keys
    at ``base + i``; queries at ``base + i`` under a causal or local kernel (``per_row``),
    else all at ``base``; ``base`` is rotary_seqlens, else cache_seqlens."""
    cos, sin, base = rot
    base = seqlens if base is None else base
    qs_out, kns_out = [], []
    for bi, (qb, kb) in enumerate(zip(qs, kns, strict=True)):
        kpos = base[bi] + np.arange(kb.shape[1])[None]
        qpos = base[bi] + (np.arange(qb.shape[1]) if per_row else np.zeros(qb.shape[1], int))[None]
        rotary.positions_past(cos.shape[0], kpos, "k")
        rotary.positions_past(cos.shape[0], qpos, "q")
        kns_out.append(rotary.rotate(kb, cos, sin, kpos, interleaved))
        qs_out.append(rotary.rotate(qb, cos, sin, qpos, interleaved))
    return qs_out, kns_out
