"""A paged KV cache (``page_table``) for ``flash_attn_with_kvcache``: what FA3 decides on the
host for it (hopper/flash_api.cpp ``mha_fwd``: ``get_pagedkv_tma``, the seqlen_q == 1 causal
rule, the tile and PackGQA of ``PagedKVNonTMA``) and how its kernel addresses the block pool
(hopper/paged_kv.h: key ``i`` of a sequence is row ``i % page_size`` of page
``page_table[row, i // page_size]``).

The pool is ``k_cache`` / ``v_cache`` of shape [num_pages, page_size, heads_kv, head_dim]; the
cache of a sequence is ``max_num_pages_per_seq * page_size`` keys long. The arithmetic of the
kernel is the forward's: a paged call gives the bits of the same call on the gathered contiguous
cache, run with the tile FA3 picks for paged KV.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..flash.dispatch import kernel_head_dims, tile_size_fwd_sm90
from ..flash.masks import fa3_window, kernel_flags, normalize_window
from .arrays import to_numpy


@dataclass(frozen=True)
class PagedLaunch:
    """What ``mha_fwd`` decides for a paged launch.

    Attributes:
        tma: ``params.pagedkv_tma`` (pages loaded by TMA); False: ``PagedKVNonTMA``.
        is_causal, is_local: the kernel flags (causal kept at seqlen_q == 1 for head dims in
            (64, 128]: "better for pagedKV and TMA").
        kblock_m, kblock_n, overlap: ``tile_size_fwd_sm90(..., paged_kv_non_TMA=not tma)``.
        pack_gqa_forced: ``PagedKVNonTMA`` kernels always pack the query heads.
    """

    tma: bool
    is_causal: bool
    is_local: bool
    kblock_m: int
    kblock_n: int
    overlap: bool
    pack_gqa_forced: bool


def page_table_array(page_table, batch_k_rows: int | None) -> np.ndarray:
    """``page_table`` as int64 [batch_k, max_num_pages_per_seq] (FA3: int32, 2-d).

    Raises:
        ValueError: another dtype or rank, or no pages per sequence, naming page_table.
    """
    arr = to_numpy(page_table, "page_table")[0]
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"page_table: expected an int32 array [batch, max_num_pages_per_seq], "
                         f"got {type(arr).__name__}")
    if arr.dtype != np.int32:
        raise ValueError(f"page_table: FA3 requires dtype int32 (\"page_table must have dtype "
                         f"torch.int32\"), got {arr.dtype}")
    if arr.ndim != 2 or arr.shape[1] < 1 or arr.shape[0] < 1:
        raise ValueError(f"page_table: expected shape [batch, max_num_pages_per_seq] with both "
                         f">= 1, got {list(arr.shape)}")
    if batch_k_rows is not None and arr.shape[0] != batch_k_rows:
        raise ValueError(f"page_table: expected {batch_k_rows} rows (one per batch: FA3's "
                         f"\"batch_size must be equal to batch_size_k\"), got {arr.shape[0]}")
    return arr.astype(np.int64)


def check_pages(table: np.ndarray, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                page_size: int, num_pages: int) -> None:
    """Every page a batch reads or writes (keys ``starts[b]`` .. ``ends[b]`` - 1 of page-table
    row ``rows[b]``) names a page of the pool; the others are never read and may hold anything.

    Raises:
        ValueError: naming page_table, the batch, the entry and the pool size.
    """
    for b, (r, start, end) in enumerate(zip(rows, starts, ends, strict=True)):
        first, last = int(start) // page_size, -(-int(end) // page_size)
        used = table[r, first:last]
        bad = np.flatnonzero((used < 0) | (used >= num_pages))
        if bad.size:
            j = first + int(bad[0])
            raise ValueError(f"page_table: batch {b} reads page_table[{int(r)}, {j}] = "
                             f"{int(table[r, j])}, expected a page in 0..{num_pages - 1} (the "
                             f"pool's num_pages)")


def gather(pool: np.ndarray, table_row: np.ndarray, start: int, end: int) -> np.ndarray:
    """Keys ``start`` .. ``end`` - 1 of one sequence, contiguous: [end - start, heads_kv,
    head_dim] from the pool [num_pages, page_size, heads_kv, head_dim] (hopper/paged_kv.h's
    addressing)."""
    page_size = pool.shape[1]
    first = start // page_size
    pages = table_row[first: max(first, -(-end // page_size))]
    keys = pool[pages].reshape((-1,) + pool.shape[2:])
    return keys[start - first * page_size: end - first * page_size]


def slots(table: np.ndarray, rows: np.ndarray, positions: np.ndarray,
          page_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(page, row in page) of key ``positions[b, i]`` of page-table row ``rows[b]``: where
    AppendKV writes the new keys in the pool."""
    return table[rows[:, None], positions // page_size], positions % page_size


def paged_launch(fmt: str, head_dim: int, head_dim_v: int, causal: bool, window, seqlen_q: int,
                 seqlen_k: int, softcap: float, heads: int, heads_kv: int, page_size: int,
                 leftpad: bool, append: bool) -> PagedLaunch:
    """FA3's kernel choice for a paged launch (hopper/flash_api.cpp ``mha_fwd``,
    ``get_pagedkv_tma``, ``get_pack_gqa``; hopper/tile_size.h).

    Args:
        fmt: "bf16", "f16" or "e4m3"; head_dim, head_dim_v: the inputs'.
        causal, window: the caller's; seqlen_q, seqlen_k: the launch's (seqlen_k =
            max_num_pages_per_seq * page_size).
        softcap: > 0 when on; heads, heads_kv: query and kv heads.
        page_size: rows per page; leftpad: cache_leftpad given; append: new k, v given.
    Returns:
        :class:`PagedLaunch`. TMA needs no leftpad, no append, ``page_size % kBlockN == 0``
        (kBlockN of the non-paged tile) and ``seqlen_q * heads / heads_kv > kBlockM``.
    """
    win = fa3_window(normalize_window(bool(causal), window), seqlen_q, seqlen_k)
    is_causal, is_local = kernel_flags(win)  # causal at seqlen_q == 1 reads as non-causal here
    if causal and seqlen_q == 1 and win[0] == -1 and 64 < head_dim <= 128:
        is_causal, is_local = True, False  # mha_fwd keeps it for paged KV at hdim (64, 128]
    kd, kdv = kernel_head_dims(fmt, head_dim, head_dim_v)
    esize = 1 if fmt == "e4m3" else 2
    soft = softcap > 0
    m, n, _, _ = tile_size_fwd_sm90(kd, kdv, is_causal, is_local, esize, False, False, soft)
    tma = (not leftpad and not append and page_size % n == 0
           and seqlen_q * (heads // heads_kv) > m)
    m, n, _, overlap = tile_size_fwd_sm90(kd, kdv, is_causal, is_local, esize, False, not tma, soft)
    return PagedLaunch(tma, is_causal, is_local, m, n, overlap, not tma)
