"""The forward of ``python -m simulator run``, split into units of work for the progress bar,
and its float64 reference: one FA3 launch (or one varlen launch), emulated bit for bit."""

from __future__ import annotations

import math
import sys

import numpy as np

from ..errors import UsageError
from .workload import Workload, is_varlen, varlen_lengths

_UNITS_TARGET = 8  # forward calls to split the work into (for the progress bar)


def forward_kwargs(args, work: Workload) -> dict:
    kw = dict(softmax_scale=args.softmax_scale, causal=args.causal, window=tuple(args.window),
              softcap=args.softcap, seqlens_k=work.seqlens_k, kblock_m=args.kblock_m,
              kblock_n=args.kblock_n, schedule=args.schedule)
    kw.update(work.descales)
    return kw


def _units(batch: int, heads: int, heads_kv: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(b, query heads, kv heads) per forward call: whole KV groups, about _UNITS_TARGET calls."""
    group = heads // heads_kv
    per_batch = max(1, math.ceil(_UNITS_TARGET / batch))
    chunk = max(1, math.ceil(heads_kv / per_batch))
    out = []
    for b in range(batch):
        for k0 in range(0, heads_kv, chunk):
            kvh = np.arange(k0, min(k0 + chunk, heads_kv))
            qh = np.arange(kvh[0] * group, (kvh[-1] + 1) * group)
            out.append((b, qh, kvh))
    return out


def _one_sequence(work: Workload, kwargs: dict, b: int, hs=slice(None), ks=slice(None)) -> dict:
    """Arguments of sequence ``b`` of a varlen workload as one launch of
    :func:`simulator.flash.forward`: its rows and keys, the launch's max_seqlen_q / k."""
    rows, keys = varlen_lengths(work)
    sub = {n: x for n, x in kwargs.items() if n != "seqlens_k"}
    for n in ("q_descale", "k_descale", "v_descale"):
        if kwargs.get(n) is not None:
            d = np.broadcast_to(np.asarray(kwargs[n], np.float32), (work.q.shape[0], work.k.shape[2]))
            sub[n] = np.ascontiguousarray(d[b: b + 1, ks])
    sub.update(max_seqlen_q=max(1, int(rows.max())), max_seqlen_k=max(1, int(keys.max())))
    L, Lk = int(rows[b]), int(keys[b])
    return dict(q=work.q[b: b + 1, :L, hs], k=work.k[b: b + 1, :Lk, ks],
                v=work.v[b: b + 1, :Lk, ks], kw=sub)


def sequence_configs(work: Workload, kwargs: dict) -> list:
    """The :class:`simulator.flash.forward.Config` of each sequence of a varlen workload."""
    from ..flash import make_config

    out = []
    for b in range(work.q.shape[0]):
        a = _one_sequence(work, kwargs, b)
        out.append(make_config(a["q"], a["k"], a["v"], **a["kw"]))
    return out


def _emulate_varlen(work: Workload, kwargs: dict, trace_ctas, progress=None):
    """The varlen launch through :func:`simulator.fa3.flash_attn_varlen_func`, one
    (sequence, head chunk) at a time: sequences and heads are independent in an unsplit
    launch, so the bits equal one call's. With --kblock-m / --kblock-n / --schedule (tiles
    FA3's API does not take), :func:`simulator.flash.forward` with the launch's max_seqlen.
    Returns padded ``(out, lse, trace)``: rows past a sequence's length hold 0 and -inf."""
    from .. import fa3
    from ..flash import forward
    from ..trace import Trace

    B, S, H, _ = work.q.shape
    out = lse = None
    trace = Trace()
    tiles = any(kwargs.get(n) is not None for n in ("kblock_m", "kblock_n", "schedule"))
    for b, qh, kvh in _units(B, H, work.k.shape[2]):
        hs, ks = slice(qh[0], qh[-1] + 1), slice(kvh[0], kvh[-1] + 1)
        a = _one_sequence(work, kwargs, b, hs, ks)
        local = sorted({(0, work.heads.index(h) - qh[0], m) for (bb, h, m) in trace_ctas
                        if bb == b and work.heads.index(h) in qh})
        L, Lk = a["q"].shape[1], a["k"].shape[1]
        if tiles:
            r = forward(a["q"], a["k"], a["v"], **a["kw"], trace=local or None)
            o, l_, t = r.out[0], r.lse[0], r.trace
        else:
            kw = a["kw"]
            got = fa3.flash_attn_varlen_func(
                a["q"][0], a["k"][0], a["v"][0], np.array([0, L], np.int32),
                np.array([0, Lk], np.int32), kw["max_seqlen_q"], kw["max_seqlen_k"],
                softmax_scale=kw["softmax_scale"], causal=kw["causal"], window_size=kw["window"],
                softcap=kw["softcap"], q_descale=kw.get("q_descale"), k_descale=kw.get("k_descale"),
                v_descale=kw.get("v_descale"), return_attn_probs=True, trace=local or None)
            o, l_, t = got[0], got[1], (got[2] if local else None)
        if out is None:
            out = np.zeros((B, S, H, o.shape[-1]), dtype=o.dtype)
            lse = np.full((B, H, S), -np.inf, dtype=np.float32)
        out[b, :L, hs], lse[b, hs, :L] = o, l_
        for e in (t or []):
            e.cta = (b, work.heads[qh[0] + e.cta[1]], e.cta[2])
            trace.events.append(e)
        if progress:
            progress.update(1)
    return out, lse, trace


def emulate(work: Workload, kwargs: dict, trace_ctas, progress=None):
    """:func:`simulator.flash.forward` over the whole input, one (batch, head chunk) at a time
    (a varlen workload: :func:`_emulate_varlen`).

    CTAs are independent, so the bits equal a single call's. ``trace_ctas`` and the trace's
    CTAs use the input's head numbers (``work.heads``). Returns ``(out, lse, trace)``.
    """
    from ..flash import forward
    from ..trace import Trace

    if is_varlen(work):
        return _emulate_varlen(work, kwargs, trace_ctas, progress)
    q, k, v = work.q, work.k, work.v
    B, _, H, _ = q.shape
    out = None
    lse = np.empty((B, H, q.shape[1]), dtype=np.float32)
    trace = Trace()
    units = _units(B, H, k.shape[2])
    for b, qh, kvh in units:
        sub = dict(kwargs)
        if kwargs.get("seqlens_k") is not None:
            sub["seqlens_k"] = np.asarray(kwargs["seqlens_k"])[b: b + 1]
        for n in ("q_descale", "k_descale", "v_descale"):
            if kwargs.get(n) is not None:
                d = np.broadcast_to(np.asarray(kwargs[n], np.float32), (B, k.shape[2]))
                sub[n] = np.ascontiguousarray(d[b: b + 1, kvh])
        hs, ks = slice(qh[0], qh[-1] + 1), slice(kvh[0], kvh[-1] + 1)
        local = {(0, work.heads.index(h) - qh[0], m) for (bb, h, m) in trace_ctas
                 if bb == b and work.heads.index(h) in qh}
        r = forward(q[b: b + 1, :, hs], k[b: b + 1, :, ks], v[b: b + 1, :, ks], **sub,
                    trace=sorted(local) if local else None)
        if out is None:
            out = np.empty(q.shape, dtype=r.out.dtype)
        out[b: b + 1, :, hs] = r.out
        lse[b: b + 1, hs] = r.lse
        if r.trace is not None:
            for e in r.trace:
                e.cta = (b, work.heads[qh[0] + e.cta[1]], e.cta[2])
                trace.events.append(e)
        if progress:
            progress.update(1)
    return out, lse, trace


class _Progress:
    """tqdm when installed, else a counter on stderr; only on a terminal."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        self.total, self.done = total, 0
        self.enabled = enabled and sys.stderr.isatty()
        if not self.enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            self._show()
            return
        self.bar = tqdm(total=total, desc="emulating", unit="call", file=sys.stderr, leave=False)

    def _show(self):
        print(f"\remulating: {self.done}/{self.total} forward calls", end="", file=sys.stderr,
              flush=True)

    def update(self, n: int):
        if not self.enabled:
            return
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        else:
            self._show()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            print("\r" + " " * 60 + "\r", end="", file=sys.stderr, flush=True)


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
                a = _one_sequence(work, kwargs, b)
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
