"""The forward's launch, whatever the kernel family: its grid of CTAs, their order, chunks and
executors, around a mainloop passed in as an argument.

FA3's tile scheduler gives each CTA one (batch, head, m_block, split) tile; CTAs that visit the
same K/V blocks with the same masking steps run the same sequence of steps, so the emulation
groups them (:func:`cta_groups`) and evaluates a group as one batch of tiles. :func:`launch`
cuts the groups into chunks that fit the memory budget, runs them serially, on task threads
of the compiled engine or as an executor's tasks, and stores each CTA's O and LSE. It picks
the launch's evaluator once, by the launch's whole work (:func:`simulator.flash.evaluator.pick`),
and passes it to every group. What a group computes is the mainloop's
(:class:`ForwardMainloop`: FA3's sm90 mainloop is
:data:`simulator.flash.mainloop_fwd_sm90.MAINLOOP`); the bits never depend on the schedule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from . import chunks, evaluator
from .block_info import block_range, masking_steps
from .config import Config
from .forward_memory import plan

_NEG_INF = np.float32(-np.inf)


class ForwardMainloop(NamedTuple):
    """A kernel family's forward mainloop, as the scheduler runs it (each a module-level
    function, so that a process pool's tasks can carry it).

    Attributes:
        padded_inputs: ``(cfg, q, k, v, qv) -> padded``: the operands as the kernel reads them.
        run_group: ``(cfg, n_range, masked, ctas, padded, out, lse, wanted, record, ev)``:
            one group's CTAs over their K/V blocks on the launch's evaluator ``ev``
            (:mod:`simulator.flash.evaluator`); stores into ``out`` / ``lse``, or returns
            ``(acc_o, lse_rows)`` (None for an empty range) when they are None.
        tile_rows: ``(cfg, ctas) -> (rows, heads, valid)``: the output rows of each CTA's tile.
        store: ``(cfg, ctas, rows, heads, acc_o, lse_rows, out, lse, exact)``: the epilogue.
        split_ranges: ``(full, cfg, b) -> [(n_block_min, n_block_max), ...]``: each split's
            K/V blocks of a CTA whose whole range is ``full`` (batch ``b``), or None for
            FA3's rule (:func:`fa3_split_ranges`).
        evaluated: whether ``run_group`` takes the evaluator as its last argument; False: a
            mainloop that takes the Exactness (None) there instead and evaluates on the NumPy
            specification's defaults.
    """

    padded_inputs: Callable
    run_group: Callable
    tile_rows: Callable
    store: Callable
    split_ranges: Callable | None = None
    evaluated: bool = False


def launch(cfg: Config, mainloop: ForwardMainloop, operands, wanted, record, exact, executor,
           budget: int, progress) -> tuple[np.ndarray, np.ndarray]:
    """Run every CTA of the launch ``cfg`` through ``mainloop`` and return ``(out, lse)``: out
    [(splits,) batch, seqlen_q, heads, head_dim_v] (the output dtype, float32 partials with
    splits, float64 with ``exact.o_rounding``), lse [(splits,) batch, heads, seqlen_q].

    Args:
        operands: ``(q, k, v, qv)`` as :func:`simulator.flash.forward` took them.
        wanted, record: the CTAs to trace and the :class:`simulator.trace.Trace` (or None).
        exact: an :class:`simulator.flash.Exactness` or None; executor, budget, progress: as
            :func:`simulator.flash.forward` checked them.
    Raises:
        MemoryError: not even one CTA fits ``budget`` (:func:`.forward_memory.plan`).
    """
    lead = () if cfg.splits is None else (int(cfg.splits.max()),)
    wide = exact is not None and exact.o_rounding  # float64 outputs
    out = np.zeros(lead + (cfg.batch, cfg.seqlen_q, cfg.heads, cfg.head_dim_v),
                   dtype=np.float64 if wide else cfg.out_dtype if cfg.splits is None else np.float32)
    lse = np.full(lead + (cfg.batch, cfg.heads, cfg.seqlen_q), _NEG_INF,
                  dtype=np.float64 if wide else np.float32)
    groups = cta_groups(cfg, mainloop.split_ranges)
    ev = evaluator.pick(_products(cfg, groups), exact)  # once: "auto" by the launch's work
    threads = 1 if executor is not None or wanted is not None else _task_threads(
        ev.task_threads(), groups)
    parts, shared, size = plan(cfg, operands[0].dtype, executor, threads, budget)
    threads = min(threads, parts)
    padded = mainloop.padded_inputs(cfg, *operands)
    work = [(key, part) for key, ctas in groups.items()
            for part in chunks.split(ctas, size, _group_parts(len(ctas), parts, threads))]
    visits = [len(part) * max(0, key[0][1] - key[0][0]) for key, part in work]
    seconds = chunks.estimate_seconds(sum(visits), cfg.kblock_m, cfg.kblock_n,
                                      cfg.kernel_head_dim + cfg.kernel_head_dim_v, parts,
                                      compiled=ev.compiled)
    bar = chunks.Progress(chunks.auto_progress(progress, seconds), sum(visits))
    # the compiled engine's threads take chunks of CTAs: a launch per K/V block of a few CTAs
    # is too small to share among the kernels' own parallel loops
    own = chunks.task_pool(threads if len(work) > 1 else 1)
    if own is not None:  # the longest chunks first: the threads finish together
        order = sorted(range(len(work)), key=lambda i: -visits[i])
        work, visits = [work[i] for i in order], [visits[i] for i in order]
    executor = executor if own is None else own
    try:
        _execute(mainloop, cfg, work, visits, padded, out, lse, wanted, record, ev, executor,
                 parts if shared else 0, bar)
    finally:
        bar.close()
        chunks.shutdown(own)
    return out, lse


def _execute(mainloop: ForwardMainloop, cfg: Config, work, visits, padded, out, lse, wanted,
             record, ev, executor, threads: int, bar) -> None:
    """Run the chunks ``work`` (``((n_range, masked), ctas)`` each) on the evaluator ``ev``:
    serially, on the threads of a thread pool (``threads`` > 0 of them at once) storing their
    own CTAs, or as an executor's tasks returning theirs (``ev`` travels with each task)."""
    last = ev if mainloop.evaluated else ev.exact
    if executor is None:
        for ((n_range, masked), part), n in zip(work, visits, strict=True):
            mainloop.run_group(cfg, n_range, masked, part, padded, out, lse, wanted, record, last)
            bar.update(n)
        return
    task, dest = ((chunks.gated(mainloop.run_group, threads), (out, lse, None, None)) if threads
                  else (functools.partial(_chunk_task, mainloop), ()))
    futures = {executor.submit(task, cfg, n_range, masked, part, padded, *dest, last): i
               for i, ((n_range, masked), part) in enumerate(work)}
    for future, i in chunks.finished(futures):  # stored as they finish: CTAs are disjoint
        result = future.result()
        if result is not None:
            part = work[i][1]
            rows, heads, _ = mainloop.tile_rows(cfg, part)
            mainloop.store(cfg, part, rows, heads, *result, out, lse, ev.exact)
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


def _task_threads(threads: int, groups: dict) -> int:
    """Of the evaluator's ``threads`` (its ``task_threads()``), those the forward's chunks go
    to where every one of them gets a chunk of at least ``MIN_TASK_CTAS`` CTAs, or there are
    at most ``MAX_THREADS_PER_GROUP`` threads per group that visits some K/V block (groups then
    run whole); else 1 (the kernels' own parallel loops take the pool)."""
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


def _chunk_task(mainloop: ForwardMainloop, cfg: Config, n_range, masked, ctas, padded, last):
    """One executor task: the CTAs ``ctas`` of a group, returning their O accumulator and
    LSE rows (None when the range is empty) for the caller's ``mainloop.store``; ``last``:
    the evaluator (or the Exactness, :attr:`ForwardMainloop.evaluated`)."""
    return mainloop.run_group(cfg, n_range, masked, ctas, padded, None, None, None, None, last)


def cta_groups(cfg: Config, split_ranges: Callable | None = None) -> dict[tuple, np.ndarray]:
    """The launch's CTAs grouped by the work they do: ``{(kv_range, masked): ctas}`` with
    ``kv_range`` the ``(n_block_min, n_block_max)`` a CTA visits (hopper/block.h, per split),
    ``masked`` its masking steps (:func:`simulator.flash.block_info.masking_steps`: the blocks run
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
            for split, rng in enumerate((split_ranges or fa3_split_ranges)(full, cfg, b)):
                masked = masking_steps(mb, cfg.seqlen_q, sk, cfg.max_seqlen_k, cfg.kblock_m,
                                       cfg.kblock_n, cfg.window, rng, g, cfg.chunk)
                groups.setdefault((rng, masked), []).extend((b, h, mb, split)
                                                            for h in range(heads))
    return {key: np.array(ctas, dtype=np.int64).reshape(-1, 4) for key, ctas in groups.items()}


def fa3_split_ranges(full: tuple[int, int], cfg: Config, b: int) -> list[tuple[int, int]]:
    """The K/V block range of each split of batch ``b`` (hopper/block.h, Split: ceil of the
    range over the split count per split, the last ones shorter or empty)."""
    if cfg.splits is None:
        return [full]
    n_min, n_max = full
    count = int(cfg.splits[b])
    per = 0 if n_max <= n_min else -(-(n_max - n_min) // count)
    return [(n_min + s * per, min(n_min + s * per + per, n_max)) for s in range(count)]

