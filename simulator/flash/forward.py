"""The FlashAttention-3 forward on emulated Hopper warpgroups (docs/forward.md, step by step):
the kernel-level entry point. It checks the call into a :class:`simulator.flash.config.Config`
(FA3's dispatch), then hands the launch to the scheduler (:mod:`simulator.flash.scheduler`:
grid, CTA groups, chunks, executors) with FA3's sm90 mainloop
(:mod:`simulator.flash.mainloop_fwd_sm90`: what each group of CTAs computes).
"""

from __future__ import annotations

import numpy as np

from ..gpus import DEFAULT_GPU
from ..trace import Trace
from . import chunks, mainloop_fwd_sm90, scheduler
from . import exact as _exact
from .config import Config, ForwardResult, make_config
from .forward_memory import check_memory as check_memory  # the public names stay here
from .forward_memory import memory_needed as memory_needed


def forward(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
            seqlens_k=None, kblock_m=None, kblock_n=None, schedule=None,
            q_descale=None, k_descale=None, v_descale=None, gpu=DEFAULT_GPU, mufu=None, trace=None,
            max_seqlen_q=None, max_seqlen_k=None, num_splits=None, pack_gqa=None,
            executor=None, memory_budget=None, progress=None, qv=None,
            attention_chunk=0, exact=None) -> ForwardResult:
    """FlashAttention-3 forward, emulated bit for bit on Hopper warpgroups.

    With no tile arguments it runs what FA3 dispatches for the inputs
    (:func:`simulator.flash.dispatch.fa3_dispatch`: kernel head dim, kBlockM x kBlockN,
    IntraWGOverlap, RescaleOBeforeGemm); the real library on the H200 is what it is checked
    against (``simulator/data/device/fa3_library_report.json``).

    Args:
        q: [batch, seqlen_q, heads, head_dim]; k: [batch, seqlen_k, heads_kv, head_dim];
            v: [batch, seqlen_k, heads_kv, head_dim_v]; dtype ml_dtypes.bfloat16,
            numpy.float16 or ml_dtypes.float8_e4m3fn (all the same); head_dim a multiple of 8
            (16 for e4m3) up to 256, run as FA3's kernel head dim (64, 96, 128, 192 or 256)
            with zero columns; heads_kv divides heads (GQA). head_dim_v is head_dim, or a pair
            FA3 compiles a kernel for (Q/K in (128, 192] with V in (96, 128], or Q/K <= 64
            with V <= 512; :func:`simulator.flash.dispatch.check_head_dim_v`).
        softmax_scale: default 1/sqrt(head_dim) (the input's head dim); with ``qv``
            1/sqrt(head_dim + head_dim_v), as hopper/flash_attn_interface.py.
        causal: bottom-right aligned causal mask (window right = 0); with seqlen_q == 1 it is
            the same as non-causal, and FA3 dispatches it so.
        window: (left, right) local window, -1 = unbounded (sides wider than the sequence
            become -1, as in FA3).
        softcap: > 0 enables ``softcap * tanh(s / softcap)`` (tanh.approx.f32).
        seqlens_k: [batch] ints, keys per batch (FA3's ``seqused_k``; default seqlen_k).
        kblock_m: None (FA3's choice) or 64, 128, 192 rows per CTA; kblock_n: None or keys per
            block (a multiple of 16, 32 for e4m3, up to 256).
        schedule: None (FA3's), "plain" or "intra_wg_overlap"; see docs/forward.md.
        q_descale, k_descale, v_descale: FP8 only: float32 scalars or [batch, heads_kv].
        gpu: the GPU whose arithmetic runs, a key of :data:`simulator.gpus.GPUS` (``"h200"``,
            ``"h100"``, ``"h100-pcie"``) or a record: its MUFU tables and tensor-core parameters.
        mufu: None (the GPU's calibrated MUFU models) or ``"ideal"`` (correctly rounded ex2,
            rcp, lg2, tanh: what the approximation costs).
        trace: None, or an iterable of CTAs ``(batch, head, m_block)`` to record (unsplit,
            without PackGQA or qv, V head dim <= 256).
        max_seqlen_q, max_seqlen_k: the launch's maxima when this call is one sequence of a
            varlen launch (``simulator.fa3`` passes them): FA3 normalises the window, applies
            the seqlen_q == 1 rule and bounds local windows with them. Default: the arrays'.
        num_splits: None (the unsplit kernel), or K/V splits per batch (an int, or [batch]
            ints: FA3's static or dynamic split count): FA3's Split kernel, whose output is
            the partial O and LSE of every split, for ``simulator.fa3``'s combine.
        pack_gqa: None (FA3's choice: always with splits, else ``should_pack_gqa``), True or
            False. A PackGQA tile holds the query heads of one kv head (rows
            ``position * g + head_in_group``); with causal or local masks and with splits this
            changes which K/V blocks (and split boundaries) a row's tile has, hence bits.
        executor: None (serial), or a ``concurrent.futures.Executor`` (a
            ``ProcessPoolExecutor``, ``dask.distributed.Client.get_executor()``): chunks of
            CTAs run as its tasks (:mod:`simulator.flash.chunks`); the bits are the serial
            run's. Not with ``trace``. With None, a call the compiled engine runs while
            ``simulator.engine.set_threads(N)`` holds N > 1 spreads its chunks over N threads
            of this process, each running the serial kernels (same bits).
        memory_budget: bytes of memory for the padded inputs, the outputs and the working
            arrays (default ``chunks.DEFAULT_MEMORY_BUDGET``, 4 GiB): CTAs run in chunks that
            fit (``chunks.cta_bytes`` per CTA); each executor task holds one chunk: a
            thread pool runs as many at once as the budget affords (the rest wait), and
            with W worker processes each chunk gets a W-th of the budget.
        progress: None (the default: as True where stderr is a terminal and the call is
            expected to take over ``chunks.LONG_CALL_SECONDS``, 10 s, at
            ``chunks.SECONDS_PER_BLOCK_ELEMENT``; else silent), False (silent), True (a bar
            with an ETA on stderr, tqdm where installed, else a line every 5 s) or a callable
            ``progress(done, total)`` in K/V block visits, after every chunk.
        qv: None, or [batch, seqlen_q, heads, head_dim_v] in q's dtype (bf16 / f16; FA3's
            MLA decode: head_dim <= 64, head_dim_v >= 256): the scores become
            ``q K^T + qv V^T``, the second GEMM accumulating into the first's registers
            (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp, HasQv: ``tiled_mma_qv`` with
            zero_init false after ``tiled_mma_qk``).
        attention_chunk: 0 (off) or FA3's chunk length C: a row sees only the keys of its
            chunk (C-aligned keys around key ``row + seqlen_k - seqlen_q``), within a window
            capped at C - 1 on both sides; the kernel is then the local one
            (hopper/flash_api.cpp, hopper/mask.h, hopper/block.h;
            :func:`simulator.flash.masks.chunk_window`).
        exact: None (the H200's arithmetic), or a :class:`simulator.flash.exact.Exactness`:
            the approximations it switches on run exact in float64 (:mod:`simulator.budget`
            attributes the error to each); with ``o_rounding`` ``out`` and ``lse`` are float64.
            Not with ``num_splits``.
    Returns:
        :class:`ForwardResult`: ``out`` [batch, seqlen_q, heads, head_dim_v] in the input dtype
        (bf16 for e4m3 inputs), ``lse`` [batch, heads, seqlen_q] float32, natural log, -inf
        for rows that see no key; ``trace`` when requested. With ``num_splits``: ``out``
        float32 [splits, batch, seqlen_q, heads, head_dim_v] (each split's O, normalised by its
        own row sum, not rounded) and ``lse`` [splits, batch, heads, seqlen_q]; a split that
        a batch does not have, or that sees no key, holds O = 0 and LSE = -inf.
    Raises:
        ValueError: any invalid argument, naming it (see :func:`make_config`).
        TypeError: ``executor`` without a ``submit`` method; ``progress`` of another type.
        MemoryError: up front, with the estimate, when not even one CTA fits ``memory_budget``.
    """
    executor = chunks.check_executor(executor)
    exact = _exact.check(exact)
    budget = chunks.check_budget(memory_budget)
    chunks.check_progress(progress)
    if executor is not None and trace is not None:
        raise ValueError("trace: not recorded with an executor; trace a serial call "
                         "(executor=None)")
    if trace is not None and pack_gqa is None and num_splits is None:
        pack_gqa = False  # traces are per head; unsplit, PackGQA leaves the bits unchanged
    cfg = make_config(q, k, v, softmax_scale=softmax_scale, causal=causal, window=window,
                      softcap=softcap, seqlens_k=seqlens_k, kblock_m=kblock_m, kblock_n=kblock_n,
                      schedule=schedule, q_descale=q_descale, k_descale=k_descale,
                      v_descale=v_descale, gpu=gpu, mufu=mufu, max_seqlen_q=max_seqlen_q,
                      max_seqlen_k=max_seqlen_k, num_splits=num_splits, pack_gqa=pack_gqa, qv=qv,
                      attention_chunk=attention_chunk)
    if trace is not None and (cfg.splits is not None or cfg.pack_gqa):
        raise ValueError("trace: not recorded for split or PackGQA launches; trace with "
                         "num_splits=None and pack_gqa=False")
    if trace is not None and cfg.kernel_head_dim_v > 256:
        raise ValueError(f"trace: not recorded for a V head dim over 256 (kernel "
                         f"{cfg.kernel_head_dim_v}: O spans two m64n256 accumulators)")
    if exact is not None and cfg.splits is not None:
        raise ValueError("exact: not with num_splits (the Split kernel's partials are float32)")
    wanted = None if trace is None else validate_trace(trace, cfg)
    record = Trace() if wanted is not None else None
    out, lse = scheduler.launch(cfg, mainloop_fwd_sm90.MAINLOOP, (q, k, v, qv), wanted, record,
                                exact, executor, budget, progress)
    return ForwardResult(out, lse, record)


def validate_trace(trace, cfg: Config) -> set[tuple[int, int, int]]:
    """Validate ``trace``: an iterable of (batch, head, m_block) inside the grid (shared with the
    device forward, so both reject the same arguments).

    Raises:
        ValueError: not an iterable of 3-int tuples, or a CTA outside the grid.
    """
    m_blocks = -(-cfg.seqlen_q // cfg.kblock_m)
    try:
        ctas = [tuple(cta) for cta in trace]
    except TypeError:
        raise ValueError(f"trace: expected an iterable of (batch, head, m_block), got {trace!r}") from None
    out = set()
    for cta in ctas:
        ok = len(cta) == 3 and all(isinstance(c, (int, np.integer)) and not isinstance(c, bool)
                                   for c in cta)
        if not ok or not (0 <= cta[0] < cfg.batch and 0 <= cta[1] < cfg.heads and 0 <= cta[2] < m_blocks):
            raise ValueError(f"trace: CTA {cta!r} is not (batch, head, m_block) inside the grid "
                             f"[{cfg.batch}, {cfg.heads}, {m_blocks}]")
        out.add(tuple(int(c) for c in cta))
    return out


