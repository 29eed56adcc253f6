"""``flash_attn_func``, ``flash_attn_varlen_func``, ``flash_attn_with_kvcache``,
``flash_attn_combine``: FA3's ``hopper/flash_attn_interface.py`` and the host code of
``hopper/flash_api.cpp`` (``mha_fwd``), over the kernel-level :func:`simulator.flash.forward`.

What the host side decides, as FA3 does:

* ``softmax_scale`` default ``head_dim ** -0.5`` (computed in Python by the interface);
* ``num_splits <= 0``: FA3's split heuristic (``get_num_splits``); above 1: the Split kernel
  (partial O and LSE in float32 per split) and the combine kernel;
* varlen launches (``cu_seqlens_*``, ``seqused_*``, ``cache_seqlens``, ``cache_leftpad``): each
  sequence runs with the launch's ``max_seqlen_q`` / ``max_seqlen_k`` (window normalisation, the
  seqlen_q == 1 rule) and, when split, its own split count (``simulator.fa3.scheduler``);
* the KV cache: ``cache_batch_idx`` picks the cache row, ``cache_leftpad`` its first key,
  ``cache_seqlens`` its length; new ``k`` / ``v`` are written into the caches in place at
  ``cache_seqlens`` and attended to.

PackGQA (``pack_gqa``) changes which rows share a tile, never a row's arithmetic
(docs/forward.md, "PackGQA"): accepted, with no effect on the bits. Not emulated (ValueError
naming the argument): ``qv``, ``attention_chunk``, rotary embeddings, paged KV, ``cu_seqlens_q`` /
``cu_seqlens_k_new`` with the KV cache, ``scheduler_metadata``.
"""

from __future__ import annotations

import numpy as np

from .. import flash
from ..flash.constants import host_constants
from ..flash.dispatch import check_head_dim, check_head_dim_v, fa3_dispatch
from ..flash.forward import DTYPES
from ..flash.masks import fa3_window, kernel_flags, normalize_window
from ..trace import Trace
from . import combine as _combine
from .scheduler import dynamic_num_splits

#: multiprocessors of the H200 (what FA3's split heuristic reads off the device)
H200_SMS = 132


# ---- arrays in and out (NumPy, or CPU torch tensors when torch is installed) -------------------
def _np(x, name: str):
    """(array, was_torch): a torch tensor becomes a NumPy array of the same bits."""
    if x is None or isinstance(x, np.ndarray):
        if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
            raise ValueError(f"{name}: expected a plain numpy array, got {type(x).__name__} "
                             "(a mask or subclass meaning would be lost)")
        return x, False
    mod = type(x).__module__
    if mod.startswith("torch"):
        return _from_torch(x, name), True
    if isinstance(x, (int, float, np.integer, np.floating)):
        return x, False
    raise ValueError(f"{name}: expected a numpy array or a CPU torch tensor, got {type(x).__name__}")


def _from_torch(t, name: str) -> np.ndarray:
    import ml_dtypes  # noqa: PLC0415
    import torch  # noqa: PLC0415 - optional

    if t.device.type != "cpu":
        raise ValueError(f"{name}: expected a CPU tensor, got one on {t.device}")
    t = t.detach().contiguous()  # the forward has no autograd; FA3 takes such tensors too
    views = {torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
             torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn)}
    if t.dtype in views:
        raw, dt = views[t.dtype]
        return t.view(raw).numpy().view(dt)
    return t.numpy()


def _write_back(orig, arr: np.ndarray) -> None:
    """Copy ``arr``'s bits into the caller's torch tensor ``orig`` (a view or non-contiguous
    tensor was copied by :func:`_from_torch`); nothing for NumPy arrays, written in place."""
    if not type(orig).__module__.startswith("torch"):
        return
    import torch  # noqa: PLC0415

    raw = np.ascontiguousarray(arr).view(np.int16 if arr.itemsize == 2 else np.uint8)
    orig.view(torch.int16 if arr.itemsize == 2 else torch.uint8).copy_(torch.from_numpy(raw))


def _to_torch(x: np.ndarray):
    import ml_dtypes  # noqa: PLC0415
    import torch  # noqa: PLC0415

    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(x))


def _ret(arrays, torch_out: bool):
    return tuple(_to_torch(a) for a in arrays) if torch_out else tuple(arrays)


def _int_array(x, name: str, length: int | None = None) -> np.ndarray | None:
    """An int32 [length] array (FA3 requires int32 tensors: "cu_seqlens_q must have dtype
    torch.int32", hopper/flash_api.cpp), as int64 values, or None."""
    if x is None:
        return None
    arr = np.asarray(x)
    if arr.dtype != np.int32:
        raise ValueError(f"{name}: FA3 requires dtype int32 (\"{name} must have dtype int32\"), "
                         f"got {arr.dtype}")
    if arr.ndim != 1 or (length is not None and arr.shape[0] != length):
        want = f"[{length}]" if length is not None else "1-d"
        raise ValueError(f"{name}: expected shape {want}, got {list(arr.shape)}")
    return arr.astype(np.int64)


def _refuse(**args) -> None:
    for name, value in args.items():
        if value is not None and value is not False and not (isinstance(value, (int, float)) and value == 0):
            raise ValueError(f"{name}: not emulated (the published FA3 build and this emulator "
                             f"cover the forward without it), got {type(value).__name__}")


def _check_scale(softmax_scale, head_dim: int, softcap: float = 0.0) -> float:
    scale = head_dim ** (-0.5) if softmax_scale is None else softmax_scale
    host_constants(head_dim, scale, softcap)  # a ValueError naming softmax_scale / softcap
    return scale


def _check_splits(num_splits) -> int:
    if isinstance(num_splits, bool) or not isinstance(num_splits, (int, np.integer)):
        raise ValueError(f"num_splits: expected an int (<= 0: FA3's heuristic), got {num_splits!r}")
    if num_splits > _combine.MAX_SPLITS:
        raise ValueError(f"num_splits: expected at most {_combine.MAX_SPLITS} (FA3: 'num_splits > 256 "
                         f"not supported'), got {int(num_splits)}")
    return int(num_splits)


def _check_fmt(q) -> str:
    fmt = DTYPES.get(q.dtype)
    if fmt is None:
        raise ValueError(f"q: expected dtype bfloat16, float16 or float8_e4m3fn, got {q.dtype}")
    return fmt


def _check_softcap(softcap) -> float:
    """softcap as a float (its range is host_constants'): a real number, not a bool or string."""
    if isinstance(softcap, (bool, np.bool_)) or not isinstance(softcap, (int, float, np.integer,
                                                                      np.floating)):
        raise ValueError(f"softcap: expected a float (0.0 = off), got {softcap!r}")
    return float(softcap)


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


def _check_sms(num_sms, sm_margin) -> int:
    """num_sms - sm_margin (FA3's params.num_sm), both ints."""
    for name, x in (("num_sms", num_sms), ("sm_margin", sm_margin)):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise ValueError(f"{name}: expected an int, got {x!r}")
    return int(num_sms) - int(sm_margin)


def _need_sms(sms: int, num_sms, sm_margin) -> int:
    if sms < 1:
        raise ValueError(f"sm_margin: num_sms - sm_margin must be >= 1 for FA3's split heuristic "
                         f"and scheduler, got {num_sms} - {sm_margin}")
    return sms


def _check_pack_gqa(pack_gqa, splits: bool, varlen: bool, heads: int, heads_kv: int) -> None:
    """pack_gqa: None, True or False. False with a split varlen GQA launch is refused: FA3's
    prepare kernel then counts unpacked tiles (its split counts change) while its Split kernel
    always packs (hopper/flash_api.cpp run_mha_fwd, prepare_varlen_num_blocks)."""
    if pack_gqa is not None and not isinstance(pack_gqa, (bool, np.bool_)):
        raise ValueError(f"pack_gqa: expected None, True or False, got {pack_gqa!r}")
    if pack_gqa is not None and not pack_gqa and splits and varlen and heads != heads_kv:
        raise ValueError("pack_gqa: False with splits in a varlen launch and GQA is not emulated "
                         "(FA3's prepare kernel would count unpacked tiles while its Split kernel "
                         "packs them); pass None or True")


def _check_descales(descales: dict, fmt: str, batch: int, heads_kv: int) -> dict:
    """Descales for a launch run one batch at a time: float32, e4m3 only, broadcast to
    [batch, heads_kv] (as :func:`simulator.flash.forward` checks them for a whole launch)."""
    out = {}
    for name, x in descales.items():
        if x is None:
            out[name] = None
            continue
        if fmt != "e4m3":
            raise ValueError(f"{name}: descales apply to e4m3 inputs only, got {fmt} inputs")
        arr = np.asarray(x)
        if arr.dtype != np.float32:
            raise ValueError(f"{name}: expected float32 (a scalar or [batch, heads_kv]), got {arr.dtype}")
        try:
            out[name] = np.broadcast_to(arr, (batch, heads_kv))
        except ValueError:
            raise ValueError(f"{name}: expected a scalar or shape [{batch}, {heads_kv}], "
                             f"got {arr.shape}") from None
    return out


# ---- one launch ----------------------------------------------------------------------------------
def _static_splits(num_splits: int, *, fmt, batch, heads, heads_kv, seqlen_q, seqlen_k, head_dim,
                   head_dim_v, causal, local, softcap, varlen, num_sms, window=(-1, -1)) -> int:
    """FA3's params.num_splits: the caller's, or ``get_num_splits`` for num_splits <= 0
    (``causal`` / ``local`` the kernel flags after mha_fwd's normalisation)."""
    if num_splits > 0:
        return num_splits
    return int(_combine.get_num_splits(
        batch, heads, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v, fmt, causal=causal,
        local=local, softcap=1.0 if softcap else 0.0, varlen=varlen,
        window_size=window if local else None, num_sms=num_sms))


def _kernel_flags(fmt, head_dim, head_dim_v, causal, window, max_q, max_k, softcap):
    """(Is_causal, Is_local, (kBlockM, kBlockN)) of the launch, as mha_fwd decides them.

    The tile is the kernel's, also for the per-batch split counts of a varlen launch. The
    source's ``prepare_varlen_num_blocks`` call names ``tile_size_fwd_sm90(d_rounded,
    dv_rounded)``, which differs for Q/K <= 64 with V in (64, 256) (kernel kHeadDimV 256), but
    the library on the H200 agrees with the kernel's tile there (head dims 48 / 96: 0 differing
    bits with it, thousands without; fa3_api_report.json)."""
    win = fa3_window(normalize_window(bool(causal), window), max_q, max_k)
    is_causal, is_local = kernel_flags(win)
    disp = fa3_dispatch(fmt, head_dim, max_q, causal=is_causal, local=is_local, softcap=softcap,
                        head_dim_v=head_dim_v)
    return is_causal, is_local, (disp.kblock_m, disp.kblock_n)


def _out_dtype(dt: np.dtype) -> np.dtype:
    import ml_dtypes  # noqa: PLC0415

    return np.dtype(ml_dtypes.bfloat16) if DTYPES[dt] == "e4m3" else np.dtype(dt)


def _forward(q, k, v, kw: dict, splits) -> tuple[np.ndarray, np.ndarray]:
    """The unsplit kernel (``splits`` None or 1: with a single split FA3's Split kernel writes
    the final output itself and the combine kernel skips the batch), or the Split kernel then
    the combine kernel."""
    if splits is None or splits == 1:
        res = flash.forward(q, k, v, **kw)
        return res.out, res.lse
    part = flash.forward(q, k, v, num_splits=splits, **kw)
    return _combine.combine(part.out, part.lse, _out_dtype(q.dtype), head_dim_v=v.shape[-1])


def _traced_forward(q, k, v, kw: dict, splits, b: int, wanted, record):
    """:func:`_forward` of batch (or sequence) ``b`` run as its own launch, recording the
    CTAs of ``wanted`` ((b, head, m_block) tuples) in ``record`` with their batch number."""
    mine = None if wanted is None else [(0, c[1], c[2]) for c in wanted if c[0] == b]
    if not mine:
        return _forward(q, k, v, kw, splits)
    res = flash.forward(q, k, v, **kw, trace=mine)
    for e in res.trace:
        e.cta = (b, e.cta[1], e.cta[2])
        record.events.append(e)
    return res.out, res.lse


def _with_trace(ret: tuple, record, full: bool):
    """FA3's return value, plus the Trace as a last item when one was asked for."""
    if record is not None:
        return ret + (record,)
    return ret if full else ret[0]


def _descale_rows(x, b: int | None):
    """A [batch, heads_kv] descale for one batch (varlen runs one sequence at a time)."""
    if x is None or b is None:
        return x
    return x[b: b + 1]


# ---- the API ---------------------------------------------------------------------------------------
def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None,
                    k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0,
                    softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0,
                    return_attn_probs=False, *, num_sms=H200_SMS, trace=None):
    """FA3's ``flash_attn_func`` (forward).

    Args:
        q: [batch, seqlen_q, heads, head_dim]; k: [batch, seqlen_k, heads_kv, head_dim];
            v: [batch, seqlen_k, heads_kv, head_dim_v]; bf16 / float16 / float8_e4m3fn NumPy
            arrays or CPU torch tensors; head_dim a multiple of 8 (16 for e4m3) up to 256;
            head_dim_v = head_dim, or a pair FA3 compiles (Q/K in (128, 192] with V in
            (96, 128]; Q/K <= 64 with V <= 512, bf16;
            :func:`simulator.flash.dispatch.check_head_dim_v`).
        softmax_scale: default ``head_dim ** -0.5``; causal, window_size, softcap: as FA3.
        q_descale, k_descale, v_descale: e4m3, float32 [batch, heads_kv] (or scalars).
        num_splits: 1 (default) the unsplit kernel; > 1 that many K/V splits and the combine
            kernel; <= 0 FA3's heuristic (``get_num_splits``, with ``num_sms - sm_margin``).
        pack_gqa, deterministic: accepted, no effect on the forward's bits.
        return_attn_probs: also return softmax_lse.
        num_sms: keyword-only: the GPU's multiprocessors (the H200's 132) for the heuristic.
        trace: keyword-only, not FA3's: None, or CTAs ``(batch, head, m_block)`` whose steps to
            record; unsplit launches only (``num_splits=1``).
    Returns:
        out [batch, seqlen_q, heads, head_dim_v] (bf16 for e4m3 inputs), and with
        ``return_attn_probs`` also softmax_lse float32 [batch, heads, seqlen_q]; with
        ``trace`` a :class:`simulator.trace.Trace` is appended to the returned tuple.
    Raises:
        ValueError: what FA3 refuses, with its rule, and the arguments not emulated.
    Source: hopper/flash_attn_interface.py, hopper/flash_api.cpp (mha_fwd).
    """
    _refuse(qv=qv, attention_chunk=attention_chunk)
    (q, tq), (k, _), (v, _) = _np(q, "q"), _np(k, "k"), _np(v, "v")
    descales = {n: _np(x, n)[0] for n, x in (("q_descale", q_descale), ("k_descale", k_descale),
                                             ("v_descale", v_descale))}
    _check_4d(q, k, v)
    fmt = _check_fmt(q)
    check_head_dim(q.shape[-1], fmt)
    softcap, return_attn_probs, sms, splits_arg = _check_options(
        softcap, causal, return_attn_probs, deterministic, num_sms, sm_margin, num_splits)
    b, sq, h, d = q.shape
    dv = v.shape[-1]
    check_head_dim_v(d, dv, fmt)
    is_causal, is_local, (tile_m, _) = _kernel_flags(fmt, d, dv, causal, window_size, sq,
                                                     k.shape[1], softcap)
    static = 1 if splits_arg == 1 else _static_splits(
        splits_arg, fmt=fmt, batch=b, heads=h, heads_kv=k.shape[2], seqlen_q=sq,
        seqlen_k=k.shape[1], head_dim=d, head_dim_v=dv, causal=is_causal,
        local=is_local, softcap=softcap > 0,
        varlen=False, num_sms=_need_sms(sms, num_sms, sm_margin) if splits_arg <= 0 else sms,
        window=tuple(window_size))
    _check_pack_gqa(pack_gqa, static > 1, False, h, k.shape[2])
    kw = dict(softmax_scale=_check_scale(softmax_scale, d, softcap), causal=causal,
              window=tuple(window_size), softcap=softcap, **descales)
    wanted = _trace_ctas(trace, static, h, [sq] * b, tile_m)
    record = None if wanted is None else Trace()
    if k.shape[1] == 0 and v.shape[:3] == k.shape[:3]:  # total_k == 0: O = 0, LSE = +inf
        flash.forward(q, k, v, **kw)  # validates every argument
        out = np.zeros((b, sq, h, dv), dtype=_out_dtype(q.dtype))
        lse = np.full((b, h, sq), np.inf, dtype=np.float32)
    elif wanted:
        res = flash.forward(q, k, v, **kw, trace=wanted)
        out, lse = res.out, res.lse
        record.events.extend(res.trace)
    else:
        out, lse = _forward(q, k, v, kw, static if static > 1 else None)
    return _with_trace(_ret((out, lse) if return_attn_probs else (out,), tq), record,
                       return_attn_probs)


def _check_options(softcap, causal, return_attn_probs, deterministic, num_sms, sm_margin,
                   num_splits):
    """The scalar options flash_attn_func and flash_attn_varlen_func share, checked in one
    order: (softcap as a float, return_attn_probs as a bool, usable SMs, num_splits)."""
    softcap = _check_softcap(softcap)
    _check_bool("causal", causal)
    return_attn_probs = _check_bool("return_attn_probs", return_attn_probs)
    _check_bool("deterministic", deterministic)
    return softcap, return_attn_probs, _check_sms(num_sms, sm_margin), _check_splits(num_splits)


def _check_4d(q, k, v) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            raise ValueError(f"{name}: expected [batch, seqlen, heads, head_dim], got "
                             f"{getattr(x, 'shape', type(x).__name__)}")


def _cu(cu, name: str, total: int) -> np.ndarray:
    """cu_seqlens: int32 [batch + 1], starting at 0, non-decreasing, ending within ``total``."""
    arr = _int_array(_np(cu, name)[0], name)
    if arr is None or arr.shape[0] < 2 or arr[0] != 0 or np.any(np.diff(arr) < 0) or arr[-1] > total:
        raise ValueError(f"{name}: expected [batch + 1] int32 offsets from 0, non-decreasing, "
                         f"at most {total} (the packed length), got "
                         f"{None if arr is None else arr.tolist()[:8]}")
    return arr


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           seqused_q=None, seqused_k=None, softmax_scale=None, causal=False,
                           qv=None, q_descale=None, k_descale=None, v_descale=None,
                           window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                           pack_gqa=None, deterministic=False, sm_margin=0,
                           return_attn_probs=False, *, num_sms=H200_SMS, trace=None):
    """FA3's ``flash_attn_varlen_func`` (forward): packed sequences.

    Args:
        q: [total_q, heads, head_dim]; k: [total_k, heads_kv, head_dim]; v: [total_k,
            heads_kv, head_dim_v].
        cu_seqlens_q, cu_seqlens_k: int32 [batch + 1] offsets of each sequence.
        max_seqlen_q, max_seqlen_k: ints at least every sequence's length (FA3 takes them as
            given: they set the dispatch and the window normalisation).
        seqused_q, seqused_k: int32 [batch] or None: rows / keys of each sequence actually
            used (later query rows are not written by FA3: their out rows are 0 here and their
            LSE -inf; compare them only where FA3 writes).
        others: as :func:`flash_attn_func`.
        trace: keyword-only, not FA3's: None, or CTAs ``(sequence, head, m_block)`` (m_block
            within the sequence) whose steps to record; unsplit launches only
            (``num_splits=1``).
    Returns:
        out [total_q, heads, head_dim_v], and with ``return_attn_probs`` softmax_lse float32
        [heads, total_q]; with ``trace`` a :class:`simulator.trace.Trace` is appended to the
        returned tuple (``(out, trace)`` or ``(out, lse, trace)``).
    Raises:
        ValueError: bad offsets or lengths (naming the argument), what FA3 refuses.
    Source: hopper/flash_api.cpp (mha_fwd, is_varlen), hopper/seqlen.h.
    """
    _refuse(qv=qv, attention_chunk=attention_chunk)
    (q, tq), (k, _), (v, _) = _np(q, "q"), _np(k, "k"), _np(v, "v")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray) or x.ndim != 3:
            raise ValueError(f"{name}: expected [total, heads, head_dim], got "
                             f"{getattr(x, 'shape', type(x).__name__)}")
    cq, ck = _cu(cu_seqlens_q, "cu_seqlens_q", q.shape[0]), _cu(cu_seqlens_k, "cu_seqlens_k", k.shape[0])
    batch = cq.shape[0] - 1
    if ck.shape[0] != batch + 1:
        raise ValueError(f"cu_seqlens_k: expected {batch + 1} offsets (as cu_seqlens_q), got {ck.shape[0]}")
    len_q = _seqused(seqused_q, "seqused_q", np.diff(cq))
    len_k = _seqused(seqused_k, "seqused_k", np.diff(ck))
    for name, m, lens in (("max_seqlen_q", max_seqlen_q, len_q), ("max_seqlen_k", max_seqlen_k, len_k)):
        longest = max(1, int(lens.max(initial=0)))
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < longest:
            raise ValueError(f"{name}: expected an int >= every sequence's length ({longest}), "
                             f"got {m!r}")
    fmt, d, h, hkv = _check_fmt(q), q.shape[-1], q.shape[1], k.shape[1]
    descales = _check_descales({n: _np(x, n)[0] for n, x in (
        ("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))},
        fmt, batch, hkv)
    check_head_dim(d, fmt)
    if k.dtype != q.dtype or v.dtype != q.dtype or k.shape[:2] != v.shape[:2] or k.shape[-1] != d:
        raise ValueError(f"k, v: expected [total_k, heads_kv, head_dim={d}] and [total_k, heads_kv, "
                         f"head_dim_v] in {q.dtype} (as q), got {k.shape} {k.dtype} / {v.shape} {v.dtype}")
    dv = v.shape[-1]
    check_head_dim_v(d, dv, fmt)
    if hkv < 1 or h % hkv:
        raise ValueError(f"k: heads_kv = {hkv} must divide heads = {h}")
    softcap, return_attn_probs, sms, splits_arg = _check_options(
        softcap, causal, return_attn_probs, deterministic, num_sms, sm_margin, num_splits)
    is_causal, is_local, (tile_m, tile_n) = _kernel_flags(fmt, d, dv, causal, window_size,
                                                          max_seqlen_q, max_seqlen_k, softcap)
    static = 1 if splits_arg == 1 else _static_splits(
        splits_arg, fmt=fmt, batch=batch, heads=h, heads_kv=hkv, seqlen_q=max_seqlen_q,
        seqlen_k=max_seqlen_k, head_dim=d, head_dim_v=dv, causal=is_causal,
        local=is_local, softcap=softcap > 0,
        varlen=True, num_sms=_need_sms(sms, num_sms, sm_margin), window=tuple(window_size))
    _check_pack_gqa(pack_gqa, static > 1, True, h, hkv)
    wanted = _trace_ctas(trace, static, h, len_q, tile_m, "sequence")
    record = None if wanted is None else Trace()
    splits = dynamic_num_splits(len_q, len_k, kblock_m=tile_m, kblock_n=tile_n,
                                heads=h, heads_kv=hkv, num_sms=sms,
                                num_splits_static=static, pack_gqa=True) if static > 1 else None
    out = np.zeros(q.shape[:2] + (dv,), dtype=_out_dtype(q.dtype))
    # total_k == 0: FA3 skips the kernel and fills LSE with +inf (mha_fwd)
    lse = np.full((h, q.shape[0]), np.inf if k.shape[0] == 0 else -np.inf, dtype=np.float32)
    scale = _check_scale(softmax_scale, d, softcap)
    for bi in range(batch):
        sq_b = int(len_q[bi])
        if sq_b == 0:
            continue
        qs, ks = slice(cq[bi], cq[bi] + sq_b), slice(ck[bi], ck[bi] + int(len_k[bi]))
        kb, vb = k[None, ks], v[None, ks]
        if kb.shape[1] == 0:  # no key: FA3 writes O = 0, LSE = -inf
            continue
        kw = dict(softmax_scale=scale, causal=causal, window=tuple(window_size), softcap=softcap,
                  max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                  **{n: _descale_rows(x, bi) for n, x in descales.items()})
        o, l_ = _traced_forward(q[None, qs], kb, vb, kw, None if splits is None else int(splits[bi]),
                                bi, wanted, record)
        out[qs], lse[:, qs] = o[0], l_[0]
    return _with_trace(_ret((out, lse) if return_attn_probs else (out,), tq), record,
                       return_attn_probs)


def _trace_ctas(trace, static_splits: int, heads: int, rows, kblock_m: int,
                what: str = "batch") -> list[tuple[int, int, int]] | None:
    """``trace`` of the API functions: None, or (``what``, head, m_block) tuples inside the
    launch's grid: ``what`` in 0..len(rows)-1, head in 0..heads-1, m_block below
    ceil(rows[b] / kblock_m) (``rows``: query rows per batch or sequence)."""
    if trace is None:
        return None
    if static_splits > 1:
        raise ValueError("trace: recorded for unsplit launches only; pass num_splits=1")
    try:
        ctas = [tuple(c) for c in trace]
    except TypeError:
        raise ValueError(f"trace: expected an iterable of ({what}, head, m_block), got {trace!r}") from None
    rows = [int(r) for r in rows]
    for c in ctas:
        ok = len(c) == 3 and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                                 for x in c)
        if not ok or not 0 <= c[0] < len(rows):
            raise ValueError(f"trace: CTA {c!r} is not ({what} 0..{len(rows) - 1}, head, m_block)")
        m_blocks = -(-rows[c[0]] // kblock_m)
        if not 0 <= c[1] < heads or not 0 <= c[2] < m_blocks:
            raise ValueError(f"trace: CTA {c!r} is outside the grid: heads 0..{heads - 1}, and "
                             f"{what} {c[0]} ({rows[c[0]]} query rows, kBlockM {kblock_m}) has "
                             + (f"m_blocks 0..{m_blocks - 1}" if m_blocks else "no m_block"))
    return [tuple(int(x) for x in c) for c in ctas]


def _seqused(x, name: str, lengths: np.ndarray) -> np.ndarray:
    """seqused_*: [batch] ints within the cu_seqlens lengths, or the lengths themselves."""
    arr = _int_array(_np(x, name)[0], name, lengths.shape[0])
    if arr is None:
        return lengths.astype(np.int64)
    if np.any(arr < 0) or np.any(arr > lengths):
        raise ValueError(f"{name}: expected values in 0..the sequence's length "
                         f"{lengths.tolist()[:8]}, got {arr.tolist()[:8]}")
    return arr


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, page_table=None, cu_seqlens_q=None,
                            cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                            rotary_interleaved=True, scheduler_metadata=None, num_splits=0,
                            pack_gqa=None, sm_margin=0, return_softmax_lse=False, *,
                            num_sms=H200_SMS, trace=None):
    """FA3's ``flash_attn_with_kvcache`` (decode and chunked prefill against a KV cache).

    Args:
        q: [batch, seqlen_q, heads, head_dim].
        k_cache, v_cache: [batch_cache, seqlen_cache, heads_kv, head_dim] and [..., head_dim_v];
            updated in place when ``k`` / ``v`` are given (NumPy arrays and CPU torch
            tensors, views included).
        k, v: [batch, seqlen_new, heads_kv, head_dim] and [..., head_dim_v], or None:
            appended at ``cache_seqlens``.
        cache_seqlens: int or int32 [batch]: keys in the cache per batch (default: all).
        cache_batch_idx: int32 [batch] or None: the cache row of each batch.
        cache_leftpad: int32 [batch] or None: the first valid key of each cache row.
        num_splits: 0 (default) FA3's heuristic, 1 unsplit, > 1 at most that many splits;
            with ``cache_seqlens`` each batch's count comes from FA3's prepare kernel
            (:func:`simulator.fa3.scheduler.dynamic_num_splits`).
        others: as :func:`flash_attn_func`; ``return_softmax_lse`` returns (out, lse).
        trace: keyword-only, not FA3's: None, or CTAs ``(batch, head, m_block)`` to record;
            unsplit launches only (``num_splits=1``).
    Returns:
        out [batch, seqlen_q, heads, head_dim_v], and softmax_lse [batch, heads, seqlen_q] with
        ``return_softmax_lse``; with ``trace`` a :class:`simulator.trace.Trace` is appended.
    Raises:
        ValueError: what FA3 refuses (a cache too short for the new keys, head counts that do
            not divide, ...), naming the argument; the arguments not emulated.
    Source: hopper/flash_attn_interface.py, hopper/flash_api.cpp (mha_fwd, AppendKV),
    hopper/seqlen.h (leftpad), hopper/flash_prepare_scheduler.cu.
    """
    _refuse(qv=qv, rotary_cos=rotary_cos, rotary_sin=rotary_sin, page_table=page_table,
            cu_seqlens_q=cu_seqlens_q, cu_seqlens_k_new=cu_seqlens_k_new,
            rotary_seqlens=rotary_seqlens, attention_chunk=attention_chunk,
            scheduler_metadata=scheduler_metadata)
    (q, tq), (kc, _), (vc, _) = _np(q, "q"), _np(k_cache, "k_cache"), _np(v_cache, "v_cache")
    (kn, _), (vn, _) = _np(k, "k"), _np(v, "v")
    _check_4d(q, kc, vc)
    b, sq, h, d = q.shape
    bc, s_cache, hkv, _ = kc.shape
    if (kn is None) != (vn is None):
        raise ValueError("k, v: give both new keys and new values, or neither")
    if q.dtype != kc.dtype or kc.dtype != vc.dtype:
        raise ValueError(f"q, k_cache, v_cache: dtypes differ ({q.dtype}, {kc.dtype}, {vc.dtype})")
    if kc.shape[:3] != vc.shape[:3]:
        raise ValueError(f"k_cache, v_cache: expected the same [batch_cache, seqlen_cache, heads_kv], "
                         f"got {kc.shape} and {vc.shape}")
    dv = vc.shape[-1]
    if b < 1 or sq < 1 or h < 1:
        raise ValueError(f"q: batch, seqlen_q and heads must be >= 1, got {q.shape}")
    if kc.shape[-1] != d:
        raise ValueError(f"k_cache: expected head_dim {d} (as q), got shape {kc.shape}")
    if hkv < 1 or h % hkv:
        raise ValueError(f"k_cache: heads_kv = {hkv} must divide heads = {h}")
    fmt = _check_fmt(q)
    softcap = _check_softcap(softcap)
    _check_bool("causal", causal)
    return_softmax_lse = _check_bool("return_softmax_lse", return_softmax_lse)
    sms = _check_sms(num_sms, sm_margin)
    splits_arg = _check_splits(num_splits)
    if isinstance(cache_seqlens, (int, np.integer)) and not isinstance(cache_seqlens, bool):
        if not 0 <= cache_seqlens <= s_cache:
            raise ValueError(f"cache_seqlens: expected 0..{s_cache} (the cache length), "
                             f"got {cache_seqlens}")
    seqlens = (np.full(b, s_cache, np.int64) if cache_seqlens is None else
               np.full(b, int(cache_seqlens), np.int64)
               if isinstance(cache_seqlens, (int, np.integer)) and not isinstance(cache_seqlens, bool)
               else _int_array(_np(cache_seqlens, "cache_seqlens")[0], "cache_seqlens", b))
    rows = (np.arange(b) if cache_batch_idx is None else
            _int_array(_np(cache_batch_idx, "cache_batch_idx")[0], "cache_batch_idx", b))
    left = (np.zeros(b, np.int64) if cache_leftpad is None else
            _int_array(_np(cache_leftpad, "cache_leftpad")[0], "cache_leftpad", b))
    if np.any((rows < 0) | (rows >= bc)):
        raise ValueError(f"cache_batch_idx: expected rows in 0..{bc - 1}, got {rows.tolist()[:8]}")
    if cache_batch_idx is None and bc != b:
        raise ValueError(f"k_cache: batch_size must be equal to batch_size_k ({b} vs {bc})")
    s_new = 0 if kn is None else kn.shape[1]
    if kn is not None:
        if kn.ndim != 4 or kn.shape != (b, s_new, hkv, d) or vn.shape != (b, s_new, hkv, dv) or \
                kn.dtype != q.dtype or vn.dtype != q.dtype:
            raise ValueError(f"k, v: expected [batch={b}, seqlen_new, heads_kv={hkv}, head_dim={d}] "
                             f"and [..., head_dim_v={dv}] in {q.dtype}, got {kn.shape} {kn.dtype} / "
                             f"{vn.shape} {vn.dtype}")
        check_head_dim(d, _check_fmt(q))
        check_head_dim_v(d, dv, _check_fmt(q))  # FA3's refusal of the pair comes first
        if dv < d:
            raise ValueError(f"v: appending new values with head_dim_v {dv} < head_dim {d} is not "
                             f"emulated: FA3's AppendKV writes {d} values per V row, past the row's "
                             f"{dv}, zeroing the cache's next values (measured on the H200)")
        if cache_seqlens is None:
            raise ValueError("cache_seqlens: FA3 requires it when k, v are appended "
                             "('If k_new is supplied, seqlens_k must also be passed in')")
        if sq > s_cache:
            raise ValueError(f"q: with new k, v FA3 requires seqlen_q <= the cache's length "
                             f"({sq} > {s_cache})")
    if np.any(seqlens < 0) or np.any(seqlens + s_new > s_cache):
        raise ValueError(f"cache_seqlens: expected 0..{s_cache - s_new} (the cache length minus the "
                         f"new keys), got {seqlens.tolist()[:8]}")
    if np.any(left < 0) or np.any(left > seqlens):
        raise ValueError(f"cache_leftpad: expected 0..cache_seqlens, got {left.tolist()[:8]}")
    check_head_dim(d, fmt)
    check_head_dim_v(d, dv, fmt)
    varlen = cache_seqlens is not None or cache_leftpad is not None  # seqused_k / leftpad_k given
    is_causal, is_local, (tile_m, tile_n) = _kernel_flags(fmt, d, dv, causal, window_size, sq,
                                                          s_cache, softcap)
    static = 1 if splits_arg == 1 else _static_splits(
        splits_arg, fmt=fmt, batch=b, heads=h, heads_kv=hkv, seqlen_q=sq, seqlen_k=s_cache,
        head_dim=d, head_dim_v=dv, causal=is_causal,
        local=is_local, softcap=softcap > 0, varlen=varlen,
        num_sms=_need_sms(sms, num_sms, sm_margin), window=tuple(window_size))
    _check_pack_gqa(pack_gqa, static > 1, varlen, h, hkv)
    descales = _check_descales({n: _np(x, n)[0] for n, x in (
        ("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))}, fmt, b, hkv)
    scale = _check_scale(softmax_scale, d, softcap)
    if kn is not None:
        for name, c in (("k_cache", kc), ("v_cache", vc)):
            if not c.flags.writeable:
                raise ValueError(f"{name}: read-only, but the new k, v are written into it in place")
    if kn is not None:  # AppendKV: the new keys land in the cache, in place
        for bi in range(b):
            at = slice(int(seqlens[bi]), int(seqlens[bi]) + s_new)
            kc[rows[bi], at], vc[rows[bi], at] = kn[bi], vn[bi]
        for orig, arr in ((k_cache, kc), (v_cache, vc)):
            _write_back(orig, arr)
    # varlen (seqused_k / leftpad_k): the prepare kernel's per-batch counts; else the static one
    splits = None if static <= 1 else np.full(b, static, np.int64) if not varlen else dynamic_num_splits(
        np.full(b, sq), seqlens, kblock_m=tile_m, kblock_n=tile_n, heads=h,
        heads_kv=hkv, num_sms=sms, num_splits_static=static, pack_gqa=True, leftpad_k=left,
        seqlens_k_new=np.full(b, s_new))
    wanted = _trace_ctas(trace, static, h, [sq] * b, tile_m)
    record = None if wanted is None else Trace()
    out = np.zeros((b, sq, h, dv), dtype=_out_dtype(q.dtype))
    # total_k + total_k_new == 0 (an empty cache): FA3 skips the kernel, LSE = +inf (mha_fwd)
    lse = np.full((b, h, sq), np.inf if s_cache == 0 else -np.inf, dtype=np.float32)
    for bi in range(b):
        keys = slice(int(left[bi]), int(seqlens[bi]) + s_new)
        kb, vb = kc[None, rows[bi], keys], vc[None, rows[bi], keys]
        if kb.shape[1] == 0:
            continue
        kw = dict(softmax_scale=scale, causal=causal, window=tuple(window_size), softcap=softcap,
                  max_seqlen_q=sq, max_seqlen_k=s_cache,
                  **{n: _descale_rows(x, bi) for n, x in descales.items()})
        o, l_ = _traced_forward(q[bi: bi + 1], kb, vb, kw, None if splits is None else int(splits[bi]),
                                bi, wanted, record)
        out[bi], lse[bi] = o[0], l_[0]
    return _with_trace(_ret((out, lse) if return_softmax_lse else (out,), tq), record,
                       return_softmax_lse)


def _combine_out_dtype(out_dtype) -> np.dtype:
    """``out_dtype`` of :func:`flash_attn_combine`: None (float32), a NumPy dtype or a torch
    dtype of float32, bfloat16 or float16 (mha_combine: "Output type must be FP32, FP16 or
    BF16")."""
    import ml_dtypes  # noqa: PLC0415

    names = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
    if out_dtype is None:
        return np.dtype(np.float32)
    key = str(out_dtype).removeprefix("torch.")
    try:
        key = key if key in names else str(np.dtype(out_dtype))
    except TypeError:
        pass
    if key not in names:
        raise ValueError(f"out_dtype: expected None, float32, bfloat16 or float16 (a NumPy or torch "
                         f"dtype), got {out_dtype!r}")
    return np.dtype(names[key])


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """FA3's ``flash_attn_combine`` (``mha_combine``): merge per-split partial outputs.

    Args:
        out_partial: float32 [num_splits, batch, seqlen, heads, head_dim];
        lse_partial: float32 [num_splits, batch, seqlen, heads] (``mha_combine``'s layouts;
            FA3 also needs the LSE's memory contiguous along seqlen, as the Split kernel writes
            it: NumPy arrays of any memory layout are accepted here).
        out: must be None (results are returned, not written in place).
        out_dtype: float32 (FA3's default: the partials' dtype), bfloat16 or float16.
    Returns:
        (out [batch, seqlen, heads, head_dim] in ``out_dtype``, softmax_lse float32 in the
        layout :func:`simulator.fa3.combine.combine` documents for ``layout="combine"``), as
        FA3's combine kernel computes them.
    Raises:
        ValueError: a shape or dtype ``mha_combine`` refuses, or ``out`` given.
    Source: hopper/flash_api.cpp (mha_combine), hopper/flash_fwd_combine_kernel.h.
    """
    if out is not None:
        raise ValueError("out: not supported (NumPy results are returned, not written in place)")
    (op, t), (lp, _) = _np(out_partial, "out_partial"), _np(lse_partial, "lse_partial")
    for name, x in (("out_partial", op), ("lse_partial", lp)):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32:
            raise ValueError(f"{name}: FA3's combine takes float32 partials, got "
                             f"{getattr(x, 'dtype', type(x).__name__)}")
    res = _combine.combine(op, lp, _combine_out_dtype(out_dtype), head_dim_v=op.shape[-1],
                           layout="combine")
    return _ret(res, t)
