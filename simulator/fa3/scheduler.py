"""FA3's per-batch split count for varlen launches (``hopper/flash_prepare_scheduler.cu``).

When a launch is varlen (cu_seqlens, seqused_q / seqused_k or leftpad_k given: every
``flash_attn_with_kvcache`` call with ``cache_seqlens``) and its static split count is above 1,
the prepare kernel decides each batch's split count from the work of the whole launch:

    num_m_blocks[b] = ceil(seqlen_q[b] * (qheads per kv head if PackGQA) / kBlockM)
    num_n_blocks[b] = ceil((seqlen_k[b] - leftpad_k[b] + seqlen_k_new[b]) / kBlockN)
    total_blocks    = sum over b of num_m_blocks[b] * num_n_blocks[b]
    blocks_per_sm   = ceilf(float(total_blocks) * 1.1f * float(num_head) / float(num_sm))
    splits[b]       = max(min(ceil(num_n_blocks[b] / blocks_per_sm), num_splits_static), 1)

with ``num_head`` the kv heads under PackGQA (always on with splits) and float32 arithmetic
as written (``ceilf`` of a float32 product; the division is the fast-math ``a * rcp(b)``).
Batches beyond 992 (more than one CTA of the prepare kernel) or a static count of 1 give 1
split everywhere.
"""

from __future__ import annotations

import numpy as np

from ..numerics import fmul
from ..numerics.mufu import rcp


def dynamic_num_splits(seqlens_q, seqlens_k, *, kblock_m: int, kblock_n: int, heads: int,
                       heads_kv: int, num_sms: int, num_splits_static: int, pack_gqa: bool,
                       leftpad_k=None, seqlens_k_new=None) -> np.ndarray:
    """Per-batch split counts of a varlen launch (module docstring).

    Args:
        seqlens_q, seqlens_k: [batch] ints (seqused or cu_seqlens differences; for the KV
            cache, the cache lengths before appending).
        kblock_m, kblock_n: the launch's tile; heads, heads_kv: query and kv heads.
        num_sms: multiprocessors (132 on the H200); num_splits_static: FA3's static count.
        pack_gqa: the launch's PackGQA (True whenever it splits).
        leftpad_k, seqlens_k_new: [batch] ints or None (0).
    Returns:
        int64 [batch] split counts >= 1.
    Source: hopper/flash_prepare_scheduler.cu, prepare_varlen_num_blocks_kernel.
    """
    sq = np.asarray(seqlens_q, dtype=np.int64)
    sk = np.asarray(seqlens_k, dtype=np.int64)
    batch = sq.shape[0]
    left = np.zeros(batch, np.int64) if leftpad_k is None else np.asarray(leftpad_k, np.int64)
    new = np.zeros(batch, np.int64) if seqlens_k_new is None else np.asarray(seqlens_k_new, np.int64)
    if num_splits_static == 1 or batch > 992:
        return np.ones(batch, dtype=np.int64)
    ratio = -(-heads // heads_kv)
    m_blocks = -(-(sq * (ratio if pack_gqa else 1)) // kblock_m)
    n_blocks = -(-(sk - left + new) // kblock_n)
    total = int(np.sum(m_blocks * n_blocks))
    num_head = heads_kv if pack_gqa else heads
    # float32 as written; under --use_fast_math the division is div.approx.ftz.f32: a * rcp(b)
    prod = fmul(fmul(np.float32(total), np.float32(1.1), ftz=True), np.float32(num_head), ftz=True)
    blocks_per_sm = int(np.ceil(fmul(prod, rcp(np.float32(num_sms)), ftz=True)))
    if blocks_per_sm <= 0:  # no work anywhere: the kernel divides by it; FA3 launches nothing
        return np.ones(batch, dtype=np.int64)
    splits = np.minimum(-(-n_blocks // blocks_per_sm), num_splits_static)
    return np.maximum(splits, 1).astype(np.int64)
