"""The FlashAttention-3 backward's mainloop (``mainloop_bwd_sm90_tma_gmma_ws.hpp``), emulated:
one CTA per (batch, head, n_block), over its m_blocks in ascending order (docs/backward.md).

CTAs are emulated together: an array axis holds every CTA of a chunk of (batch, head) rows
active at an m_block; the Python loops run over m_blocks and, for the ordered reduce-adds into
dQaccum, over the CTAs of a tile (the kernels' sequential structure, never threads or elements).
Chunks of rows bound the working memory (``memory_budget``) and are what an executor's workers
or the task threads run. ``cfg`` is always a :class:`simulator.flash.backward.BackwardConfig`
(not imported: that module imports this one). The arithmetic that the NumPy specification and
the compiled engine both evaluate is the launch's evaluator's (:mod:`simulator.flash.evaluator`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import mma
from ..numerics import convert, fadd, fdiv, ffma, fmul, fsub
from ..numerics.mufu import ex2, tanh
from . import chunks
from .block_info import m_block_range
from .evaluator import SPECIFICATION, plan_compiled
from .grid import pad_rows
from .masks import allowed
from .spread import sum_bounds

_NEG_INF = np.float32(-np.inf)


def dq_add_ftz(cfg) -> bool:
    """Whether dQ's reduce-adds flush subnormals: ``atomicAdd`` (REDG.ADD.F32.FTZ) at kernel
    head dim 256, else the TMA bulk reduce (``dQacc_use_TMA = kHeadDim < 256`` in
    ``mainloop_bwd_sm90_tma_gmma_ws.hpp``; UBLKRED.ADD.F32.RN keeps them). Measured:
    ``simulator/data/device/reduce_add_probe.json``."""
    return cfg.tiles.kernel_head_dim >= 256


def dq_order(cfg, n_block: np.ndarray) -> np.ndarray:
    """The rank of each n_block's dQ partial in FA3's deterministic order of arrival at an
    m_block (``store_dq``: ascending n_block, descending with a causal mask): a sort key."""
    return -n_block if cfg.causal else n_block


def _ctas(cfg):
    """Every (batch, head, n_block) CTA: int arrays [C] and its m_block range."""
    b, h, n = np.meshgrid(np.arange(cfg.batch), np.arange(cfg.heads), np.arange(cfg.n_blocks),
                          indexing="ij")
    b, h, n = b.ravel(), h.ravel(), n.ravel()
    m_min, m_max = m_block_range(cfg, n)
    return b, h, n, m_min, m_max


def mainloop(cfg, q, k, v, dout, dpsum, lse_log2, spread, budget, bar, tracer,
             executor, ev=SPECIFICATION):
    """dQaccum [B, H, rows, kd] float32, each CTA's dK (scaled) and dV, float32 [B, H, n_blocks
    * kBlockN, kd], with ``spread`` dQaccum's (lo, hi) over every order of its reduce-adds (else
    None). CTAs run in chunks of whole (batch, head) rows (their dQ tiles meet no other chunk's)
    within ``budget`` bytes: serially, on a thread pool as many at once as the budget affords
    (in place), or as other executors' tasks, W chunks of a W-th each (W: their workers); all
    on the launch's evaluator ``ev``, which travels with each task."""
    M, N, kd = cfg.tiles.kblock_m, cfg.tiles.kblock_n, cfg.tiles.kernel_head_dim
    rows, keys = cfg.m_blocks * M, cfg.n_blocks * N
    padded = [pad_rows(x, length, kd) for x, length in ((q, rows), (dout, rows), (k, keys), (v, keys))]
    ctas = _ctas(cfg)
    dk, dv = (np.zeros((len(ctas[0]), N, kd), np.float32) for _ in range(2))
    dq_accum = np.zeros((cfg.batch * cfg.heads, rows, kd), np.float32)
    bounds = (np.zeros_like(dq_accum), np.zeros_like(dq_accum)) if spread else None
    fixed, per_row = memory_needed(cfg, spread, ev.compiled)  # priced on the launch's evaluator
    parts, shared = chunks.concurrency(executor, 1, budget, fixed, per_row)
    fixed += chunks.shipped_bytes(executor, sum(x.nbytes for x in padded))
    size = chunks.chunk_size(budget, fixed, per_row, "this backward", parts,
                             unit="(batch, head) row of CTAs",
                             held="padded inputs and float32 accumulators")
    jobs = _row_jobs(cfg, size, parts)
    flat = (dpsum.reshape(-1, rows), lse_log2.reshape(-1, rows))
    if executor is None:
        for job in jobs:
            _run_chunk(cfg, job, ctas, padded, *flat, spread, bar, tracer, ev,
                       out=_chunk_views(cfg, job, dk, dv, dq_accum, bounds))
    elif shared:  # threads write their disjoint rows in place: nothing waits to be stored
        # (the task threads' pool is as large as numba's: gated to what the budget affords)
        run = chunks.gated(_run_chunk, parts)  # at most parts at once
        futures = {executor.submit(run, cfg, job, ctas, padded, *flat, spread, None, None, ev,
                                   out=_chunk_views(cfg, job, dk, dv, dq_accum, bounds)): job
                   for job in jobs}
        for future, job in chunks.finished(futures):
            future.result()
            bar.update(_chunk_steps(cfg, job, ctas))
    else:  # other processes: each task gets its batches and returns its rows' arrays
        futures = {executor.submit(_run_chunk, cfg, job, ctas, _batch_slice(cfg, job, padded),
                                   *(x[job[0]:job[1]] for x in flat), spread, None, None, ev,
                                   sliced=True): job for job in jobs}
        for future, job in chunks.finished(futures):  # stored as they finish: disjoint chunks
            _store_chunk(cfg, job, future.result(), dk, dv, dq_accum, bounds)
            bar.update(_chunk_steps(cfg, job, ctas))
    shape = (cfg.batch, cfg.heads, keys, kd)
    bounds = None if bounds is None else tuple(x.reshape(shape[:2] + (rows, kd)) for x in bounds)
    return (dq_accum.reshape(shape[:2] + (rows, kd)), dk.reshape(shape), dv.reshape(shape),
            bounds)


def memory_needed(cfg, spread: bool, compiled: bool | None = None) -> tuple[int, int]:
    """(fixed, per_row), bytes: what the mainloop holds throughout (the padded q, dO, k, v,
    the float32 dK / dV / dQaccum accumulators, dPsum and LSE_log2; doubled with ``spread``,
    for dQaccum's bounds and their working arrays) and what each (batch, head) row of a
    chunk adds (:func:`row_bytes`, ``compiled`` as there)."""
    t = cfg.tiles
    rows, keys, kd = cfg.m_blocks * t.kblock_m, cfg.n_blocks * t.kblock_n, t.kernel_head_dim
    itemsize = 2  # bf16 / f16, the backward's input formats
    inputs = 2 * itemsize * cfg.batch * kd * (rows * cfg.heads + keys * cfg.heads_kv)
    return (inputs + accumulator_bytes(cfg)) * (2 if spread else 1), row_bytes(cfg, compiled)


def accumulator_bytes(cfg) -> int:
    """Bytes of the float32 dQaccum, dK and dV accumulators and of dPsum and LSE_log2, held
    from the mainloop through the postprocess."""
    t = cfg.tiles
    rows, keys = cfg.m_blocks * t.kblock_m, cfg.n_blocks * t.kblock_n
    return 4 * cfg.batch * cfg.heads * (t.kernel_head_dim * (rows + 2 * keys) + 2 * rows)


def row_bytes(cfg, compiled: bool | None = None) -> int:
    """Working bytes of one (batch, head) row of a chunk: its n_blocks CTAs (the unit of the
    chunks: a row's CTAs reduce-add into the same dQaccum tiles), at the compiled engine's
    cost with ``compiled`` (the launch's evaluator runs compiled), else the NumPy engine's;
    None: as the setting alone takes it (:func:`simulator.flash.evaluator.plan_compiled`)."""
    t = cfg.tiles
    compiled = plan_compiled() if compiled is None else compiled
    return max(1, cfg.n_blocks) * chunks.backward_cta_bytes(t.kblock_m, t.kblock_n,
                                                           t.kernel_head_dim, compiled)


def _row_jobs(cfg, size: int, parts: int) -> list[tuple[int, int]]:
    """Chunks of (batch, head) rows, ``[start, stop)`` in ``batch * heads + head``, of at most
    ``size`` rows each, and at least ``parts`` chunks when there are that many rows (so that
    an executor's workers all get work)."""
    rows = chunks.split(np.arange(cfg.batch * cfg.heads), size, parts)
    return [(int(r[0]), int(r[-1]) + 1) for r in rows]


def _batch_slice(cfg, job, padded):
    """The padded q, dO, k, v of the batches the rows ``job`` cover (an executor task's
    inputs: what a process pool pickles)."""
    b0, b1 = job[0] // cfg.heads, (job[1] - 1) // cfg.heads + 1
    return [x[b0:b1] for x in padded]


def _chunk_steps(cfg, job, ctas) -> int:
    """CTA m_block steps of the rows ``job`` (the progress bar's unit)."""
    sel = slice(job[0] * cfg.n_blocks, job[1] * cfg.n_blocks)
    return int(np.maximum(ctas[4][sel] - ctas[3][sel], 0).sum())


def _chunk_views(cfg, job, dk, dv, dq_accum, bounds):
    """The launch arrays' parts that the rows ``job`` own: (dQaccum, dK, dV, bounds or None)
    views that :func:`_run_chunk` accumulates into in place."""
    sel = slice(job[0] * cfg.n_blocks, job[1] * cfg.n_blocks)
    rows = slice(job[0], job[1])
    return (dq_accum[rows], dk[sel], dv[sel],
            None if bounds is None else (bounds[0][rows], bounds[1][rows]))


def _store_chunk(cfg, job, res, dk, dv, dq_accum, bounds) -> None:
    """Put a chunk's results (:func:`_run_chunk` in another process) into the launch's arrays."""
    views = _chunk_views(cfg, job, dk, dv, dq_accum, bounds)
    pairs = list(zip(views[:3], res[:3], strict=True))
    if bounds is not None:
        pairs += zip(views[3], res[3], strict=True)
    for dst, src in pairs:
        dst[...] = src


def _run_chunk(cfg, job, ctas, padded, dpsum, lse_log2, spread, bar, tracer, ev, sliced=False,
               out=None):
    """The m_block loop of the CTAs of the (batch, head) rows ``job = (start, stop)``:
    (dQaccum [rows, M * m_blocks, kd], dK, dV [CTAs, kBlockN, kd], dQaccum's (lo, hi) or
    None), float32, zeroed here or ``out`` (those arrays, zero: :func:`_chunk_views`) added
    into in place. ``padded`` holds every batch, or with ``sliced`` only those of ``job``
    (:func:`_batch_slice`); ``dpsum`` / ``lse_log2`` are [B * H, rows], or the job's rows;
    ``ev`` the launch's evaluator."""
    M, N, kd = cfg.tiles.kblock_m, cfg.tiles.kblock_n, cfg.tiles.kernel_head_dim
    sel = np.arange(job[0] * cfg.n_blocks, job[1] * cfg.n_blocks)
    b, h, n, m_min, m_max = (x[sel] for x in ctas)
    local = b * cfg.heads + h - job[0]                  # the CTA's (b, h) row in this chunk
    b0, r0 = (job[0] // cfg.heads, job[0]) if sliced else (0, 0)
    b = b - b0                                          # index into ``padded``
    qp, dop, kp, vp = padded
    if out is None:
        dk, dv = (np.zeros((len(sel), N, kd), np.float32) for _ in range(2))
        dq_accum = np.zeros((job[1] - job[0], cfg.m_blocks * M, kd), np.float32)
        bounds = (np.zeros_like(dq_accum), np.zeros_like(dq_accum)) if spread else None
    else:
        dq_accum, dk, dv, bounds = out
    g = cfg.heads // cfg.heads_kv
    key_idx = n[:, None] * N + np.arange(N)[None, :]                                  # [C, N]
    kc = kp[b[:, None], key_idx, (h // g)[:, None]]                                   # [C, N, kd]
    vc = vp[b[:, None], key_idx, (h // g)[:, None]]
    ins = mma.parse("wgmma", f"m64n{N}k16.f32.{cfg.fmt}.{cfg.fmt}", cfg.gpu)
    order = dq_order(cfg, n)
    # decoded operands (the compiled evaluator's): K and V (as K^T, V^T and K) decoded once
    # per chunk, Q and dO once per m_block for their two GEMMs each, the dS step fused (same
    # bits, :class:`_Operands`); a traced call keeps the separate steps (the trace records dS)
    ops = _Operands(kc, vc, ins, ev) if tracer is None and ev.decodes(ins.params, ins.k) \
        else None
    for m in range(int(m_min.min(initial=0)), int(m_max.max(initial=0))):
        act = np.flatnonzero((m_min <= m) & (m < m_max))
        if act.size == 0:
            continue
        ab, ah, tile = b[act], h[act], local[act]
        r = m * M + np.arange(M)
        qm = qp[ab[:, None], r[None, :], ah[:, None]]                                 # [A, M, kd]
        dom = dop[ab[:, None], r[None, :], ah[:, None]]
        if ops is not None:
            ops.step(qm, dom, act)
            s, dp = ops.scores(M, N)
        else:
            kt, vt = kc[act], vc[act]
            zero = np.full((act.size, M, N), -0.0, np.float32)  # zero_init: scale-d = 0
            s = ev.gemm(qm, np.swapaxes(kt, 1, 2), zero, ins)                         # [A, M, N]
            dp = ev.gemm(dom, np.swapaxes(vt, 1, 2), zero, ins)
        traced = {"s": s, "dp": dp}
        dtanh = None
        if cfg.softcap_val > 0 and cfg.family == "fa4":
            # FA4's score_mod (softcap * tanh(s * scale / softcap): mul, div.rn, tanh.approx,
            # mul) and its score_mod_bwd's 1 - t*t from the same t (flash/backward_fa4.py)
            t = tanh(fdiv(fmul(s, cfg.softmax_scale), cfg.softcap_val), model=cfg.mufu)
            dtanh = ffma(-t, t, np.float32(1))
            s = fmul(t, cfg.softcap_val)
            traced["dtanh"] = dtanh
        elif cfg.softcap_val > 0:
            # apply_softcap then calculate_dtanh (hopper/utils.h), before the mask as FA3 does it
            # (after it, 1 - (-inf)^2 would be NaN); 1 - t*t is one FFMA (docs/backward.md)
            s = tanh(fmul(s, cfg.softcap_val, ftz=True), model=cfg.mufu)
            dtanh = ffma(-s, s, np.float32(1), ftz=True)
            traced["dtanh"] = dtanh
        ok = allowed(r[None, :, None], key_idx[act][:, None, :], cfg.seqlen_q, cfg.seqlen_k,
                     cfg.window)
        s = np.where(ok, s, _NEG_INF)
        row = tile + job[0] - r0                       # the (b, h) row in dpsum / lse_log2
        lse_m = lse_log2[row][:, r]                                                     # [A, M]
        p = ev.exp2_rows(s, np.float32(cfg.scale_log2), -lse_m, cfg.mufu)  # a twin, or None
        if p is None:
            p = ex2(ffma(s, cfg.scale_log2, -lse_m[..., None], ftz=True), model=cfg.mufu)
        if ops is not None:  # dS, the conversions and decodes in one step
            dv[act], dqp, dk[act] = ops.grads(*ev.backward_ds(
                p, dp, dpsum[row][:, r], dtanh, cfg.fmt, ins.params.emin), dv[act], dk[act])
        else:
            ds = fmul(p, fsub(dp, dpsum[row][:, r][..., None], ftz=True), ftz=True)
            if dtanh is not None:
                ds = fmul(ds, dtanh, ftz=True)
            p16 = convert(p, cfg.fmt)
            ds16 = convert(ds, cfg.fmt)
            dv[act] = ev.gemm(np.swapaxes(p16, 1, 2), dom, dv[act], ins)
            dqp = ev.gemm(ds16, kt, np.full((act.size, M, kd), -0.0, np.float32), ins)
            dk[act] = ev.gemm(np.swapaxes(ds16, 1, 2), qm, dk[act], ins)
        if tracer is not None:
            tracer.record(m, sel[act], {**traced, "scores": s, "p": p, "ds": ds, "dq_partial": dqp})
        _ordered_add(dq_accum, tile, r, dqp, order[act], bounds, dq_add_ftz(cfg))
        if bar is not None:
            bar.update(int(act.size))
    if tracer is not None:
        tracer.finish(dk, dv, job[0] * cfg.n_blocks)
    if cfg.family == "fa3":
        dk[...] = fmul(dk, cfg.softmax_scale, ftz=True)  # after the loop, each CTA's own (FMUL.FTZ)
    elif cfg.heads == cfg.heads_kv:  # FA4: mul.f32 per CTA; with GQA after the heads' sum
        dk[...] = fmul(dk, cfg.softmax_scale)
    return dq_accum, dk, dv, bounds


class _Operands:
    """The five GEMMs of an m_block on operands decoded once by the evaluator ``ev``
    (``ev.decode`` / ``ev.gemm_decoded``, the bits of ``mma.gemm``): the
    chunk's K^T, V^T (B of S = Q K^T and dP = dO V^T) and K (B of dQ = dS K), decoded when
    the chunk starts and read by the active CTAs through an index; Q and dO decoded once
    per m_block, each the A of one GEMM and the B of another (dK = dS^T Q, dV = P^T dO); the
    zero_init accumulators one -0 tile read by every CTA."""

    def __init__(self, kc, vc, ins, ev):
        self.ins = ins
        self.ev = ev
        self.kt, self.vt, self.k = (ev.decode(x, ins.params) for x in
                                    (np.swapaxes(kc, 1, 2), np.swapaxes(vc, 1, 2), kc))
        for x in (self.kt, self.vt, self.k):
            x.step_max()  # computed once, shared by the indexed copies

    def step(self, qm, dom, act):
        """The m_block's Q and dO [A, M, kd] of the active CTAs ``act``."""
        self.act = np.asarray(act, dtype=np.int64)
        self.q, self.do = (self.ev.decode(x, self.ins.params) for x in (qm, dom))

    def _gemm(self, a, b, c, c_index=None):
        return self.ev.gemm_decoded(a, b, c, self.ins.params, self.ins.k, c_index)

    def _zero(self, rows, cols):
        return np.full((1, rows, cols), -0.0, np.float32), np.zeros(self.act.size, np.int64)

    def scores(self, m, n):
        """S = Q K^T and dP = dO V^T, [A, M, N]."""
        at = lambda x: dataclasses.replace(x, index=self.act)  # noqa: E731
        zero, zi = self._zero(m, n)
        return self._gemm(self.q, at(self.kt), zero, zi), self._gemm(self.do, at(self.vt), zero, zi)

    def grads(self, pt, ds, dst, dv, dk):
        """dV += P^T dO, dQ's partial dS K (from -0), dK += dS^T Q, the three [A, ., kd], from
        the decoded P^T, dS and dS^T (``ev.backward_ds``)."""
        zero, zi = self._zero(ds.vals.shape[1], self.k.vals.shape[2])
        dv = self._gemm(pt, self.do, np.ascontiguousarray(dv))
        dq = self._gemm(ds, dataclasses.replace(self.k, index=self.act), zero, zi)
        dk = self._gemm(dst, self.q, np.ascontiguousarray(dk))
        return dv, dq, dk


def _ordered_add(acc, tile, rows, parts, key, bounds=None, ftz=True):
    """``acc[tile, rows] += parts`` (float32 adds, FTZ) in ascending ``key`` within each tile
    (a (batch, head) row of dQaccum): the reduce-adds of several CTAs into one dQaccum tile,
    one after the other (``ftz``: subnormals flushed, :func:`dq_add_ftz`). With ``bounds =
    (lo, hi)`` arrays like ``acc``, also what any order of those adds gives
    (:func:`simulator.flash.spread.sum_bounds`; the tile is zero before this m_block's adds)."""
    bh = tile
    idx = np.lexsort((key, bh))
    bh_sorted = bh[idx]
    first = np.r_[True, bh_sorted[1:] != bh_sorted[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(idx)), 0))
    rank = np.empty(len(idx), np.int64)
    rank[idx] = np.arange(len(idx)) - start
    for k in range(int(rank.max()) + 1):
        sel = np.flatnonzero(rank == k)
        cur = acc[bh[sel][:, None], rows[None, :]]
        acc[bh[sel][:, None], rows[None, :]] = fadd(cur, parts[sel], ftz=ftz)
    if bounds is None:
        return
    count = np.bincount(bh, minlength=int(bh.max()) + 1)[bh]
    for c in np.unique(count):
        tiles = np.flatnonzero((count == c) & (rank == 0))        # one CTA per (b, h) tile
        stack = np.stack([parts[_member(bh, rank, bh[tiles], j)] for j in range(c)])
        lo, hi = sum_bounds(stack, ftz)
        at = (bh[tiles][:, None], rows[None, :])
        bounds[0][at], bounds[1][at] = lo, hi


def _member(bh, rank, tiles_bh, j):
    """Index of the CTA of rank ``j`` in each tile ``tiles_bh`` (ranks are unique per tile)."""
    pos = np.flatnonzero(rank == j)
    order = np.argsort(bh[pos])
    return pos[order[np.searchsorted(bh[pos][order], tiles_bh)]]
