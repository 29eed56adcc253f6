"""FA3's backward from Python: ``flash_attn_backward`` (``_flash_attn_backward`` of
``hopper/flash_attn_interface.py``, ``mha_bwd`` of ``hopper/flash_api.cpp``) and
``backward_spread``, over the kernel-level :func:`simulator.flash.backward`.

A varlen launch (``cu_seqlens_q`` / ``cu_seqlens_k``, or ``seqused_q`` / ``seqused_k``) runs
one kernel-level call per sequence with the launch's ``max_seqlen_q`` / ``max_seqlen_k`` (FA3's
window normalisation and tile choice use them); a sequence without queries or keys gets zero
gradients, as FA3's kernels write them (no K/V block visited: dQaccum stays 0; no m_block:
``store_zero``). With ``seqused_*`` a sequence is its first seqused rows / keys; FA3 writes no
gradient for the rows and keys past them (its outputs are ``torch::empty``: they keep whatever
the buffer held), and this emulation returns 0 there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .. import engine, flash
from ..flash.backward import make_backward_config
from ..flash.constants import default_softmax_scale
from ..gpus import DEFAULT_GPU
from .arrays import returned, to_numpy
from .checks import check_bool, check_parallel, check_window_size, cu_seqlens, seqused

__all__ = ["BackwardCall", "backward_spread", "flash_attn_backward"]


@dataclass(frozen=True)
class BackwardCall:
    """The arguments of one FA3 backward launch, by ``mha_bwd``'s names (as
    :func:`flash_attn_backward` takes them, without ``deterministic``): what :func:`launch`
    reads. Built by the entry points, the torch op and the replays; checked by :func:`launch`.
    """

    dout: Any
    q: Any
    k: Any
    v: Any
    out: Any
    softmax_lse: Any
    softmax_scale: Any = None
    causal: Any = False
    window_size: Any = (-1, -1)
    softcap: Any = 0.0
    cu_seqlens_q: Any = None
    cu_seqlens_k: Any = None
    max_seqlen_q: Any = None
    max_seqlen_k: Any = None
    seqused_q: Any = None
    seqused_k: Any = None
    sm_margin: Any = 0
    memory_budget: Any = None
    progress: Any = None
    executor: Any = None
    gpu: Any = DEFAULT_GPU


def flash_attn_backward(dout, q, k, v, out, softmax_lse, softmax_scale=None, causal=False,
                        window_size=(-1, -1), softcap=0.0, deterministic=False,
                        cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                        max_seqlen_k=None, seqused_q=None, seqused_k=None, sm_margin=0, *,
                        memory_budget=None, progress=None, executor=None, gpu=DEFAULT_GPU):
    """FA3's backward: (dq, dk, dv) for ``dout`` at a forward's ``out`` and ``softmax_lse``.

    Args:
        dout, q, out: [batch, seqlen_q, heads, head_dim] (varlen: [total_q, heads, head_dim]);
            k, v: [batch, seqlen_k, heads_kv, head_dim] (varlen: [total_k, ...]); bf16 or fp16
            NumPy arrays or CPU torch tensors, all the same dtype. V's head dim (v, out,
            dout) may differ from Q's (q, k), as FA3 takes it: one kernel at the rounded
            larger head dim (:func:`common_head_dim`; modelled, not yet recorded).
        softmax_lse: the forward's LSE, float32 [batch, heads, seqlen_q] (varlen:
            [heads, total_q], FA3's layout).
        softmax_scale: default ``head_dim ** -0.5``. causal, window_size: as the forward.
        softcap: FA3's tanh softcapping, as the forward's (0: off).
        deterministic: FA3's flag. The bits returned are FA3's deterministic order in both
            modes; without it the library may give any value of :func:`backward_spread`.
        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k: a varlen launch (int32
            [batch + 1] offsets; the maxima default to the longest sequence).
        seqused_q, seqused_k: int32 [batch] or None: the rows / keys of each sequence the
            kernels use (FA3's varlen kernels; with 4-d inputs each batch entry is a sequence);
            the gradients of the rows / keys past them are 0 here, unwritten by FA3.
        sm_margin: accepted (it changes no bits).
        memory_budget, progress, executor: keyword-only, not FA3's: as
            :func:`simulator.flash.backward` (per kernel-level call; a varlen launch makes one
            per sequence); an executor runs chunks of (batch, head) rows as its tasks, with
            the bits of the serial call.
        gpu: keyword-only, not FA3's: the GPU (:mod:`simulator.gpus` key or record) whose
            MUFU and tensor cores run it.
    Returns:
        (dq, dk, dv) like q, k, v (NumPy, or CPU torch tensors when q was one).
    Raises:
        ValueError: what ``mha_bwd`` refuses (shapes, dtypes, head dims, deterministic with
            head dim 256), naming the argument; seqused_* not int32 [batch] within the
            sequences' lengths; an executor that was shut down. TypeError: an executor
            without ``submit``.
    Source: hopper/flash_api.cpp (mha_bwd), hopper/flash_bwd_launch_template.h.
    """
    deterministic = check_bool("deterministic", deterministic)
    call = BackwardCall(dout, q, k, v, out, softmax_lse, softmax_scale, causal, window_size,
                        softcap, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        seqused_q, seqused_k, sm_margin, memory_budget, progress, executor, gpu)
    res, tq = launch(call, deterministic, spread=False)
    return returned(tuple(res), tq)


def backward_spread(dout, q, k, v, out, softmax_lse, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, cu_seqlens_q=None, cu_seqlens_k=None,
                    max_seqlen_q=None, max_seqlen_k=None, seqused_q=None, seqused_k=None,
                    sm_margin=0, *, memory_budget=None, progress=None,
                    executor=None, gpu=DEFAULT_GPU) -> dict:
    """What FA3's default (``deterministic=False``) backward can give on these inputs.

    FA3 reduce-adds dQ's float32 partials (one per key block) and, with GQA, dK / dV's (one per
    query head of a kv head) in the order its CTAs finish. This returns, per value, the
    smallest and largest result any order gives (exact for up to five partials, a rigorous
    enclosure beyond: :mod:`simulator.flash.spread`).

    Args: as :func:`flash_attn_backward`, without ``deterministic``.
    Returns:
        ``{"dq": (lo, hi), "dk": (lo, hi), "dv": (lo, hi)}``, arrays like dq, dk, dv (NumPy or
        CPU torch tensors as the inputs); ``lo == hi`` where no order changes the value. With
        kernel head dim 256 FA3 has no deterministic kernel, and this is also what
        ``deterministic=True`` gives there (FA3 refuses that flag).
    Raises:
        ValueError: as :func:`flash_attn_backward`.
    """
    call = BackwardCall(dout, q, k, v, out, softmax_lse, softmax_scale, causal, window_size,
                        softcap, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        seqused_q, seqused_k, sm_margin, memory_budget, progress, executor, gpu)
    res, tq = launch(call, False, spread=True)
    return {name: returned(res.spread[name], tq) for name in ("dq", "dk", "dv")}


def launch(args: BackwardCall, deterministic: bool, spread: bool):
    """One backward launch on ``args``:
    (a result with ``dq``, ``dk``, ``dv`` as NumPy arrays and ``spread`` (a dict, or None
    without ``spread``), whether q was a torch tensor)."""
    check_parallel(args.executor, args.progress, args.memory_budget, None)
    names = ("dout", "q", "k", "v", "out", "softmax_lse")
    arrs = {}
    tq = False
    for name in names:
        arrs[name], was = to_numpy(getattr(args, name), name)
        tq = tq or (name == "q" and was)
    arrs, dims = common_head_dim(arrs)
    window = check_window_size(args.window_size)
    sm = args.sm_margin
    if isinstance(sm, bool) or not isinstance(sm, (int, np.integer)) or sm < 0:
        raise ValueError(f"sm_margin: expected an int >= 0, got {sm!r}")
    scale = args.softmax_scale
    if dims is not None and scale is None:  # the interface's default, from q's own head dim
        scale = float(default_softmax_scale(dims[0]))
    kw = dict(softmax_scale=scale, causal=check_bool("causal", args.causal),
              window=window, softcap=args.softcap, deterministic=deterministic, spread=spread,
              memory_budget=args.memory_budget, progress=args.progress,
              executor=args.executor, gpu=args.gpu)
    used = args.seqused_q is not None or args.seqused_k is not None
    if args.cu_seqlens_q is None and args.cu_seqlens_k is None:
        d = arrs
        if not used:
            res = flash.backward(d["dout"], d["q"], d["k"], d["v"], d["out"], d["softmax_lse"],
                                 **kw)
        else:
            res = _batched_as_varlen(arrs, args, kw)
    else:
        res = _varlen(arrs, args, kw)
    return _cut_head_dims(res, dims), tq


def common_head_dim(arrs: dict):
    """``(arrays, dims)``: with V's head dim (v, out, dout) unlike Q's (q, k), the narrower
    group zero-padded to the wider one's, and ``dims = (d, dv)``; else ``(arrs, None)``.

    FA3's ``mha_bwd`` runs such a call on one kernel of head dim
    ``round_up_headdim(max(d, dv))`` for both (``params.d_rounded``; its tiles, and the
    deterministic refusal at 256, follow it); its loads of the narrower tensors fill the
    columns past their width with zeros (TMA out of bounds), which add exact zero products to
    the GEMMs and dPsum, and the stores write only the real columns. Modelled from
    hopper/flash_api.cpp (mha_bwd, run_mha_bwd_constexpr); the bits are to be checked
    against the library on the device (``simulator.measure.fa3_bwd_dv_record``). Arrays
    that are not 3-d / 4-d NumPy arrays are left for the checks to refuse.

    Raises:
        ValueError: with dv != d, k not of q's head dim or out / dout not of v's (v, when
            all of k, out and dout have q's), or out / dout not of q's other dims or v not
            of k's, naming it; q's or v's head dim not a multiple of 8 up to 256 (mha_bwd),
            naming q or v.
    """
    names_d, names_dv = ("q", "k"), ("v", "out", "dout")
    xs = [arrs[n] for n in names_d + names_dv]
    if not all(isinstance(x, np.ndarray) and x.ndim in (3, 4) for x in xs):
        return arrs, None
    d, dv = arrs["q"].shape[-1], arrs["v"].shape[-1]
    if d == dv:
        return arrs, None
    if all(arrs[n].shape[-1] == d for n in ("k", "out", "dout")):  # v alone differs
        raise ValueError(f"v: expected shape {arrs['k'].shape} (k's), or out and dout of V's "
                         f"head dim {dv} (FA3 takes dv != d), got {arrs['v'].shape}")
    for names, want, like in ((names_d, d, "q"), (names_dv, dv, "v")):
        for n in names:
            if arrs[n].shape[-1] != want:
                raise ValueError(f"{n}: expected head dim {want} ({like}'s; V's head dim "
                                 f"{dv} differs from Q's {d}), got {arrs[n].shape[-1]}")
    q, k = arrs["q"], arrs["k"]
    if k.ndim != q.ndim or (q.ndim == 4 and k.shape[0] != q.shape[0]):
        want_k = "[total_k, heads_kv, " if q.ndim == 3 else f"[{q.shape[0]}, seqlen_k, heads_kv, "
        raise ValueError(f"k: expected shape {want_k}{d}] (q's batch and head dim), got {k.shape}")
    for n, like in (("out", "q"), ("dout", "q"), ("v", "k")):  # mha_bwd's CHECK_SHAPEs
        want_shape = arrs[like].shape[:-1] + (dv,)
        if arrs[n].shape != want_shape:
            raise ValueError(f"{n}: expected shape {want_shape} ({like}'s with V's head dim "
                             f"{dv}), got {arrs[n].shape}")
    for n, w in (("q", d), ("v", dv)):  # mha_bwd's checks, before the padding hides them
        if w % 8 or w > 256:
            raise ValueError(f"{n}: head_dim must be a multiple of 8 from 8 to 256 (mha_bwd: "
                             f"'head_size{'_v' if n == 'v' else ''} should be a multiple of 8', "
                             f"at most 256), got {w} (Q's {d}, V's {dv})")
    width = max(d, dv)
    out = dict(arrs)
    for n in names_d if d < width else names_dv:
        x = arrs[n]
        padded = np.zeros(x.shape[:-1] + (width,), x.dtype)
        padded[..., : x.shape[-1]] = x
        out[n] = padded
    return out, (d, dv)


def _cut_head_dims(res, dims):
    """``res`` (dq, dk, dv and spread) with the padded columns of :func:`common_head_dim`
    dropped: dq and dk to d, dv to dv."""
    if dims is None:
        return res
    d, dv = dims
    widths = {"dq": d, "dk": d, "dv": dv}
    for name, w in widths.items():
        setattr(res, name, np.ascontiguousarray(getattr(res, name)[..., :w]))
    if res.spread is not None:
        res.spread = {n: tuple(np.ascontiguousarray(x[..., :widths[n]]) for x in pair)
                      for n, pair in res.spread.items()}
    return res


def _batched_as_varlen(a: dict, args: BackwardCall, kw: dict) -> _Varlen:
    """A [batch, seqlen, ...] launch with ``seqused_*``: FA3's varlen kernels with each batch
    entry a sequence of the full length at a fixed stride, the results reshaped back."""
    for name in ("dout", "q", "k", "v", "out"):
        x = a[name]
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            raise ValueError(f"{name}: expected a 4-d array [batch, seqlen, heads, head_dim], got "
                             f"{getattr(x, 'shape', type(x).__name__)}")
    b, sq, h = a["q"].shape[:3]
    sk = a["k"].shape[1]
    lse = a["softmax_lse"]
    if not isinstance(lse, np.ndarray) or lse.dtype != np.float32 or lse.shape != (b, h, sq):
        raise ValueError(f"softmax_lse: expected float32 [{b}, {h}, {sq}] (batch, heads, "
                         f"seqlen_q), got {getattr(lse, 'dtype', type(lse).__name__)} "
                         f"{getattr(lse, 'shape', '')}")
    flat = {n: a[n].reshape((-1,) + a[n].shape[2:]) for n in ("dout", "q", "k", "v", "out")}
    flat["softmax_lse"] = np.ascontiguousarray(np.moveaxis(lse, 1, 0).reshape(h, b * sq))
    cu = {"cu_seqlens_q": (np.arange(b + 1) * sq).astype(np.int32),
          "cu_seqlens_k": (np.arange(b + 1) * sk).astype(np.int32),
          "max_seqlen_q": sq, "max_seqlen_k": sk}
    res = _varlen(flat, replace(args, **cu), kw)
    like = (a["q"].shape, a["k"].shape, a["v"].shape)
    grads = [x.reshape(shape) for x, shape in zip(res, like, strict=True)]
    spread = None if res.spread is None else {
        n: tuple(x.reshape(shape) for x in res.spread[n])
        for n, shape in zip(("dq", "dk", "dv"), like, strict=True)}
    return _Varlen(*grads, spread)


class _Varlen:
    """dq, dk, dv (and spread) of a varlen launch, assembled sequence by sequence."""

    def __init__(self, dq, dk, dv, spread):
        self.dq, self.dk, self.dv, self.spread = dq, dk, dv, spread

    def __iter__(self):
        return iter((self.dq, self.dk, self.dv))


def _varlen(a: dict, args: BackwardCall, kw: dict) -> _Varlen:
    q, k, v, dout, out, lse = a["q"], a["k"], a["v"], a["dout"], a["out"], a["softmax_lse"]
    for name in ("dout", "q", "k", "v", "out"):
        x = a[name]
        if not isinstance(x, np.ndarray) or x.ndim != 3:
            raise ValueError(f"{name}: expected [total, heads, head_dim] with cu_seqlens, got "
                             f"{getattr(x, 'shape', type(x).__name__)}")
    if args.cu_seqlens_q is None or args.cu_seqlens_k is None:
        raise ValueError("cu_seqlens_q, cu_seqlens_k: a varlen backward needs both")
    cq = cu_seqlens(args.cu_seqlens_q, "cu_seqlens_q", q.shape[0])
    ck = cu_seqlens(args.cu_seqlens_k, "cu_seqlens_k", k.shape[0])
    if ck.shape != cq.shape:
        raise ValueError(f"cu_seqlens_k: expected {cq.shape[0]} offsets (as cu_seqlens_q), got "
                         f"{ck.shape[0]}")
    h = q.shape[1]
    for name, x, like in (("dout", dout, "q"), ("out", out, "q"), ("v", v, "k")):
        want = a[like].shape
        if x.shape != want:
            raise ValueError(f"{name}: expected shape {want} ({like}'s: total, heads, head_dim), got "
                             f"{x.shape}")
    if not isinstance(lse, np.ndarray) or lse.dtype != np.float32 or lse.shape != (h, q.shape[0]):
        raise ValueError(f"softmax_lse: expected float32 [{h}, {q.shape[0]}] (heads, total_q: "
                         f"FA3's varlen layout), got {getattr(lse, 'dtype', type(lse).__name__)} "
                         f"{getattr(lse, 'shape', '')}")
    lq = seqused(args.seqused_q, "seqused_q", np.diff(cq))
    lk = seqused(args.seqused_k, "seqused_k", np.diff(ck))
    msq = _max_seqlen(args.max_seqlen_q, "max_seqlen_q", lq)
    msk = _max_seqlen(args.max_seqlen_k, "max_seqlen_k", lk)
    # the launch's arguments once (dtypes, head dims, heads, softcap, deterministic), whatever
    # the sequences' lengths
    t = make_backward_config(dout[None], q[None], k[None], v[None], out[None], lse[None],
                             softmax_scale=kw["softmax_scale"], causal=kw["causal"],
                             window=kw["window"], softcap=kw["softcap"],
                             deterministic=kw["deterministic"], max_seqlen_q=msq,
                             max_seqlen_k=msk).tiles
    grads = [np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)]
    lows = [np.zeros_like(x) for x in grads]
    highs = [np.zeros_like(x) for x in grads]
    # "auto" decides once for all the sequences: five GEMMs a tile, masks not counted
    steps = int(((-(-lq.astype(np.int64) // t.kblock_m)) * (-(-lk.astype(np.int64) // t.kblock_n))).sum())
    with engine.launching(5 * steps * t.kblock_m * t.kblock_n * t.kernel_head_dim * q.shape[1]):
        for i in range(len(lq)):
            sq_, sk_ = slice(cq[i], cq[i] + lq[i]), slice(ck[i], ck[i] + lk[i])
            if lq[i] == 0 or lk[i] == 0:
                continue  # no K/V block or no m_block: zero gradients
            res = flash.backward(dout[None, sq_], q[None, sq_], k[None, sk_], v[None, sk_],
                                 out[None, sq_], np.ascontiguousarray(lse[None, :, sq_]),
                                 max_seqlen_q=msq, max_seqlen_k=msk, **kw)
            for j, (name, rows) in enumerate((("dq", sq_), ("dk", sk_), ("dv", sk_))):
                grads[j][rows] = getattr(res, name)[0]
                if res.spread is not None:
                    lows[j][rows], highs[j][rows] = (x[0] for x in res.spread[name])
    spread = None
    if kw["spread"]:
        spread = {n: (lows[j], highs[j]) for j, n in enumerate(("dq", "dk", "dv"))}
    return _Varlen(*grads, spread)


def _max_seqlen(m, name: str, lengths: np.ndarray) -> int:
    longest = int(lengths.max(initial=0))
    if m is None:
        return max(1, longest)
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < longest:
        raise ValueError(f"{name}: expected an int >= every sequence's length ({longest}), got {m!r}")
    return int(m)
