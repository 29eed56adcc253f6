"""FlashAttention-2's forward mainloop (``csrc/flash_attn/src/flash_fwd_kernel.h``,
``compute_attn_1rowblock``) as its sm80 code runs on a Hopper GPU, on emulated warps.

One CTA owns kBlockM query rows of one head, 4 or 8 warps of 16 rows per ``mma.sync``
m16n8k16 tile. Per K/V block, from ``n_block_max - 1`` down to ``n_block_min``:

1. ``S = Q K^T``: ``mma.sync`` m16n8k16 steps over the head dim from a cleared (+0)
   accumulator; masked positions -inf (``mask.h``: keys past seqlen_k, the causal diagonal).
2. ``softmax_rescale_o`` (``softmax.h``): the row maximum (thread-local, then the quad's
   shuffles); for a later block ``scores_scale = exp2f((max_prev - max_cur) * scale_log2)``
   (0 for a -inf max with ``Check_inf``), ``acc_o *= scores_scale`` before this block's P V;
   ``P = exp2f(x * scale_log2 - max_scaled)`` (``max_scaled`` 0 for a -inf max), in the build's
   form (:class:`Fa2Build`: PyTorch's ``UNFUSE_FMA`` rounds the product before the
   subtraction); ``row_sum``: the thread's columns in order, ``row_sum * scores_scale`` fused
   with the first add (one FFMA, as the compiled kernels have it).
3. ``P`` rounded to the input type (``cvt.rn``), then ``acc_o += P V`` by ``mma.sync`` steps
   over the block's keys.

Then ``normalize_softmax_lse``: the row sum over the quad, ``inv_sum = 1`` for a 0 / NaN sum
(else 1/sum), LSE ``row_max * softmax_scale + __logf(sum)`` (+inf for an empty row),
``acc_o *= inv_sum``, rounded to the output type. The masking steps and ``Check_inf`` follow
the kernel's ``n_masking_steps``. A CTA with no K/V block (causal / local, or a ragged
sequence) writes O = 0 and LSE = +inf.

The steps reuse the forward's shared pieces: the scheduler's CTA groups, the padded operands
and epilogue store of :mod:`.mainloop_fwd_sm90`, :class:`.softmax.Softmax`'s row state (the
row / column view of a thread's registers is the same for an m16n8 tile as for an m64nN one),
and :mod:`simulator.mma`'s ``mma.sync`` model. The rules that differ from FlashAttention-3's
are the methods of :class:`Fa2Softmax`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .. import mma
from ..hw import quad_allreduce, rowcol_view
from ..numerics import convert, ffma, fmul, fsub
from ..numerics.mufu import ex2, lg2, rcp
from .config import Config
from .constants import LN2_F32
from .evaluator import SPECIFICATION
from .mainloop_fwd_sm90 import _gemm_wg, _kv_block, padded_inputs, store, tile_rows
from .masks import allowed, kernel_flags
from .scheduler import ForwardMainloop
from .softmax import Softmax, rescale_o

_NEG_INF = np.float32(-np.inf)
_POS_INF = np.float32(np.inf)


@dataclass(frozen=True)
class Fa2Build:
    """How a build of FlashAttention-2 compiles the softmax's arithmetic.

    Attributes:
        name: the build (``"pytorch"``: PyTorch's ``aten/.../transformers/cuda/flash_attn``).
        unfuse_fma: ``exp2f(__fmul_rn(x, scale_log2) - max_scaled)`` (PyTorch's
            ``UNFUSE_FMA``, after pytorch/pytorch#121558) instead of one FFMA.
        fmul_ftz, fsub_ftz: whether that FMUL and the subtraction flush subnormals.
        ex2_ftz: ``exp2f`` as MUFU.EX2 with subnormals flushed (``--use_fast_math``) or
            ``ex2.approx.f32`` keeping them.
        rcp_approx: ``1.f / sum`` as MUFU.RCP (fast math) or the IEEE division (``rcp.rn``).
        fast_math: ``expf`` / ``logf`` in the split-KV combine as ``__expf`` / ``__logf``
            (else libdevice's accurate sequences, :mod:`simulator.numerics.libdevice`).
    """

    name: str
    unfuse_fma: bool = True
    fmul_ftz: bool = False
    fsub_ftz: bool = False
    ex2_ftz: bool = False
    rcp_approx: bool = False
    fast_math: bool = False


#: PyTorch's build of FA2: ``UNFUSE_FMA``, no ``--use_fast_math``. Measured on the H100 with
#: torch 2.11 (simulator/data/device/sdpa/): the two-rounding exp2 argument (one FFMA misses
#: hundreds of bits), ``1.f / sum`` correctly rounded (MUFU.RCP misses O bits in 4 of 202
#: calls), the combine's accurate ``logf`` (``__logf`` misses LSE bits in nearly every split
#: call). The ftz switches follow the PTX of a build without ``-ftz``; no recorded input tells
#: them apart.
PYTORCH = Fa2Build("pytorch")

#: flash-attn 2.x's own build (``setup.py``: ``--use_fast_math``, no ``UNFUSE_FMA``), as PyPI
#: flash-attn-jax 0.6.2 ships it (sm_80 PTX that the driver compiles for sm_90): its PTX has
#: ``mul.ftz`` then ``sub.ftz`` for the exp2 argument (contractible: one FFMA.FTZ, which the
#: recorded bits show), ``ex2.approx.ftz``, ``rcp.approx.ftz`` for ``1.f / sum`` and
#: ``lg2.approx.ftz`` for ``__logf``. Measured on the H100 (simulator/data/device/fa2_jax/).
FLASH_ATTN = Fa2Build("flash-attn", unfuse_fma=False, fmul_ftz=True, fsub_ftz=True, ex2_ftz=True,
                      rcp_approx=True, fast_math=True)


@dataclass(frozen=True)
class Fa2Dropout:
    """A launch's dropout (``Is_dropout``): the keep mask the kernel draws and ``rp_dropout``.

    Attributes:
        keep: bool ``[batch, heads, seqlen_q, seqlen_k]`` of the launch
            (:func:`simulator.numerics.philox.dropout_keep`): True where P is kept.
        rp_dropout: ``1.f / p_keep`` in float32 (flash_api.cpp), folded into the final scale.
    """

    keep: np.ndarray
    rp_dropout: np.float32


def fa2_tile(head_dim: int, causal: bool, dropout: bool) -> tuple[int, int, int]:
    """``(kBlockM, kBlockN, warps)`` of FA2's forward kernel on a Hopper GPU (compute capability
    9.0, not ``is_sm8x``; 227 KB of shared memory per block and 228 KB per SM), from the
    ``run_mha_fwd_hdim*`` functions of ``flash_fwd_launch_template.h`` (PyTorch's copy).

    Args:
        head_dim: the input head dim (the kernel's is its rounding, :func:`kernel_head_dim`).
    """
    hd = kernel_head_dim(head_dim)
    if hd == 32:
        return 128, 128, 4
    if hd == 64:
        return (128, 64, 4) if dropout else (128, 128, 4)
    if hd == 96:
        return 128, 64, 4
    if hd == 128:
        return (128, 32, 4) if dropout else (128, 64, 4)
    if hd == 192:
        return (64, 64, 4) if dropout else (128, 64, 8)
    return 64, 64, 4  # 256: two 64 x 64 CTAs per SM fit Hopper's shared memory


#: the head dims FA2 compiles kernels for: 160 and 224 have none since upstream removed them
#: (after 2.5.7), and torch 2.11's build runs a head dim of 160 with the 192 kernel, 224 with
#: the 256 one (the kernel names recorded in simulator/data/device/sdpa/sdpa_kernels.json)
KERNEL_HEAD_DIMS = (32, 64, 96, 128, 192, 256)


def kernel_head_dim(head_dim: int) -> int:
    """The compiled kHeadDim a head dim runs with: the smallest of :data:`KERNEL_HEAD_DIMS`
    that holds it (``run_mha_fwd_`` dispatch by ``head_size_rounded``, flash_api.cpp)."""
    for hd in KERNEL_HEAD_DIMS:
        if head_dim <= hd:
            return hd
    raise ValueError(f"head_dim: FlashAttention-2 supports head dims up to 256, got {head_dim}")


class Fa2Softmax(Softmax):
    """``Softmax<kNRows>`` of FA2's ``softmax.h``: the row state of :class:`.softmax.Softmax`
    with FA2's exp2 form, its ``scale_apply_exp2`` and ``normalize_softmax_lse``."""

    def __init__(self, batch_shape, nrow, scale_log2, softmax_scale, build: Fa2Build, mufu: str,
                 split: bool = False, *, evaluator=None):
        super().__init__(batch_shape, nrow, scale_log2, 0, mufu, evaluator=evaluator)
        self.softmax_scale = np.float32(softmax_scale)
        self.build = build
        self.split = split  # the split-KV kernel's: an empty row's LSE is -inf

    def fusable(self) -> bool:
        """Whether the compiled block step (FA3's: :meth:`.softmax.Softmax.block_step`) gives
        this build's bits: the exp2 argument as one FFMA.FTZ and every step flushing, as
        flash-attn's fast-math build compiles it (not PyTorch's ``UNFUSE_FMA``). One difference
        remains, the -inf guard of ``max_scaled`` (FA2 applies it whatever ``Check_inf``):
        the mainloop redoes a block in NumPy where it matters (a row max of -inf on a block
        without ``Check_inf``)."""
        b = self.build
        return (not b.unfuse_fma and b.fmul_ftz and b.fsub_ftz and b.ex2_ftz
                and super().fusable())

    def online_softmax(self, scores, is_first, check_inf=True):
        """``scale_apply_exp2`` then the thread-local ``reduce_sum``: ``max_scaled`` is 0 for a
        -inf max whatever ``Check_inf`` (softmax.h checks it there unconditionally)."""
        scale = self._scale()
        b = self.build
        max_scaled = np.where(self.row_max == _NEG_INF, np.float32(0),
                              fmul(self.row_max, scale, ftz=b.fmul_ftz))
        if b.unfuse_fma:
            x = fsub(fmul(scores, scale[..., None], ftz=b.fmul_ftz), max_scaled[..., None],
                     ftz=b.fsub_ftz)
        else:
            x = ffma(scores, scale[..., None], -max_scaled[..., None], ftz=b.fmul_ftz)
        p = ex2(x, model=self.mufu, ftz=b.ex2_ftz)
        self.add_row_sum(p, is_first)
        return p

    def finalize(self, final_scale=1.0):
        """``normalize_softmax_lse``: quad-allreduced row sum; ``inv_sum`` 1 for a 0 or NaN sum;
        ``lse = row_max * softmax_scale + __logf(sum)`` (FFMA of MUFU.LG2 * ln 2), +inf for a 0
        or NaN sum (-inf in the split-KV kernel); returns the scale O is multiplied by
        (``inv_sum``)."""
        total = quad_allreduce(self.row_sum, "sum")
        self.row_sum = total
        empty = (total == 0) | np.isnan(total)
        safe = np.where(empty, np.float32(1), total)
        if self.build.rcp_approx:
            inv = rcp(safe, model=self.mufu)
        else:
            with np.errstate(divide="ignore", over="ignore"):
                inv = (np.float32(1) / safe).astype(np.float32)
        inv = np.where(empty, np.float32(1), inv)
        ftz = self.build.fmul_ftz
        log_sum = fmul(lg2(safe, model=self.mufu, ftz=ftz), LN2_F32, ftz=ftz)  # __logf
        lse = ffma(self.row_max, self.softmax_scale, log_sum, ftz=ftz)
        self.lse = np.where(empty, _NEG_INF if self.split else _POS_INF, lse).astype(np.float32)
        return fmul(inv, np.asarray(final_scale, np.float32), ftz=ftz)


def masking_checks(cfg: Config, steps: int) -> list[bool]:
    """``Check_inf`` of each visited block: the first ``n_masking_steps`` blocks check when the
    kernel is causal or local, the later ones when it is local (``compute_attn_1rowblock``)."""
    causal, local = kernel_flags(cfg.window)
    M, N = cfg.kblock_m, cfg.kblock_n
    even_mn = (cfg.seqlen_k % N == 0 and cfg.seqlen_q % M == 0 and not local
               and kernel_head_dim(cfg.head_dim) <= 128 and cfg.head_dim == kernel_head_dim(cfg.head_dim))
    if not causal and not local:
        masking = 1
    else:
        masking = -(-M // N) + (0 if even_mn and causal else 1)
    return [(causal or local) if step < masking else local for step in range(steps)]


def run_group(cfg: Config, n_range, masked, ctas, padded, out, lse, wanted, record,
              ev=SPECIFICATION, *, build: Fa2Build = PYTORCH, dropout: Fa2Dropout | None = None):
    """One group of CTAs of FA2's forward over their K/V blocks (the module docstring's steps);
    stores into ``out`` / ``lse``, or returns ``(acc_o, lse_rows)`` when they are None. With
    ``dropout``, the rounded P is zeroed where the mask drops it (``apply_dropout``: an AND
    with the f16x2 compare's mask) before P V, and O's final scale is ``inv_sum * rp_dropout``.
    ``ev``: the launch's evaluator (:mod:`simulator.flash.evaluator`): it runs the GEMMs; the
    softmax steps stay FA2's own (no compiled twin: FA2's FMUL / FADD and ftz are not FA3's)."""
    if ev.exact is not None or wanted:
        raise ValueError("exact, trace: not emulated for FlashAttention-2's forward")
    qp, kp, vp, _ = padded
    n_min, n_max = n_range
    b = ctas[:, 0]
    G, W, N, d, dv = len(ctas), cfg.kblock_m // 64, cfg.kblock_n, cfg.kernel_head_dim, \
        cfg.kernel_head_dim_v
    rows, heads, hkv = tile_rows(cfg, ctas)
    grow = rows.reshape(G, W, 64)
    split = cfg.splits is not None
    if n_max <= n_min:  # no K/V block: the early exit writes O = 0, LSE = +inf (-inf: a split)
        acc_o = np.zeros((G, W, 64, dv), np.float32)
        lse_rows = np.full((G, cfg.kblock_m), _NEG_INF if split else _POS_INF, np.float32)
        return _finish(cfg, ctas, rows, heads, acc_o, lse_rows, out, lse)
    c = cfg.consts
    soft = Fa2Softmax((G, W), 2, np.float32(c["scale_log2"]), c["softmax_scale"], build, cfg.mufu,
                      split, evaluator=ev)
    view = rowcol_view(f"m64n{N}k16")
    flat = view.row[:, :, None] * N + view.col[:, None, :]
    flat.setflags(write=False)  # the compiled block step checks read-only positions once
    to_rowcol = np.argsort(flat.reshape(-1))
    ins = mma.parse("mma_sync", f"m16n8k16.f32.{cfg.fmt}.{cfg.fmt}.f32", cfg.gpu)
    kv_pairs, kv_of = np.unique(b * cfg.heads_kv + hkv, return_inverse=True)
    bu, hu = kv_pairs // cfg.heads_kv, kv_pairs % cfg.heads_kv
    qt = qp[b[:, None], rows, heads].reshape(G, W, 64, d)
    # operands decoded once where the evaluator has them: Q per group, each K/V block per
    # distinct (batch, kv head) (the same bits as decoding in every GEMM)
    decoded = ev.decodes(ins.params, ins.k)
    if decoded:
        qt = ev.decode(qt.reshape(G, W * 64, d), ins.params)
    fused = decoded and dropout is None and soft.fusable()
    acc_o = np.zeros((G, W, 64, dv), np.float32)
    blocks = list(range(n_max - 1, n_min - 1, -1))
    for step, (n, check_inf) in enumerate(zip(blocks, masking_checks(cfg, len(blocks)), strict=True)):
        keys = n * N + np.arange(N)
        kt = _kv_block(kp, bu, hu, keys, kv_of, ins if decoded else None, transpose=True,
                       evaluator=ev)
        vt = _kv_block(vp, bu, hu, keys, kv_of, ins if decoded else None, evaluator=ev)
        s = _gemm_wg(qt, kt, np.zeros((G, W, 64, N), np.float32), ins, ev)
        ok = allowed(grow[..., None], keys[None, None, None, :], cfg.seqlen_q,
                     cfg.seqlens_k[b][:, None, None, None], cfg.window, cfg.chunk)
        s = np.where(ok, s, _NEG_INF)
        first = step == 0
        scores_scale, p_cvt = _softmax_step(soft, s, flat, to_rowcol, first, check_inf, cfg.fmt,
                                            ins.params.emin, fused)
        if not first:
            acc_o = rescale_o(acc_o, view.row_values(scores_scale))
        if dropout is not None:
            p_cvt = _drop(p_cvt, dropout.keep, b, heads.reshape(G, W, 64), grow, keys)
        acc_o = _gemm_wg(p_cvt, vt, acc_o, ins, ev)
    final = soft.finalize(1.0 if dropout is None else dropout.rp_dropout)
    acc_o = rescale_o(acc_o, view.row_values(final))
    return _finish(cfg, ctas, rows, heads, acc_o, view.row_values(soft.lse), out, lse)


def _softmax_step(soft: Fa2Softmax, s, flat, to_rowcol, first: bool, check_inf: bool, fmt: str,
                  emin: int, fused: bool):
    """One block's ``max_get_scale``, ``online_softmax`` and P's conversion: ``(scores_scale,
    P)``, P in matrix order (decoded for the P V GEMM when ``fused``). The compiled step
    (``fused``) guards ``max_scaled`` only under ``Check_inf``, FA2 always: a block without
    ``Check_inf`` that leaves a row max of -inf is redone from the saved state in NumPy."""
    if fused:
        saved = (soft.row_max.copy(), soft.row_sum.copy(), soft._row_sum_scale)
        scores_scale, p = soft.block_step(s, flat, first, check_inf, fmt, emin)
        if check_inf or not np.isneginf(soft.row_max).any():
            return scores_scale, p
        soft.row_max, soft.row_sum, soft._row_sum_scale = saved
    g, w = s.shape[:2]
    scores = np.take(s.reshape(g, w, -1), flat, axis=-1)
    scores_scale = soft.max_get_scale(scores, is_first=first, check_inf=check_inf)
    p = soft.online_softmax(scores, is_first=first, check_inf=check_inf)
    return scores_scale, np.take(convert(p, fmt).reshape(g, w, -1), to_rowcol,
                                 axis=-1).reshape(s.shape)


def _drop(p, keep, b, heads, rows, keys):
    """``p`` [G, W, 64, N] (the input type) with the dropped positions +0; rows and keys past
    the mask's extent (not stored, or already 0) are read clamped."""
    _, _, sq, sk = keep.shape
    kept = keep[b[:, None, None, None], heads[..., None], np.minimum(rows, sq - 1)[..., None],
                np.minimum(keys, sk - 1)[None, None, None, :]]
    return np.where(kept, p, np.zeros((), p.dtype))


def _finish(cfg, ctas, rows, heads, acc_o, lse_rows, out, lse):
    if out is None:  # an executor task: the caller stores
        return acc_o, lse_rows
    store(cfg, ctas, rows, heads, acc_o, lse_rows, out, lse)
    return None


def split_ranges(full: tuple[int, int], cfg: Config, b: int) -> list[tuple[int, int]]:
    """Each split's K/V blocks in FA2's split-KV kernel (``compute_attn_1rowblock_splitkv``):
    ``n_blocks_per_split = ceil(ceil(seqlen_k / kBlockN) / num_splits)`` over the whole key
    range, split ``s`` from ``s * per`` to ``(s + 1) * per``, cut to the CTA's own range
    ``full`` (causal / local bounds); an empty range writes O = 0 and LSE = -inf."""
    if cfg.splits is None:
        return [full]
    n_min, n_max = full
    count = int(cfg.splits[b])
    blocks = -(-cfg.seqlen_k // cfg.kblock_n)  # params.seqlen_k: the launch's, not the batch's
    per = -(-blocks // count)
    return [(max(n_min, s * per), min(n_max, (s + 1) * per)) for s in range(count)]


def mainloop(build: Fa2Build = PYTORCH, dropout: Fa2Dropout | None = None) -> ForwardMainloop:
    """FA2's forward mainloop for ``build`` (and ``dropout``), as
    :func:`simulator.flash.scheduler.launch` takes it (the padded operands, tile rows and
    epilogue store are FA3's: the same memory layout)."""
    return ForwardMainloop(padded_inputs, functools.partial(run_group, build=build, dropout=dropout),
                           tile_rows, store, split_ranges, evaluated=True)


def splitkv_tile(head_dim: int) -> tuple[int, int, int]:
    """``(kBlockM, kBlockN, warps)`` of FA2's split-KV kernel (``run_mha_fwd_splitkv_dispatch``):
    64 rows, 256 keys up to head dim 64, 128 up to 128, 64 above, 4 warps."""
    hd = kernel_head_dim(head_dim)
    return 64, 256 if hd <= 64 else 128 if hd <= 128 else 64, 4


__all__ = ["FLASH_ATTN", "KERNEL_HEAD_DIMS", "PYTORCH", "Fa2Build", "Fa2Dropout", "Fa2Softmax", "fa2_tile",
           "kernel_head_dim", "mainloop", "masking_checks", "run_group", "split_ranges", "splitkv_tile"]
