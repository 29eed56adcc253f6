"""The FlashAttention-3 backward on emulated Hopper warpgroups (docs/backward.md).

Three kernels, as ``hopper/flash_bwd_launch_template.h`` launches them:

* preprocess (``flash_bwd_preprocess_kernel.h``): ``dPsum = rowsum(dO * O)`` as its threads sum
  it (each thread an FMUL then an FFMA chain over its 8-element chunks, then a butterfly
  shuffle sum over the threads of a row), ``LSE_log2 = LSE * log2(e)`` (0 for -inf rows, +inf
  for the rows past seqlen_q of the last block), dQaccum cleared;
* mainloop (``mainloop_bwd_sm90_tma_gmma_ws.hpp``), one CTA per (batch, head, n_block): over its
  m_blocks in ascending order, ``S = Q K^T`` and ``dP = dO V^T`` (wgmma, zero-initialised),
  ``P = ex2(S * scale_log2 - LSE_log2)`` (FFMA.FTZ, MUFU.EX2) after the masks,
  ``dS = P * (dP - dPsum)`` (FADD.FTZ, FMUL.FTZ), P and dS rounded to the input type,
  ``dV += P^T dO``, ``dK += dS^T Q`` (register accumulators across m_blocks), and the dQ partial
  ``dS K`` (zero-initialised) reduce-added into float32 dQaccum; after the loop dK *= scale;
* postprocess (``flash_bwd_postprocess_kernel.h``): ``dQ = dQaccum * scale`` rounded; with GQA
  the float32 dK / dV of each query head reduce-added per kv head, then rounded (``* 1.0``).

The float32 reduce-adds into dQaccum (and dK / dV accumulators with GQA) arrive in the order
the CTAs finish; ``deterministic=True`` is FA3's semaphore order, which this emulation always
uses (:func:`dq_order`); :mod:`simulator.flash.spread` bounds what any order gives.

CTAs are emulated together: an array axis holds every (batch, head, n_block) CTA active at an
m_block; the Python loops run over m_blocks and, for the ordered adds, over n_blocks: the
sequential structure of the kernels, never threads or elements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..gpus import DEFAULT_GPU, GPU, get_gpu, mufu_model_name
from ..numerics import convert, fadd, ffma, fmul
from . import backward_fa4, chunks, evaluator
from .backward_trace import make_tracer
from .block_info import m_block_range
from .config import input_format
from .constants import host_constants
from .dispatch import kernel_head_dim
from .mainloop_bwd_sm90 import accumulator_bytes, mainloop
from .mainloop_bwd_sm90 import dq_add_ftz as dq_add_ftz  # the public names stay here
from .mainloop_bwd_sm90 import dq_order as dq_order
from .masks import fa3_window, kernel_flags, normalize_window
from .spread import ordered_sum, sum_bounds

_LOG2E_F32 = np.float32(np.log2(np.e))  # float(M_LOG2E), 0x3fb8aa3b
_NEG_INF = np.float32(-np.inf)
#: the input dtypes FA3's backward takes (mha_bwd: fp16 and bf16)
#: the input formats FA3's backward takes (hopper/flash_api.cpp's mha_bwd: no FP8)
BACKWARD_FORMATS = ("bf16", "f16")


@dataclass(frozen=True)
class BackwardTiles:
    """FA3's sm90 backward kernel for a head dim (``run_mha_bwd_hdim*`` in
    ``hopper/flash_bwd_launch_template.h``; kBlockM / kBlockN also in ``mha_bwd``)."""

    kernel_head_dim: int
    kblock_m: int
    kblock_n: int
    deterministic_supported: bool

    def describe(self) -> str:
        return (f"kernel head dim {self.kernel_head_dim}, kBlockM x kBlockN "
                f"{self.kblock_m} x {self.kblock_n}")


def bwd_tiles(head_dim: int, causal: bool, local: bool, softcap: bool = False) -> BackwardTiles:
    """FA3's sm90 backward tiles: hdim 64 128 x 128 (96 x 128 causal with softcap), 96
    64 x 128, 128 64 x 128 (causal, local or softcap) else 80 x 128, 192 64 x 96, 256 64 x 80;
    deterministic only below 256 (``mha_bwd``)."""
    kd = kernel_head_dim(head_dim)
    if kd == 64:
        m, n = (96 if causal and softcap else 128), 128
    elif kd == 96:
        m, n = 64, 128
    elif kd == 128:
        m, n = (64 if causal or local or softcap else 80), 128
    elif kd == 192:
        m, n = 64, 96
    else:
        m, n = 64, 80
    return BackwardTiles(kd, m, n, kd < 256)


@dataclass
class BackwardResult:
    """Output of :func:`backward`: ``dq`` [B, Sq, H, d], ``dk`` / ``dv`` [B, Sk, Hkv, d] in the
    input dtype; ``dpsum`` and ``lse_log2`` float32 [B, H, seqlen_q_rounded] (the preprocess
    kernel's outputs). Unpacks as ``dq, dk, dv = result``."""

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    dpsum: np.ndarray
    lse_log2: np.ndarray
    tiles: BackwardTiles
    spread: dict | None = None
    trace: dict | None = None

    def __iter__(self):
        return iter((self.dq, self.dk, self.dv))


# ---- preprocess ---------------------------------------------------------------------------------
def preprocess_dpsum(out: np.ndarray, dout: np.ndarray, kernel_hdim: int) -> np.ndarray:
    """``dPsum = rowsum(dO * O)`` as ``flash_bwd_preprocess_kernel.h`` sums it.

    A row of kHeadDim values is read by ``kBlockKGmem / 8`` threads (kBlockKGmem 128, 64 or 32,
    the largest dividing kHeadDim), each taking 8 consecutive values per kBlockKGmem-wide chunk;
    a thread's sum is FMUL.FTZ of its first pair then FFMA.FTZ of the others, chunk by chunk;
    the threads' sums meet in a butterfly (shfl_xor by half the group, then halves again).

    Args:
        out, dout: [..., head_dim] bf16 / fp16 (head_dim <= kernel_hdim: zero columns added).
    Returns:
        float32 [...].
    """
    d = out.shape[-1]
    o = np.zeros(out.shape[:-1] + (kernel_hdim,), np.float32)
    g = np.zeros_like(o)
    o[..., :d] = out.astype(np.float32)
    g[..., :d] = dout.astype(np.float32)
    width = 128 if kernel_hdim % 128 == 0 else (64 if kernel_hdim % 64 == 0 else 32)
    threads = width // 8
    chunks = kernel_hdim // width
    # [..., chunk, thread, 8] -> per thread the values in order (chunk, element)
    o = np.moveaxis(o.reshape(o.shape[:-1] + (chunks, threads, 8)), -2, -3)
    g = np.moveaxis(g.reshape(g.shape[:-1] + (chunks, threads, 8)), -2, -3)
    o = o.reshape(o.shape[:-3] + (threads, chunks * 8))
    g = g.reshape(g.shape[:-3] + (threads, chunks * 8))
    acc = fmul(g[..., 0], o[..., 0], ftz=True)
    for i in range(1, chunks * 8):
        acc = ffma(g[..., i], o[..., i], acc, ftz=True)
    offset = threads // 2
    lane = np.arange(threads)
    while offset >= 1:
        acc = fadd(acc, acc[..., lane ^ offset], ftz=True)
        offset //= 2
    return acc[..., 0]


def preprocess_lse_log2(lse: np.ndarray) -> np.ndarray:
    """``LSE * log2(e)`` (FMUL.FTZ by float(M_LOG2E)); 0 where LSE is -inf."""
    scaled = fmul(lse.astype(np.float32), _LOG2E_F32, ftz=True)
    return np.where(lse == _NEG_INF, np.float32(0), scaled).astype(np.float32)


# ---- launch ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BackwardConfig:
    """A backward call resolved once: shapes, format, FA3's window and tiles, the constants."""

    fmt: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    heads_kv: int
    head_dim: int
    window: tuple[int, int]          # FA3-normalised (left, right), -1 unbounded
    kernel_window: tuple[int, int]   # what the kernel receives: -1 replaced (set_params_fprop)
    causal: bool                     # the kernel's Is_causal
    local: bool                      # the kernel's Is_local
    tiles: BackwardTiles
    softmax_scale: np.float32
    scale_log2: np.float32           # softmax_scale * log2(e), or softcap * log2(e) with softcap
    softcap_val: np.float32          # softmax_scale / softcap, FA4's softcap (0: none)
    deterministic: bool
    mufu: str                        # the MUFU model: the GPU's key, or "ideal"
    gpu: GPU                         # the GPU whose arithmetic runs
    family: str = "fa3"              # "fa3", or "fa4": FA4's rules (backward_fa4.py)

    @property
    def m_blocks(self) -> int:
        return -(-self.seqlen_q // self.tiles.kblock_m)

    @property
    def n_blocks(self) -> int:
        return -(-self.seqlen_k // self.tiles.kblock_n)


def make_backward_config(dout, q, k, v, out, lse, *, softmax_scale=None, causal=False,
                         window=(-1, -1), softcap=0.0, deterministic=False, max_seqlen_q=None,
                         max_seqlen_k=None, gpu=DEFAULT_GPU, mufu=None,
                         family="fa3") -> BackwardConfig:
    """Check a backward call's arguments as ``mha_bwd`` does and resolve FA3's choices.

    Raises:
        ValueError: naming the argument: dtypes (fp16 / bf16, all the same), shapes of dout,
            out (q's), k / v (matching), softmax_lse ([batch, heads, seqlen_q] float32), head
            dims (a multiple of 8, at most 256, V's equal to Q's), heads_kv dividing heads,
            softcap and softmax_scale (as the forward checks them), deterministic with kernel
            head dim 256
            (FA3 refuses it).
    """
    arrays = {"dout": dout, "q": q, "k": k, "v": v, "out": out}
    for name, x in arrays.items():
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            raise ValueError(f"{name}: expected a 4-d numpy array [batch, seqlen, heads, head_dim], "
                             f"got {getattr(x, 'shape', type(x).__name__)}")
    fmt = input_format(q.dtype)
    if fmt not in BACKWARD_FORMATS:
        raise ValueError(f"q: expected dtype bfloat16 or float16 (FA3's backward has no other), "
                         f"got {q.dtype}")
    for name, x in arrays.items():
        if x.dtype != q.dtype:
            raise ValueError(f"{name}: expected dtype {q.dtype} (q's), got {x.dtype}")
    b, sq, h, d = q.shape
    _, sk, hk, _ = k.shape
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"k: expected shape [{b}, seqlen_k, heads_kv, {d}], got {k.shape}")
    if v.shape != k.shape:
        raise ValueError(f"v: expected shape {k.shape} (k's; the backward takes V's head dim "
                         f"equal to Q's), got {v.shape}")
    for name in ("dout", "out"):
        if arrays[name].shape != q.shape:
            raise ValueError(f"{name}: expected shape {q.shape} (q's), got {arrays[name].shape}")
    if not isinstance(lse, np.ndarray) or lse.dtype != np.float32 or lse.shape != (b, h, sq):
        raise ValueError(f"softmax_lse: expected float32 [{b}, {h}, {sq}] (batch, heads, seqlen_q), "
                         f"got {getattr(lse, 'dtype', type(lse).__name__)} "
                         f"{getattr(lse, 'shape', '')}")
    if d < 8 or d % 8 or d > 256:
        raise ValueError(f"q: head_dim must be a multiple of 8 from 8 to 256 (mha_bwd), got {d}")
    if h < 1 or hk < 1:
        raise ValueError(f"q, k: expected at least one head each, got heads = {h}, heads_kv = {hk}")
    if h % hk:
        raise ValueError(f"k: heads_kv = {hk} must divide heads = {h}")
    consts = host_constants(d, softmax_scale, softcap)  # checked as the forward checks them
    gpu = get_gpu(gpu)
    mufu = mufu_model_name(gpu, mufu)
    msq = sq if max_seqlen_q is None else int(max_seqlen_q)
    msk = sk if max_seqlen_k is None else int(max_seqlen_k)
    win = fa3_window(normalize_window(bool(causal), window), msq, msk)
    if causal:
        win = (win[0], 0)
    is_causal, is_local = kernel_flags(win)
    tiles = bwd_tiles(d, is_causal, is_local, consts["softcap_val"] > 0)
    if family == "fa4":  # FA4 keeps a window covering every key local: the local kernel's tile
        dims, consts = backward_fa4.launch(d, kernel_flags(normalize_window(bool(causal), window)),
                                           softcap, consts)
        tiles = BackwardTiles(*dims, True)
    if deterministic and not tiles.deterministic_supported:
        raise ValueError("deterministic: FA3's backward has no deterministic kernel for head dim "
                         f"{tiles.kernel_head_dim} (mha_bwd: 'Deterministic backward not supported "
                         "for hdim 256')")
    kwin = (msk - 1 if win[0] < 0 else win[0], msq - 1 if win[1] < 0 else win[1])
    return BackwardConfig(fmt, b, sq, sk, h, hk, d, win, kwin, is_causal, is_local,
                          tiles, consts["softmax_scale"], consts["scale_log2"],
                          consts["softcap_val"], bool(deterministic), mufu, gpu, family)


def max_dq_partials(cfg: BackwardConfig) -> int:
    """The most float32 partials one dQaccum value receives: the n_blocks visiting an m_block,
    at the busiest m_block (0 when none is visited)."""
    m_min, m_max = m_block_range(cfg, np.arange(cfg.n_blocks))
    if cfg.m_blocks == 0 or cfg.n_blocks == 0:
        return 0
    m = np.arange(cfg.m_blocks)[:, None]
    return int(((m_min[None, :] <= m) & (m < m_max[None, :])).sum(axis=1).max())


def backward(dout, q, k, v, out, lse, *, softmax_scale=None, causal=False, window=(-1, -1),
             softcap=0.0, deterministic=False, max_seqlen_q=None, max_seqlen_k=None,
             gpu=DEFAULT_GPU, mufu=None, spread=False, memory_budget=None, progress=None,
             trace=None, executor=None, family="fa3") -> BackwardResult:
    """FlashAttention-3's backward, emulated bit for bit on Hopper warpgroups.

    Args:
        dout, q, out: [batch, seqlen_q, heads, head_dim]; k, v: [batch, seqlen_k, heads_kv,
            head_dim]; all bf16 or all fp16.
        lse: the forward's softmax_lse, float32 [batch, heads, seqlen_q] (natural log).
        softmax_scale: default 1/sqrt(head_dim). causal, window: as the forward.
        softcap: FA3's tanh softcapping (0: off): S becomes tanh(S * softmax_scale / softcap)
            (MUFU.TANH) and dS is multiplied by 1 - tanh^2, taken before the masks.
        deterministic: FA3's ``deterministic`` flag. Both modes give the bits of FA3's
            deterministic order of the float32 reduce-adds (:func:`dq_order`, GQA heads
            ascending); with False the library's own run may differ where ``spread`` says so.
        max_seqlen_q, max_seqlen_k: the launch's maxima when this call is one sequence of a
            varlen launch (FA3 normalises the window with them).
        gpu: the GPU whose arithmetic runs (:mod:`simulator.gpus` key or record).
        mufu: None (the GPU's calibrated MUFU.EX2 / MUFU.TANH) or "ideal" (correctly rounded).
        spread: also compute, per value, the smallest and largest result any arrival order
            of the reduce-adds gives (:mod:`simulator.flash.spread`): ``result.spread``.
        memory_budget: bytes for the padded operands, the accumulators and the working arrays
            (default 4 GiB): CTAs run in chunks of whole (batch, head) rows that fit, and the
            postprocess in chunks of (batch, kv head) rows (docs/backward.md, "Memory").
        progress: None (the default: a bar on a terminal when the call is expected to take
            over 10 s), False, True (a bar on stderr) or a callable ``progress(done, total)``
            in CTA m_block steps, as :func:`simulator.flash.forward`'s.
        trace: None or ``(batch, head, n_block)``: record that CTA's steps
            (:class:`~simulator.flash.backward_trace.CtaTrace`, ``result.trace``: a dict of
            float32 arrays).
        family: keyword: "fa3" (FA3's kernels), or "fa4": FlashAttention-4's sm90 backward
            (:mod:`simulator.flash.backward_fa4`; head dims 64, 96, 128, 192, 256).
        executor: None (serial), or a ``concurrent.futures.Executor`` (a
            ``ProcessPoolExecutor``, ``dask.distributed.Client.get_executor()``): chunks of
            whole (batch, head) rows of CTAs run as its tasks: a ``ThreadPoolExecutor``'s
            as many at once as the budget affords, writing in place; other executors' each
            with the batches it needs and a W-th of ``memory_budget`` (W: its workers). The
            bits are the serial run's (no chunk shares a dQaccum tile or a dK / dV
            accumulator with another). None: with ``engine.set_threads(N)``, N > 1, the
            compiled engine runs them on up to N threads.
    Returns:
        :class:`BackwardResult` (dq, dk, dv in the input dtype; dpsum, lse_log2; with
        ``spread`` a dict ``{"dq": (lo, hi), "dk": ..., "dv": ...}`` of arrays like dq, dk, dv;
        ``lo == hi`` where no order changes the value). With ``deterministic=True`` (a kernel
        head dim below 256) the spread is the result itself.
    Raises:
        ValueError: see :func:`make_backward_config`; ``memory_budget`` not a positive int.
        MemoryError: up front, with the estimate, when not even one (batch, head) row of
            CTAs (or one row of the postprocess) fits the budget.
        TypeError: ``progress`` of another type; ``executor`` without a ``submit`` method.
    """
    executor = chunks.check_executor(executor)
    budget = chunks.check_budget(memory_budget)
    chunks.check_progress(progress)
    if executor is not None and trace is not None:
        raise ValueError("trace: not recorded with an executor; trace a serial call "
                         "(executor=None)")
    cfg = make_backward_config(dout, q, k, v, out, lse, softmax_scale=softmax_scale,
                               causal=causal, window=window, softcap=softcap,
                               deterministic=deterministic, max_seqlen_q=max_seqlen_q,
                               max_seqlen_k=max_seqlen_k, gpu=gpu, mufu=mufu, family=family)
    want = spread and not cfg.deterministic
    tracer = make_tracer(cfg, trace)
    post = _post_rows(cfg, budget, want)  # its MemoryError before the long part
    dpsum, lse_log2 = _preprocess(cfg, out, dout, lse)
    m_min, m_max = m_block_range(cfg, np.arange(cfg.n_blocks))
    steps = int(np.maximum(m_max - m_min, 0).sum()) * cfg.batch * cfg.heads
    t = cfg.tiles
    work = 5 * steps * t.kblock_m * t.kblock_n * t.kernel_head_dim  # products: five GEMMs a step
    ev = evaluator.pick(work)  # once: "auto" by the launch's work
    own = None if executor is not None or tracer is not None else chunks.task_pool(
        ev.task_threads())
    executor = executor if own is None else own
    seconds = chunks.BACKWARD_COST * chunks.estimate_seconds(
        steps, t.kblock_m, t.kblock_n, 2 * t.kernel_head_dim,
        1 if executor is None else chunks.workers(executor), compiled=ev.compiled)
    bar = chunks.Progress(chunks.auto_progress(progress, seconds), steps, "flash.backward")
    try:
        dq_accum, dk, dv, bounds = mainloop(cfg, q, k, v, dout, dpsum, lse_log2, want, budget,
                                            bar, tracer, executor, ev)
    finally:
        bar.close()
        chunks.shutdown(own)
    g = cfg.heads // cfg.heads_kv
    dq = _postprocess_dq(cfg, dq_accum, post * g)
    (dk, dv), kv_bounds = _postprocess_kv(cfg, dk, dv, want, post)
    result = BackwardResult(dq, dk, dv, dpsum, lse_log2, cfg.tiles,
                            trace=None if tracer is None else tracer.arrays())
    if want:
        result.spread = {"dq": tuple(_postprocess_dq(cfg, x, post * g) for x in bounds),
                         **kv_bounds}
    elif spread:  # one order only: the deterministic kernel
        result.spread = {"dq": (dq, dq.copy()), "dk": (dk, dk.copy()), "dv": (dv, dv.copy())}
    return result


def _postprocess_dq(cfg: BackwardConfig, dq_accum, size: int):
    """dQ [B, Sq, H, d] in the input type: ``dQaccum * scale`` (FMUL.FTZ), rounded; ``size``
    query heads' rows at a time (:func:`_post_rows`)."""
    flat = dq_accum.reshape(cfg.batch * cfg.heads, *dq_accum.shape[2:])
    x = flat[:, : cfg.seqlen_q, : cfg.head_dim]
    ftz = cfg.family == "fa3"
    return _by_rows(cfg.batch, cfg.heads, size, lambda r0, r1: (
        convert(fmul(x[r0:r1], cfg.softmax_scale, ftz=ftz), cfg.fmt),))[0]


def _preprocess(cfg: BackwardConfig, out, dout, lse):
    """dPsum and LSE_log2, [B, H, seqlen_q_rounded] (rows past seqlen_q: 0 and +inf)."""
    rows = cfg.m_blocks * cfg.tiles.kblock_m
    dpsum = np.zeros((cfg.batch, cfg.heads, rows), np.float32)
    lse_log2 = np.full((cfg.batch, cfg.heads, rows), np.inf, np.float32)
    fa4 = cfg.family == "fa4"
    dpsum[..., : cfg.seqlen_q] = (backward_fa4.preprocess_dpsum if fa4 else preprocess_dpsum)(
        np.swapaxes(out, 1, 2), np.swapaxes(dout, 1, 2), cfg.tiles.kernel_head_dim)
    lse_log2[..., : cfg.seqlen_q] = (backward_fa4.preprocess_lse_log2 if fa4 else
                                     preprocess_lse_log2)(lse)
    return dpsum, lse_log2


def _postprocess_kv(cfg: BackwardConfig, dk, dv, spread: bool, size: int):
    """(dK, dV) [B, Sk, Hkv, d] in the input type, and with ``spread`` their (lo, hi) over
    every order of the GQA reduce-adds ({} without); ``size`` kv heads' rows at a time
    (:func:`_post_rows`). With GQA the query heads of each kv head are reduce-added in
    ascending head order into zeroed float32 accumulators (the TMA bulk reduce of
    ``CollectiveEpilogueBwdGQA``: subnormals kept), then ``* 1.0`` (FMUL.FTZ) and rounded;
    without GQA each CTA's accumulator is rounded."""
    g = cfg.heads // cfg.heads_kv
    res, bounds = [], {}
    for name, x in (("dk", dk), ("dv", dv)):
        x = x.reshape(cfg.batch * cfg.heads_kv, g, *x.shape[2:])[:, :, : cfg.seqlen_k,
                                                                   : cfg.head_dim]
        got = _by_rows(cfg.batch, cfg.heads_kv, size, lambda r0, r1, x=x, n=name: _reduce_kv(
            cfg, x[r0:r1], spread, n == "dk"))
        res.append(got[0])
        if spread:
            bounds[name] = got[1:] if g > 1 else (got[0].copy(), got[0].copy())
    return res, bounds


def _reduce_kv(cfg: BackwardConfig, x, spread: bool, scale_after_sum: bool = False):
    """(sum,) or with ``spread`` and GQA (sum, lo, hi), [R, Sk, d] in the input type, of the
    float32 accumulators ``x`` [R, g, Sk, d] of R kv heads' query heads (see
    :func:`_postprocess_kv`)."""
    if x.shape[1] == 1:
        return (convert(x[:, 0], cfg.fmt),)
    parts = np.moveaxis(x, 1, 0)
    sums = [ordered_sum(parts, ftz=False)] + (list(sum_bounds(parts, ftz=False)) if spread else [])
    # FA4's postprocess scales the summed dK (its CTAs leave GQA's dK unscaled), FA3's by 1.0
    scale = cfg.softmax_scale if cfg.family == "fa4" and scale_after_sum else np.float32(1.0)
    return tuple(convert(fmul(y, scale, ftz=cfg.family == "fa3"), cfg.fmt) for y in sums)


def _by_rows(batch: int, heads: int, size: int, piece):
    """Arrays [batch, S, heads, d] assembled from ``piece(r0, r1)``, a tuple of arrays
    [r1 - r0, S, d] for the (batch, head) rows ``r0 .. r1 - 1`` (``batch * heads + head``),
    called on ``size`` rows at a time: the postprocess's working arrays stay one chunk's."""
    count, outs = batch * heads, None
    for r0 in range(0, max(count, 1), size):
        r1 = min(r0 + size, count)
        parts = piece(r0, r1)
        if outs is None:
            outs = tuple(np.empty((batch, x.shape[1], heads, x.shape[2]), x.dtype) for x in parts)
        b, h = np.divmod(np.arange(r0, r1), heads)
        for out, x in zip(outs, parts, strict=True):
            out[b, :, h] = x
    return outs


def _post_rows(cfg: BackwardConfig, budget: int, spread: bool) -> int:
    """kv heads' rows per chunk of the postprocess within ``budget`` bytes: beside the float32
    accumulators (with ``spread`` their bounds) and the outputs, each (batch, kv head) row
    costs :data:`chunks.POSTPROCESS_BYTES` per accumulator value of its query heads.

    Raises:
        MemoryError: not even one row fits (checked before the mainloop runs).
    """
    t, g = cfg.tiles, cfg.heads // cfg.heads_kv
    rows, keys = cfg.m_blocks * t.kblock_m, cfg.n_blocks * t.kblock_n
    acc = accumulator_bytes(cfg)
    outs = 2 * cfg.batch * cfg.head_dim * (cfg.heads * cfg.seqlen_q + 2 * cfg.heads_kv * cfg.seqlen_k)
    per_row = chunks.POSTPROCESS_BYTES * g * max(rows, keys) * t.kernel_head_dim
    return chunks.chunk_size(budget, (acc + outs) * (3 if spread else 1), per_row,
                             "this backward's postprocess", unit="(batch, kv head) row",
                             held="float32 accumulators and outputs")
