"""The forward of ``python -m simulator run`` and its float64 reference: one FA3 launch (or
one varlen launch), emulated bit for bit, with progress through the forward's ``progress=``
callback, an optional executor (``--workers``) and the time estimate of a long run."""

from __future__ import annotations

import os

import numpy as np

from ..errors import UsageError
from ..flash import chunks
from .workload import Workload, is_varlen, varlen_lengths

#: seconds of one K/V block visit per score of the block times (kernel head dim + V head dim):
#: the forward's cost model (:data:`simulator.flash.chunks.SECONDS_PER_BLOCK_ELEMENT`, where
#: its measurements are), read here by :func:`estimate_seconds`
SECONDS_PER_BLOCK_ELEMENT = chunks.SECONDS_PER_BLOCK_ELEMENT
#: the same where the launch runs on the compiled engine
COMPILED_SECONDS_PER_BLOCK_ELEMENT = chunks.COMPILED_SECONDS_PER_BLOCK_ELEMENT
#: the float64 reference's cost, per score (:data:`REFERENCE_SECONDS_PER_SCORE`: the softmax's
#: exp, masks and sums, whatever the head dims) plus per score times (head dim + V head dim)
#: (:data:`REFERENCE_SECONDS_PER_ELEMENT`: the two GEMMs). On the 2-core development machine,
#: its cores shared (load average 7), bf16 1 x 2048 x 4 heads: 1.8e-7 s per score at head dim
#: 64, 1.6e-7 at 128, 3.7e-7 at 256; 1 x 1024 x 8 x 128 1.65e-7; 1 x 4096 x 8 x 128 (run
#: --input) 22 s, 1.6e-7. A cost per score times the head dims alone (2e-9) estimated that run
#: at 69 s.
REFERENCE_SECONDS_PER_SCORE = 1.2e-7
REFERENCE_SECONDS_PER_ELEMENT = 4.5e-10
#: a run expected to take longer than this (seconds) says so on stderr before it starts
SLOW_RUN_SECONDS = 60.0
_DESCALES = ("q_descale", "k_descale", "v_descale")


def forward_kwargs(args, work: Workload) -> dict:
    """The :func:`simulator.flash.forward` arguments of the command's options and input."""
    kw = dict(softmax_scale=args.softmax_scale, causal=args.causal, window=tuple(args.window),
              softcap=args.softcap, seqlens_k=work.seqlens_k, kblock_m=args.kblock_m,
              kblock_n=args.kblock_n, schedule=args.schedule, gpu=args.gpu)
    kw.update(work.descales)
    return kw


def descales_of(kwargs: dict, b: int, kv_heads: slice, batch: int, heads_kv: int) -> dict:
    """The FP8 descales of ``kwargs`` for batch element (or sequence) ``b`` and the KV heads
    ``kv_heads``: each a scalar or [batch, heads_kv] broadcast, cut to a contiguous float32
    [1, len(kv_heads)] array; descales not given are left out."""
    out = {}
    for n in _DESCALES:
        if kwargs.get(n) is not None:
            d = np.broadcast_to(np.asarray(kwargs[n], np.float32), (batch, heads_kv))
            out[n] = np.ascontiguousarray(d[b: b + 1, kv_heads])
    return out


def one_sequence(work: Workload, kwargs: dict, b: int, hs=slice(None), ks=slice(None)) -> dict:
    """Arguments of sequence ``b`` of a varlen workload (query heads ``hs``, KV heads ``ks``)
    as one launch of :func:`simulator.flash.forward`: its rows and keys, the launch's
    max_seqlen_q / k."""
    rows, keys = varlen_lengths(work)
    sub = {n: x for n, x in kwargs.items() if n != "seqlens_k" and n not in _DESCALES}
    sub.update(descales_of(kwargs, b, ks, work.q.shape[0], work.k.shape[2]))
    sub.update(max_seqlen_q=max(1, int(rows.max())), max_seqlen_k=max(1, int(keys.max())))
    L, Lk = int(rows[b]), int(keys[b])
    return dict(q=work.q[b: b + 1, :L, hs], k=work.k[b: b + 1, :Lk, ks],
                v=work.v[b: b + 1, :Lk, ks], kw=sub)


def sequence_configs(work: Workload, kwargs: dict) -> list:
    """The :class:`simulator.flash.forward.Config` of each sequence of a varlen workload."""
    from ..flash import make_config

    out = []
    for b in range(work.q.shape[0]):
        a = one_sequence(work, kwargs, b)
        out.append(make_config(a["q"], a["k"], a["v"], **a["kw"]))
    return out


def _uses_tiles(kwargs: dict) -> bool:
    """--kblock-m / --kblock-n / --schedule given: tiles FA3's API does not take."""
    return any(kwargs.get(n) is not None for n in ("kblock_m", "kblock_n", "schedule"))


def _varlen_call(q, k, v, kw: dict, rows, keys, trace=None, **how):
    """One varlen launch of sequences ``rows`` / ``keys`` long, packed from padded ``q``, ``k``,
    ``v`` [batch, seqlen, heads, d] through :func:`simulator.fa3.flash_attn_varlen_func`;
    returns the padded ``(out, lse, trace)`` (rows past a sequence 0 / -inf)."""
    from .. import fa3

    B, S, H, _ = q.shape
    cu_q = np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(keys)]).astype(np.int32)
    pack = [np.concatenate([x[b, :n] for b, n in enumerate(lens)]) for x, lens in
            ((q, rows), (k, keys), (v, keys))]
    got = fa3.flash_attn_varlen_func(
        *pack, cu_q, cu_k, kw["max_seqlen_q"], kw["max_seqlen_k"],
        softmax_scale=kw["softmax_scale"], causal=kw["causal"], window_size=kw["window"],
        softcap=kw["softcap"], q_descale=kw.get("q_descale"), k_descale=kw.get("k_descale"),
        v_descale=kw.get("v_descale"), return_attn_probs=True, trace=trace or None, **how)
    o, l_ = got[0], got[1]
    out = np.zeros((B, S, H, o.shape[-1]), dtype=o.dtype)
    lse = np.full((B, H, S), -np.inf, dtype=np.float32)
    for b, n in enumerate(rows):
        out[b, :n], lse[b, :, :n] = o[cu_q[b]: cu_q[b] + n], l_[:, cu_q[b]: cu_q[b] + n]
    return out, lse, (got[2] if trace else None)


def _emulate_varlen(work: Workload, kwargs: dict, local, **how):
    """The varlen launch through :func:`simulator.fa3.flash_attn_varlen_func`, all sequences
    and heads in one call; with --kblock-m / --kblock-n / --schedule (tiles FA3's API does not
    take), :func:`simulator.flash.forward` per sequence with the launch's max_seqlen. ``local``:
    CTAs (sequence, head index, m_block) to trace. Returns padded ``(out, lse, trace)``."""
    from ..flash import forward
    from ..trace import Trace

    rows, keys = varlen_lengths(work)
    if not _uses_tiles(kwargs):
        kw = one_sequence(work, kwargs, 0)["kw"]  # the launch's scalars and max_seqlen
        kw.update({n: kwargs[n] for n in _DESCALES if kwargs.get(n) is not None})
        return _varlen_call(work.q, work.k, work.v, kw, rows, keys, local, **how)
    B, S, H, _ = work.q.shape
    out = lse = None
    trace = Trace()
    for b in range(B):
        a = one_sequence(work, kwargs, b)
        mine = [(0, h, m) for (bb, h, m) in local if bb == b]
        r = forward(a["q"], a["k"], a["v"], **a["kw"], trace=mine or None, **how)
        if out is None:
            out = np.zeros((B, S, H, r.out.shape[-1]), dtype=r.out.dtype)
            lse = np.full((B, H, S), -np.inf, dtype=np.float32)
        L = int(rows[b])
        out[b, :L], lse[b, :, :L] = r.out[0], r.lse[0]
        for e in (r.trace or []):
            e.cta = (b, e.cta[1], e.cta[2])
            trace.events.append(e)
    return out, lse, trace


def _trace_slices(work: Workload, kwargs: dict, local) -> list:
    """The traced CTAs ``local`` (batch, head index, m_block) run again, serially, in
    launches of one batch element (or sequence) and one KV head's group of query heads, for a
    run whose forward goes to an executor (which records no trace): CTAs are independent, so
    their steps are those of the full launch. Returns their Trace events, CTAs renumbered to
    the full launch's (batch, head index, m_block)."""
    from ..flash import forward

    H, hkv = work.q.shape[2], work.k.shape[2]
    g = H // hkv
    events = []
    for b, kv in sorted({(b, h // g) for (b, h, _) in local}):
        hs, ks = slice(kv * g, (kv + 1) * g), slice(kv, kv + 1)
        mine = sorted({(0, h - kv * g, m) for (bb, h, m) in local if bb == b and h // g == kv})
        if is_varlen(work):
            a = one_sequence(work, kwargs, b, hs, ks)
            if _uses_tiles(kwargs):
                trace = forward(a["q"], a["k"], a["v"], **a["kw"], trace=mine).trace
            else:
                rows, keys = np.array([a["q"].shape[1]]), np.array([a["k"].shape[1]])
                trace = _varlen_call(a["q"], a["k"], a["v"], a["kw"], rows, keys, mine)[2]
        else:
            sub = {n: x for n, x in kwargs.items() if n not in _DESCALES}
            if kwargs.get("seqlens_k") is not None:
                sub["seqlens_k"] = np.asarray(kwargs["seqlens_k"])[b: b + 1]
            sub.update(descales_of(kwargs, b, ks, work.q.shape[0], hkv))
            trace = forward(work.q[b: b + 1, :, hs], work.k[b: b + 1, :, ks],
                            work.v[b: b + 1, :, ks], **sub, trace=mine).trace
        for e in trace:
            e.cta = (b, kv * g + e.cta[1], e.cta[2])
            events.append(e)
    return events


def emulate(work: Workload, kwargs: dict, trace_ctas, progress=None, executor=None):
    """The whole input through :func:`simulator.flash.forward` as one launch (a varlen
    workload: one :func:`simulator.fa3.flash_attn_varlen_func` launch).

    ``trace_ctas`` and the trace's CTAs use the input's head numbers (``work.heads``); the
    trace holds each CTA's events in turn, CTAs by (batch, head index, m_block). ``progress``: None or a
    ``progress(done, total)`` callable, passed to every forward call (see
    :meth:`simulator.flash.chunks.Progress.callback`). ``executor``: None (serial) or a
    ``concurrent.futures`` executor for the forward's CTA chunks; the traced CTAs then run
    again serially (:func:`_trace_slices`). The bits are the serial run's either way.
    Returns ``(out, lse, trace)``.
    """
    from ..flash import forward
    from ..trace import Trace

    local = [(b, work.heads.index(h), m) for (b, h, m) in trace_ctas]
    how = dict(progress=progress, executor=executor)
    serial_trace = local if executor is None else []
    if is_varlen(work):
        out, lse, got = _emulate_varlen(work, kwargs, serial_trace, **how)
    else:
        r = forward(work.q, work.k, work.v, **kwargs, trace=serial_trace or None, **how)
        out, lse, got = r.out, r.lse, r.trace
    events = list(got or []) if executor is None else _trace_slices(work, kwargs, local)
    order = {c: i for i, c in enumerate(sorted(set(local)))}
    trace = Trace()
    for e in sorted(events, key=lambda e: order[e.cta]):  # stable: each CTA's steps in order
        e.cta = (e.cta[0], work.heads[e.cta[1]], e.cta[2])
        trace.events.append(e)
    return out, lse, trace


def forward_calls(work: Workload, kwargs: dict) -> int:
    """How many forward calls :func:`emulate` makes for the launch: 1, or for a varlen
    workload one per sequence that has query rows and keys (FA3 runs no kernel for the
    others)."""
    if not is_varlen(work):
        return 1
    rows, keys = varlen_lengths(work)
    return len(rows) if _uses_tiles(kwargs) else int(np.sum((rows > 0) & (keys > 0)))


def runs_compiled(cfgs, visits: int) -> bool:
    """Whether the launch(es) ``cfgs`` of ``visits`` K/V block visits run on the compiled
    engine (:func:`simulator.flash.evaluator.pick` on their tensor-core products)."""
    from ..flash.evaluator import pick

    cfg = cfgs[0] if isinstance(cfgs, list) else cfgs
    products = visits * cfg.kblock_m * cfg.kblock_n * (cfg.kernel_head_dim + cfg.kernel_head_dim_v)
    return pick(products).compiled


def estimate_seconds(cfgs, visits: int, workers: int = 1, compiled: bool | None = None) -> float:
    """Expected emulation time of ``visits`` K/V block visits of the launch(es) ``cfgs`` (a
    Config, or a list: the sequences of a varlen launch, which share one tile), at
    :data:`SECONDS_PER_BLOCK_ELEMENT` (:data:`COMPILED_SECONDS_PER_BLOCK_ELEMENT` where the
    launch runs compiled, :func:`runs_compiled`) per score times (kernel head dim + V head
    dim), over ``workers`` processes (at most the machine's CPUs); ``compiled``: the engine
    when the caller has it already (None: :func:`runs_compiled`)."""
    cfg = cfgs[0] if isinstance(cfgs, list) else cfgs
    dims = cfg.kernel_head_dim + cfg.kernel_head_dim_v
    if compiled is None:
        compiled = runs_compiled(cfgs, visits)
    rate = COMPILED_SECONDS_PER_BLOCK_ELEMENT if compiled else SECONDS_PER_BLOCK_ELEMENT
    return chunks.estimate_seconds(visits, cfg.kblock_m, cfg.kblock_n, dims,
                                   min(workers, os.cpu_count() or 1), per_element=rate)


def reference_seconds(work: Workload) -> float:
    """Expected time of the float64 reference (:func:`reference_result`) on ``work``: every
    query row against every key, :data:`REFERENCE_SECONDS_PER_SCORE` per score and
    :data:`REFERENCE_SECONDS_PER_ELEMENT` per score times (head dim + V head dim)."""
    b, s, h, d = work.q.shape
    per_score = REFERENCE_SECONDS_PER_SCORE + (d + work.v.shape[-1]) * REFERENCE_SECONDS_PER_ELEMENT
    return b * h * s * work.k.shape[1] * per_score


def slow_run_warning(cfgs, visits: int, workers: int = 1) -> str | None:
    """One line for stderr when the run is expected to take over :data:`SLOW_RUN_SECONDS`
    (:func:`estimate_seconds`), else None."""
    compiled = runs_compiled(cfgs, visits)
    seconds = estimate_seconds(cfgs, visits, workers, compiled)
    if seconds <= SLOW_RUN_SECONDS:
        return None
    took = f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
    cpus = os.cpu_count() or 1
    used = min(workers, cpus)
    busy = (f"{used} worker process{'es' if used > 1 else ''}" if used == workers else
            f"{workers} worker processes on {cpus} CPU{'s' if cpus > 1 else ''}")
    more = ", or more worker processes (--workers N)" if workers < cpus else ""
    engine = "compiled engine's" if compiled else "NumPy engine's"
    return (f"run: this run may take about {took} (an estimate: {visits:,} K/V block visits at "
            f"the {engine} per-block cost measured on a 2-core machine, {busy}); to shorten it, choose "
            f"fewer heads (--heads) or a shorter input{more}")


def reference_result(work: Workload, kwargs: dict, causal: bool):
    """The float64 reference ``(out, lse)``. No keys at all (seqlen_k = 0) is exact math here:
    O = 0 and LSE = -inf. A ValueError of the reference is about the input (exit 2); any other
    exception is a bug (exit 3)."""
    from ..flash import reference

    B, S, H, d = work.q.shape
    if work.k.shape[1] == 0:
        return np.zeros((B, S, H, work.v.shape[-1])), np.full((B, H, S), -np.inf)
    if is_varlen(work):  # each sequence on its own, padding rows 0 / -inf
        out, lse = np.zeros((B, S, H, work.v.shape[-1])), np.full((B, H, S), -np.inf)
        try:
            for b in range(B):
                a = one_sequence(work, kwargs, b)
                kw = {n: x for n, x in a["kw"].items() if not n.startswith("max_seqlen")}
                o, l_ = reference(a["q"], a["k"], a["v"], **kw)
                out[b, : a["q"].shape[1]], lse[b, :, : a["q"].shape[1]] = o[0], l_[0]
        except ValueError as exc:
            raise UsageError(f"{work.label}: the float64 reference rejects the input: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        return out, lse
    try:
        return reference(work.q, work.k, work.v, softmax_scale=kwargs["softmax_scale"],
                         causal=causal, window=kwargs["window"], softcap=kwargs["softcap"],
                         seqlens_k=work.seqlens_k, **work.descales)
    except ValueError as exc:
        raise UsageError(f"{work.label}: the float64 reference rejects the input: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
