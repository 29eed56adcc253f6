"""``flash_attn_with_kvcache``: FA3's decode and chunked-prefill entry point against a KV
cache (hopper/flash_attn_interface.py, hopper/flash_api.cpp ``mha_fwd`` with AppendKV):
``cache_batch_idx`` picks the cache row, ``cache_leftpad`` its first key, ``cache_seqlens``
its length; new ``k`` / ``v`` are written into the caches in place at ``cache_seqlens`` and
attended to; a launch with ``cache_seqlens`` or ``cache_leftpad`` is varlen (seqused_k /
leftpad_k), so its per-batch split counts come from FA3's prepare kernel.

The arguments are checked once, in FA3's order and all before a cache is written, into
:class:`CacheArrays` (q, the caches, the page table), :class:`CacheRows` (cache_seqlens,
cache_batch_idx, cache_leftpad, the new keys) and :class:`KVCacheCall` (the launch of
:mod:`simulator.fa3.arguments`, the paged launch, the rotary positions, the per-batch split
counts); :func:`run_kvcache` runs the call from that record.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import engine
from ..flash.config import check_chunk, check_qv
from ..flash.dispatch import check_head_dim, check_head_dim_v
from ..flash.forward import check_memory
from ..gpus import DEFAULT_GPU
from ..trace import Trace
from . import paged, rotary, torch_ops
from .append import append_kv
from .arguments import DESCALES, Launch, Options, Parallel, plan
from .arrays import check_writable, returned, to_numpy
from .checks import (
    check_4d,
    check_bool,
    check_descales,
    check_fmt,
    check_scale,
    check_window_size,
    gpu_sms,
    int_array,
    trace_ctas,
)
from .kvcache_rows import NewKeys, QueryRows, cache_lengths
from .launch import output_dtype, traced_forward, with_trace
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


@torch_ops.outside_compiled_graphs
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
    parallel = Parallel.checked(executor, progress, memory_budget, trace)
    num_sms = gpu_sms(gpu, num_sms)
    arrays = CacheArrays.of(q, k_cache, v_cache, k, v, qv, page_table, cu_seqlens_q=cu_seqlens_q,
                            max_seqlen_q=max_seqlen_q)
    opts = Options.checked(
        softmax_scale=softmax_scale, causal=causal, window_size=window_size,
        attention_chunk=chunk, softcap=softcap, num_splits=num_splits, pack_gqa=pack_gqa,
        sm_margin=sm_margin, num_sms=num_sms, gpu=gpu, return_softmax_lse=return_softmax_lse)
    rows = CacheRows.of(arrays, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                        cache_leftpad=cache_leftpad, cu_seqlens_k_new=cu_seqlens_k_new)
    call = KVCacheCall.of(arrays, rows, opts, parallel, trace, (q_descale, k_descale, v_descale),
                          rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                          rotary_seqlens=rotary_seqlens, rotary_interleaved=rotary_interleaved,
                          scheduler_metadata=scheduler_metadata)
    return run_kvcache(call)


@dataclass(frozen=True)
class CacheArrays:
    """The arrays of a ``flash_attn_with_kvcache`` call, checked (:meth:`of`).

    Attributes:
        q: NumPy [batch, seqlen_q, heads, head_dim] (packed [total_q, heads, head_dim] with
            cu_seqlens_q); torch: q came as a torch tensor (the results go back as such).
        rows_q: the queries' layout (:class:`simulator.fa3.kvcache_rows.QueryRows`).
        k_cache, v_cache: NumPy views of the caches (of the page pool with a page table);
            given: the caches as passed (written back in place after the append).
        k_new, v_new, qv: NumPy or None.
        page_table: None, or int64 [batch_cache, max_num_pages_per_seq]; page_size,
            num_pages: the pool's (0 without a page table).
        batch_cache, seqlen_cache: cache rows and keys per row (a page-table row is
            ``max_num_pages_per_seq * page_size`` keys).
        fmt: the inputs' format.
    """

    q: np.ndarray
    torch: bool
    rows_q: QueryRows
    k_cache: np.ndarray
    v_cache: np.ndarray
    given: tuple
    k_new: np.ndarray | None
    v_new: np.ndarray | None
    qv: np.ndarray | None
    page_table: np.ndarray | None
    page_size: int
    num_pages: int
    batch_cache: int
    seqlen_cache: int
    fmt: str

    @property
    def heads(self) -> int:
        return self.q.shape[-2]

    @property
    def heads_kv(self) -> int:
        return self.k_cache.shape[2]

    @property
    def head_dim(self) -> int:
        return self.q.shape[-1]

    @property
    def head_dim_v(self) -> int:
        return self.v_cache.shape[-1]

    @classmethod
    def of(cls, q, k_cache, v_cache, k, v, qv, page_table, *, cu_seqlens_q,
           max_seqlen_q) -> CacheArrays:
        """The arrays as NumPy, their shapes and dtypes against each other (mha_fwd's
        CHECK_SHAPEs), the page pool. Raises ValueError naming the argument."""
        (qn, tq), (kc, _) = to_numpy(q, "q"), to_numpy(k_cache, "k_cache")
        vc = to_numpy(v_cache, "v_cache")[0]
        (kn, _), (vn, _), (qv, _) = to_numpy(k, "k"), to_numpy(v, "v"), to_numpy(qv, "qv")
        rows_q = QueryRows.of(qn, cu_seqlens_q, max_seqlen_q)
        check_4d(rows_q.as_4d(qn), kc, vc, ("q", "k_cache", "v_cache"))
        b, sq, h, d = rows_q.batch, rows_q.max_len, qn.shape[-2], qn.shape[-1]
        bc, s_cache, hkv, _ = kc.shape
        table = None if page_table is None else paged.page_table_array(page_table, None)
        num_pages = page_size = 0
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
        if qn.dtype != kc.dtype or kc.dtype != vc.dtype:
            raise ValueError(f"q, k_cache, v_cache: dtypes differ ({qn.dtype}, {kc.dtype}, {vc.dtype})")
        if kc.shape[:3] != vc.shape[:3]:
            raise ValueError(f"k_cache, v_cache: expected the same [batch_cache, seqlen_cache, "
                             f"heads_kv], got {kc.shape} and {vc.shape}")
        if b < 1 or sq < 1 or h < 1:
            raise ValueError(f"q: batch, seqlen_q and heads must be >= 1, got {qn.shape}")
        if kc.shape[-1] != d:
            raise ValueError(f"k_cache: expected head_dim {d} (as q), got shape {kc.shape}")
        if hkv < 1 or h % hkv:
            raise ValueError(f"k_cache: heads_kv = {hkv} must divide heads = {h}")
        return cls(qn, tq, rows_q, kc, vc, (k_cache, v_cache), kn, vn, qv, table, page_size,
                   num_pages, bc, s_cache, check_fmt(qn))


@dataclass(frozen=True)
class CacheRows:
    """Which cache keys each batch attends to, checked (:meth:`of`).

    Attributes:
        cache_seqlens, cache_batch_idx, cache_leftpad: int64 [batch] keys before the append,
            cache row, first valid key (defaults: the whole cache, row ``b``, 0).
        new: the appended keys (:class:`simulator.fa3.kvcache_rows.NewKeys`).
        varlen: FA3's launch is varlen (cache_seqlens: seqused_k, cache_leftpad: leftpad_k,
            or cu_seqlens_q), so its per-batch split counts come from the prepare kernel.
        leftpad: cache_leftpad was given (no TMA page loads for a paged cache).
    """

    cache_seqlens: np.ndarray
    cache_batch_idx: np.ndarray
    cache_leftpad: np.ndarray
    new: NewKeys
    varlen: bool
    leftpad: bool

    @classmethod
    def of(cls, a: CacheArrays, *, cache_seqlens, cache_batch_idx, cache_leftpad,
           cu_seqlens_k_new) -> CacheRows:
        """The rows checked against the cache, the new keys and the queries (mha_fwd,
        AppendKV). Raises ValueError naming the argument."""
        rows_q, b, s_cache, bc = a.rows_q, a.rows_q.batch, a.seqlen_cache, a.batch_cache
        d, dv, fmt = a.head_dim, a.head_dim_v, a.fmt
        seqlens = cache_lengths(cache_seqlens, a.q, b, s_cache, rows_q.varlen)
        rows = (np.arange(b) if cache_batch_idx is None else
                int_array(to_numpy(cache_batch_idx, "cache_batch_idx")[0], "cache_batch_idx", b))
        left = (np.zeros(b, np.int64) if cache_leftpad is None else
                int_array(to_numpy(cache_leftpad, "cache_leftpad")[0], "cache_leftpad", b))
        if cache_batch_idx is None and bc != b:  # before the rows: none were given to blame
            raise ValueError(f"{'k_cache' if a.page_table is None else 'page_table'}: expected "
                             f"q's batch {b}, got {bc} (FA3: 'batch_size must be equal to "
                             f"batch_size_k')")
        if np.any((rows < 0) | (rows >= bc)):
            raise ValueError(f"cache_batch_idx: expected rows in 0..{bc - 1}, got {rows.tolist()[:8]}")
        new = NewKeys.of(a.k_new, a.v_new, cu_seqlens_k_new, b, a.heads_kv, d, dv, a.q.dtype)
        if a.k_new is not None:
            check_head_dim(d, fmt)
            check_head_dim_v(d, dv, fmt)  # FA3's refusal of the pair comes first
            if dv < d:
                raise ValueError(f"v: appending new values with head_dim_v {dv} < head_dim {d} is "
                                 f"not emulated: FA3's AppendKV writes {d} values per V row, past "
                                 f"the row's {dv}, zeroing the cache's next values (measured on the "
                                 f"H200); to attend to them without that spill, write k, v into the "
                                 f"caches yourself and call without k, v, with cache_seqlens + "
                                 f"seqlen_new")
            if cache_seqlens is None:
                raise ValueError("cache_seqlens: FA3 requires it when k, v are appended "
                                 "('If k_new is supplied, seqlens_k must also be passed in')")
            if rows_q.max_len > s_cache:
                raise ValueError(f"q: with new k, v FA3 requires seqlen_q <= the cache's length "
                                 f"({rows_q.max_len} > {s_cache})")
        if np.any(seqlens < 0) or np.any(seqlens + new.lengths > s_cache):
            raise ValueError(f"cache_seqlens: expected 0..{s_cache} minus each batch's new keys "
                             f"{new.lengths.tolist()[:8]} (the cache length), got {seqlens.tolist()[:8]}")
        if np.any(left < 0) or np.any(left > seqlens):
            raise ValueError(f"cache_leftpad: expected 0..cache_seqlens, got {left.tolist()[:8]}")
        check_head_dim(d, fmt)
        check_head_dim_v(d, dv, fmt)
        if a.qv is not None:
            check_qv(rows_q.qv_4d(a.qv, dv), rows_q.as_4d(a.q), dv, fmt)
        if a.page_table is not None:
            paged.check_pages(a.page_table, rows, left, seqlens + new.lengths, a.page_size,
                              a.num_pages)
        varlen = (cache_seqlens is not None or cache_leftpad is not None  # seqused_k / leftpad_k
                  or rows_q.varlen)
        return cls(seqlens, rows, left, new, varlen, cache_leftpad is not None)


def cache_launch(a: CacheArrays, rows: CacheRows, opts: Options, parallel: Parallel, trace,
                 descales) -> tuple[Launch, paged.PagedLaunch | None, bool]:
    """The launch of a KV-cache call: :func:`simulator.fa3.arguments.plan` (FA3's paged tile
    with a page table), the descales, softmax_scale, the traced CTAs (checked before the
    append). Returns (the launch, the paged launch or None, whether FA3 packs the query heads
    of varlen queries). Raises ValueError naming the argument."""
    b, sq, h, hkv = a.rows_q.batch, a.rows_q.max_len, a.heads, a.heads_kv
    d, dv, s_cache, fmt = a.head_dim, a.head_dim_v, a.seqlen_cache, a.fmt
    paged_launch = None if a.page_table is None else paged.paged_launch(
        fmt, d, dv, opts.causal, opts.window_size, sq, s_cache, opts.softcap, h, hkv,
        a.page_size, leftpad=rows.leftpad, append=a.k_new is not None)
    kernel = plan(opts, fmt, batch=b, heads=h, heads_kv=hkv, head_dim=d, head_dim_v=dv,
                  seqlen_q=sq, seqlen_k=s_cache, varlen=rows.varlen, prepare=True,
                  paged=paged_launch)
    named = check_descales({n: to_numpy(x, n)[0] for n, x in zip(DESCALES, descales, strict=True)},
                           fmt, b, hkv)
    scale = check_scale(opts.softmax_scale, d, opts.softcap, 0 if a.qv is None else dv)
    wanted = trace_ctas(trace, kernel.num_splits, h, a.rows_q.lengths, kernel.kblock_m)
    if wanted is not None and paged_launch is not None and paged_launch.pack_gqa_forced and h > hkv:
        raise ValueError("trace: not recorded for this paged launch: without TMA page loads "
                         "(new keys, cache_leftpad, or page_size not a multiple of kBlockN "
                         f"{paged_launch.kblock_n}) FA3 packs the query heads of a kv head "
                         "(PackGQA), and PackGQA launches are not traced")
    if wanted is not None and dv > 256:  # the forward's refusal, before the append
        raise ValueError(f"trace: not recorded for a V head dim over 256 (got head_dim_v {dv}: "
                         "O spans two m64n256 accumulators)")
    # get_pack_gqa: should_pack_gqa(varlen_q) is always true for packed queries
    packs_varlen = a.rows_q.varlen and h > hkv and opts.pack_gqa is None
    if wanted is not None and packs_varlen:
        raise ValueError("trace: with cu_seqlens_q and grouped heads FA3 packs the query heads "
                         "of a kv head (PackGQA), and PackGQA launches are not traced; pass "
                         "pack_gqa=False (the same bits)")
    launch = Launch(opts, kernel, parallel, fmt, h, hkv, d, dv, scale, named, wanted,
                    (sq, s_cache))
    return launch, paged_launch, packs_varlen


@dataclass(frozen=True)
class KVCacheCall:
    """A ``flash_attn_with_kvcache`` call, checked: everything :func:`run_kvcache` reads.

    Attributes:
        arrays, rows: :class:`CacheArrays`, :class:`CacheRows`.
        launch: the launch (:class:`simulator.fa3.arguments.Launch`), with each batch's split
            count when FA3 reads them per batch (the prepare kernel or ``scheduler_metadata``).
        paged: the paged launch (:func:`simulator.fa3.paged.paged_launch`) or None.
        packs_varlen: FA3 packs the query heads of varlen queries (PackGQA).
        rotary: None, or (rotary_cos, rotary_sin, per batch (query positions, key positions))
            when new keys are rotated (:mod:`simulator.fa3.rotary`).
        rotary_interleaved: pairs (2j, 2j + 1), else (j, j + rotary_dim / 2).
    """

    arrays: CacheArrays
    rows: CacheRows
    launch: Launch
    paged: paged.PagedLaunch | None
    packs_varlen: bool
    rotary: tuple | None
    rotary_interleaved: bool

    @classmethod
    def of(cls, a: CacheArrays, rows: CacheRows, opts: Options, parallel: Parallel, trace,
           descales, *, rotary_cos, rotary_sin, rotary_seqlens, rotary_interleaved,
           scheduler_metadata) -> KVCacheCall:
        """The launch (:func:`cache_launch`), the rotary tables and positions, the caches'
        writability, the per-batch split counts: all checked before the caches are written.
        Raises ValueError naming the argument."""
        launch, paged_launch, packs_varlen = cache_launch(a, rows, opts, parallel, trace, descales)
        kernel, b = launch.kernel, a.rows_q.batch
        interleaved = check_bool("rotary_interleaved", rotary_interleaved)
        rot = rotary.check_rotary(rotary_cos, rotary_sin, rotary_seqlens, q_dtype=a.q.dtype,
                                  head_dim=a.head_dim, batch=b, appends=a.k_new is not None,
                                  paged=a.page_table is not None, seqlen_k=a.seqlen_cache)
        if rot is not None and rot[2] is not None and np.any(rot[2] < 0):
            raise ValueError(f"rotary_seqlens: expected positions >= 0, got {rot[2].tolist()[:8]}")
        # no new key at all (an empty k, v: a null pointer to FA3) runs the kernel without
        # AppendKV, and so without rotary: the queries stay as they are (measured on the H200)
        if rot is not None and rows.new.lengths.sum() > 0:
            rot = rot[:2] + (rotary_positions(rot, rows.cache_seqlens, a.rows_q.lengths,
                                              rows.new.lengths,
                                              kernel.is_causal or kernel.is_local),)
        else:
            rot = None
        if a.k_new is not None:  # both caches checked before either is written
            for name, orig, c in zip(("k_cache", "v_cache"), a.given, (a.k_cache, a.v_cache),
                                     strict=True):
                check_writable(orig, name)
                check_writable(c, name)
        # varlen (seqused_k / leftpad_k / cu_seqlens_q): the prepare kernel's per-batch counts
        # (or scheduler_metadata's, which holds them); else the static one
        static, splits = kernel.num_splits, None
        if static > 1:
            splits = np.full(b, static, np.int64) if not rows.varlen else dynamic_num_splits(
                a.rows_q.lengths, rows.cache_seqlens, kblock_m=kernel.kblock_m,
                kblock_n=kernel.kblock_n, heads=a.heads, heads_kv=a.heads_kv, num_sms=opts.sms,
                num_splits_static=static, pack_gqa=True, leftpad_k=rows.cache_leftpad,
                seqlens_k_new=rows.new.lengths)
        splits = metadata_splits(scheduler_metadata, splits, b, static, rows.varlen,
                                 kernel.is_causal, kernel.is_local)
        return cls(a, rows, replace(launch, batch_splits=splits), paged_launch, packs_varlen,
                   rot, interleaved)


def run_kvcache(call: KVCacheCall):
    """The launch of a checked KV-cache call: the memory budget checked for every batch, the
    new keys (rotated first, with rotary) appended into the caches in place, then one forward
    call per batch; FA3's return value."""
    a, rows, launch = call.arrays, call.rows, call.launch
    b, h, dv, new = a.rows_q.batch, a.heads, a.head_dim_v, rows.new
    qs = [a.rows_q.batch_rows(a.q, bi) for bi in range(b)]   # [1, len_q[bi], heads, head_dim]
    qvs = [None if a.qv is None else a.rows_q.batch_rows(a.qv, bi) for bi in range(b)]
    kns = [new.batch_rows(a.k_new, bi) for bi in range(b)]   # [1, len_new[bi], heads_kv, head_dim]
    vns = [new.batch_rows(a.v_new, bi) for bi in range(b)]
    if call.rotary is not None:  # new keys rotated, then the queries
        qs, kns = rotated(call.rotary, qs, kns, call.rotary_interleaved)
    splits = launch.batch_splits

    def batch_call(bi: int):
        """Batch ``bi``'s keys, values and forward arguments (the keys after the append)."""
        keys = slice(int(rows.cache_leftpad[bi]), int(rows.cache_seqlens[bi] + new.lengths[bi]))
        kw = launch.forward_kwargs(bi, qvs[bi])
        if splits is not None and splits[bi] != 1:
            kw["num_splits"] = int(splits[bi])
        if call.packs_varlen:
            kw["pack_gqa"] = True
        row = rows.cache_batch_idx[bi]
        if call.paged is None:
            return a.k_cache[None, row, keys], a.v_cache[None, row, keys], kw
        kw.update(paged_kwargs(call.paged, launch.options.pack_gqa, h > a.heads_kv))
        pages = a.page_table[row]
        return (paged.gather(a.k_cache, pages, keys.start, keys.stop)[None],
                paged.gather(a.v_cache, pages, keys.start, keys.stop)[None], kw)

    # "auto" decides once for the check and all the batch's calls: their tiles' products, a
    # full cache each
    with engine.launching(launch.work(a.rows_q.lengths, np.full(b, a.seqlen_cache))):
        if a.k_new is not None:  # the memory budget refuses before the cache is written, not after
            for bi in range(b):
                kb, vb, kw = batch_call(bi)
                if kb.shape[1] and qs[bi].shape[1]:
                    check_memory(qs[bi], kb, vb, **kw)
        if a.k_new is not None:  # AppendKV: the new keys land in the cache, in place
            append(a, rows, kns, vns)
        record = None if launch.trace is None else Trace()
        out, lse, out_acc, lse_acc = a.rows_q.outputs(h, dv, output_dtype(a.q.dtype),
                                                      launch.kernel.num_splits, a.seqlen_cache == 0)
        for bi in range(b):
            kb, vb, kw = batch_call(bi)
            if kb.shape[1] == 0 or qs[bi].shape[1] == 0:
                continue
            kw.pop("num_splits", None)
            parts = []
            o, l_ = traced_forward(qs[bi], kb, vb, kw, None if splits is None else int(splits[bi]),
                                   bi, launch.trace, record, parts)
            a.rows_q.store(bi, o[0], l_[0], parts, out, lse, out_acc, lse_acc)
    full = launch.options.return_lse
    return with_trace(returned((out, lse, out_acc, lse_acc) if full else (out,), a.torch), record,
                      full)


def append(a: CacheArrays, rows: CacheRows, kns: list, vns: list) -> None:
    """AppendKV: batch ``bi``'s new keys and values (``kns[bi]``, ``vns[bi]``) written into its
    cache row at ``cache_seqlens[bi]``, in place, by the attention CTAs
    (hopper/flash_fwd_kernel_sm90.h, store_kv_new): a varlen sequence without query rows has
    no CTA and appends nothing (measured: H200)."""
    b = a.rows_q.batch
    count = np.where(a.rows_q.lengths > 0, rows.new.lengths, 0)
    bsel = np.repeat(np.arange(b), count)                              # [appended keys]
    pos = rows.cache_seqlens[bsel] + (np.arange(bsel.shape[0]) - np.repeat(np.cumsum(count) - count, count))
    slots = (rows.cache_batch_idx[bsel], pos)
    if a.page_table is not None:
        page, row = paged.slots(a.page_table, rows.cache_batch_idx[bsel], pos[:, None], a.page_size)
        slots = (page[:, 0], row[:, 0])
    append_kv((a.k_cache, a.v_cache), a.given, slots,
              tuple(np.concatenate([x[bi][0, : count[bi]] for bi in range(b)]) for x in (kns, vns)))


def rotary_positions(rot, seqlens, lengths_q, lengths_new, per_row: bool) -> list:
    """Each batch's (query positions, key positions) of the rotary tables, FA3's
    (hopper/rotary.h): keys at ``base + i``; queries at ``base + i`` under a causal or local
    kernel (``per_row``), else all at ``base``; ``base`` is rotary_seqlens, else cache_seqlens.

    Raises:
        ValueError: a position past the tables (:func:`simulator.fa3.rotary.positions_past`).
    """
    cos, _, base = rot
    base = seqlens if base is None else base
    out = []
    for bi in range(len(lengths_q)):
        kpos = base[bi] + np.arange(lengths_new[bi])[None]
        qpos = base[bi] + (np.arange(lengths_q[bi]) if per_row else np.zeros(lengths_q[bi], int))[None]
        rotary.positions_past(cos.shape[0], kpos, "k")
        rotary.positions_past(cos.shape[0], qpos, "q")
        out.append((qpos, kpos))
    return out


def rotated(rot, qs: list, kns: list, interleaved: bool):
    """Queries and new keys of every batch rotated at their positions (:func:`rotary_positions`)."""
    cos, sin, positions = rot
    qs_out, kns_out = [], []
    for qb, kb, (qpos, kpos) in zip(qs, kns, positions, strict=True):
        kns_out.append(rotary.rotate(kb, cos, sin, kpos, interleaved))
        qs_out.append(rotary.rotate(qb, cos, sin, qpos, interleaved))
    return qs_out, kns_out
