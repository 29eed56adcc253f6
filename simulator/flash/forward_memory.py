"""What a forward launch holds in memory and how it chunks its CTAs to fit ``memory_budget``
(the estimates behind :func:`simulator.flash.forward.forward`'s chunks, shared with the callers
that must refuse a call up front)."""

from __future__ import annotations

import numpy as np

from . import chunks
from .config import Config, make_config
from .evaluator import plan_compiled


def memory_needed(cfg: Config, dtype) -> tuple[int, int]:
    """(bytes held for the whole forward, bytes per CTA of a chunk) of a forward on ``cfg``
    with inputs of ``dtype``: the padded inputs and the outputs (as ``mainloop_fwd_sm90.padded_inputs``
    and :func:`simulator.flash.forward.forward` allocate them), and :func:`chunks.cta_bytes`
    at the compiled engine's cost where the engine setting (or a launch this runs in) takes
    every call compiled, else at the NumPy engine's
    (:func:`simulator.flash.evaluator.plan_compiled`)."""
    lead = 1 if cfg.splits is None else int(cfg.splits.max())
    out_item = np.dtype(cfg.out_dtype if cfg.splits is None else np.float32).itemsize
    outputs = lead * cfg.batch * cfg.heads * cfg.seqlen_q * (cfg.head_dim_v * out_item + 4)
    return (_input_bytes(cfg, dtype) + outputs,
            chunks.cta_bytes(cfg.kblock_m, cfg.kblock_n, cfg.kernel_head_dim_v,
                             cfg.kernel_head_dim, plan_compiled()))


def _input_bytes(cfg: Config, dtype) -> int:
    """Bytes of the padded q (with qv), k and v (``mainloop_fwd_sm90.padded_inputs``)."""
    m_rows = (-(-cfg.seqlen_q // cfg.kblock_m) + 1) * cfg.kblock_m
    n_pad = max(1, -(-cfg.seqlen_k // cfg.kblock_n)) * cfg.kblock_n
    q_width = cfg.kernel_head_dim + (cfg.kernel_head_dim_v if cfg.has_qv else 0)
    return np.dtype(dtype).itemsize * cfg.batch * (
        m_rows * cfg.heads * q_width
        + n_pad * cfg.heads_kv * (cfg.kernel_head_dim + cfg.kernel_head_dim_v))


def plan(cfg: Config, dtype, executor, threads: int, budget: int) -> tuple[int, bool, int]:
    """``(parts, shared, size)`` of a forward within ``budget`` bytes: chunks in memory at
    once, whether they share this process (serial, task ``threads``, a thread pool: see
    :func:`chunks.concurrency`) and CTAs per chunk; other executors' queued tasks also hold
    pickled copies of the padded inputs here (:func:`chunks.shipped_bytes`).

    Raises:
        MemoryError: not even one CTA per chunk in memory at once fits.
    """
    fixed, per_cta = memory_needed(cfg, dtype)
    parts, shared = chunks.concurrency(executor, threads, budget, fixed, per_cta)
    fixed += chunks.shipped_bytes(executor, _input_bytes(cfg, dtype))
    return parts, shared, chunks.chunk_size(budget, fixed, per_cta, "this forward", parts)


def check_memory(q, k, v, *, memory_budget=None, **kwargs) -> None:
    """Raise the MemoryError ``flash.forward`` would raise up front for these arguments (not
    even one CTA within ``memory_budget``), without running it: for callers that must refuse
    a call before a side effect (the KV cache's AppendKV). ``kwargs``: the rest of the
    forward's arguments; ``executor`` counts as the forward counts it (a thread pool by what
    the budget affords, other executors by their workers), ``progress`` and ``trace`` are
    ignored."""
    executor = kwargs.pop("executor", None)
    for name in ("progress", "trace"):
        kwargs.pop(name, None)
    cfg = make_config(q, k, v, **kwargs)
    plan(cfg, q.dtype, executor, 1, chunks.check_budget(memory_budget))
