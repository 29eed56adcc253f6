"""FlashAttention-2's backward (``csrc/flash_attn/src/flash_bwd_kernel.h``,
``compute_dq_dk_dv_1colblock`` as ``flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel`` runs it) as
its sm80 code runs on a Hopper GPU, on emulated warps.

Three kernels, as ``run_flash_bwd_seqk_parallel`` (``flash_bwd_launch_template.h``) launches
them:

* ``flash_bwd_dot_do_o_kernel`` (``flash_bwd_preprocess_kernel.h``, :func:`dot_do_o`):
  ``dP_sum = rowsum(dO * O) * p_keep`` per row of every m block (0 for the rows past
  seqlen_q); without ``deterministic`` it also clears dQaccum.
* the mainloop, one CTA per (n_block, batch, head): its m blocks in **descending** order;
  ``S = Q K^T`` and ``dP = dO V^T`` by ``mma.sync`` m16n8k16 from +0; masked positions -inf;
  ``P = exp2f(S * scale_log2 - LSE * log2(e))`` in the build's form (PyTorch's ``UNFUSE_FMA``:
  the product rounded first; :func:`recompute_p`), LSE +inf for the rows past seqlen_q; with
  dropout the dropped P negated (``encode_dropout_in_sign_bit``) and rounded with
  ``cvt.rn.relu``; ``dS = P * (dP - dP_sum)`` (a dropped P: ``P * dP_sum`` of the negated P),
  rounded; ``dV += P^T dO``, ``dK += dS^T Q`` (register accumulators across the m blocks) and
  the dQ partial ``dS K`` (from +0) ``atomicAdd``-ed into float32 dQaccum (RED.ADD.F32.FTZ.RN:
  the PTX ``red.add.f32`` flushes subnormals). After the loop dK *= scale * rp_dropout, dV *=
  rp_dropout (dropout only), both rounded.
* ``flash_bwd_convert_dq_kernel``: ``dQ = (sum of the dQaccum copies) * scale * rp_dropout``,
  rounded; one copy without ``deterministic`` (whose adds arrive in the CTAs' finishing order:
  :mod:`simulator.flash.spread`), ``ceil(SMs / (batch * heads))`` with it: CTA column ``c`` adds
  the n blocks ``c, c + G, ...`` in ascending order into its own copy, and the copies are summed
  in order (:func:`deterministic_dq`).

The warp layout (AtomLayoutMSdP, ...) never splits a GEMM's K, so an output element's bits
depend only on the K order: ascending within a block, the m blocks descending for dK / dV.
CTAs are emulated together (an array axis); the Python loops run over m blocks and over the
deterministic copies, never threads or elements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import mma
from ..numerics import convert, fadd, ffma, fmul, fsub
from ..numerics.mufu import ex2
from .evaluator import SPECIFICATION
from .grid import pad_rows
from .mainloop_fwd_fa2 import FLASH_ATTN, KERNEL_HEAD_DIMS, PYTORCH, Fa2Build
from .masks import allowed
from .spread import ordered_sum, sum_bounds

_NEG_INF = np.float32(-np.inf)
_LOG2E_F32 = np.float32(np.log2(np.e))  # float(M_LOG2E)

#: FA2 2.5.7's kernel head dims (``HEADDIM_SWITCH``); upstream after April 2025 has no 160 / 224
KERNEL_HEAD_DIMS_257 = (32, 64, 96, 128, 160, 192, 224, 256)


@dataclass(frozen=True)
class Fa2BwdBuild:
    """How a build of FlashAttention-2 compiles the backward.

    Attributes:
        exp: the P recompute's exp2 form (``scale_apply_exp2``, the forward's switches:
            :class:`simulator.flash.mainloop_fwd_fa2.Fa2Build`).
        ftz: whether the elementwise float32 arithmetic (dot_do_o's FMUL / FFMA / FADD, the
            LSE scaling, dS's FSUB / FMUL, convert_dQ's FADD, the final FMULs) flushes
            subnormals (``--use_fast_math``'s ``--ftz=true``). The atomicAdd always does.
        kernel_head_dims: the compiled kHeadDim list (``HEADDIM_SWITCH``).
    """

    exp: Fa2Build = PYTORCH
    ftz: bool = False
    kernel_head_dims: tuple[int, ...] = KERNEL_HEAD_DIMS


#: PyTorch's build: ``UNFUSE_FMA``, no fast math, the forward's kernel head dims (what the
#: forward's recordings show: simulator/flash/mainloop_fwd_fa2.py, PYTORCH, KERNEL_HEAD_DIMS)
PYTORCH_BWD = Fa2BwdBuild()

#: flash-attn 2.x's own build (``--use_fast_math``: every float32 step flushes), as PyPI
#: flash-attn-jax 0.6.2 ships it; its kernels are those of head dims 32, 64, 96, 128, 192 and
#: 256 (simulator/data/device/fa2_jax/)
FLASH_ATTN_BWD = Fa2BwdBuild(exp=FLASH_ATTN, ftz=True)


@dataclass(frozen=True)
class Fa2BwdTile:
    """``Flash_bwd_kernel_traits`` of a launch (``run_mha_bwd_hdim*``)."""

    kernel_head_dim: int
    kblock_m: int
    kblock_n: int
    warps: int
    atom_m_sdp: int
    atom_n_dkv: int
    atom_m_dq: int
    v_in_regs: bool

    @property
    def gmem_threads_per_row(self) -> int:
        """``kGmemThreadsPerRow = kBlockKSmem / 8`` (kBlockKSmem 64 or 32)."""
        return (64 if self.kernel_head_dim % 64 == 0 else 32) // 8


def kernel_head_dim(head_dim: int, build: Fa2BwdBuild = PYTORCH_BWD) -> int:
    """The kHeadDim a head dim runs with (``HEADDIM_SWITCH``, ``run_mha_bwd``).

    Raises:
        ValueError: a head dim above the largest kernel's, naming ``head_dim``.
    """
    for hd in build.kernel_head_dims:
        if head_dim <= hd:
            return hd
    raise ValueError(f"head_dim: FlashAttention-2's backward supports head dims up to "
                     f"{build.kernel_head_dims[-1]}, got {head_dim}")


def bwd_tile(head_dim: int, dropout: bool, build: Fa2BwdBuild = PYTORCH_BWD) -> Fa2BwdTile:
    """The backward's kernel traits on a Hopper GPU (227 KB of opt-in shared memory per block:
    every ``max_smem_per_block`` test of ``run_mha_bwd_hdim*`` in
    ``flash_bwd_launch_template.h`` takes its first branch): hdim 32 128 x 128 (V in
    registers without dropout), 64 128 x 128, 96 64 x 128 (V in registers without dropout),
    128 64 x 128, 160 / 192 / 224 / 256 64 x 64; 8 warps."""
    hd = kernel_head_dim(head_dim, build)
    table = {32: (128, 128, 4, 4, 4, not dropout), 64: (128, 128, 4, 4, 4, False),
             96: (64, 128, 2, 4, 4, not dropout), 128: (64, 128, 2, 4, 2, False),
             160: (64, 64, 4, 4, 4, False), 192: (64, 64, 4, 2, 2, False),
             224: (64, 64, 4, 4, 4, False), 256: (64, 64, 4, 2, 2, False)}
    m, n, a_sdp, a_dkv, a_dq, v_regs = table[hd]
    return Fa2BwdTile(hd, m, n, 8, a_sdp, a_dkv, a_dq, v_regs)


def dot_do_o(out: np.ndarray, dout: np.ndarray, tile: Fa2BwdTile, p_keep, ftz: bool = True) -> np.ndarray:
    """``dP_sum = rowsum(dO * O) * p_keep`` as ``dot_do_o`` (``flash_bwd_preprocess_kernel.h``)
    sums it: a row is read by ``kGmemThreadsPerRow`` threads (8, or 4 when kHeadDim is not a
    multiple of 64), each taking 8 consecutive values of every kBlockKSmem-wide (64 or 32)
    chunk; a thread's sum is FMUL of its first pair, then FFMA of the others in (chunk, value)
    order; the threads' sums meet in a butterfly (``Allreduce``: shfl_xor by half the threads,
    then halves again); then FMUL by ``p_keep`` (1 without dropout).

    Args:
        out, dout: [..., head_dim] bf16 / fp16 (head_dim <= kernel head dim; zero columns
            added, as the predicated loads leave them). p_keep: float32 ``1 - dropout_p``.
    Returns:
        float32 [...].
    """
    kd, tpr = tile.kernel_head_dim, tile.gmem_threads_per_row
    d = out.shape[-1]
    o = np.zeros(out.shape[:-1] + (kd,), np.float32)
    g = np.zeros_like(o)
    o[..., :d] = out.astype(np.float32)
    g[..., :d] = dout.astype(np.float32)
    width = tpr * 8
    chunks = kd // width
    # [..., chunk, thread, 8] -> per thread its values in (chunk, value) order
    lead = o.shape[:-1]
    o, g = (np.moveaxis(x.reshape(lead + (chunks, tpr, 8)), -2, -3).reshape(lead + (tpr, chunks * 8))
            for x in (o, g))
    acc = fmul(g[..., 0], o[..., 0], ftz=ftz)
    for i in range(1, chunks * 8):
        acc = ffma(g[..., i], o[..., i], acc, ftz=ftz)
    lane, offset = np.arange(tpr), tpr // 2
    while offset >= 1:
        acc = fadd(acc, acc[..., lane ^ offset], ftz=ftz)
        offset //= 2
    return fmul(acc[..., 0], np.float32(p_keep), ftz=ftz)


def recompute_p(s: np.ndarray, lse: np.ndarray, scale_log2, build: Fa2BwdBuild, mufu: str) -> np.ndarray:
    """``scale_apply_exp2</*Scale_max=*/false>`` (``softmax.h``): ``max_scaled = LSE *
    float(M_LOG2E)`` (0 for a -inf LSE), ``P = exp2f(S * scale_log2 - max_scaled)`` in the
    build's form (``UNFUSE_FMA``: ``__fmul_rn`` then the subtraction; else one FFMA).

    Args:
        s: float32 [..., M, N] scores (-inf where masked); lse: float32 [..., M].
    """
    b = build.exp
    scale = np.float32(scale_log2)
    max_scaled = np.where(lse == _NEG_INF, np.float32(0), fmul(lse, _LOG2E_F32, ftz=build.ftz))
    max_scaled = max_scaled.astype(np.float32)[..., None]
    if b.unfuse_fma:
        x = fsub(fmul(s, scale, ftz=b.fmul_ftz), max_scaled, ftz=b.fsub_ftz)
    else:
        x = ffma(s, scale, -max_scaled, ftz=True)
    return ex2(x, model=mufu, ftz=b.ex2_ftz)


def convert_relu(x: np.ndarray, fmt: str) -> np.ndarray:
    """``cvt.rn.relu`` to ``fmt``: the rounded value, +0 where its sign bit is set (NaN stays
    NaN: ``convert_type_relu``, utils.h)."""
    r = convert(x, fmt)
    neg = np.signbit(r.astype(np.float32)) & ~np.isnan(r.astype(np.float32))
    return np.where(neg, np.zeros((), r.dtype), r)


@dataclass(frozen=True)
class BwdLaunch:
    """A backward launch resolved once (the kernel layout [batch, seqlen, heads, d])."""

    fmt: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    heads_kv: int
    head_dim: int
    window: tuple[int, int]       # (left, right), -1 unbounded; causal: (-1, 0)
    tile: Fa2BwdTile
    scale_log2: np.float32
    scale_rp_dropout: np.float32  # params.scale_softmax_rp_dropout
    rp_dropout: np.float32
    p_keep: np.float32
    dropout: bool
    grid_cols: int                # CTA columns of the deterministic launch (G)
    build: Fa2BwdBuild
    mufu: str
    gpu: object

    @property
    def m_blocks(self) -> int:
        return -(-self.seqlen_q // self.tile.kblock_m)

    @property
    def n_blocks(self) -> int:
        return -(-self.seqlen_k // self.tile.kblock_n)


def m_block_range(cfg: BwdLaunch, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[m_block_min, m_block_max)`` of the CTAs of key blocks ``n`` (``compute_dq_dk_dv_1colblock``,
    C's integer division): the kernel is causal for a window ``(-1, 0)``, local for any other
    bounded one (an unbounded side then reaches seqlen_k, ``set_params_fprop``); a local CTA
    ends at ``ceil((n + 1) * kBlockN + seqlen_q - seqlen_k + left, kBlockM)``, a causal or
    local one starts at ``max(0, (n * kBlockN + seqlen_q - seqlen_k - right) / kBlockM)``."""
    M, N = cfg.tile.kblock_m, cfg.tile.kblock_n
    left, right = cfg.window
    causal = left < 0 and right == 0
    local = (left >= 0 or right >= 0) and not causal
    if local:
        left, right = (cfg.seqlen_k if left < 0 else left), (cfg.seqlen_k if right < 0 else right)
    shift = cfg.seqlen_q - cfg.seqlen_k
    n = np.asarray(n, np.int64)
    m_max = np.full(n.shape, cfg.m_blocks, np.int64)
    if local:
        m_max = np.minimum(m_max, _cdiv((n + 1) * N + shift + left + M - 1, M))
    m_min = np.zeros(n.shape, np.int64)
    if causal or local:
        m_min = np.maximum(0, _cdiv(n * N + shift - right, M))
    return m_min, np.where(n * N < cfg.seqlen_k, m_max, 0)


def _cdiv(a, b: int) -> np.ndarray:
    """C's ``/`` on ints (toward zero)."""
    a = np.asarray(a, np.int64)
    return np.sign(a) * (np.abs(a) // b)


@dataclass
class MainloopOut:
    """dQaccum per mode ([B * H, rows, kd] float32), dK / dV accumulators ([B, keys, H, kd]
    float32, scaled as the epilogue leaves them before rounding) and the spread's (lo, hi)."""

    dq_det: np.ndarray | None
    dq_default: np.ndarray
    dq_bounds: tuple[np.ndarray, np.ndarray] | None
    dk: np.ndarray
    dv: np.ndarray


def mainloop(cfg: BwdLaunch, q, k, v, dout, lse, dpsum, keep, *, deterministic: bool,
             spread: bool, ev=SPECIFICATION) -> MainloopOut:
    """Every CTA of the launch (the module docstring's steps) and the dQaccum sums.

    Args:
        q, dout: [B, Sq, H, d]; k, v: [B, Sk, Hkv, d] (the input dtype); lse: float32
            [B, H, Sq]; dpsum: float32 [B, H, rows] (:func:`dot_do_o`, rows = m blocks *
            kBlockM); keep: None, or bool [B, H, rows, keys] (the dropout mask over the
            padded tiles).
        deterministic: also sum the deterministic launch's dQaccum copies (``dq_det``).
        spread: also bound every arrival order of the default launch's atomics.
        ev: the launch's evaluator (:mod:`simulator.flash.evaluator`): it runs the five GEMMs;
            the elementwise steps are FA2's own.
    """
    t = cfg.tile
    M, N, kd = t.kblock_m, t.kblock_n, t.kernel_head_dim
    B, H, g = cfg.batch, cfg.heads, cfg.heads // cfg.heads_kv
    rows, keys = cfg.m_blocks * M, cfg.n_blocks * N
    qp, dop = pad_rows(q, rows, kd), pad_rows(dout, rows, kd)
    kp, vp = pad_rows(k, keys, kd), pad_rows(v, keys, kd)
    lse_p = np.full((B, H, rows), np.inf, np.float32)  # rows past seqlen_q: LSE = +inf
    lse_p[..., : cfg.seqlen_q] = lse
    b, h, n = (x.ravel() for x in np.meshgrid(np.arange(B), np.arange(H), np.arange(cfg.n_blocks),
                                              indexing="ij"))
    m_min, m_max = m_block_range(cfg, n)
    dk = np.zeros((len(b), N, kd), np.float32)
    dv = np.zeros_like(dk)
    shape = (B * H, rows, kd)
    dq_default = np.zeros(shape, np.float32)
    dq_det = np.zeros(shape, np.float32) if deterministic else None
    bounds = (np.zeros(shape, np.float32), np.zeros(shape, np.float32)) if spread else None
    ins = mma.parse("mma_sync", f"m16n8k16.f32.{cfg.fmt}.{cfg.fmt}.f32", cfg.gpu)
    key_idx = n[:, None] * N + np.arange(N)[None, :]                                   # [C, N]
    kc = kp[b[:, None], key_idx, (h // g)[:, None]]                                    # [C, N, kd]
    vc = vp[b[:, None], key_idx, (h // g)[:, None]]
    ftz = cfg.build.ftz
    for m in range(int(m_max.max(initial=0)) - 1, -1, -1):  # every CTA walks its m blocks down
        act = np.flatnonzero((m_min <= m) & (m < m_max))
        if act.size == 0:
            continue
        ab, ah = b[act], h[act]
        r = m * M + np.arange(M)
        qm = qp[ab[:, None], r[None, :], ah[:, None]]                                  # [A, M, kd]
        dom = dop[ab[:, None], r[None, :], ah[:, None]]
        kt, vt = kc[act], vc[act]
        zero = np.zeros((act.size, M, N), np.float32)                                  # clear(): +0
        s = ev.gemm(qm, np.swapaxes(kt, 1, 2), zero, ins)
        ok = allowed(r[None, :, None], key_idx[act][:, None, :], cfg.seqlen_q, cfg.seqlen_k, cfg.window)
        s = np.where(ok, s, _NEG_INF)
        p = recompute_p(s, lse_p[ab, ah][:, r], cfg.scale_log2, cfg.build, cfg.mufu)
        dsum = dpsum[ab, ah][:, r][..., None]
        dp = ev.gemm(dom, np.swapaxes(vt, 1, 2), zero, ins)
        if keep is None:
            p16 = convert(p, cfg.fmt)
            ds = fmul(p, fsub(dp, dsum, ftz=ftz), ftz=ftz)
        else:
            kept = keep[ab[:, None, None], ah[:, None, None], r[None, :, None], key_idx[act][:, None, :]]
            p = np.where(kept, p, -p)                                 # the sign bit marks a drop
            p16 = convert_relu(p, cfg.fmt)
            ds = fmul(p, np.where(p >= 0, fsub(dp, dsum, ftz=ftz), dsum), ftz=ftz)
        ds16 = convert(ds, cfg.fmt)
        dv[act] = ev.gemm(np.swapaxes(p16, 1, 2), dom, dv[act], ins)
        dqp = ev.gemm(ds16, kt, np.zeros((act.size, M, kd), np.float32), ins)
        dk[act] = ev.gemm(np.swapaxes(ds16, 1, 2), qm, dk[act], ins)
        _add_dq(cfg, m, n[act], ab * H + ah, dqp, dq_default, dq_det, bounds)
    dk = fmul(dk, cfg.scale_rp_dropout, ftz=ftz)
    if cfg.dropout:
        dv = fmul(dv, cfg.rp_dropout, ftz=ftz)
    cta = (B, H, cfg.n_blocks, N, kd)
    dk = dk.reshape(cta).transpose(0, 2, 3, 1, 4).reshape(B, keys, H, kd)
    dv = dv.reshape(cta).transpose(0, 2, 3, 1, 4).reshape(B, keys, H, kd)
    return MainloopOut(dq_det, dq_default, bounds, dk, dv)


def _add_dq(cfg: BwdLaunch, m: int, n, bh, dqp, dq_default, dq_det, bounds) -> None:
    """The atomicAdds of m block ``m``'s dQ partials ``dqp`` [A, M, kd] (CTAs ``(bh, n)``,
    sorted by (bh, n): every (batch, head) has the same n blocks here) into dQaccum: ascending
    n for ``dq_default``; the deterministic copies then their in-order sum for ``dq_det``; the
    bounds over every order for ``bounds``."""
    M = cfg.tile.kblock_m
    rows = slice(m * M, (m + 1) * M)
    ns = n[: np.count_nonzero(bh == bh[0])]
    parts = np.moveaxis(dqp.reshape(-1, len(ns), *dqp.shape[1:]), 1, 0)   # [n, BH, M, kd]
    tiles = bh[:: len(ns)]
    dq_default[tiles, rows] = ordered_sum(parts, ftz=True)
    if dq_det is not None:
        dq_det[tiles, rows] = deterministic_dq(parts, ns, cfg.grid_cols, cfg.build.ftz)
    if bounds is not None:
        lo, hi = sum_bounds(parts, ftz=True)
        bounds[0][tiles, rows], bounds[1][tiles, rows] = lo, hi


def deterministic_dq(parts: np.ndarray, ns: np.ndarray, grid_cols: int, ftz: bool) -> np.ndarray:
    """The deterministic launch's dQaccum sum for one m block: CTA column ``c`` handles the n
    blocks ``c, c + G, ...`` one after the other, atomicAdd-ing (FTZ) into its own zeroed copy;
    ``convert_dQ`` adds the G copies in order into a +0 accumulator (FADD, the build's ftz).

    Args:
        parts: float32 [n, ...] the partials of the n blocks ``ns`` (ascending).
        grid_cols: G = ceil(SM count / (batch * heads)).
    Returns:
        float32 [...]: the accumulator before convert_dQ's scaling.
    """
    acc = np.zeros(parts.shape[1:], np.float32)
    col = ns % grid_cols
    empty_added = False
    for c in range(grid_cols):
        sel = np.flatnonzero(col == c)
        if sel.size:
            acc = fadd(acc, ordered_sum(parts[sel], ftz=True), ftz=ftz)
            empty_added = False
        elif not empty_added:  # a +0 copy: consecutive ones change nothing after the first
            acc = fadd(acc, np.float32(0), ftz=ftz)
            empty_added = True
    return acc


__all__ = ["FLASH_ATTN_BWD", "KERNEL_HEAD_DIMS_257", "PYTORCH_BWD", "BwdLaunch", "Fa2BwdBuild", "Fa2BwdTile",
           "MainloopOut", "bwd_tile", "convert_relu", "deterministic_dq", "dot_do_o",
           "kernel_head_dim", "m_block_range", "mainloop", "recompute_p"]
