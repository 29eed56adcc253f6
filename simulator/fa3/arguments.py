"""The arguments of a forward call of :mod:`simulator.fa3`, checked once at the API boundary
into records that what runs the launch reads (:mod:`.interface`, :mod:`.kvcache`), named in
FA3's terms (hopper/flash_attn_interface.py, hopper/flash_api.cpp ``mha_fwd``):

* :class:`Parallel`: how, not what, every forward call of the launch computes (``executor``,
  ``progress``, ``memory_budget``);
* :class:`Options`: the scalar options every forward entry point takes (``softmax_scale``,
  ``causal``, ``window_size``, ``attention_chunk``, ``softcap``, ``num_splits``, ``pack_gqa``,
  ``deterministic``, ``sm_margin`` / ``num_sms`` on ``gpu``, the LSE flag);
* :class:`Kernel`: what ``mha_fwd`` decides from them and the shapes before the kernel runs
  (Is_causal, Is_local, the tile, params.num_splits);
* :class:`Launch`: all of it for one launch, with the keywords every
  :func:`simulator.flash.forward` call of it takes (:meth:`Launch.forward_kwargs`).

The entry points check in FA3's order and build these once; nothing below them checks an
argument again or takes the options one by one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..flash.config import check_qv
from ..flash.dispatch import check_head_dim, check_head_dim_v
from .arrays import to_numpy
from .checks import (
    check_4d,
    check_descales,
    check_fmt,
    check_options,
    check_pack_gqa,
    check_parallel,
    check_scale,
    cu_seqlens,
    need_sms,
    seqused,
    trace_ctas,
)
from .launch import descale_rows, kernel_window, launch_flags, static_splits
from .scheduler import dynamic_num_splits

__all__ = ["DESCALES", "DenseArrays", "Kernel", "Launch", "Options", "Parallel", "VarlenArrays",
           "plan"]

#: the descale arguments, in the order the entry points take them
DESCALES = ("q_descale", "k_descale", "v_descale")


class Parallel(NamedTuple):
    """``executor``, ``progress`` and ``memory_budget`` as :func:`simulator.flash.forward` takes
    them (None: its defaults, serial, silent, ``chunks.DEFAULT_MEMORY_BUDGET``); the bits are
    the serial run's."""

    executor: Any = None
    progress: Any = None
    memory_budget: int | None = None

    @classmethod
    def checked(cls, executor, progress, memory_budget, trace) -> Parallel:
        """Checked before any work (:func:`simulator.fa3.checks.check_parallel`: the KV cache
        is written in place before the first forward call); ``trace`` only without an
        executor. Raises its TypeError / ValueError, naming the argument."""
        check_parallel(executor, progress, memory_budget, trace)
        return cls(executor, progress, memory_budget)

    def kwargs(self) -> dict:
        """The keywords of :func:`simulator.flash.forward` (and the combine's budget)."""
        return self._asdict()


@dataclass(frozen=True)
class Options:
    """The scalar options of ``flash_attn_func``, ``flash_attn_varlen_func`` and
    ``flash_attn_with_kvcache``, checked (:meth:`checked`).

    Attributes:
        softmax_scale: the caller's (None: the default, which needs the head dims:
            :func:`simulator.fa3.checks.check_scale` resolves it).
        causal, window_size, attention_chunk, softcap: as given, checked (window_size two
            ints, attention_chunk an int >= 0, softcap a float).
        num_splits: the caller's: 1 the unsplit kernel, > 1 that many, <= 0 FA3's heuristic.
        pack_gqa: None, True or False (checked against the launch by :func:`plan`).
        sm_margin, num_sms: ints; num_sms the GPU's SM count or the caller's override.
        gpu: the caller's GPU (a key of :data:`simulator.gpus.GPUS` or a record).
        return_lse: ``return_attn_probs`` / ``return_softmax_lse``.
        deterministic: the backward's flag (no effect on the forward's bits).
    """

    softmax_scale: Any
    causal: bool
    window_size: tuple[int, int]
    attention_chunk: int
    softcap: float
    num_splits: int
    pack_gqa: bool | None
    sm_margin: int
    num_sms: int
    gpu: Any
    return_lse: bool
    deterministic: bool = False

    @classmethod
    def checked(cls, *, softmax_scale, causal, window_size, attention_chunk, softcap, num_splits,
                pack_gqa, sm_margin, num_sms, gpu, **flags) -> Options:
        """The options checked in :func:`simulator.fa3.checks.check_options`' order (softcap,
        causal, the ``flags`` as given, num_sms and sm_margin, num_splits); window_size and
        attention_chunk already checked by the caller (their checks come first), num_sms the
        GPU's count or the override (:func:`simulator.fa3.checks.gpu_sms`).

        Args:
            flags: ``return_attn_probs=..., deterministic=...`` or ``return_softmax_lse=...``.
        Raises:
            ValueError: the first option of the wrong type or range, naming it.
        """
        softcap, values, _, splits = check_options(softcap, causal, num_sms, sm_margin,
                                                   num_splits, **flags)
        named = dict(zip(flags, values, strict=True))
        return cls(softmax_scale, bool(causal), tuple(window_size), attention_chunk, softcap,
                   splits, pack_gqa, sm_margin, num_sms, gpu, values[0],
                   named.get("deterministic", False))

    @property
    def sms(self) -> int:
        """FA3's params.num_sm: ``num_sms - sm_margin`` (may be < 1 until a heuristic needs it)."""
        return int(self.num_sms) - int(self.sm_margin)


class Kernel(NamedTuple):
    """What ``mha_fwd`` decides before the kernel runs: the kernel flags after its window
    normalisation, the tile (also the per-batch split counts' tile) and params.num_splits (1:
    the unsplit kernel)."""

    is_causal: bool
    is_local: bool
    kblock_m: int
    kblock_n: int
    num_splits: int


def plan(opts: Options, fmt: str, *, batch: int, heads: int, heads_kv: int, head_dim: int,
         head_dim_v: int, seqlen_q: int, seqlen_k: int, varlen: bool, prepare: bool,
         paged=None) -> Kernel:
    """:class:`Kernel` of a launch (``seqlen_q`` / ``seqlen_k`` its maxima), then ``pack_gqa``
    checked against it.

    Args:
        varlen: the launch is varlen (per-batch lengths: FA3's prepare kernel may run).
        prepare: the entry point may run the prepare kernel (varlen and KV-cache calls): it
            reads ``num_sms - sm_margin`` even with a given num_splits, which must then be >= 1;
            ``flash_attn_func`` reads it for the heuristic only.
        paged: a :class:`simulator.fa3.paged.PagedLaunch` or None: its flags and tile replace
            the plain launch's.
    Raises:
        ValueError: ``sm_margin`` leaving no SM for the heuristic or scheduler, ``pack_gqa``
            (:func:`simulator.fa3.checks.check_pack_gqa`), a refusal of the dispatch.
    """
    causal, window, chunk = opts.causal, opts.window_size, opts.attention_chunk
    is_causal, is_local, (tile_m, tile_n) = launch_flags(fmt, head_dim, head_dim_v, causal, window,
                                                         seqlen_q, seqlen_k, opts.softcap, chunk)
    if paged is not None:
        is_causal, is_local = paged.is_causal, paged.is_local
        tile_m, tile_n = paged.kblock_m, paged.kblock_n
    static = 1
    if opts.num_splits != 1:
        sms = (need_sms(opts.sms, opts.num_sms, opts.sm_margin) if prepare or opts.num_splits <= 0
               else opts.sms)
        static = static_splits(
            opts.num_splits, fmt=fmt, batch=batch, heads=heads, heads_kv=heads_kv,
            seqlen_q=seqlen_q, seqlen_k=seqlen_k, head_dim=head_dim, head_dim_v=head_dim_v,
            causal=is_causal, local=is_local, softcap=opts.softcap > 0, varlen=varlen,
            num_sms=sms, window=kernel_window(causal, window, seqlen_q, seqlen_k, chunk),
            paged=paged)
    check_pack_gqa(opts.pack_gqa, static > 1, varlen, heads, heads_kv)
    return Kernel(is_causal, is_local, tile_m, tile_n, static)


@dataclass(frozen=True)
class Launch:
    """One forward launch, checked: its options, shapes and ``mha_fwd``'s decisions.

    Attributes:
        options, kernel, parallel: :class:`Options`, :class:`Kernel`, :class:`Parallel`.
        fmt: the inputs' format ("bf16", "f16", "e4m3").
        heads, heads_kv, head_dim, head_dim_v: the launch's.
        softmax_scale: the scale every call uses (the default resolved).
        descales: ``q_descale``, ``k_descale``, ``v_descale`` (None, or what the forward
            takes: the caller's, or [batch, heads_kv] for a launch run one batch at a time).
        trace: None, or the CTAs ``(batch, head, m_block)`` to record.
        max_seqlen: None, or ``(max_seqlen_q, max_seqlen_k)`` handed to every forward call of
            a launch run one batch (or sequence) at a time.
        batch_splits: None, or int64 [batch]: each batch's split count, for a launch that
            reads them per batch (FA3's prepare kernel, or ``scheduler_metadata``).
    """

    options: Options
    kernel: Kernel
    parallel: Parallel
    fmt: str
    heads: int
    heads_kv: int
    head_dim: int
    head_dim_v: int
    softmax_scale: Any
    descales: dict
    trace: list | None
    max_seqlen: tuple[int, int] | None = None
    batch_splits: np.ndarray | None = None

    def forward_kwargs(self, batch: int | None = None, qv=None) -> dict:
        """The keywords of every :func:`simulator.flash.forward` call of the launch: of batch
        (or sequence) ``batch``'s call (its descale rows; None: the whole launch), with its
        ``qv`` rows."""
        o = self.options
        kw = dict(softmax_scale=self.softmax_scale, causal=o.causal, window=tuple(o.window_size),
                  softcap=o.softcap)
        if self.max_seqlen is not None:
            kw.update(max_seqlen_q=self.max_seqlen[0], max_seqlen_k=self.max_seqlen[1])
        kw.update(qv=qv, attention_chunk=o.attention_chunk,
                  **{n: descale_rows(x, batch) for n, x in self.descales.items()},
                  gpu=o.gpu, **self.parallel.kwargs())
        return kw

    def work(self, lengths_q, lengths_k) -> int:
        """What ``engine.launching`` weighs to decide once for all the launch's forward calls
        ("auto"): its tiles' kBlockM x kBlockN products over the batches (``lengths_q``,
        ``lengths_k``: query rows and keys per batch; masks not counted) times the heads and
        both head dims."""
        q = -(-np.asarray(lengths_q, np.int64) // self.kernel.kblock_m)
        k = -(-np.asarray(lengths_k, np.int64) // self.kernel.kblock_n)
        return (int((q * k).sum()) * self.kernel.kblock_m * self.kernel.kblock_n * self.heads
                * (self.head_dim + self.head_dim_v))


def _descales(descales) -> dict:
    """``q_descale``, ``k_descale``, ``v_descale`` (a triple) by name, as NumPy (or None)."""
    return {n: to_numpy(x, n)[0] for n, x in zip(DESCALES, descales, strict=True)}


@dataclass(frozen=True)
class DenseArrays:
    """The arrays of a ``flash_attn_func`` call, checked (:meth:`of`).

    Attributes:
        q, k, v: NumPy [batch, seqlen_q, heads, head_dim], [batch, seqlen_k, heads_kv,
            head_dim], [batch, seqlen_k, heads_kv, head_dim_v].
        qv: None or [batch, seqlen_q, heads, head_dim_v].
        descales: ``q_descale``, ``k_descale``, ``v_descale`` as given (NumPy or None).
        torch: q came as a torch tensor (the results go back as torch tensors).
        fmt: the inputs' format ("bf16", "f16", "e4m3").
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    qv: np.ndarray | None
    descales: dict
    torch: bool
    fmt: str

    @classmethod
    def of(cls, q, k, v, qv, descales) -> DenseArrays:
        """The arrays as NumPy (``descales``: the triple), each of 4 dims, q's dtype and head
        dim FA3's. Raises ValueError naming the argument."""
        (q, tq), (k, _), (v, _) = to_numpy(q, "q"), to_numpy(k, "k"), to_numpy(v, "v")
        qv = to_numpy(qv, "qv")[0]
        named = _descales(descales)
        check_4d(q, k, v)
        fmt = check_fmt(q)
        check_head_dim(q.shape[-1], fmt)
        return cls(q, k, v, qv, named, tq, fmt)

    def launch(self, opts: Options, parallel: Parallel, trace) -> Launch:
        """The launch of these arrays with the checked options: the descales against
        [batch, heads_kv], head_dim_v and qv, :func:`plan`, softmax_scale, the traced CTAs.
        Raises ValueError naming the argument."""
        q, k, fmt = self.q, self.k, self.fmt
        b, sq, h, d = q.shape
        check_descales(self.descales, fmt, b, k.shape[2])  # FA3's [batch, heads_kv]
        dv = self.v.shape[-1]
        check_head_dim_v(d, dv, fmt)
        check_qv(self.qv, q, dv, fmt)
        kernel = plan(opts, fmt, batch=b, heads=h, heads_kv=k.shape[2], head_dim=d, head_dim_v=dv,
                      seqlen_q=sq, seqlen_k=k.shape[1], varlen=False, prepare=False)
        scale = check_scale(opts.softmax_scale, d, opts.softcap, 0 if self.qv is None else dv)
        wanted = trace_ctas(trace, kernel.num_splits, h, [sq] * b, kernel.kblock_m)
        # the forward broadcasts the caller's descales over the launch itself
        return Launch(opts, kernel, parallel, fmt, h, k.shape[2], d, dv, scale, self.descales,
                      wanted)


@dataclass(frozen=True)
class VarlenArrays:
    """The arrays of a ``flash_attn_varlen_func`` call, checked (:meth:`of`).

    Attributes:
        q, k, v, qv: NumPy [total_q, heads, head_dim], [total_k, heads_kv, head_dim],
            [total_k, heads_kv, head_dim_v], None or [total_q, heads, head_dim_v].
        descales: float32 [batch, heads_kv] views (or None).
        torch, fmt: as :class:`DenseArrays`.
        cu_seqlens_q, cu_seqlens_k: int64 [batch + 1] offsets.
        seqused_q, seqused_k: int64 [batch] rows / keys used per sequence (the cu_seqlens
            lengths when not given).
        max_seqlen_q, max_seqlen_k: the launch's maxima.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    qv: np.ndarray | None
    descales: dict
    torch: bool
    fmt: str
    cu_seqlens_q: np.ndarray
    cu_seqlens_k: np.ndarray
    seqused_q: np.ndarray
    seqused_k: np.ndarray
    max_seqlen_q: int
    max_seqlen_k: int

    @property
    def batch(self) -> int:
        return self.cu_seqlens_q.shape[0] - 1

    @classmethod
    def of(cls, q, k, v, qv, descales, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
           seqused_q, seqused_k) -> VarlenArrays:
        """The arrays as NumPy (``descales``: the triple), the offsets, lengths and maxima,
        checked against each other and FA3's rules (hopper/flash_api.cpp, mha_fwd is_varlen).
        Raises ValueError naming the argument."""
        (q, tq), (k, _), (v, _) = to_numpy(q, "q"), to_numpy(k, "k"), to_numpy(v, "v")
        qv = to_numpy(qv, "qv")[0]
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not isinstance(x, np.ndarray) or x.ndim != 3:
                raise ValueError(f"{name}: expected [total, heads, head_dim], got "
                                 f"{getattr(x, 'shape', type(x).__name__)}")
        cq = cu_seqlens(cu_seqlens_q, "cu_seqlens_q", q.shape[0])
        ck = cu_seqlens(cu_seqlens_k, "cu_seqlens_k", k.shape[0])
        batch = cq.shape[0] - 1
        if ck.shape[0] != batch + 1:
            raise ValueError(f"cu_seqlens_k: expected {batch + 1} offsets (as cu_seqlens_q), "
                             f"got {ck.shape[0]}")
        len_q = seqused(seqused_q, "seqused_q", np.diff(cq))
        len_k = seqused(seqused_k, "seqused_k", np.diff(ck))
        for name, m, lens in (("max_seqlen_q", max_seqlen_q, len_q), ("max_seqlen_k", max_seqlen_k, len_k)):
            longest = int(lens.max(initial=0))  # 0 when every sequence is empty
            if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < longest:
                raise ValueError(f"{name}: expected an int >= every sequence's length ({longest}), "
                                 f"got {m!r}")
        fmt, d, h, hkv = check_fmt(q), q.shape[-1], q.shape[1], k.shape[1]
        named = check_descales(_descales(descales), fmt, batch, hkv)
        check_head_dim(d, fmt)
        if k.dtype != q.dtype or v.dtype != q.dtype or k.shape[:2] != v.shape[:2] or k.shape[-1] != d:
            raise ValueError(f"k, v: expected [total_k, heads_kv, head_dim={d}] and [total_k, "
                             f"heads_kv, head_dim_v] in {q.dtype} (as q), got {k.shape} {k.dtype} "
                             f"/ {v.shape} {v.dtype}")
        dv = v.shape[-1]
        check_head_dim_v(d, dv, fmt)
        if hkv < 1 or h % hkv:
            raise ValueError(f"k: heads_kv = {hkv} must divide heads = {h}")
        if qv is not None:  # FA3's varlen qv: [total_q, heads, head_dim_v]
            if not isinstance(qv, np.ndarray) or qv.shape != q.shape[:2] + (dv,):
                raise ValueError(f"qv: expected [total_q, heads, head_dim_v] = "
                                 f"{list(q.shape[:2] + (dv,))}, got {list(getattr(qv, 'shape', []))}")
            check_qv(qv[None], q[None], dv, fmt)
        return cls(q, k, v, qv, named, tq, fmt, cq, ck, len_q, len_k, int(max_seqlen_q),
                   int(max_seqlen_k))

    def launch(self, opts: Options, parallel: Parallel, trace) -> Launch:
        """The launch of these arrays with the checked options: :func:`plan` (a varlen
        launch), the traced CTAs ``(sequence, head, m_block)``, each sequence's split count
        (FA3's prepare kernel, with PackGQA: its Split kernel always packs), softmax_scale.
        Raises ValueError naming the argument."""
        h, hkv, d, dv = self.q.shape[1], self.k.shape[1], self.q.shape[-1], self.v.shape[-1]
        max_q, max_k = self.max_seqlen_q, self.max_seqlen_k
        kernel = plan(opts, self.fmt, batch=self.batch, heads=h, heads_kv=hkv, head_dim=d,
                      head_dim_v=dv, seqlen_q=max_q, seqlen_k=max_k, varlen=True, prepare=True)
        wanted = trace_ctas(trace, kernel.num_splits, h, self.seqused_q, kernel.kblock_m,
                            "sequence")
        splits = None if kernel.num_splits <= 1 else dynamic_num_splits(
            self.seqused_q, self.seqused_k, kblock_m=kernel.kblock_m, kblock_n=kernel.kblock_n,
            heads=h, heads_kv=hkv, num_sms=opts.sms, num_splits_static=kernel.num_splits,
            pack_gqa=True)
        scale = check_scale(opts.softmax_scale, d, opts.softcap, 0 if self.qv is None else dv)
        return Launch(opts, kernel, parallel, self.fmt, h, hkv, d, dv, scale, self.descales,
                      wanted, (max_q, max_k), splits)
