"""The FlashAttention-3 forward on emulated Hopper warpgroups (docs/forward.md, step by step).

CTAs that visit the same K/V blocks (same ``n_block_min .. n_block_max``) are emulated together:
one array axis holds them, the next their warpgroups, then the 64 rows (matrix form, for the
tensor-core GEMMs) or the 128 threads (row/column form, for the softmax). The Python loops run
over groups of CTAs and over K/V blocks, the sequential structure of the kernel; never over
threads or elements.
"""

from __future__ import annotations

import numpy as np

from .. import engine, mma
from ..gpus import DEFAULT_GPU
from ..hw import accumulator_layout, rowcol_view
from ..numerics import convert, fmul, format_of
from ..numerics.mufu import tanh
from ..trace import Trace
from . import chunks
from . import exact as _exact
from .config import Config, ForwardResult, make_config
from .constants import MAX_OFFSET
from .forward_memory import check_memory as check_memory  # the public names stay here
from .forward_memory import memory_needed as memory_needed
from .forward_memory import plan
from .grid import pad_rows
from .masks import allowed, block_range, masking_steps
from .softmax import Softmax, rescale_o

_NEG_INF = np.float32(-np.inf)
_NEG_ZERO = np.float32(-0.0)


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
    lead = () if cfg.splits is None else (int(cfg.splits.max()),)
    wide = exact is not None and exact.o_rounding  # float64 outputs
    out = np.zeros(lead + (cfg.batch, cfg.seqlen_q, cfg.heads, cfg.head_dim_v),
                   dtype=np.float64 if wide else cfg.out_dtype if cfg.splits is None else np.float32)
    lse = np.full(lead + (cfg.batch, cfg.heads, cfg.seqlen_q), _NEG_INF,
                  dtype=np.float64 if wide else np.float32)
    groups = cta_groups(cfg)
    products = _products(cfg, groups)
    threads = 1 if executor is not None or wanted is not None else _task_threads(products, groups)
    parts, shared, size = plan(cfg, q.dtype, executor, threads, budget)
    threads = min(threads, parts)
    qp, kp, vp, qvp = _padded_inputs(cfg, q, k, v, qv)
    work = [(key, part) for key, ctas in groups.items()
            for part in chunks.split(ctas, size, _group_parts(len(ctas), parts, threads))]
    visits = [len(part) * max(0, key[0][1] - key[0][0]) for key, part in work]
    seconds = chunks.estimate_seconds(sum(visits), cfg.kblock_m, cfg.kblock_n,
                                      cfg.kernel_head_dim + cfg.kernel_head_dim_v, parts)
    bar = chunks.Progress(chunks.auto_progress(progress, seconds), sum(visits))
    # the compiled engine's threads take chunks of CTAs: a launch per K/V block of a few CTAs
    # is too small to share among the kernels' own parallel loops
    own = chunks.task_pool(threads if len(work) > 1 else 1)
    if own is not None:  # the longest chunks first: the threads finish together
        order = sorted(range(len(work)), key=lambda i: -visits[i])
        work, visits = [work[i] for i in order], [visits[i] for i in order]
    executor = executor if own is None else own
    try:
        with engine.launching(products):  # "auto": the launch's work decides
            _execute(cfg, work, visits, (qp, kp, vp, qvp), out, lse, wanted, record, exact,
                     executor, parts if shared else 0, bar)
    finally:
        bar.close()
        chunks.shutdown(own)
    return ForwardResult(out, lse, record)


def _execute(cfg: Config, work, visits, padded, out, lse, wanted, record, exact, executor,
             threads: int, bar) -> None:
    """Run the chunks ``work`` (``((n_range, masked), ctas)`` each) serially, on the threads
    of a thread pool (``threads`` > 0 of them at once) storing their own CTAs, or as an
    executor's tasks returning theirs."""
    if executor is None:
        for ((n_range, masked), part), n in zip(work, visits, strict=True):
            _run_group(cfg, n_range, masked, part, padded, out, lse, wanted, record, exact)
            bar.update(n)
        return
    task, dest = ((chunks.gated(_run_group, threads), (out, lse, None, None)) if threads
                  else (_chunk_task, ()))
    futures = {executor.submit(engine.carry(task), cfg, n_range, masked, part, padded, *dest,
                               exact): i
               for i, ((n_range, masked), part) in enumerate(work)}
    for future, i in chunks.finished(futures):  # stored as they finish: CTAs are disjoint
        result = future.result()
        if result is not None:
            part = work[i][1]
            rows, heads, _ = _tile_rows(cfg, part)
            _store(cfg, part, rows, heads, *result, out, lse, exact)
        bar.update(visits[i])


# the fewest CTAs a task thread's chunk holds: with fewer, the NumPy between the serial kernel
# launches (serialised by the GIL) outweighs them; below it the kernels' own parallel loops win
# (benchmarks/results/task_threads_sweep.json: 16 cores, causal 4096 x 8 heads in chunks of one
# CTA 6.6 s on task threads vs 2.0 s on parallel kernels; non-causal in chunks of 16, 0.89 vs 1.93)
MIN_TASK_CTAS = 16
# groups smaller than that (a causal launch's: one m_block's CTAs each) still go to task
# threads whole, where there are at most this many threads per group: a group's NumPy is then
# not repeated per chunk, and its kernels run beside the other threads' (16-core H100 host,
# benchmarks/results/causal_groups_h100_host.json: 4096 x 8 causal at 8 threads 1.10 s against
# 2.66 s on parallel kernels; 1024 x 4's 8 groups at 16 threads 0.097 s against 0.138 s)
MAX_THREADS_PER_GROUP = 2


def _task_threads(products: int, groups: dict) -> int:
    """Threads for the forward's chunks of ``products`` in all (:func:`simulator.engine.
    task_threads`) where every one of them gets a chunk of at least ``MIN_TASK_CTAS`` CTAs, or
    there are at most ``MAX_THREADS_PER_GROUP`` threads per group that visits some K/V block
    (groups then run whole); else 1 (the kernels' own parallel loops take the pool)."""
    threads = engine.task_threads(products)
    fit = sum(len(ctas) // MIN_TASK_CTAS for ctas in groups.values())
    whole = sum(1 for ((n_min, n_max), _) in groups if n_max > n_min)
    return threads if threads > 1 and (fit >= threads or threads <= MAX_THREADS_PER_GROUP * whole) \
        else 1


def _group_parts(ctas: int, parts: int, threads: int) -> int:
    """Chunks a group of ``ctas`` CTAs at least splits into: ``parts`` for an executor's
    workers, at most one per ``MIN_TASK_CTAS`` CTAs for task threads."""
    return parts if threads == 1 else max(1, min(parts, ctas // MIN_TASK_CTAS))


def _products(cfg: Config, groups: dict) -> int:
    """The tensor-core products of a forward: per CTA and K/V block visit, S = Q K^T and
    O += P V over a kBlockM x kBlockN tile."""
    visits = sum(len(ctas) * max(0, n_max - n_min) for ((n_min, n_max), _), ctas in groups.items())
    return visits * cfg.kblock_m * cfg.kblock_n * (cfg.kernel_head_dim + cfg.kernel_head_dim_v)


def _chunk_task(cfg: Config, n_range, masked, ctas, padded, exact=None):
    """One executor task: the CTAs ``ctas`` of a group, returning their O accumulator and
    LSE rows (None when the range is empty) for the caller's :func:`_store`."""
    return _run_group(cfg, n_range, masked, ctas, padded, None, None, None, None, exact)


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


# ---- setup ------------------------------------------------------------------------------------
def _padded_inputs(cfg: Config, q, k, v, qv=None):
    """Zero-filled copies padded to whole blocks and to the kernel head dim (qv: to the
    kernel's V head dim; None without qv); keys at or after seqlens_k[b] zeroed (as a bulk copy
    bounded by the sequence length and head dim leaves them)."""
    m_blocks = -(-cfg.seqlen_q // cfg.kblock_m) + 1  # + 1: PackGQA tiles reach a little beyond
    n_pad = max(1, -(-cfg.seqlen_k // cfg.kblock_n)) * cfg.kblock_n
    kd = cfg.kernel_head_dim
    qp = pad_rows(q, m_blocks * cfg.kblock_m, kd)
    kp = pad_rows(k, n_pad, kd)
    vp = pad_rows(v, n_pad, cfg.kernel_head_dim_v)
    absent = np.arange(n_pad)[None, :] >= cfg.seqlens_k[:, None]  # [batch, keys]
    kp[absent] = 0
    vp[absent] = 0
    qvp = None if qv is None else pad_rows(qv, m_blocks * cfg.kblock_m, cfg.kernel_head_dim_v)
    return qp, kp, vp, qvp


def cta_groups(cfg: Config) -> dict[tuple, np.ndarray]:
    """The launch's CTAs grouped by the work they do: ``{(kv_range, masked): ctas}`` with
    ``kv_range`` the ``(n_block_min, n_block_max)`` a CTA visits (hopper/block.h, per split),
    ``masked`` its masking steps (:func:`simulator.flash.masks.masking_steps`: the blocks run
    with masking and Check_inf) and ``ctas`` int64 [n, 4] rows ``(batch, head, m_block,
    split)``, in order of first appearance over batch, then m_block (``head`` a KV head when
    ``cfg.pack_gqa``). CTAs of one group run the same sequence of steps, so the forward
    evaluates each group as one batch of tiles."""
    g = cfg.qhead_per_khead if cfg.pack_gqa else 1
    m_blocks = -(-cfg.seqlen_q * g // cfg.kblock_m)
    heads = cfg.heads_kv if cfg.pack_gqa else cfg.heads  # a packed tile belongs to a kv head
    groups: dict[tuple, list] = {}
    for b in range(cfg.batch):  # per batch and m_block (a handful): the ranges
        sk = int(cfg.seqlens_k[b])
        for mb in range(m_blocks):
            full = block_range(mb, cfg.seqlen_q, sk, cfg.kblock_m, cfg.kblock_n, cfg.window, g,
                               cfg.chunk)
            for split, rng in enumerate(_split_ranges(full, cfg, b)):
                masked = masking_steps(mb, cfg.seqlen_q, sk, cfg.max_seqlen_k, cfg.kblock_m,
                                       cfg.kblock_n, cfg.window, rng, g, cfg.chunk)
                groups.setdefault((rng, masked), []).extend((b, h, mb, split)
                                                            for h in range(heads))
    return {key: np.array(ctas, dtype=np.int64).reshape(-1, 4) for key, ctas in groups.items()}


def _split_ranges(full: tuple[int, int], cfg: Config, b: int) -> list[tuple[int, int]]:
    """The K/V block range of each split of batch ``b`` (hopper/block.h, Split: ceil of the
    range over the split count per split, the last ones shorter or empty)."""
    if cfg.splits is None:
        return [full]
    n_min, n_max = full
    count = int(cfg.splits[b])
    per = 0 if n_max <= n_min else -(-(n_max - n_min) // count)
    return [(n_min + s * per, min(n_min + s * per + per, n_max)) for s in range(count)]


# ---- one group of CTAs ---------------------------------------------------------------------------
def _run_group(cfg: Config, n_range, masked, ctas, padded, out, lse, wanted, record,
               exact=None):
    qp, kp, vp, qvp = padded
    n_min, n_max = n_range
    b = ctas[:, 0]
    W, N, d, dv = cfg.kblock_m // 64, cfg.kblock_n, cfg.kernel_head_dim, cfg.kernel_head_dim_v
    rows, heads, hkv = _tile_rows(cfg, ctas)                      # positions, heads: [G, kBlockM]
    if n_max <= n_min:  # nothing to attend: O = 0, LSE = -inf (already in place)
        return
    qt = qp[b[:, None], rows, heads].reshape(len(ctas), W, 64, d)                  # [G, W, 64, d]
    qvt = None if qvp is None else qvp[b[:, None], rows, heads].reshape(len(ctas), W, 64, dv)
    scale_log2, softcap_val, final_scale = (_exact.cta_scales(cfg, b, hkv) if exact is not None
                                            and exact.ffma else cta_scales(cfg, b, hkv))
    soft = Softmax((len(ctas), W), 2, scale_log2[:, None, None, None],
                   MAX_OFFSET[cfg.fmt], cfg.mufu, exact)
    view = rowcol_view(f"m64n{N}k16")
    # each thread-row element's flat position in a warpgroup's 64 x N tile: a take along one
    # axis gives the [G, W, 128, 2, N/4] scores C-ordered (the kernels read rows in place)
    flat = view.row[:, :, None] * N + view.col[:, None, :]
    to_rowcol = np.argsort(flat.reshape(-1))  # the take that undoes it: row / col form to matrix
    flat.setflags(write=False)  # the compiled block step checks read-only positions once
    acc_layout_s = accumulator_layout(f"m64n{N}k16")
    acc_layout_o = accumulator_layout(f"m64n{min(dv, 256)}k16")
    tracer = _Tracer(ctas, wanted, record, acc_layout_s, acc_layout_o)
    qk = mma.parse("wgmma", f"m64n{N}k{cfg.k_step}.f32.{cfg.fmt}.{cfg.fmt}", cfg.gpu)
    # a V head dim over 256 runs as m64n256 instructions side by side (columns are independent)
    pv = mma.parse("wgmma", f"m64n{min(dv, 256)}k{cfg.k_step}.f32.{cfg.fmt}.{cfg.fmt}", cfg.gpu)
    # the compiled engine's hand-over: Q decoded once per group, each K/V block once per
    # distinct (batch, kv head) of the group, not once per CTA and block (same bits)
    fast = _decoded_gemms(cfg, qt, qvt, qk, pv, exact)
    fused = fast[1] and exact is None and not tracer.sel and soft.fusable()
    kv_pairs, kv_of = np.unique(b * cfg.heads_kv + hkv, return_inverse=True)
    bu, hu = kv_pairs // cfg.heads_kv, kv_pairs % cfg.heads_kv
    if fast[0]:
        qt = engine.decode_operand(qt.reshape(len(ctas), W * 64, d), qk.params)
    grow = rows.reshape(len(ctas), W, 64)                                          # global rows
    acc_o = np.zeros((len(ctas), W, 64, dv), dtype=np.float32)
    pending = None  # (P, V, scores_scale) of the previous block, for the overlapped schedule
    prev_scale = None
    for step, n in enumerate(range(n_max - 1, n_min - 1, -1)):
        keys = n * N + np.arange(N)
        kt = _kv_block(kp, bu, hu, keys, kv_of, qk if fast[0] else None, transpose=True)
        vt = _kv_block(vp, bu, hu, keys, kv_of, pv if fast[1] else None)
        s = _gemm_wg(qt, kt, np.broadcast_to(_NEG_ZERO, (len(ctas), W, 64, N)), qk, exact)
        tracer.frag("qk_gemm", n, acc_s=s)
        if qvt is not None:  # HasQv: the same accumulator, V's columns as the reduction axis
            s = _gemm_wg(qvt, np.swapaxes(vt, -1, -2), s, qk, exact)
            tracer.frag("qv_gemm", n, acc_s=s)
        if cfg.softcap > 0:
            s = tanh(fmul(s, softcap_val[:, None, None, None], ftz=True), model=cfg.mufu) \
                if exact is None else _exact.softcap(s, softcap_val[:, None, None, None],
                                                     cfg.mufu, exact)
            tracer.frag("softcap", n, acc_s=s)
        first, check_inf = step == 0, masked[step]
        if check_inf:  # the blocks between the masking steps run without a mask function
            ok = allowed(grow[..., None], keys[None, None, None, :], cfg.seqlen_q,
                         cfg.seqlens_k[b][:, None, None, None], cfg.window, cfg.chunk)
            s = np.where(ok, s, _NEG_INF)
        tracer.frag("mask", n, acc_s=s)
        if fused:  # the block's softmax, P's conversion and decode in one compiled call
            scores_scale, p_cvt = soft.block_step(s, flat, first, check_inf, cfg.fmt,
                                                  pv.params.emin)
        else:
            scores_scale, p_cvt = _softmax(cfg, soft, tracer, n, s, flat, to_rowcol, first,
                                           check_inf, exact)
        scale_rows = view.row_values(scores_scale)
        if cfg.schedule == "plain":
            acc_o = _rescale(tracer, n, acc_o, scale_rows, exact)
            acc_o = _pv(tracer, n, acc_o, p_cvt, vt, pv, exact)
        elif first:
            pending = (p_cvt, vt)
        elif cfg.rescale_before_gemm:
            acc_o = _rescale(tracer, n, acc_o, prev_scale, exact)
            acc_o = _pv(tracer, n + 1, acc_o, *pending, pv, exact)
            pending = (p_cvt, vt)
        else:
            acc_o = _pv(tracer, n + 1, acc_o, *pending, pv, exact)
            acc_o = _rescale(tracer, n, acc_o, scale_rows, exact)
            pending = (p_cvt, vt)
        prev_scale = scale_rows
    if cfg.schedule == "intra_wg_overlap":
        if cfg.rescale_before_gemm and n_max - n_min > 1:
            acc_o = _rescale(tracer, n_min, acc_o, prev_scale, exact)
        acc_o = _pv(tracer, n_min, acc_o, *pending, pv, exact)
    final = soft.finalize(final_scale[:, None, None, None])
    tracer.rows("finalize", None, row_sum=soft.row_sum, scores_scale=final, lse=soft.lse,
                row_max=soft.row_max)
    acc_o = rescale_o(acc_o, view.row_values(final), exact)
    tracer.frag("epilogue", None, acc_o=acc_o)
    lse_rows = view.row_values(soft.lse)
    if out is None:  # an executor task: the caller stores
        return acc_o, lse_rows
    _store(cfg, ctas, rows, heads, acc_o, lse_rows, out, lse, exact)


def _softmax(cfg: Config, soft, tracer, n, s, flat, to_rowcol, first, check_inf, exact):
    """One block's softmax steps on the scores ``s`` [G, W, 64, N] (matrix order) through
    the row / column view, and P converted for the P V GEMM: ``(scores_scale, P)``."""
    g, w = s.shape[:2]
    scores = np.take(s.reshape(g, w, -1), flat, axis=-1)                          # [G,W,128,2,N/4]
    scores_scale = soft.max_get_scale(scores, is_first=first, check_inf=check_inf)
    tracer.rows("max_get_scale", n, row_max=soft.row_max, row_sum=soft.row_sum,
                scores_scale=scores_scale)
    p = soft.online_softmax(scores, is_first=first, check_inf=check_inf)
    if exact is None and not tracer.sel:  # converted in the threads' order, then put in
        # matrix order by a take of the narrow bits (cheaper than a float32 scatter)
        return scores_scale, np.take(convert(p, cfg.fmt).reshape(g, w, -1), to_rowcol,
                                     axis=-1).reshape(s.shape)
    p_mat = np.empty(s.shape, dtype=p.dtype)
    p_mat.reshape(g, w, -1)[..., flat] = p
    tracer.frag("online_softmax", n, acc_s=p_mat, row_sum=soft.row_sum)
    return scores_scale, (convert(p_mat, cfg.fmt) if exact is None else
                          _exact.p_operand(p_mat, cfg.fmt, exact))


def cta_scales(cfg: Config, b, hkv):
    """The float32 ``(scale_log2, softcap_val, final_scale)`` of each CTA, arrays [n] for the
    CTAs of batch ``b`` [n] and KV head ``hkv`` [n]: the host constants, with e4m3's
    ``q_descale * k_descale`` folded (FMUL, ftz) into softcap_val when softcap is on
    (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp), else into scale_log2
    (hopper/flash_fwd_kernel_sm90.h), and ``v_descale`` as the final scale."""
    c = cfg.consts
    qk = fmul(cfg.q_descale[b, hkv], cfg.k_descale[b, hkv], ftz=True)
    scale_log2 = np.full(len(b), c["scale_log2"], dtype=np.float32)
    softcap_val = np.full(len(b), c["softcap_val"], dtype=np.float32)
    if cfg.fmt == "e4m3":
        if cfg.softcap > 0:
            softcap_val = fmul(softcap_val, qk, ftz=True)
        else:
            scale_log2 = fmul(scale_log2, qk, ftz=True)
    return scale_log2, softcap_val, cfg.v_descale[b, hkv].astype(np.float32)


def _rescale(tracer, n, acc_o, scale_rows, exact=None):
    acc_o = rescale_o(acc_o, scale_rows, exact)
    tracer.frag("rescale_o", n, acc_o=acc_o)
    return acc_o


def _decoded_gemms(cfg: Config, qt, qvt, qk, pv, exact) -> tuple[bool, bool]:
    """Whether the group's QK^T and PV GEMMs run compiled on operands decoded once
    (``engine.numba_dot_add_decoded``, for the work each call has): without ``exact``, qv,
    or a V head dim over 256."""
    if exact is not None or qvt is not None or cfg.kernel_head_dim_v > 256:
        return False, False
    work = qt.size * cfg.kblock_n  # G x kBlockM rows, times N x d (QK^T) or d_v x N (PV)
    return (engine.numba_dot_add_decoded(qk.params, qk.k, work),
            engine.numba_dot_add_decoded(pv.params, pv.k,
                                         work // cfg.kernel_head_dim * cfg.kernel_head_dim_v))


def _kv_block(xp, bu, hu, keys, kv_of, instruction, transpose=False):
    """The block ``keys`` of K or V for every CTA of a group: gathered for the distinct
    (batch ``bu``, kv head ``hu``) pairs, then [G, N, d] (``[G, d, N]`` with ``transpose``) by
    ``kv_of``, or, for the compiled engine (``instruction`` given), decoded once per pair and
    read through ``kv_of`` (``engine.decode_operand``)."""
    x = xp[bu[:, None], keys[None, :], hu[:, None]]                             # [U, N, d]
    x = np.swapaxes(x, -1, -2) if transpose else x
    if instruction is None:
        return x[kv_of]
    return engine.decode_operand(x, instruction.params, kv_of)


def _gemm_wg(a, b, c, instruction, exact=None):
    """Every warpgroup's GEMM of a CTA: a [G, W, 64, K] (each warpgroup's rows), b [G, K, N]
    (shared by the CTA's warpgroups), c [G, W, 64, N] (zero_init: a broadcast -0, read-only).
    The W warpgroups are stacked along M (rows of different warpgroups never meet in a GEMM),
    so B is not repeated per warpgroup. ``a`` and ``b`` may be operands decoded once
    (``engine.decode_operand``: a [G, W * 64, K], b read through its index); then the
    compiled engine evaluates it."""
    if not isinstance(b, np.ndarray):
        return _gemm_decoded(a, b, c, instruction)
    if not c.flags.writeable:
        c = np.array(c)
    g, w, m, _ = a.shape
    d = mma.gemm(a.reshape(g, w * m, -1), b, c.reshape(g, w * m, -1), instruction=instruction) \
        if exact is None else _exact.gemm(a.reshape(g, w * m, -1), b, c.reshape(g, w * m, -1),
                                          instruction, exact)
    return d.reshape(c.shape)


def _gemm_decoded(a, b, c, instruction):
    """:func:`_gemm_wg` through ``engine.dot_add_decoded``: ``a`` decoded or [G, W, 64, K]
    (decoded here), ``b`` decoded; a ``c`` broadcast over the CTAs (zero_init's -0) is one
    accumulator read by every CTA."""
    g, w, m, n = c.shape
    if isinstance(a, np.ndarray):
        a = engine.decode_operand(a.reshape(g, w * m, -1), instruction.params)
    if c.strides[0] == 0:
        c3, c_index = np.array(c[:1]).reshape(1, w * m, n), np.zeros(g, np.int64)
    else:
        c3, c_index = c.reshape(g, w * m, n), None
    d = engine.dot_add_decoded(a, b, c3, instruction.params, instruction.k, c_index)
    return d.reshape(c.shape)


def _pv(tracer, n, acc_o, p_cvt, vt, instruction, exact=None):
    width = acc_o.shape[-1]
    if width <= 256:
        acc_o = _gemm_wg(p_cvt, vt, acc_o, instruction, exact)
    else:
        acc_o = np.concatenate([_gemm_wg(p_cvt, vt[..., c: c + 256], acc_o[..., c: c + 256],
                                         instruction, exact) for c in range(0, width, 256)], axis=-1)
    tracer.frag("pv_gemm", n, acc_o=acc_o)
    return acc_o


def _tile_rows(cfg: Config, ctas):
    """(query positions, query heads, kv head) of every CTA's rows: ``[G, kBlockM]``,
    ``[G, kBlockM]``, ``[G]``. A PackGQA tile's row ``r`` is position ``r // g``, head
    ``hkv * g + r % g``; otherwise the rows are one head's consecutive positions."""
    g = cfg.qhead_per_khead
    r = ctas[:, 2:3] * cfg.kblock_m + np.arange(cfg.kblock_m)[None, :]
    if cfg.pack_gqa:
        hkv = ctas[:, 1]
        return r // g, hkv[:, None] * g + r % g, hkv
    return r, np.broadcast_to(ctas[:, 1:2], r.shape), ctas[:, 1] // g


def _store(cfg: Config, ctas, rows, heads, acc_o, lse_rows, out, lse, exact=None):
    """Epilogue: convert O to the output dtype and write the rows < seqlen_q of every CTA."""
    b = ctas[:, 0]
    valid = rows < cfg.seqlen_q                                                     # [G, kBlockM]
    gi, ri = np.nonzero(valid)
    o = acc_o.reshape(len(ctas), cfg.kblock_m, cfg.kernel_head_dim_v)[..., : cfg.head_dim_v]
    lse_rows = lse_rows.reshape(len(ctas), cfg.kblock_m)
    if cfg.splits is None:
        o = convert(o, format_of(cfg.out_dtype).name) if exact is None else \
            _exact.output(o, format_of(cfg.out_dtype).name, exact)
        out[b[gi], rows[gi, ri], heads[gi, ri]] = o[gi, ri]
        lse[b[gi], heads[gi, ri], rows[gi, ri]] = lse_rows[gi, ri]
    else:  # the Split epilogue stores float32 partials, one slice per split
        sp = ctas[:, 3]
        out[sp[gi], b[gi], rows[gi, ri], heads[gi, ri]] = o[gi, ri]
        lse[sp[gi], b[gi], heads[gi, ri], rows[gi, ri]] = lse_rows[gi, ri]


class _Tracer:
    """Records the traced CTAs of a group; free when nothing is traced."""

    def __init__(self, ctas, wanted, record, layout_s, layout_o):
        self.record = record
        self.layouts = {"acc_s": layout_s, "acc_o": layout_o}
        self.sel = []
        if wanted:
            self.sel = [(i, tuple(int(c) for c in cta[:3])) for i, cta in enumerate(ctas)
                        if tuple(int(c) for c in cta[:3]) in wanted]

    def frag(self, step, n, **arrays):
        """Matrices [G, W, 64, cols] become fragments [W, 128, regs]; row state passes through."""
        for i, cta in self.sel:
            data = {k: (self.layouts[k].from_matrix(v[i]) if k in self.layouts else v[i])
                    for k, v in arrays.items()}
            self.record.add(step, cta, n, **data)

    def rows(self, step, n, **arrays):
        for i, cta in self.sel:
            self.record.add(step, cta, n, **{k: v[i] for k, v in arrays.items()})
