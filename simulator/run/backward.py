"""``run --backward``: FA3's backward on the run's input after its forward.

dO is drawn from a stated seed (normal-ish, std 1: :class:`simulator.flash.inputs.InputStream`),
the backward runs at the forward's out and LSE (per sequence of a varlen launch, with the
launch's max_seqlen, as :func:`simulator.fa3.flash_attn_backward` does), and the gradients are
measured against the float64 gradients of exact attention
(:func:`simulator.flash.reference_backward`), in ulps of the input format at the reference
value. The spread says how many values FA3's default (non-deterministic) mode could change
from run to run.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import UsageError
from ..flash import backward, reference_backward
from ..flash.backward import make_backward_config, max_dq_partials
from ..flash.inputs import InputStream
from .metrics import ulp
from .workload import Workload, is_varlen, varlen_lengths

GRADS = ("dq", "dk", "dv")


def check_backward_args(work: Workload) -> None:
    """UsageError for what FA3's backward does not take (before any work)."""
    if work.fmt not in ("bf16", "f16"):
        raise UsageError(f"--backward: FA3's backward takes bf16 or f16 inputs, got --dtype "
                         f"{work.fmt}; run with --dtype bf16 or f16, or the forward alone")
    if work.q.shape[-1] != work.v.shape[-1]:
        raise UsageError(f"--backward: FA3's backward takes V's head dim equal to Q's, got "
                         f"{work.v.shape[-1]} and {work.q.shape[-1]}; run the forward alone")


def draw_dout(out: np.ndarray, seed: int) -> np.ndarray:
    """dO like ``out``: normal-ish values (std 1) from ``InputStream(seed)``, cast to out's type."""
    return InputStream(seed).normalish(out.shape).astype(np.float32).astype(out.dtype)


def _sequences(work: Workload, out, lse):
    """(q, k, v, out, lse, rows, keys) per kernel-level call: each sequence of a varlen workload,
    else the whole batch."""
    if not is_varlen(work):
        return [(work.q, work.k, work.v, out, lse, slice(None), slice(None), None)]
    rows, keys = varlen_lengths(work)
    msq, msk = int(rows.max()), int(keys.max())
    calls = []
    for b, (r, kk) in enumerate(zip(rows, keys, strict=True)):
        rs, ks = slice(0, int(r)), slice(0, int(kk))
        calls.append((work.q[b:b + 1, rs], work.k[b:b + 1, ks], work.v[b:b + 1, ks],
                      out[b:b + 1, rs], np.ascontiguousarray(lse[b:b + 1, :, rs]), (b, rs), (b, ks),
                      (msq, msk)))
    return calls


def run_backward(work: Workload, kwargs: dict, out, lse, seed: int, progress=None) -> dict:
    """The backward of the run: gradients, spread counts, errors against float64, times.

    Returns:
        dict with ``dout``, ``dq``, ``dk``, ``dv`` (arrays shaped like q, k, v; padding rows of
        a varlen workload 0), ``ref`` (float64 dq, dk, dv), ``spread`` (values per gradient
        whose default-mode result could differ), ``errors`` (per gradient: mean / p99 / max ulp,
        relative Frobenius), ``tiles`` (FA3's backward tiles), ``partials`` (the most float32
        partials one value receives: key blocks for dQ, query heads per kv head for dK / dV),
        ``times`` (seconds).
    """
    dout = draw_dout(out, seed)
    grads = {n: np.zeros_like(x) for n, x in zip(GRADS, (work.q, work.k, work.v), strict=True)}
    refs = {n: np.zeros(x.shape) for n, x in zip(GRADS, (work.q, work.k, work.v), strict=True)}
    spread = dict.fromkeys(GRADS, 0)
    kw = {n: kwargs[n] for n in ("softmax_scale", "causal", "window", "softcap") if n in kwargs}
    t0 = time.perf_counter()
    tiles = None
    ref_time = 0.0
    partials = 0
    for q, k, v, o, l_, rs, ks, maxima in _sequences(work, out, lse):
        dout_s = dout[rs[0]: rs[0] + 1, rs[1]] if maxima else dout
        extra = {} if maxima is None else {"max_seqlen_q": maxima[0], "max_seqlen_k": maxima[1]}
        res = backward(dout_s, q, k, v, o, l_, spread=True, progress=progress, **kw, **extra)
        tiles = res.tiles
        cfg = make_backward_config(dout_s, q, k, v, o, l_, **kw, **extra)
        partials = max(partials, max_dq_partials(cfg), q.shape[2] // k.shape[2])
        t_ref = time.perf_counter()
        ref = reference_backward(dout_s, q, k, v, **kw)
        ref_time += time.perf_counter() - t_ref
        for name, where in (("dq", rs), ("dk", ks), ("dv", ks)):
            idx = (slice(None),) if maxima is None else (slice(where[0], where[0] + 1), where[1])
            grads[name][idx] = getattr(res, name)
            refs[name][idx] = ref[GRADS.index(name)]
            lo, hi = res.spread[name]
            spread[name] += int(np.sum(lo.view(np.uint16) != hi.view(np.uint16)))
    total = time.perf_counter() - t0
    errors = {n: _errors(grads[n], refs[n], work.fmt) for n in GRADS}
    return {"dout": dout, **grads, "ref": refs, "spread": spread, "errors": errors, "tiles": tiles,
            "partials": partials, "softcap": bool(kw.get("softcap")),
            "times": {"backward": total - ref_time, "reference": ref_time}}


def _errors(x: np.ndarray, ref: np.ndarray, fmt: str) -> dict:
    """ulps over the values with ``|ref|`` at least 1% of its rms (near zero, a gradient that
    exact math cancels makes ulp counts meaningless), the largest absolute error, and the
    relative Frobenius error over all values."""
    err = np.abs(x.astype(np.float64) - ref)
    norm = float(np.linalg.norm(ref))
    rms = norm / np.sqrt(max(1, ref.size))
    big = np.abs(ref) >= 0.01 * rms
    if norm == 0 or not big.any():  # exact math gives 0 everywhere: no ulp or relative error
        return {"mean_ulp": None, "p99_ulp": None, "max_ulp": None,
                "max_abs": float(err.max(initial=0.0)), "rel_frobenius": None}
    u = (err / ulp(ref, fmt))[big]
    return {"mean_ulp": float(u.mean()), "p99_ulp": float(np.percentile(u, 99)),
            "max_ulp": float(u.max()), "max_abs": float(err.max(initial=0.0)),
            "rel_frobenius": float(np.linalg.norm(err) / norm)}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def report(res: dict, seed: int) -> str:
    """The printed lines of ``run --backward``."""
    t = res["tiles"]
    order = ("the deterministic order (FA3's semaphores)" if t.deterministic_supported else
             "one order of the reduce-adds (FA3 has no deterministic kernel at head dim 256)")
    checked = ("softcap checked against the CUDA twin on the H200 (no real build has a softcap "
               "backward)" if res.get("softcap") else
               "checked on the H200 at head dim 128 (flash-attn3-jax)" if t.kernel_head_dim == 128
               else "FA3's kernel for this head dim, not device-checked (the recordings are hdim 128)")
    lines = [f"backward  dO normal-ish (std 1) from seed {seed}; FA3's {t.describe()}; {order}; "
             f"{checked}"]
    for n in GRADS:
        e = res["errors"][n]
        if e["mean_ulp"] is None:
            lines.append(f"          {n} vs float64: the exact gradient is 0 everywhere; max |error| "
                         f"{e['max_abs']:.3g}")
            continue
        lines.append(f"          {n} vs float64: mean {e['mean_ulp']:.3g} ulp, 99th percentile "
                     f"{e['p99_ulp']:.3g}, max {e['max_ulp']:.3g} (|ref| >= 1% of rms); max |error| "
                     f"{e['max_abs']:.3g}, relative Frobenius {e['rel_frobenius']:.3g}")
    sp = res["spread"]
    values = sum(res[n].size for n in GRADS)
    lines.append(f"          deterministic=False: {sum(sp.values()):,} of {values:,} values could "
                 f"differ from run to run (dq {sp['dq']:,}, dk {sp['dk']:,}, dv {sp['dv']:,}: "
                 f"the arrival order of at most {_plural(res['partials'], 'float32 partial')} per "
                 "value" + ("; two commute)" if res["partials"] == 2 else ")"))
    tm = res["times"]
    lines.append(f"          backward {tm['backward']:.1f} s (with the spread), reference "
                 f"{tm['reference']:.2f} s")
    return "\n".join(lines)
