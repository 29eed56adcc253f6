"""How FA3 splits the K/V blocks of a launch: the split heuristic and the pack-GQA decision of
the host (hopper/heuristics.h, hopper/flash_api.cpp ``get_num_splits``, ``get_pack_gqa``)
and the block range of each split (hopper/block.h). Host code compiled for the CPU (no SASS):
float32, int32 and double arithmetic as written in the C++.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..flash.config import input_format
from ..flash.dispatch import round_up_headdim, round_up_headdimv, should_pack_gqa, tile_size_fwd_sm90
from ..gpus import get_gpu
from ..numerics.bits import is_int
from .checks import check_bool, check_int

#: the SM count of the default GPU (simulator.gpus), what the heuristic reads unless told
_DEFAULT_SMS = get_gpu().sm_count

_INT32 = 1 << 32
_ELEMENT_SIZE = {"bf16": 2, "f16": 2, "e4m3": 1}


def _fmt(dtype) -> str:
    if isinstance(dtype, str) and dtype in _ELEMENT_SIZE:
        return dtype
    fmt = input_format(dtype)
    if fmt is None:
        raise ValueError(f"dtype: expected 'bf16', 'f16' or 'e4m3' (or the matching NumPy / ml_dtypes "
                         f"dtype), got {dtype!r}")
    return fmt


# ---- split ranges (hopper/block.h) -------------------------------------------------------------------
def _wrap32(x: int) -> int:
    """The int32 value C++ computes for ``x`` (two's complement wrap of signed overflow)."""
    x &= _INT32 - 1
    return x - _INT32 if x >= 1 << 31 else x


def _cdiv(a: int, b: int) -> int:
    """C++ integer division (truncation toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def n_block_range_for_split(n_block_min, n_block_max, split_idx, num_splits):
    """The K/V blocks ``[min, max)`` one split visits: the ``Split`` part of
    ``BlockMN::get_n_block_min_max`` (hopper/block.h)::

        num_splits_dynamic = uint32(split_idx) >> 16          // top 16 bits (varlen launches)
        split              = split_idx & 0xFFFF
        n                  = num_splits_dynamic > 0 ? num_splits_dynamic : num_splits
        per                = n_block_max <= n_block_min ? 0 : ceil_div(n_block_max - n_block_min, n)
        min'               = n_block_min + split * per
        max'               = min(min' + per, n_block_max)

    The range is empty (``max' <= min'``) for the last splits when the blocks do not fill them;
    such a split writes LSE = -inf and no O. The blocks are visited from ``max' - 1`` down to
    ``min'``.

    Args:
        n_block_min, n_block_max: the tile's range before splitting (ints or int arrays; with
            PackGQA, always on for split launches, the range of the packed tile).
        split_idx: the split index, optionally with the dynamic split count in its top 16 bits
            (as the varlen scheduler passes it: ``split | (num_splits_dynamic << 16)``); an int in
            0..2**32 - 1 or an int array.
        num_splits: params.num_splits, >= 1.
    Returns:
        ``(min', max')``: ints for int arguments, else int64 arrays (broadcast).
    Raises:
        ValueError: non-integer arguments, num_splits < 1, split_idx outside 32 bits, a split
            index (low 16 bits) not below the split count in use.
    Source: hopper/block.h ``get_n_block_min_max`` (``if constexpr (Split)``);
        hopper/tile_scheduler.hpp (``work_info.split_idx |= (num_splits_dynamic << 16)``).
        SASS (fa3-fwd 0.0.3, bf16 hdim 128 Split + PackGQA forward, SingleTileScheduler):
        ``ULOP3.LUT UR31, UR8, 0xffff``, ``USHF.R.U32.HI UR8, URZ, 0x10, UR8``, ``@!UP0 ULDC
        UR8, c[0x0][0x9f0]`` (params.num_splits when the top bits are 0), ``UIADD3 UR9, UR7,
        -0x1, UR8`` then an integer division: ``ceil_div(n_blocks, n)``.
    """
    scalar = all(is_int(v) and not isinstance(v, bool)
                 for v in (n_block_min, n_block_max, split_idx, num_splits))
    arrs = []
    for name, v in (("n_block_min", n_block_min), ("n_block_max", n_block_max),
                    ("split_idx", split_idx), ("num_splits", num_splits)):
        a = np.asarray(v)
        if a.dtype.kind not in "iu" or isinstance(v, bool):
            raise ValueError(f"{name}: expected an int or an int array, got {v!r}")
        arrs.append(a.astype(np.int64))
    lo, hi, sidx, ns = np.broadcast_arrays(*arrs)
    if np.any(ns < 1):
        raise ValueError(f"num_splits: expected >= 1, got {int(ns.min())}")
    if np.any((sidx < 0) | (sidx >= _INT32)):
        raise ValueError("split_idx: expected a 32-bit value (0..2**32 - 1)")
    dyn = sidx >> 16
    split = sidx & 0xFFFF
    n = np.where(dyn > 0, dyn, ns)
    if np.any(split >= n):
        raise ValueError("split_idx: the split index (low 16 bits) must be below the split count "
                         f"in use, got split {int(split.max())} of {int(n[split >= n].min())}")
    per = np.where(hi <= lo, 0, -(-(hi - lo) // n))
    new_lo = lo + split * per
    new_hi = np.minimum(new_lo + per, hi)
    if scalar:
        return int(new_lo), int(new_hi)
    return new_lo, new_hi


# ---- host heuristics (hopper/heuristics.h, hopper/tile_size.h, hopper/flash_api.cpp) ---------------
def num_splits_heuristic(total_mblocks, num_sms, num_n_blocks, num_m_blocks, size_one_kv_head,
                         is_causal_or_local, max_splits) -> int:
    """``num_splits_heuristic`` of hopper/heuristics.h, with its C++ arithmetic.

    1. ``total_mblocks >= 0.8f * num_SMs`` (float32): 1 split, unless one KV head exceeds the
       assumed 50 MiB of L2 (``size_one_kv_head > 50 * 1024 * 1024``) and ``num_m_blocks >=
       2 * num_SMs`` and not causal / local: then ``min(ceil_div(size_one_kv_head, 50 MiB),
       max_splits)`` (int32).
    2. ``num_n_blocks <= 4``: 1.
    3. Otherwise, with ``max_splits = min(max_splits, num_SMs, num_n_blocks)``, the efficiency of
       each count ``n`` is ``waves / ceil(waves)`` with ``waves = float(total_mblocks * n) /
       num_SMs`` (float32); the result is the smallest ``n`` whose efficiency is at least
       ``0.85 * best`` (compared in double, as ``0.85`` is a double literal).

    Args:
        total_mblocks: tiles of one split (batch * heads_kv * m_blocks; batch 1 for varlen).
        num_sms: multiprocessors (132 on the H200, minus sm_margin).
        num_n_blocks, num_m_blocks: K/V blocks and (packed) query tiles per head.
        size_one_kv_head: bytes of one KV head (int32, as FA3 computes it).
        is_causal_or_local: bool. max_splits: 128 in get_num_splits.
    Returns:
        int: >= 1, except where FA3's int32 arithmetic overflows: ``size_one_kv_head + 50 MiB - 1``
        above 2**31 - 1 wraps negative and so does the result (``mha_fwd`` then fails its
        ``num_splits >= 1`` check); a size that wrapped below 50 MiB gives 1.
    Raises:
        ValueError: non-int counts (bool for ``is_causal_or_local``), num_sms < 1, negative counts.
    Source: hopper/heuristics.h (host C++, compiled for the CPU: no SASS; float32 and int32 as
        written, the double literals 0.85 and ``ceil``).
    """
    total_mblocks = check_int("total_mblocks", total_mblocks, 0)
    num_sms = check_int("num_sms", num_sms, 1)
    num_n_blocks = check_int("num_n_blocks", num_n_blocks, 0)
    num_m_blocks = check_int("num_m_blocks", num_m_blocks, 0)
    size_one_kv_head = _wrap32(check_int("size_one_kv_head", size_one_kv_head))
    is_causal_or_local = check_bool("is_causal_or_local", is_causal_or_local)
    max_splits = check_int("max_splits", max_splits, 1)
    f32 = np.float32
    if f32(total_mblocks) >= f32(0.8) * f32(num_sms):
        size_l2 = 50 * 1024 * 1024
        if size_one_kv_head > size_l2 and num_m_blocks >= num_sms * 2 and not is_causal_or_local:
            return min(_cdiv(_wrap32(size_one_kv_head + size_l2 - 1), size_l2), max_splits)
        return 1
    if num_n_blocks <= 4:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)
    eff = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for n in range(1, max_splits + 1):
            waves = f32(total_mblocks * n) / f32(num_sms)
            eff.append(f32(waves / f32(np.ceil(waves))))
    best = f32(0)
    for e in eff:
        if e > best:
            best = e
    for n, e in enumerate(eff, start=1):
        if float(e) >= 0.85 * float(best):
            return n
    return 1


class SplitPlan(NamedTuple):
    """What ``mha_fwd`` decides about splitting (see :func:`plan_splits`).

    Attributes:
        num_splits: params.num_splits (``get_num_splits``).
        pack_gqa: params.pack_gqa (``get_pack_gqa``, after num_splits).
        kblock_m, kblock_n: the tile ``get_num_splits`` assumes (tile_size_fwd_sm90).
        num_m_blocks, num_n_blocks, total_mblocks, size_one_kv_head: the heuristic's inputs.
        is_causal, is_local: the kernel flags after mha_fwd's normalisation.
    """

    num_splits: int
    pack_gqa: bool
    kblock_m: int
    kblock_n: int
    num_m_blocks: int
    num_n_blocks: int
    total_mblocks: int
    size_one_kv_head: int
    is_causal: bool
    is_local: bool


def _window(window_size, seqlen_q: int, seqlen_k: int) -> tuple[int, int]:
    try:
        left, right = window_size
        ok = all(is_int(w) and not isinstance(w, bool) and int(w) >= -1 for w in (left, right))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"window_size: expected (left, right) ints >= -1 (-1 = unbounded), "
                         f"got {window_size!r}")
    left, right = int(left), int(right)
    left = -1 if left >= seqlen_k - 1 else left
    right = -1 if right >= seqlen_q - 1 else right
    return (seqlen_k - 1 if left < 0 else left), (seqlen_q - 1 if right < 0 else right)


def plan_splits(batch, heads, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v=None, dtype="bf16",
                causal=False, local=False, softcap=0.0, varlen=False, *, varlen_q=None,
                window_size=None, num_sms: int = _DEFAULT_SMS, paged_kv: bool = False,
                paged_kv_non_tma: bool = False) -> SplitPlan:
    """``get_num_splits`` then ``get_pack_gqa`` (hopper/flash_api.cpp) for sm_90, with their inputs.

    ``get_num_splits``: the tile of ``tile_size_fwd_sm90(round_up_headdim(d), dv_rounded,
    is_causal, is_local, element_size, false, false, softcap)``; ``seqlen_q_packgqa = seqlen_q *
    (heads / heads_kv)`` (PackGQA is always on with splits); for local attention only
    ``max(0, min(seqlen_k, window_left + window_right + 1 + kBlockM))`` keys count;
    ``num_n_blocks = ceil(keys / kBlockN)``, ``num_m_blocks = ceil(seqlen_q_packgqa / kBlockM)``,
    ``size_one_kv_head = seqlen_k * (d + dv) * element_size`` (int32), ``total_mblocks =
    (varlen ? 1 : batch) * heads_kv * num_m_blocks`` (a varlen launch has
    ``num_splits_dynamic_ptr`` set, and the heuristic only bounds the per-batch counts that
    the prepare kernel computes on the device); then :func:`num_splits_heuristic` with
    ``max_splits = 128``. ``get_pack_gqa``: True with splits; else False when ``heads ==
    heads_kv``; else ``should_pack_gqa(varlen_q, seqlen_q, heads / heads_kv, kBlockM)``.

    Args:
        batch, heads, heads_kv, seqlen_q, seqlen_k: the launch (max seqlens for varlen).
        head_dim, head_dim_v: Q/K and V head dims (head_dim_v default head_dim).
        dtype: "bf16", "f16" or "e4m3" (or the NumPy dtype).
        causal, local: the caller's flags; normalised as mha_fwd does (causal with seqlen_q == 1
            and no window is non-causal; ``local`` is FA3's is_local, a window that excludes
            something).
        softcap: > 0 when on (a float or bool).
        varlen: any of cu_seqlens_q / cu_seqlens_k / seqused_q / seqused_k / leftpad_k given
            (the library launcher passes seqused_k, so every such call is varlen).
        varlen_q: cu_seqlens_q or seqused_q given (for should_pack_gqa); default ``varlen``.
        window_size: (left, right), -1 unbounded (FA3's window before mha_fwd replaces -1 by
            ``seqlen_k - 1`` / ``seqlen_q - 1``): required when ``local``, ignored otherwise.
        num_sms: multiprocessors minus sm_margin (132 on the H200).
        paged_kv: a page_table is given (causal at seqlen_q == 1 then stays causal for head
            dims in (64, 128]); paged_kv_non_tma: FA3's PagedKVNonTMA (its tile, and PackGQA
            always; :func:`simulator.fa3.paged.paged_launch`).
    Returns:
        :class:`SplitPlan`.
    Raises:
        ValueError: non-positive sizes, heads not a multiple of heads_kv, an unknown dtype, a
            head dim FA3 refuses (over 256, or head_dim_v over 512), a bad or (with ``local``)
            missing window.
    Source: hopper/flash_api.cpp ``get_num_splits``, ``get_pack_gqa``, ``mha_fwd``;
        hopper/tile_size.h; hopper/heuristics.h (host code: no SASS).
    """
    batch = check_int("batch", batch, 1)
    heads = check_int("heads", heads, 1)
    heads_kv = check_int("heads_kv", heads_kv, 1)
    if heads % heads_kv:
        raise ValueError(f"heads: must be a multiple of heads_kv ({heads_kv}), got {heads}")
    seqlen_q = check_int("seqlen_q", seqlen_q, 0)
    seqlen_k = check_int("seqlen_k", seqlen_k, 0)
    head_dim = check_int("head_dim", head_dim, 1, 256)
    head_dim_v = head_dim if head_dim_v is None else check_int("head_dim_v", head_dim_v, 1, 512)
    fmt = _fmt(dtype)
    causal = check_bool("causal", causal)
    local = check_bool("local", local)
    if isinstance(softcap, (bool, np.bool_)):
        soft = bool(softcap)
    else:
        try:
            soft = float(softcap) > 0
        except (TypeError, ValueError):
            raise ValueError(f"softcap: expected a float or bool, got {softcap!r}") from None
    varlen = check_bool("varlen", varlen)
    varlen_q = varlen if varlen_q is None else check_bool("varlen_q", varlen_q)
    num_sms = check_int("num_sms", num_sms, 1)
    if causal and local:
        raise ValueError("causal and local: FA3's is_causal and is_local exclude each other")
    if seqlen_q == 1 and causal and not (paged_kv and 64 < head_dim <= 128):
        causal = False  # mha_fwd: causal with seqlen_q == 1 is non-causal (but paged hdim 128)
    if local and window_size is None:
        raise ValueError("window_size: required with local=True (the keys a local tile loads "
                         "depend on it)")
    wl, wr = _window(window_size, seqlen_q, seqlen_k) if local else (seqlen_k - 1, seqlen_q - 1)
    esize = _ELEMENT_SIZE[fmt]
    d_r = round_up_headdim(head_dim)
    dv_r = d_r if head_dim_v == head_dim else round_up_headdimv(head_dim_v)
    kbm, kbn, _, _ = tile_size_fwd_sm90(d_r, dv_r, causal, local, esize, False,
                                        bool(paged_kv_non_tma), soft)
    seqlen_q_packgqa = seqlen_q * (heads // heads_kv)
    loaded = seqlen_k if not local else max(0, min(seqlen_k, wr + wl + 1 + kbm))
    num_n_blocks = (loaded + kbn - 1) // kbn
    num_m_blocks = (seqlen_q_packgqa + kbm - 1) // kbm
    size_one = _wrap32(seqlen_k * (head_dim + head_dim_v) * esize)
    total = (1 if varlen else batch) * heads_kv * num_m_blocks
    n = num_splits_heuristic(total, num_sms, num_n_blocks, num_m_blocks, size_one, causal or local, 128)
    pack = bool(paged_kv_non_tma) or get_pack_gqa(n, heads, heads_kv, seqlen_q, head_dim,
                                                  head_dim_v, fmt, causal, local, soft, varlen_q)
    return SplitPlan(n, pack, kbm, kbn, num_m_blocks, num_n_blocks, total, size_one, causal, local)


def get_num_splits(batch, heads, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v=None, dtype="bf16",
                   causal=False, local=False, softcap=0.0, varlen=False, *, window_size=None,
                   num_sms: int = _DEFAULT_SMS, paged_kv: bool = False,
                   paged_kv_non_tma: bool = False) -> int:
    """``get_num_splits`` of hopper/flash_api.cpp for sm_90: what ``mha_fwd`` uses when called
    with ``num_splits <= 0`` (flash_attn_func's default is 1). See :func:`plan_splits` for the
    formula, the arguments and the errors. Returns an int in 1..128 (see
    :func:`num_splits_heuristic` for the int32 overflow). Source: hopper/flash_api.cpp
    (host code: no SASS)."""
    return plan_splits(batch, heads, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v, dtype, causal,
                       local, softcap, varlen, window_size=window_size, num_sms=num_sms,
                       paged_kv=paged_kv, paged_kv_non_tma=paged_kv_non_tma).num_splits


def get_pack_gqa(num_splits, heads, heads_kv, seqlen_q, head_dim, head_dim_v=None, dtype="bf16",
                 causal=False, local=False, softcap=False, varlen_q=False) -> bool:
    """``get_pack_gqa`` of hopper/flash_api.cpp on sm_90 (no paged KV): True whenever
    ``num_splits > 1`` ("Always enable PackGQA for Split"); False when ``heads == heads_kv``;
    else :func:`should_pack_gqa` with the kBlockM of ``tile_size_fwd_sm90``.

    Raises:
        ValueError: as :func:`plan_splits`.
    Source: hopper/flash_api.cpp, hopper/heuristics.h (host code: no SASS).
    """
    num_splits = check_int("num_splits", num_splits, 1)
    heads = check_int("heads", heads, 1)
    heads_kv = check_int("heads_kv", heads_kv, 1)
    if num_splits > 1:
        return True
    if heads == heads_kv:
        return False
    head_dim = check_int("head_dim", head_dim, 1, 256)
    head_dim_v = head_dim if head_dim_v is None else check_int("head_dim_v", head_dim_v, 1, 512)
    d_r = round_up_headdim(head_dim)
    dv_r = d_r if head_dim_v == head_dim else round_up_headdimv(head_dim_v)
    soft = bool(softcap) if isinstance(softcap, (bool, np.bool_)) else float(softcap) > 0
    kbm = tile_size_fwd_sm90(d_r, dv_r, check_bool("causal", causal), check_bool("local", local),
                             _ELEMENT_SIZE[_fmt(dtype)], False, False, soft)[0]
    return should_pack_gqa(check_bool("varlen_q", varlen_q), check_int("seqlen_q", seqlen_q, 0),
                           heads // heads_kv, kbm)
