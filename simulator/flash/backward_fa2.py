"""FlashAttention-2's backward at the kernel level (``mha_bwd`` of ``flash_api.cpp`` after its
argument checks, then ``run_mha_bwd``): the preprocess, the seqlen_k-parallel mainloop and
convert_dQ of :mod:`.mainloop_bwd_fa2`, and, with GQA, the host's sum of each kv head's query
heads (``at::sum_out`` over the group of the rounded per-head dK / dV)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..gpus import DEFAULT_GPU, get_gpu, mufu_model_name
from ..numerics import convert, fadd, fmul, format_of
from ..numerics.philox import dropout_keep
from . import evaluator
from .constants import host_constants
from .mainloop_bwd_fa2 import PYTORCH_BWD, BwdLaunch, Fa2BwdBuild, Fa2BwdTile, bwd_tile, dot_do_o, mainloop

__all__ = ["Fa2BackwardResult", "backward_fa2", "group_sum", "plan_backward"]

_FORMATS = ("bf16", "f16")


@dataclass
class Fa2BackwardResult:
    """Output of :func:`backward_fa2`. Unpacks as ``dq, dk, dv = result``.

    Attributes:
        dq: [B, Sq, H, d]; dk, dv: [B, Sk, Hkv, d]; the input dtype.
        dpsum: float32 [B, H, m_blocks * kBlockM] (``softmax_d``: dot_do_o's output).
        tile: the kernel traits; grid_cols: the deterministic launch's CTA columns G.
        spread: with ``spread=True``, ``{"dq": (lo, hi), "dk": ..., "dv": ...}`` of what any
            arrival order of the default launch's atomicAdds gives (dK / dV: one value).
    """

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    dpsum: np.ndarray
    tile: Fa2BwdTile
    grid_cols: int
    spread: dict | None = None

    def __iter__(self):
        return iter((self.dq, self.dk, self.dv))


def plan_backward(q, k, *, softmax_scale=None, causal=False, window=(-1, -1), dropout_p=0.0,
                  build: Fa2BwdBuild = PYTORCH_BWD, gpu=DEFAULT_GPU) -> BwdLaunch:
    """The launch ``mha_bwd`` makes for q [B, Sq, H, d], k [B, Sk, Hkv, d]: window sides of at
    least seqlen_k become -1, causal sets the right side to 0; the tile (:func:`bwd_tile`),
    the host constants (``set_params_fprop``: ``p_keep = 1.f - p``, ``rp_dropout = 1.f /
    p_keep``, ``scale_softmax_rp_dropout = rp_dropout * scale``, ``scale_log2 = scale *
    M_LOG2E``), G = ``ceil(SM count / (B * H))``.

    Raises:
        ValueError: naming the argument: head dim, scale, dropout_p, an unknown GPU.
    """
    fmt = format_of(q.dtype).name
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    record = get_gpu(gpu)
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or \
            not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p: expected a number in [0, 1), got {dropout_p!r}")
    left, right = (int(window[0]), int(window[1]))
    left = -1 if left >= sk else left
    right = -1 if right >= sk else right
    if causal:
        right = 0
    elif left < 0 <= right:  # set_params_fprop: the open side of a one-sided window
        left = sk
    elif right < 0 <= left:
        right = sk
    tile = bwd_tile(d, dropout_p > 0, build)
    consts = host_constants(d, softmax_scale, 0.0)
    p_keep = np.float32(1.0) - np.float32(dropout_p)
    rp = np.float32(np.float32(1.0) / p_keep)
    scale_rp = np.float32(rp * consts["softmax_scale"])
    grid_cols = -(-record.sm_count // (b * h))
    return BwdLaunch(fmt, b, sq, sk, h, hk, d, (left, right), tile, consts["scale_log2"], scale_rp,
                     rp, p_keep, dropout_p > 0, grid_cols, build, mufu_model_name(record), record)


def backward_fa2(dout, q, k, v, out, lse, *, softmax_scale=None, causal=False, window=(-1, -1),
                 dropout_p=0.0, philox=None, deterministic=False, spread=False,
                 build: Fa2BwdBuild = PYTORCH_BWD, gpu=DEFAULT_GPU) -> Fa2BackwardResult:
    """FlashAttention-2's backward, emulated bit for bit (module docstring of
    :mod:`.mainloop_bwd_fa2`).

    Args:
        dout, q, out: [batch, seqlen_q, heads, head_dim]; k, v: [batch, seqlen_k, heads_kv,
            head_dim]; all ml_dtypes.bfloat16 or all numpy.float16; head_dim a multiple of 8
            up to 256; heads_kv divides heads.
        lse: the forward's softmax_lse, float32 [batch, heads, seqlen_q] (natural log; +inf
            for a row with no key).
        softmax_scale: default ``head_dim ** -0.5``; causal, window: as ``mha_bwd`` takes them.
        dropout_p, philox: the forward's dropout probability and its Philox ``(seed, offset)``
            (required with dropout): the mask is
            :func:`simulator.numerics.philox.dropout_keep` of it, the forward's.
        deterministic: ``params.deterministic``: dQ from G per-column dQaccum copies summed in
            order (G from the GPU's SM count); False: one dQaccum whose atomicAdds arrive in
            any order: the bits returned are those of ascending n blocks, and ``spread`` says
            what any order gives.
        spread: also return the default launch's bounds (``result.spread``).
        build: the build's arithmetic (:class:`.mainloop_bwd_fa2.Fa2BwdBuild`); gpu: the GPU.
    Returns:
        :class:`Fa2BackwardResult`.
    Raises:
        ValueError: naming the argument: dtypes, shapes, head dims, heads, lse, dropout
            without ``philox``, an unknown GPU.
    Source: csrc/flash_attn/src/flash_bwd_kernel.h, flash_bwd_preprocess_kernel.h,
    flash_bwd_launch_template.h; flash_api.cpp (mha_bwd).
    """
    _check(dout, q, k, v, out, lse)
    cfg = plan_backward(q, k, softmax_scale=softmax_scale, causal=bool(causal), window=window,
                        dropout_p=dropout_p, build=build, gpu=gpu)
    keep = None
    if cfg.dropout:
        if philox is None or len(philox) != 2:
            raise ValueError(f"philox: dropout needs the forward's (seed, offset), got {philox!r}")
        rows, keys = cfg.m_blocks * cfg.tile.kblock_m, cfg.n_blocks * cfg.tile.kblock_n
        keep = dropout_keep(int(philox[0]), int(philox[1]), cfg.batch, cfg.heads, rows, keys,
                            float(dropout_p))
    rows = cfg.m_blocks * cfg.tile.kblock_m
    o_pad = np.zeros((cfg.batch, cfg.heads, rows, cfg.head_dim), q.dtype)
    g_pad = np.zeros_like(o_pad)
    o_pad[:, :, : cfg.seqlen_q] = np.swapaxes(out, 1, 2)
    g_pad[:, :, : cfg.seqlen_q] = np.swapaxes(dout, 1, 2)
    dpsum = dot_do_o(o_pad, g_pad, cfg.tile, cfg.p_keep, build.ftz)
    t = cfg.tile
    work = 5 * cfg.batch * cfg.heads * rows * cfg.n_blocks * t.kblock_n * t.kernel_head_dim
    res = mainloop(cfg, q, k, v, dout, lse, dpsum, keep, deterministic=bool(deterministic),
                   spread=bool(spread), ev=evaluator.pick(work))  # once: "auto" by the work
    accum = res.dq_det if deterministic else fadd(np.zeros_like(res.dq_default), res.dq_default,
                                                  ftz=build.ftz)
    dq = _convert_dq(cfg, accum)
    dk, dv = (_store_kv(cfg, x) for x in (res.dk, res.dv))
    result = Fa2BackwardResult(dq, dk, dv, dpsum, cfg.tile, cfg.grid_cols)
    if spread:
        lo, hi = (_convert_dq(cfg, fadd(np.zeros_like(x), x, ftz=build.ftz)) for x in res.dq_bounds)
        result.spread = {"dq": (lo, hi), "dk": (dk, dk.copy()), "dv": (dv, dv.copy())}
    return result


def _convert_dq(cfg: BwdLaunch, accum: np.ndarray) -> np.ndarray:
    """convert_dQ after its sum: ``* scale_softmax_rp_dropout`` (FMUL), rounded; [B, Sq, H, d]
    from the [B * H, rows, kd] accumulator."""
    x = accum.reshape(cfg.batch, cfg.heads, -1, accum.shape[-1])[:, :, : cfg.seqlen_q, : cfg.head_dim]
    x = convert(fmul(x, cfg.scale_rp_dropout, ftz=cfg.build.ftz), cfg.fmt)
    return np.ascontiguousarray(np.swapaxes(x, 1, 2))


def _store_kv(cfg: BwdLaunch, acc: np.ndarray) -> np.ndarray:
    """dK or dV [B, Sk, Hkv, d]: each query head's scaled accumulator rounded (dk_expanded),
    then with GQA the group sum of ``mha_bwd`` (:func:`group_sum`)."""
    x = convert(acc[:, : cfg.seqlen_k, :, : cfg.head_dim], cfg.fmt)
    g = cfg.heads // cfg.heads_kv
    if g == 1:
        return np.ascontiguousarray(x)
    x = x.reshape(cfg.batch, cfg.seqlen_k, cfg.heads_kv, g, cfg.head_dim)
    return group_sum(x, axis=3, fmt=cfg.fmt)


def group_sum(x: np.ndarray, axis: int, fmt: str) -> np.ndarray:
    """``at::sum`` of a bf16 / fp16 tensor over ``axis`` as torch's CUDA reduction kernel adds
    it (``Reduce.cuh``, ``thread_reduce_impl`` with four accumulators): float32 accumulators
    ``acc[j]`` start at +0 and take the values ``j, j + 4, ...`` in order; then
    ``((acc[0] + acc[1]) + acc[2]) + acc[3]``, rounded to ``fmt`` (IEEE adds, subnormals kept).

    Args:
        x: the rounded per-query-head gradients; axis: the group axis.
    Returns:
        ``x`` summed over ``axis`` (that axis removed), in ``x``'s dtype.
    """
    vals = np.moveaxis(x, axis, 0).astype(np.float32)
    acc = [np.zeros(vals.shape[1:], np.float32) for _ in range(4)]
    for i, v in enumerate(vals):
        acc[i % 4] = (acc[i % 4] + v).astype(np.float32)
    total = acc[0]
    for j in range(1, 4):
        total = (total + acc[j]).astype(np.float32)
    return convert(total, fmt)


def _check(dout, q, k, v, out, lse) -> None:
    arrays = {"dout": dout, "q": q, "k": k, "v": v, "out": out}
    for name, x in arrays.items():
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            raise ValueError(f"{name}: expected a 4-d numpy array [batch, seqlen, heads, head_dim], "
                             f"got {getattr(x, 'shape', type(x).__name__)}")
        if x.dtype.name not in ("bfloat16", "float16"):
            raise ValueError(f"{name}: FlashAttention-2 takes bfloat16 or float16, got {x.dtype}")
        if x.dtype != q.dtype:
            raise ValueError(f"{name}: expected dtype {q.dtype} (q's), got {x.dtype}")
    b, sq, h, d = q.shape
    if k.shape[0] != b or k.shape[3] != d or v.shape != k.shape:
        raise ValueError(f"k, v: expected shape [{b}, seqlen_k, heads_kv, {d}] each, got "
                         f"{k.shape}, {v.shape}")
    for name in ("dout", "out"):
        if arrays[name].shape != q.shape:
            raise ValueError(f"{name}: expected shape {q.shape} (q's), got {arrays[name].shape}")
    if d % 8 or not 8 <= d <= 256:
        raise ValueError(f"q: head_dim must be a multiple of 8 from 8 to 256 (mha_bwd), got {d}")
    if k.shape[2] < 1 or h % k.shape[2]:
        raise ValueError(f"k: heads_kv = {k.shape[2]} must divide heads = {h}")
    if min(b, sq, k.shape[1]) < 1:
        raise ValueError(f"q, k: expected batch and sequence lengths >= 1, got q {q.shape}, k {k.shape}")
    if not isinstance(lse, np.ndarray) or lse.dtype != np.float32 or lse.shape != (b, h, sq):
        raise ValueError(f"logsumexp: expected float32 [{b}, {h}, {sq}] (batch, heads, seqlen_q), "
                         f"got {getattr(lse, 'dtype', type(lse).__name__)} {getattr(lse, 'shape', '')}")
