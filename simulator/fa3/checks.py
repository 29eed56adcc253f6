"""Argument checks of :mod:`simulator.fa3`: FA3's rules on the host side
(hopper/flash_api.cpp ``mha_fwd``'s TORCH_CHECKs, hopper/flash_attn_interface.py), each
raising ValueError with the argument's name, what was expected and what was given.
"""

from __future__ import annotations

import numpy as np

from ..flash import chunks
from ..flash.config import input_format
from ..flash.constants import host_constants
from ..flash.masks import normalize_window
from ..gpus import get_gpu
from ..numerics.bits import is_int
from .arrays import to_numpy

#: FA3's limit on splits (mha_fwd and mha_combine: "num_splits > 256 not supported")
MAX_SPLITS = 256


def check_int(name: str, value, least: int | None = None, most: int | None = None) -> int:
    """``value`` as an int within ``least`` .. ``most`` (either bound optional); not a bool.

    Raises:
        ValueError: naming ``name``, with the bound or the type given.
    """
    if isinstance(value, bool) or not is_int(value):
        raise ValueError(f"{name}: expected an int, got {value!r} ({type(value).__name__})")
    v = int(value)
    if least is not None and v < least:
        raise ValueError(f"{name}: expected an int >= {least}, got {v}")
    if most is not None and v > most:
        raise ValueError(f"{name}: expected an int <= {most}, got {v}")
    return v


def check_window_size(window_size) -> tuple[int, int]:
    """``window_size`` as two Python ints (FA3's interface reads ``window_size[0]`` and
    ``window_size[1]``: a tuple, list or 2-element integer tensor), checked under FA3's name.

    Raises:
        ValueError: not two ints in -1 .. 2^63 - 1, naming ``window_size``.
    """
    return normalize_window(False, window_size, "window_size")


def check_bool(name: str, value) -> bool:
    """``value`` as a bool: only True or False (Python's or NumPy's), never a truthy int or str.

    Raises:
        ValueError: ``"{name}: expected True or False, got {value!r}"``.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


def int_array(x, name: str, length: int | None = None) -> np.ndarray | None:
    """An int32 [length] array (FA3 requires int32 tensors: "cu_seqlens_q must have dtype
    torch.int32", hopper/flash_api.cpp), as int64 values, or None."""
    if x is None:
        return None
    if not isinstance(x, np.ndarray):  # np.asarray would call a plain 3 or [0, 3] "int64"
        raise ValueError(f"{name}: expected an int32 array (NumPy or torch), got "
                         f"{type(x).__name__} {x!r:.60}")
    arr = x
    if arr.dtype != np.int32:
        raise ValueError(f"{name}: FA3 requires dtype int32 (\"{name} must have dtype int32\"), "
                         f"got {arr.dtype}")
    if arr.ndim != 1 or (length is not None and arr.shape[0] != length):
        want = f"[{length}]" if length is not None else "1-d"
        raise ValueError(f"{name}: expected shape {want}, got {list(arr.shape)}")
    return arr.astype(np.int64)


def check_fmt(q) -> str:
    """The format name of ``q``'s dtype ("bf16", "f16", "e4m3"); ValueError for another."""
    fmt = input_format(q.dtype)
    if fmt is None:
        raise ValueError(f"q: expected dtype bfloat16, float16 or float8_e4m3fn, got {q.dtype}")
    return fmt


def check_softcap(softcap) -> float:
    """softcap as a float (its range is host_constants'): a real number, not a bool or string."""
    if isinstance(softcap, (bool, np.bool_)) or not isinstance(softcap, (int, float, np.integer,
                                                                      np.floating)):
        raise ValueError(f"softcap: expected a float (0.0 = off), got {softcap!r}")
    return float(softcap)


def check_scale(softmax_scale, head_dim: int, softcap: float = 0.0, qv_dim: int = 0) -> float:
    """softmax_scale, default ``(head_dim + qv_dim) ** -0.5`` (flash_attn_interface.py computes
    it in Python, adding qv's head dim when qv is given); host_constants' ValueError names
    softmax_scale or softcap when out of range."""
    scale = (head_dim + qv_dim) ** (-0.5) if softmax_scale is None else softmax_scale
    host_constants(head_dim, scale, softcap)  # a ValueError naming softmax_scale / softcap
    return scale


def check_splits(num_splits) -> int:
    """num_splits as an int, at most :data:`MAX_SPLITS` (<= 0 asks for FA3's heuristic)."""
    if isinstance(num_splits, bool) or not isinstance(num_splits, (int, np.integer)):
        raise ValueError(f"num_splits: expected an int (<= 0: FA3's heuristic), got {num_splits!r}")
    if num_splits > MAX_SPLITS:
        raise ValueError(f"num_splits: expected at most {MAX_SPLITS} (FA3: 'num_splits > 256 "
                         f"not supported'), got {int(num_splits)}")
    return int(num_splits)


def gpu_sms(gpu, num_sms):
    """FA3's ``num_sms`` on ``gpu``: the caller's override, or (None) the SM count of the GPU
    record (:mod:`simulator.gpus`; an unknown GPU raises ValueError naming ``gpu``)."""
    record = get_gpu(gpu)
    return record.sm_count if num_sms is None else num_sms


def check_sms(num_sms, sm_margin) -> int:
    """num_sms - sm_margin (FA3's params.num_sm), both ints."""
    for name, x in (("num_sms", num_sms), ("sm_margin", sm_margin)):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise ValueError(f"{name}: expected an int, got {x!r}")
    return int(num_sms) - int(sm_margin)


def need_sms(sms: int, num_sms, sm_margin) -> int:
    """``sms`` (num_sms - sm_margin) when FA3's heuristic or scheduler needs it: >= 1."""
    if sms < 1:
        raise ValueError(f"sm_margin: num_sms - sm_margin must be >= 1 for FA3's split heuristic "
                         f"and scheduler, got {num_sms} - {sm_margin}")
    return sms


def check_options(softcap, causal, num_sms, sm_margin, num_splits, **flags):
    """The scalar options of flash_attn_func, flash_attn_varlen_func and
    flash_attn_with_kvcache, checked in one order: softcap, causal, the boolean ``flags`` in
    the order given (``return_attn_probs`` and ``deterministic``, or ``return_softmax_lse``),
    num_sms and sm_margin, num_splits.

    Returns:
        ``(softcap, flags, sms, num_splits)``: softcap as a float, the flags as a list of
        bools in the order given, ``num_sms - sm_margin`` and num_splits as ints.
    Raises:
        ValueError: the first option of the wrong type or range, naming it.
    """
    softcap = check_softcap(softcap)
    check_bool("causal", causal)
    values = [check_bool(name, value) for name, value in flags.items()]
    return softcap, values, check_sms(num_sms, sm_margin), check_splits(num_splits)


def check_parallel(executor, progress, memory_budget, trace) -> None:
    """``executor``, ``progress`` and ``memory_budget`` as :func:`simulator.flash.forward`
    takes them, checked before any work (the KV cache is written in place before the first
    forward call); ``trace`` only without an executor (the forward's rule).

    Raises:
        TypeError: an executor without ``submit``, a progress that is not None, a bool or a
            callable; ValueError: an executor that was shut down, a memory_budget that is not a
            positive int, or a trace asked for with an executor.
    """
    chunks.check_executor(executor)
    check_open(executor)
    chunks.check_progress(progress)
    chunks.check_budget(memory_budget)
    if executor is not None and trace is not None:
        raise ValueError("trace: not recorded with an executor; trace a serial call "
                         "(executor=None)")


def check_open(executor) -> None:
    """Raise ValueError, naming the argument, when ``executor`` takes no more tasks (shut down):
    one no-op task is submitted, which such an executor refuses with a RuntimeError."""
    if executor is None:
        return
    try:
        executor.submit(int)
    except RuntimeError as exc:
        raise ValueError(f"executor: it takes no more tasks ({exc}); pass an executor that is "
                         "not shut down") from None


def check_pack_gqa(pack_gqa, splits: bool, varlen: bool, heads: int, heads_kv: int) -> None:
    """pack_gqa: None, True or False. False with a split varlen GQA launch is refused: FA3's
    prepare kernel then counts unpacked tiles (its split counts change) while its Split kernel
    always packs (hopper/flash_api.cpp run_mha_fwd, prepare_varlen_num_blocks)."""
    if pack_gqa is not None and not isinstance(pack_gqa, (bool, np.bool_)):
        raise ValueError(f"pack_gqa: expected None, True or False, got {pack_gqa!r}")
    if pack_gqa is not None and not pack_gqa and splits and varlen and heads != heads_kv:
        raise ValueError("pack_gqa: False with splits in a varlen launch and GQA is not emulated "
                         "(FA3's prepare kernel would count unpacked tiles while its Split kernel "
                         "packs them); pass None or True")


def check_descales(descales: dict, fmt: str, batch: int, heads_kv: int) -> dict:
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
        err = ValueError(f"{name}: expected a scalar or shape [{batch}, {heads_kv}] ([batch, "
                         f"heads_kv]: FA3's \"{name} must have shape (batch_size, num_heads_k)\"), "
                         f"got {list(arr.shape)}")
        if arr.ndim not in (0, 2):  # a [batch] vector would broadcast along heads_kv, not batch
            raise err
        try:
            out[name] = np.broadcast_to(arr, (batch, heads_kv))
        except ValueError:
            raise err from None
    return out


def check_4d(q, k, v, names: tuple[str, str, str] = ("q", "k", "v")) -> None:
    """q, k, v: NumPy arrays of 4 dims [batch, seqlen, heads, head_dim]; ValueError naming
    the first that is not, by the caller's ``names`` (``k_cache``, ``v_cache`` for the KV
    cache)."""
    for name, x in zip(names, (q, k, v), strict=True):
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            raise ValueError(f"{name}: expected [batch, seqlen, heads, head_dim], got "
                             f"{getattr(x, 'shape', type(x).__name__)}")


def cu_seqlens(cu, name: str, total: int) -> np.ndarray:
    """cu_seqlens: int32 [batch + 1], starting at 0, non-decreasing, ending within ``total``."""
    arr = int_array(to_numpy(cu, name)[0], name)
    if arr is None or arr.shape[0] < 2 or arr[0] != 0 or np.any(np.diff(arr) < 0) or arr[-1] > total:
        raise ValueError(f"{name}: expected [batch + 1] int32 offsets from 0, non-decreasing, "
                         f"at most {total} (the packed length), got "
                         f"{None if arr is None else arr.tolist()[:8]}")
    return arr


def seqused(x, name: str, lengths: np.ndarray) -> np.ndarray:
    """seqused_*: [batch] ints within the cu_seqlens lengths, or the lengths themselves."""
    arr = int_array(to_numpy(x, name)[0], name, lengths.shape[0])
    if arr is None:
        return lengths.astype(np.int64)
    if np.any(arr < 0) or np.any(arr > lengths):
        raise ValueError(f"{name}: expected values in 0..the sequence's length "
                         f"{lengths.tolist()[:8]}, got {arr.tolist()[:8]}")
    return arr


def trace_ctas(trace, static_splits: int, heads: int, rows, kblock_m: int,
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
