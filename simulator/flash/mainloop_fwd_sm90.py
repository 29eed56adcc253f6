"""FlashAttention-3's sm90 forward mainloop on emulated Hopper warpgroups (docs/forward.md, step
by step): what one group of CTAs computes over its K/V blocks, and the epilogue that stores it.

The scheduler (:mod:`simulator.flash.scheduler`) hands it groups of CTAs that visit the same K/V
blocks (same ``n_block_min .. n_block_max``): one array axis holds them, the next their
warpgroups, then the 64 rows (matrix form, for the tensor-core GEMMs) or the 128 threads
(row/column form, for the softmax). The Python loop runs over K/V blocks, the sequential
structure of the kernel; never over threads or elements. Sources: ``hopper/mainloop_fwd_sm90_
tma_gmma_ws.hpp``, ``hopper/softmax.h``, ``hopper/epilogue_fwd.hpp``. The arithmetic that the
NumPy specification and the compiled engine both evaluate is the launch's evaluator's
(:mod:`simulator.flash.evaluator`), passed in by the scheduler.
"""

from __future__ import annotations

import numpy as np

from .. import mma
from ..hw import accumulator_layout, rowcol_view
from ..numerics import convert, fdiv, fmul, format_of
from ..numerics.mufu import tanh
from . import exact as _exact
from .config import Config
from .constants import MAX_OFFSET
from .evaluator import SPECIFICATION
from .grid import pad_rows
from .masks import allowed
from .scheduler import ForwardMainloop
from .softmax import Softmax, rescale_o
from .softmax_fa4 import Fa4Softmax, empty_row_lse, rescale_o_fa4

_NEG_INF = np.float32(-np.inf)
_NEG_ZERO = np.float32(-0.0)


# ---- setup ------------------------------------------------------------------------------------
def padded_inputs(cfg: Config, q, k, v, qv=None):
    """Zero-filled copies padded to whole blocks and to the kernel head dim (qv: to the
    kernel's V head dim; None without qv); keys at or after seqlens_k[b] zeroed (as a bulk copy
    bounded by the sequence length and head dim leaves them)."""
    m_blocks = -(-cfg.seqlen_q // cfg.kblock_m) + 1  # + 1: PackGQA tiles reach a little beyond
    n_pad = max(1, -(-cfg.seqlen_k // cfg.kblock_n)) * cfg.kblock_n
    kd = cfg.kernel_head_dim
    qp = pad_rows(q, m_blocks * cfg.kblock_m, kd)
    kp = pad_rows(k, n_pad, kd)
    vp = pad_rows(v, n_pad, cfg.kernel_head_dim_v)
    absent = np.arange(n_pad)[None, :] >= cfg.seqlens_k[:, None]  # [batch, keys]
    kp[absent] = 0
    vp[absent] = 0
    qvp = None if qv is None else pad_rows(qv, m_blocks * cfg.kblock_m, cfg.kernel_head_dim_v)
    return qp, kp, vp, qvp


# ---- one group of CTAs ---------------------------------------------------------------------------
def run_group(cfg: Config, n_range, masked, ctas, padded, out, lse, wanted, record,
              evaluator=SPECIFICATION):
    """One group of CTAs (``ctas`` [G, 4], the same K/V blocks ``n_range`` and masking steps
    ``masked``) over their K/V blocks on the launch's ``evaluator``: stores O and LSE into
    ``out`` / ``lse``, or returns ``(acc_o, lse_rows)`` when they are None (an executor's
    task); records the ``wanted`` CTAs' steps into ``record``."""
    ev = evaluator
    exact = ev.exact
    qp, kp, vp, qvp = padded
    n_min, n_max = n_range
    b = ctas[:, 0]
    W, N, d, dv = cfg.kblock_m // 64, cfg.kblock_n, cfg.kernel_head_dim, cfg.kernel_head_dim_v
    rows, heads, hkv = tile_rows(cfg, ctas)                      # positions, heads: [G, kBlockM]
    fa4 = cfg.family == "fa4"
    if n_max <= n_min:  # nothing to attend: O = 0, LSE = -inf (already in place)
        if fa4 and cfg.sink is not None:
            return _fa4_empty(cfg, ctas, rows, heads, out, lse)
        return
    qt = qp[b[:, None], rows, heads].reshape(len(ctas), W, 64, d)                  # [G, W, 64, d]
    qvt = None if qvp is None else qvp[b[:, None], rows, heads].reshape(len(ctas), W, 64, dv)
    scale_log2, softcap_val, final_scale = (_exact.cta_scales(cfg, b, hkv) if exact is not None
                                            and exact.ffma else cta_scales(cfg, b, hkv))
    soft = (Fa4Softmax if fa4 else Softmax)((len(ctas), W), 2, scale_log2[:, None, None, None],
                                            MAX_OFFSET[cfg.fmt], cfg.mufu, evaluator=ev)
    view = rowcol_view(f"m64n{N}k16")
    # each thread-row element's flat position in a warpgroup's 64 x N tile: a take along one
    # axis gives the [G, W, 128, 2, N/4] scores C-ordered (the kernels read rows in place)
    flat = view.row[:, :, None] * N + view.col[:, None, :]
    to_rowcol = np.argsort(flat.reshape(-1))  # the take that undoes it: row / col form to matrix
    flat.setflags(write=False)  # the compiled block step checks read-only positions once
    acc_layout_s = accumulator_layout(f"m64n{N}k16")
    acc_layout_o = accumulator_layout(f"m64n{min(dv, 256)}k16")
    tracer = _Tracer(ctas, wanted, record, acc_layout_s, acc_layout_o)
    qk = mma.parse("wgmma", f"m64n{N}k{cfg.k_step}.f32.{cfg.fmt}.{cfg.fmt}", cfg.gpu)
    # a V head dim over 256 runs as m64n256 instructions side by side (columns are independent)
    pv = mma.parse("wgmma", f"m64n{min(dv, 256)}k{cfg.k_step}.f32.{cfg.fmt}.{cfg.fmt}", cfg.gpu)
    # decoded operands (the compiled evaluator's): Q decoded once per group, each K/V block
    # once per distinct (batch, kv head) of the group, not once per CTA and block (same bits)
    fast = _decoded_gemms(cfg, qvt, qk, pv, ev)
    fused = fast[1] and not tracer.sel and soft.fusable()
    kv_pairs, kv_of = np.unique(b * cfg.heads_kv + hkv, return_inverse=True)
    bu, hu = kv_pairs // cfg.heads_kv, kv_pairs % cfg.heads_kv
    if fast[0]:
        qt = ev.decode(qt.reshape(len(ctas), W * 64, d), qk.params)
    grow = rows.reshape(len(ctas), W, 64)                                          # global rows
    acc_o = np.zeros((len(ctas), W, 64, dv), dtype=np.float32)
    pending = None  # (P, V, scores_scale) of the previous block, for the overlapped schedule
    prev_scale = None
    for step, n in enumerate(range(n_max - 1, n_min - 1, -1)):
        keys = n * N + np.arange(N)
        kt = _kv_block(kp, bu, hu, keys, kv_of, qk if fast[0] else None, transpose=True,
                       evaluator=ev)
        vt = _kv_block(vp, bu, hu, keys, kv_of, pv if fast[1] else None, evaluator=ev)
        s = _gemm_wg(qt, kt, np.broadcast_to(_NEG_ZERO, (len(ctas), W, 64, N)), qk, ev)
        tracer.frag("qk_gemm", n, acc_s=s)
        if qvt is not None:  # HasQv: the same accumulator, V's columns as the reduction axis
            s = _gemm_wg(qvt, np.swapaxes(vt, -1, -2), s, qk, ev)
            tracer.frag("qv_gemm", n, acc_s=s)
        if cfg.softcap > 0:
            s = (_softcap_fa4(cfg, s) if fa4 else
                 _softcap(ev, s, softcap_val[:, None, None, None], cfg.mufu))
            tracer.frag("softcap", n, acc_s=s)
        first, check_inf = step == 0, masked[step]
        if check_inf:  # the blocks between the masking steps run without a mask function
            ok = allowed(grow[..., None], keys[None, None, None, :], cfg.seqlen_q,
                         cfg.seqlens_k[b][:, None, None, None], cfg.window, cfg.chunk)
            s = np.where(ok, s, _NEG_INF)
        tracer.frag("mask", n, acc_s=s)
        if fused:  # the block's softmax, P's conversion and decode in one compiled call
            scores_scale, p_cvt = soft.block_step(s, flat, first, check_inf, cfg.fmt,
                                                  pv.params.emin)
        else:
            scores_scale, p_cvt = _softmax(cfg, soft, tracer, n, s, flat, to_rowcol, first,
                                           check_inf or fa4, ev)
        scale_rows = view.row_values(scores_scale)
        if cfg.schedule == "plain":
            acc_o = _rescale(tracer, n, acc_o, scale_rows, ev, fa4)
            acc_o = _pv(tracer, n, acc_o, p_cvt, vt, pv, ev)
        elif first:
            pending = (p_cvt, vt)
        elif cfg.rescale_before_gemm:
            acc_o = _rescale(tracer, n, acc_o, prev_scale, ev, fa4)
            acc_o = _pv(tracer, n + 1, acc_o, *pending, pv, ev)
            pending = (p_cvt, vt)
        else:
            acc_o = _pv(tracer, n + 1, acc_o, *pending, pv, ev)
            acc_o = _rescale(tracer, n, acc_o, scale_rows, ev, fa4)
            pending = (p_cvt, vt)
        prev_scale = scale_rows
    if cfg.schedule == "intra_wg_overlap":
        if cfg.rescale_before_gemm and n_max - n_min > 1:
            acc_o = _rescale(tracer, n_min, acc_o, prev_scale, ev, fa4)
        acc_o = _pv(tracer, n_min, acc_o, *pending, pv, ev)
    final = (soft.finalize(final_scale[:, None, None, None], _sink_rows(cfg, heads, view))
             if fa4 else soft.finalize(final_scale[:, None, None, None]))
    tracer.rows("finalize", None, row_sum=soft.row_sum, scores_scale=final, lse=soft.lse,
                row_max=soft.row_max)
    acc_o = (rescale_o_fa4(acc_o, view.row_values(final)) if fa4 else
             rescale_o(acc_o, view.row_values(final), evaluator=ev))
    tracer.frag("epilogue", None, acc_o=acc_o)
    lse_rows = view.row_values(soft.lse)
    if out is None:  # an executor task: the caller stores
        return acc_o, lse_rows
    store(cfg, ctas, rows, heads, acc_o, lse_rows, out, lse, exact)


def _softmax(cfg: Config, soft, tracer, n, s, flat, to_rowcol, first, check_inf, ev):
    """One block's softmax steps on the scores ``s`` [G, W, 64, N] (matrix order) through
    the row / column view, and P converted for the P V GEMM (``ev.p_operand``):
    ``(scores_scale, P)``."""
    g, w = s.shape[:2]
    scores = np.take(s.reshape(g, w, -1), flat, axis=-1)                          # [G,W,128,2,N/4]
    scores_scale = soft.max_get_scale(scores, is_first=first, check_inf=check_inf)
    tracer.rows("max_get_scale", n, row_max=soft.row_max, row_sum=soft.row_sum,
                scores_scale=scores_scale)
    p = soft.online_softmax(scores, is_first=first, check_inf=check_inf)
    if ev.exact is None and not tracer.sel:  # converted in the threads' order, then put in
        # matrix order by a take of the narrow bits (cheaper than a float32 scatter)
        return scores_scale, np.take(convert(p, cfg.fmt).reshape(g, w, -1), to_rowcol,
                                     axis=-1).reshape(s.shape)
    p_mat = np.empty(s.shape, dtype=p.dtype)
    p_mat.reshape(g, w, -1)[..., flat] = p
    tracer.frag("online_softmax", n, acc_s=p_mat, row_sum=soft.row_sum)
    own = ev.p_operand(p_mat, cfg.fmt)  # an exact evaluator's P, or None
    return scores_scale, own if own is not None else convert(p_mat, cfg.fmt)


def _softcap(ev, s, softcap_val, mufu: str):
    """``tanh(s * softcap_val)`` (FMUL.FTZ then MUFU.TANH), or the evaluator's own (exact)."""
    own = ev.softcap(s, softcap_val, mufu)
    return own if own is not None else tanh(fmul(s, softcap_val, ftz=True), model=mufu)


def _softcap_fa4(cfg: Config, s):
    """FA4's softcap score_mod (``utils.create_softcap_scoremod``, after the softmax scale):
    ``softcap * tanh((s * softmax_scale) / softcap)``: ``mul.f32``, ``div.rn.f32``,
    ``tanh.approx.f32``, ``mul.f32`` (the kernel's PTX); its scale_log2 is log2(e)."""
    c = cfg.consts
    t = tanh(fdiv(fmul(s, c["softmax_scale"]), c["softcap32"]), model=cfg.mufu)
    return fmul(t, c["softcap32"])


def _sink_rows(cfg: Config, heads, view):
    """FA4's learnable sink of every thread-row: ``[G, W, 128, 2]`` float32, or None."""
    if cfg.sink is None:
        return None
    g, m = heads.shape
    per_row = cfg.sink[heads].reshape(g, m // 64, 64)
    return per_row[:, :, view.row]


def _fa4_empty(cfg: Config, ctas, rows, heads, out, lse):
    """CTAs with no K/V block: FA4 still runs its first (fully masked) block, so O = 0 and,
    with a learnable sink, ``lse = (sink * log2(e) + lg2(1)) * ln2`` (``finalize``)."""
    g = len(ctas)
    acc_o = np.zeros((g, cfg.kblock_m // 64, 64, cfg.kernel_head_dim_v), dtype=np.float32)
    lse_rows = empty_row_lse(cfg.sink[heads], cfg.mufu).reshape(g, cfg.kblock_m // 64, 64)
    if out is None:
        return acc_o, lse_rows
    store(cfg, ctas, rows, heads, acc_o, lse_rows, out, lse)


def cta_scales(cfg: Config, b, hkv):
    """The float32 ``(scale_log2, softcap_val, final_scale)`` of each CTA, arrays [n] for the
    CTAs of batch ``b`` [n] and KV head ``hkv`` [n]: the host constants, with e4m3's
    ``q_descale * k_descale`` folded (FMUL, ftz) into softcap_val when softcap is on
    (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp), else into scale_log2
    (hopper/flash_fwd_kernel_sm90.h), and ``v_descale`` as the final scale."""
    c = cfg.consts
    qk = fmul(cfg.q_descale[b, hkv], cfg.k_descale[b, hkv], ftz=True)
    scale_log2 = np.full(len(b), c["scale_log2"], dtype=np.float32)
    softcap_val = np.full(len(b), c["softcap_val"], dtype=np.float32)
    if cfg.fmt == "e4m3":
        if cfg.softcap > 0:
            softcap_val = fmul(softcap_val, qk, ftz=True)
        else:
            scale_log2 = fmul(scale_log2, qk, ftz=True)
    return scale_log2, softcap_val, cfg.v_descale[b, hkv].astype(np.float32)


def _rescale(tracer, n, acc_o, scale_rows, ev, fa4=False):
    acc_o = rescale_o_fa4(acc_o, scale_rows) if fa4 else rescale_o(acc_o, scale_rows, evaluator=ev)
    tracer.frag("rescale_o", n, acc_o=acc_o)
    return acc_o


def _decoded_gemms(cfg: Config, qvt, qk, pv, ev) -> tuple[bool, bool]:
    """Whether the group's QK^T and PV GEMMs run on operands decoded once (where the
    evaluator ``ev`` has them, :meth:`~simulator.flash.evaluator.Specification.decodes`):
    without qv or a V head dim over 256."""
    if qvt is not None or cfg.kernel_head_dim_v > 256:
        return False, False
    return ev.decodes(qk.params, qk.k), ev.decodes(pv.params, pv.k)


def _kv_block(xp, bu, hu, keys, kv_of, instruction, transpose=False, evaluator=SPECIFICATION):
    """The block ``keys`` of K or V for every CTA of a group: gathered for the distinct
    (batch ``bu``, kv head ``hu``) pairs, then [G, N, d] (``[G, d, N]`` with ``transpose``) by
    ``kv_of``, or, with ``instruction`` (an evaluator that decodes), decoded once per pair and
    read through ``kv_of`` (``evaluator.decode``)."""
    x = xp[bu[:, None], keys[None, :], hu[:, None]]                             # [U, N, d]
    x = np.swapaxes(x, -1, -2) if transpose else x
    if instruction is None:
        return x[kv_of]
    return evaluator.decode(x, instruction.params, kv_of)


def _gemm_wg(a, b, c, instruction, evaluator=SPECIFICATION):
    """Every warpgroup's GEMM of a CTA on the launch's ``evaluator``: a [G, W, 64, K] (each
    warpgroup's rows), b [G, K, N] (shared by the CTA's warpgroups), c [G, W, 64, N]
    (zero_init: a broadcast -0, read-only). The W warpgroups are stacked along M (rows of
    different warpgroups never meet in a GEMM), so B is not repeated per warpgroup. ``a``
    and ``b`` may be operands decoded once (``evaluator.decode``: a [G, W * 64, K], b read
    through its index)."""
    if not isinstance(b, np.ndarray):
        return _gemm_decoded(a, b, c, instruction, evaluator)
    if not c.flags.writeable:
        c = np.array(c)
    g, w, m, _ = a.shape
    d = evaluator.gemm(a.reshape(g, w * m, -1), b, c.reshape(g, w * m, -1), instruction)
    return d.reshape(c.shape)


def _gemm_decoded(a, b, c, instruction, evaluator):
    """:func:`_gemm_wg` on decoded operands (``evaluator.gemm_decoded``): ``a`` decoded or
    [G, W, 64, K] (decoded here), ``b`` decoded; a ``c`` broadcast over the CTAs (zero_init's
    -0) is one accumulator read by every CTA."""
    g, w, m, n = c.shape
    if isinstance(a, np.ndarray):
        a = evaluator.decode(a.reshape(g, w * m, -1), instruction.params)
    if c.strides[0] == 0:
        c3, c_index = np.array(c[:1]).reshape(1, w * m, n), np.zeros(g, np.int64)
    else:
        c3, c_index = c.reshape(g, w * m, n), None
    d = evaluator.gemm_decoded(a, b, c3, instruction.params, instruction.k, c_index)
    return d.reshape(c.shape)


def _pv(tracer, n, acc_o, p_cvt, vt, instruction, ev):
    width = acc_o.shape[-1]
    if width <= 256:
        acc_o = _gemm_wg(p_cvt, vt, acc_o, instruction, ev)
    else:
        acc_o = np.concatenate([_gemm_wg(p_cvt, vt[..., c: c + 256], acc_o[..., c: c + 256],
                                         instruction, ev) for c in range(0, width, 256)], axis=-1)
    tracer.frag("pv_gemm", n, acc_o=acc_o)
    return acc_o


def tile_rows(cfg: Config, ctas):
    """(query positions, query heads, kv head) of every CTA's rows: ``[G, kBlockM]``,
    ``[G, kBlockM]``, ``[G]``. A PackGQA tile's row ``r`` is position ``r // g``, head
    ``hkv * g + r % g``; otherwise the rows are one head's consecutive positions."""
    g = cfg.qhead_per_khead
    r = ctas[:, 2:3] * cfg.kblock_m + np.arange(cfg.kblock_m)[None, :]
    if cfg.pack_gqa:
        hkv = ctas[:, 1]
        return r // g, hkv[:, None] * g + r % g, hkv
    return r, np.broadcast_to(ctas[:, 1:2], r.shape), ctas[:, 1] // g


def store(cfg: Config, ctas, rows, heads, acc_o, lse_rows, out, lse, exact=None):
    """Epilogue: convert O to the output dtype and write the rows < seqlen_q of every CTA."""
    b = ctas[:, 0]
    valid = rows < cfg.seqlen_q                                                     # [G, kBlockM]
    gi, ri = np.nonzero(valid)
    o = acc_o.reshape(len(ctas), cfg.kblock_m, cfg.kernel_head_dim_v)[..., : cfg.head_dim_v]
    lse_rows = lse_rows.reshape(len(ctas), cfg.kblock_m)
    if cfg.splits is None:
        o = convert(o, format_of(cfg.out_dtype).name) if exact is None else \
            _exact.output(o, format_of(cfg.out_dtype).name, exact)
        out[b[gi], rows[gi, ri], heads[gi, ri]] = o[gi, ri]
        lse[b[gi], heads[gi, ri], rows[gi, ri]] = lse_rows[gi, ri]
    else:  # the Split epilogue stores float32 partials, one slice per split
        sp = ctas[:, 3]
        out[sp[gi], b[gi], rows[gi, ri], heads[gi, ri]] = o[gi, ri]
        lse[sp[gi], b[gi], heads[gi, ri], rows[gi, ri]] = lse_rows[gi, ri]


class _Tracer:
    """Records the traced CTAs of a group; free when nothing is traced."""

    def __init__(self, ctas, wanted, record, layout_s, layout_o):
        self.record = record
        self.layouts = {"acc_s": layout_s, "acc_o": layout_o}
        self.sel = []
        if wanted:
            self.sel = [(i, tuple(int(c) for c in cta[:3])) for i, cta in enumerate(ctas)
                        if tuple(int(c) for c in cta[:3]) in wanted]

    def frag(self, step, n, **arrays):
        """Matrices [G, W, 64, cols] become fragments [W, 128, regs]; row state passes through."""
        for i, cta in self.sel:
            data = {k: (self.layouts[k].from_matrix(v[i]) if k in self.layouts else v[i])
                    for k, v in arrays.items()}
            self.record.add(step, cta, n, **data)

    def rows(self, step, n, **arrays):
        for i, cta in self.sel:
            self.record.add(step, cta, n, **{k: v[i] for k, v in arrays.items()})


#: FA3's sm90 forward mainloop, as :func:`simulator.flash.scheduler.launch` takes it
MAINLOOP = ForwardMainloop(padded_inputs, run_group, tile_rows, store, evaluated=True)
