"""One FA3 launch over :func:`simulator.flash.forward`: what ``mha_fwd`` decides before the
kernel runs (the split count, the kernel flags, the output dtype) and the kernel calls
themselves (the unsplit kernel, or the Split kernel then the combine kernel), shared by
flash_attn_func, flash_attn_varlen_func and flash_attn_with_kvcache.

Every :func:`simulator.flash.forward` call made here takes the ``kw`` the API built
(:meth:`simulator.fa3.arguments.Launch.forward_kwargs`), which carries the caller's
``executor``, ``progress`` and ``memory_budget``.
"""

from __future__ import annotations

import numpy as np

from .. import flash
from ..flash.config import input_format
from ..flash.dispatch import fa3_dispatch
from ..flash.masks import chunk_window, fa3_window, kernel_flags, normalize_window
from ..gpus import DEFAULT_GPU, mufu_model_name
from .combine import combine
from .splits import get_num_splits


def static_splits(num_splits: int, *, fmt, batch, heads, heads_kv, seqlen_q, seqlen_k, head_dim,
                  head_dim_v, causal, local, softcap, varlen, num_sms, window=(-1, -1),
                  paged=None) -> int:
    """FA3's params.num_splits: the caller's, or ``get_num_splits`` for num_splits <= 0
    (``causal`` / ``local`` the kernel flags after mha_fwd's normalisation; ``paged`` a
    :class:`simulator.fa3.paged.PagedLaunch` or None)."""
    if num_splits > 0:
        return num_splits
    return int(get_num_splits(
        batch, heads, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v, fmt, causal=causal,
        local=local, softcap=1.0 if softcap else 0.0, varlen=varlen,
        window_size=window if local else None, num_sms=num_sms, paged_kv=paged is not None,
        paged_kv_non_tma=paged is not None and not paged.tma))


def kernel_window(causal, window, max_q, max_k, chunk: int = 0) -> tuple[int, int]:
    """The window the split heuristic reads: the caller's, or with ``attention_chunk`` > 0 the
    capped one mha_fwd hands the kernel (:func:`simulator.flash.masks.chunk_window`)."""
    if chunk:
        return chunk_window(bool(causal), window, max_q, max_k, chunk)
    return tuple(window)


def launch_flags(fmt, head_dim, head_dim_v, causal, window, max_q, max_k, softcap, chunk=0):
    """(Is_causal, Is_local, (kBlockM, kBlockN)) of the launch, as mha_fwd decides them
    (``chunk``: attention_chunk; > 0 makes the launch local).

    The tile is the kernel's, also for the per-batch split counts of a varlen launch. The
    source's ``prepare_varlen_num_blocks`` call names ``tile_size_fwd_sm90(d_rounded,
    dv_rounded)``, which differs for Q/K <= 64 with V in (64, 256) (kernel kHeadDimV 256), but
    the library on the H200 agrees with the kernel's tile there (head dims 48 / 96: 0 differing
    bits with it, thousands without; fa3_api_report.json)."""
    win = (chunk_window(bool(causal), window, max_q, max_k, chunk) if chunk else
           fa3_window(normalize_window(bool(causal), window), max_q, max_k))
    is_causal, is_local = kernel_flags(win)
    disp = fa3_dispatch(fmt, head_dim, max_q, causal=is_causal, local=is_local, softcap=softcap,
                        head_dim_v=head_dim_v)
    return is_causal, is_local, (disp.kblock_m, disp.kblock_n)


def output_dtype(dt: np.dtype) -> np.dtype:
    """The output dtype of a launch on inputs of dtype ``dt``: bf16 for e4m3 (FA3's FP8
    kernels write bf16), else ``dt``."""
    import ml_dtypes  # noqa: PLC0415

    return np.dtype(ml_dtypes.bfloat16) if input_format(dt) == "e4m3" else np.dtype(dt)


def run_forward(q, k, v, kw: dict, splits, partials: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The unsplit kernel (``splits`` None or 1: with a single split FA3's Split kernel writes
    the final output itself and the combine kernel skips the batch), or the Split kernel then
    the combine kernel; ``partials``, when a list, receives the Split kernel's (out, lse)."""
    if splits is None or splits == 1:
        res = flash.forward(q, k, v, **kw)
        return res.out, res.lse
    part = flash.forward(q, k, v, num_splits=splits, **kw)
    if partials is not None:
        partials.append((part.out, part.lse))
    return combine(part.out, part.lse, output_dtype(q.dtype), head_dim_v=v.shape[-1],
                   mufu=mufu_model_name(kw.get("gpu", DEFAULT_GPU)),
                   memory_budget=kw.get("memory_budget"))


def traced_forward(q, k, v, kw: dict, splits, b: int, wanted, record, partials=None):
    """:func:`run_forward` of batch (or sequence) ``b`` run as its own launch, recording the
    CTAs of ``wanted`` ((b, head, m_block) tuples) in ``record`` with their batch number."""
    mine = None if wanted is None else [(0, c[1], c[2]) for c in wanted if c[0] == b]
    if not mine:
        return run_forward(q, k, v, kw, splits, partials)
    res = flash.forward(q, k, v, **kw, trace=mine)
    for e in res.trace:
        e.cta = (b, e.cta[1], e.cta[2])
        record.events.append(e)
    return res.out, res.lse


def with_trace(ret: tuple, record, full: bool):
    """FA3's return value, plus the Trace as a last item when one was asked for."""
    if record is not None:
        return ret + (record,)
    return ret if full else ret[0]


def descale_rows(x, b: int | None):
    """A [batch, heads_kv] descale for one batch (varlen runs one sequence at a time)."""
    if x is None or b is None:
        return x
    return x[b: b + 1]
