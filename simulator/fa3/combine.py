"""FlashAttention-3's split-KV combine kernel on sm_90, bit for bit, and the host rules around it.

With ``num_splits > 1`` FA3's forward runs every (m_block, head, batch) tile once per split, each
split over its own range of K/V blocks (:func:`n_block_range_for_split`, hopper/block.h); the
Split epilogue (hopper/epilogue_fwd.hpp) stores each split's O in float32 *after* the
mainloop's finalize (so already divided by that split's own row sum, not rounded) and its LSE;
a split that sees no key (an empty block range) writes LSE = -inf and leaves its O unwritten
(``store_zero``: "the mha_combine kernel ... will not use the value of O if LSE is -inf"). The
combine kernel (hopper/flash_fwd_combine_kernel.h, launched by
hopper/flash_fwd_combine_launch_template.h) then merges the splits of every query row.
:func:`combine` is that kernel; the host decisions of hopper/heuristics.h and
hopper/flash_api.cpp (:func:`num_splits_heuristic`, :func:`get_num_splits`, :func:`get_pack_gqa`)
and the split ranges of hopper/block.h live in :mod:`simulator.fa3.splits` and are importable
from here too.

The exact operation sequence, read from the SASS of the published ``fa3-fwd`` 0.0.3 wheel
(the 54 sm_90 combine kernels: bf16, f16, f32 output; kBlockM x kBlockK 8 x 128 and 16 x 64;
kLogMaxSplits 4..8; varlen or not: all show the same sequence), is docs/combine.md. In short,
per query row, with ``T`` threads per row (32 when ``head_dim_v > 64``, else 16) and each
thread ``lane`` holding the splits ``lane + T*j`` (``j = 0 .. kMaxSplits/T - 1``, splits at or
beyond the split count read as -inf)::

    m      = FMNMX.FTZ over the thread's splits (j order), then SHFL.BFLY T/2 .. 1 with FMNMX.FTZ
    cur    = m == -inf ? 0 : m                                  FSETP.NEU + FSEL
    e_j    = MUFU.EX2(FMUL.FTZ(FADD.FTZ(lse_j, -cur), 0x3fb8aa3b))   expf, --use_fast_math
    sum    = FADD.FTZ(0, e_0), then FADD.FTZ(sum, e_j) for j = 1 ..   (the thread's own splits)
    sum    = SHFL.BFLY T/2 .. 1 with FADD.FTZ(own, other)           (Allreduce<T>, utils.h)
    LSE    = FFMA.FTZ(MUFU.LG2(sum), 0x3f317218, m)               logf(sum) + m, contracted
    inv    = sum != 0 (FSETP.NE.FTZ, false for NaN) ? MUFU.RCP(sum) : 0
    w_j    = FMUL.FTZ(e_j, inv)
    O      = +0; for s = 0 .. max_valid_split: if w_s > 0 (FSETP.GT.FTZ): O = FFMA.FTZ(w_s, O_s, O)
    out    = F2FP.BF16.F32.PACK_AB(O) (cvt.rn.bf16x2.f32; F16 for f16, a plain store for f32)

where ``max_valid_split`` is the largest split index whose LSE is not -inf (NaN counts), -1 if
none, and every float32 operation is the ``.ftz`` form.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..flash import chunks
from ..flash.dispatch import round_up_headdim, round_up_headdimv, should_pack_gqa, tile_size_fwd_sm90
from ..gpus import DEFAULT_GPU
from ..hw import rows_allreduce
from ..numerics import fadd, ffma, fmax, fmul, fsub
from ..numerics.bits import flush_subnormal
from ..numerics.cvt import FORMATS, convert
from ..numerics.mufu import LN2_F32, LOG2E_F32, ex2, lg2, model, rcp
from .checks import MAX_SPLITS, check_int
from .splits import (
    SplitPlan,
    get_num_splits,
    get_pack_gqa,
    n_block_range_for_split,
    num_splits_heuristic,
    plan_splits,
)

__all__ = [
    "LAYOUTS",
    "MAX_SPLITS",
    "CombineKernel",
    "SplitPlan",
    "combine",
    "combine_kernel",
    "get_num_splits",
    "get_pack_gqa",
    "n_block_range_for_split",
    "num_splits_heuristic",
    "plan_splits",
    "round_up_headdim",
    "round_up_headdimv",
    "should_pack_gqa",
    "tile_size_fwd_sm90",
]

#: threads per CTA of the combine kernel (flash_fwd_combine_launch_template.h: kNThreads 256)
COMBINE_THREADS = 256
#: accepted ``layout`` values of :func:`combine` (see its docstring)
LAYOUTS = ("forward", "accum", "combine")

_NEG_INF = np.float32(-np.inf)
_ZERO = np.float32(0.0)

_OUT_FORMATS = {FORMATS["bf16"].dtype: "bf16", FORMATS["f16"].dtype: "f16", np.dtype(np.float32): "f32"}
#: the names an ``out_dtype`` may be given by (FA3's and NumPy's spellings of each)
_OUT_NAMES = {alias: dtype for dtype, name in _OUT_FORMATS.items()
              for alias in {"bf16": ("bf16", "bfloat16"), "f16": ("f16", "float16", "fp16"),
                            "f32": ("f32", "float32", "fp32")}[name]}


# ---- arguments of the kernel ------------------------------------------------------------------
def _out_dtype(out_dtype) -> np.dtype:
    if isinstance(out_dtype, str):
        if out_dtype in _OUT_NAMES:
            return _OUT_NAMES[out_dtype]
        raise ValueError(f"out_dtype: expected bfloat16, float16 or float32 (the combine kernel's "
                         f"Element types), got {out_dtype!r}")
    try:
        dt = np.dtype(out_dtype)
    except TypeError:
        dt = None
    if dt not in _OUT_FORMATS:
        raise ValueError(f"out_dtype: expected bfloat16, float16 or float32 (the combine kernel's "
                         f"Element types), got {out_dtype!r}")
    return dt


def _float32_array(name: str, x) -> np.ndarray:
    if not isinstance(x, np.ndarray) or type(x) is not np.ndarray:
        raise ValueError(f"{name}: expected a plain numpy.ndarray of float32, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise ValueError(f"{name}: expected dtype float32 (FA3's ElementPartial and LSE type), got {x.dtype}")
    return x


# ---- kernel configuration -------------------------------------------------------------------------
class CombineKernel(NamedTuple):
    """The combine kernel FA3 launches (run_mha_fwd_combine_ / run_flash_fwd_combine).

    Attributes:
        kblock_m, kblock_k: rows and V columns per CTA (8 x 128 for ``head_dim_v > 64``, else
            16 x 64).
        log_max_splits: kLogMaxSplits (4 only with kBlockM 16 and <= 16 splits; else 5..8 for
            <= 32, 64, 128, 256 splits); kMaxSplits = 2 ** log_max_splits.
        threads_per_row: kSmemThreadsPerColLSEt = 256 / kBlockMSmem (32 or 16): the threads that
            share one row's LSEs and reduce them with Allreduce.
        splits_per_thread: kMaxSplits / threads_per_row; thread ``lane`` holds splits
            ``lane + threads_per_row * j``.
    """

    kblock_m: int
    kblock_k: int
    log_max_splits: int
    threads_per_row: int
    splits_per_thread: int

    @property
    def max_splits(self) -> int:
        return 1 << self.log_max_splits


def combine_kernel(num_splits: int, head_dim_v: int) -> CombineKernel:
    """Which combine kernel FA3 runs for ``num_splits`` (params.num_splits) and ``head_dim_v``
    (params.dv).

    Source: hopper/flash_api.cpp ``run_mha_fwd_combine`` (kBlockK 64 if ``dv <= 64`` else 128),
    hopper/flash_fwd_combine_launch_template.h ``run_mha_fwd_combine_`` (kBlockM = 8 for kBlockK
    128, 16 for 64; kLogMaxSplits from num_splits), hopper/flash_fwd_combine_kernel.h
    (kBlockMSmem = kBlockM here, kSmemThreadsPerColLSEt = 256 / kBlockMSmem, S2RLayoutAtomLSE
    = Layout<Shape<kSmemThreadsPerColLSEt, 256 / kSmemThreadsPerColLSEt>>, column-major).
    SASS: the 8 x 128 kernels reduce with SHFL.BFLY 0x10, 0x8, 0x4, 0x2, 0x1, the 16 x 64 ones
    with 0x8 .. 0x1; kLogMaxSplits 5..8 (8 x 128) show 1, 2, 4, 8 MUFU.EX2 per thread.

    Raises:
        ValueError: num_splits not in 1..256, head_dim_v < 1.
    """
    num_splits = check_int("num_splits", num_splits, 1, MAX_SPLITS)
    head_dim_v = check_int("head_dim_v", head_dim_v, 1)
    kblock_k = 64 if head_dim_v <= 64 else 128
    kblock_m = 8 if kblock_k % 128 == 0 else (16 if kblock_k % 64 == 0 else 32)
    if kblock_m >= 16 and num_splits <= 16:
        log = 4
    elif num_splits <= 32:
        log = 5
    elif num_splits <= 64:
        log = 6
    elif num_splits <= 128:
        log = 7
    else:
        log = 8
    kblock_m_smem = next(b for b in (128, 64, 32, 16, 8) if kblock_m % b == 0)
    threads = COMBINE_THREADS // kblock_m_smem
    return CombineKernel(kblock_m, kblock_k, log, threads, (1 << log) // threads)


# ---- the combine kernel -----------------------------------------------------------------------------
def _combine_rows(lse: np.ndarray, o: np.ndarray, count: np.ndarray, kernel: CombineKernel,
                  mufu: str, out_fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """The kernel on flat rows: ``lse`` [S, R], ``o`` [S, R, dv] float32, ``count`` [R] splits
    each row reads (>= 2). Returns (out [R, dv] in the output format, lse [R] float32)."""
    num, rows = lse.shape
    T, J = kernel.threads_per_row, kernel.splits_per_thread
    kmax = kernel.max_splits
    # Step 1: sLSE, kMaxSplits x rows; splits at or beyond the row's count read as -inf
    full = np.full((kmax, rows), _NEG_INF, dtype=np.float32)
    full[:num] = lse
    split_idx = np.arange(kmax)[:, None]
    full[split_idx >= count[None, :]] = _NEG_INF
    # Step 3: thread lane of a row holds splits lane + T*j: regs[j, r, lane]
    regs = full.reshape(J, T, rows).transpose(0, 2, 1)
    # Step 4: the row's max (thread-local in j order, then the butterfly)
    m = regs[0]
    for j in range(1, J):
        m = fmax(m, regs[j], ftz=True)
    lse_max = rows_allreduce(m, "max", T)
    valid = full != _NEG_INF  # FSETP.NEU: NaN counts as a valid split
    max_valid = np.where(valid.any(axis=0), kmax - 1 - np.argmax(valid[::-1], axis=0), -1)
    cur = np.where(lse_max == _NEG_INF, _ZERO, lse_max)
    e = [ex2(fmul(fsub(regs[j], cur, ftz=True), LOG2E_F32, ftz=True), model=mufu, ftz=True)
         for j in range(J)]
    total = fadd(_ZERO, e[0], ftz=True)
    for j in range(1, J):
        total = fadd(total, e[j], ftz=True)
    total = rows_allreduce(total, "sum", T)
    lse_row = ffma(lg2(total, model=mufu, ftz=True), LN2_F32, lse_max, ftz=True)
    nonzero = (flush_subnormal(total) != _ZERO) & ~np.isnan(total)  # FSETP.NE.FTZ (ordered)
    inv = np.where(nonzero, rcp(np.where(nonzero, total, np.float32(1)), model=mufu, ftz=True), _ZERO)
    weights = np.stack([fmul(e[j], inv, ftz=True) for j in range(J)])       # [J, R, T]
    weights = weights.transpose(0, 2, 1).reshape(kmax, rows)                # split-major
    # Step 6: O = sum over splits in order, one FFMA per split with a positive weight
    acc = np.zeros(o.shape[1:], dtype=np.float32)
    for s in range(min(num, int(max_valid.max(initial=-1)) + 1)):
        w = weights[s]
        take = (s <= max_valid) & (flush_subnormal(w) > _ZERO)              # FSETP.GT.FTZ
        if take.any():
            acc[take] = ffma(w[take, None], o[s, take], acc[take], ftz=True)
    # Step 7: convert_type_out
    out = acc if out_fmt == "f32" else convert(acc, out_fmt)
    return out, lse_row[:, 0]  # the thread of split 0 stores the LSE (all lanes agree)


def row_bytes(num: int, head_dim_v: int, max_splits: int) -> int:
    """Working memory of one query row of the combine, bytes: an upper estimate of its gathered
    partials (``num`` splits of O and LSE) and :func:`_combine_rows`' arrays. Measured with
    tracemalloc on 4,000 rows, 2-200 splits, head_dim_v 64-512: 0.7-0.9 of this."""
    return 4 * num * (head_dim_v + 1) + 40 * head_dim_v + 48 * max_splits


def combine(out_partial, lse_partial, out_dtype, *, head_dim_v, mufu: str = DEFAULT_GPU,
            num_splits=None, num_splits_dynamic=None, layout: str = "forward", out=None, lse=None,
            memory_budget=None, early_return: bool = True):
    """FA3's combine kernel (hopper/flash_fwd_combine_kernel.h) as the sm_90 build computes it.

    Args:
        out_partial: float32, each split's O (normalised by that split's row sum), by ``layout``:
            ``"forward"`` (default; what :func:`simulator.flash.forward` returns with
            ``num_splits``): ``[num_splits, ..., seqlen, heads, head_dim_v]``;
            ``"accum"`` (FA3's ``out_accum`` of ``mha_fwd``): ``[num_splits, batch, heads,
            seqlen, head_dim_v]``, or for a varlen launch ``[num_splits, heads, total_q,
            head_dim_v]`` (no batch axis: rows of sequence b are ``cu_seqlens_q[b] ..
            cu_seqlens_q[b+1] - 1``);
            ``"combine"`` (``flash_attn_combine`` / ``mha_combine``): ``[num_splits, batch, seqlen,
            heads, head_dim]``.
            ``...`` is any number of leading axes (usually the batch).
        lse_partial: float32 LSE of each split (natural log, -inf for a split that sees no key):
            ``[num_splits, ..., heads, seqlen]`` for ``"forward"`` and ``"accum"`` (FA3's
            ``softmax_lse_accum``: ``[num_splits, batch, heads, seqlen]``, varlen ``[num_splits,
            heads, total_q]``), ``[num_splits, ..., seqlen, heads]`` for ``"combine"``.
        out_dtype: the output Element: bfloat16 (``ml_dtypes.bfloat16`` or ``"bf16"``), float16
            or float32. ``mha_fwd`` uses the input dtype (bf16 for e4m3 inputs);
            ``flash_attn_combine`` defaults to float32.
        head_dim_v: FA3's ``params.dv``, which picks the kernel (kBlockK 64 for ``<= 64``, else
            128): ``mha_fwd`` passes ``head_size_v``, ``mha_combine`` the last dim rounded up to a
            multiple of 4. Must be ``out_partial.shape[-1]`` up to that rounding.
        mufu: the MUFU model: a GPU key of :mod:`simulator.gpus` (its calibrated tables) or
            ``"ideal"`` (correctly rounded).
        num_splits: FA3's ``params.num_splits`` (picks kLogMaxSplits, hence which splits each
            thread holds and the summation order); default ``out_partial.shape[0]``; 2..256.
        num_splits_dynamic: None, or ints broadcasting against the output LSE shape
            (``[..., heads, seqlen]``; e.g. ``[batch, 1, 1]``): the per-batch split counts of a
            varlen launch (``params.num_splits_dynamic_ptr``, from the prepare kernel). A row
            reads splits ``0 .. count - 1`` (the others as -inf); rows with ``count <= 1`` are
            not written by the kernel (``if (num_splits <= 1) return;``).
        layout: ``"forward"``, ``"accum"`` or ``"combine"`` (above).
        out, lse: optional output arrays (the shapes and dtypes returned), written in place where
            the kernel writes; rows it leaves unwritten keep their values (with
            ``num_splits_dynamic``: what the unsplit epilogue stored). Without them those rows
            hold O = 0 and LSE = NaN.
        memory_budget: bytes for the partials, the outputs and the working arrays (default
            ``flash.chunks.DEFAULT_MEMORY_BUDGET``): rows run in chunks that fit
            (:func:`row_bytes` per row); the bits are those of one pass.
        early_return: True (FA3's kernel): rows that read one split are not written (``if
            (num_splits <= 1) return;``) and ``num_splits`` must be 2..256. False: the kernel
            without that return, so one split runs the same steps (what
            :func:`simulator.fa3.flash_attn_combine` returns for one split): O = the partial
            (``.ftz``: subnormals and -0 become +0) where its LSE is finite, 0 where it is -inf.
    Returns:
        ``(out, lse)``: ``out`` in ``out_dtype`` ``[..., seqlen, heads, head_dim_v]`` (FA3's
        ``out``); ``lse`` float32 ``[..., heads, seqlen]`` (``softmax_lse``) for ``"forward"``
        and ``"accum"``, ``[..., seqlen, heads]`` for ``"combine"`` (``mha_combine`` returns a
        transposed view of that shape).
    Raises:
        ValueError: arrays that are not plain float32 ndarrays, shapes that do not match the
            layout, num_splits outside 2..256 (1..256 with ``early_return=False``; the kernel
            returns without writing for one split: FA3 only launches it for ``num_splits >
            1``) or below the splits a row reads, an
            unknown out_dtype, layout or MUFU model, head_dim_v that does not match.
        MemoryError: not even one row fits ``memory_budget``, with the estimate.
        MufuDataError: the calibrated MUFU tables are missing or corrupt.
    Source: hopper/flash_fwd_combine_kernel.h (steps 1-7), flash_fwd_combine_launch_template.h,
        hopper/flash_api.cpp (run_mha_fwd_combine, mha_fwd, mha_combine). SASS evidence (fa3-fwd
        0.0.3, ``FlashAttnFwdCombine<(8, 128), 5, 256, 1, false, false, bfloat16_t, float,
        Sm90>``), in docs/combine.md: the module docstring's sequence, e.g. ``FADD.FTZ R7, R8,
        -R7; FMUL.FTZ R7, R7, 1.4426950216293334961; MUFU.EX2 R7, R7; FADD.FTZ R11, RZ, R7``,
        ``MUFU.LG2 R9, R10; FFMA.FTZ R9, R9, 0.69314718246459960938, R6``, ``@!P0 FFMA.FTZ R11,
        R3, R16, R11`` and ``F2FP.BF16.F32.PACK_AB R2, R9, R11``.
    """
    out_partial = _float32_array("out_partial", out_partial)
    lse_partial = _float32_array("lse_partial", lse_partial)
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    try:
        model(mufu)
    except ValueError as exc:  # named as this function's argument
        raise ValueError(f"mufu: {str(exc).removeprefix('model: ')}") from None
    odt = _out_dtype(out_dtype)
    o, lse_c = _canonical(out_partial, lse_partial, layout)
    num, dv = o.shape[0], o.shape[-1]
    head_dim_v = check_int("head_dim_v", head_dim_v, 1)
    if not dv <= head_dim_v <= -(-dv // 4) * 4:
        raise ValueError(f"head_dim_v: expected out_partial's last dim {dv} (or it rounded up to a "
                         f"multiple of 4, as mha_combine pads), got {head_dim_v}")
    static = num if num_splits is None else check_int("num_splits", num_splits)
    least = 2 if early_return else 1  # rows reading fewer splits are not written
    if not least <= static <= MAX_SPLITS:
        raise ValueError(f"num_splits: expected {least}..{MAX_SPLITS} (FA3 runs the combine only "
                         f"for num_splits > 1; with one split the kernel returns without writing), "
                         f"got {static}")
    kernel = combine_kernel(static, head_dim_v)
    rows_shape = o.shape[1:-1]                              # [..., H, Sq]
    count = _split_counts(num_splits_dynamic, rows_shape, static, num, least)
    written = count >= least
    out_shape = (*rows_shape[:-2], rows_shape[-1], rows_shape[-2], dv)
    lse_shape = rows_shape if layout != "combine" else (*rows_shape[:-2], rows_shape[-1], rows_shape[-2])
    out_arr = _buffer("out", out, out_shape, odt, 0)
    lse_arr = _buffer("lse", lse, lse_shape, np.dtype(np.float32), np.nan)
    budget = chunks.check_budget(memory_budget)
    if not written.any():
        return out_arr, lse_arr
    fixed = chunks.fixed_bytes(out_partial, lse_partial, out_arr, lse_arr)
    size = chunks.chunk_size(budget, fixed, row_bytes(num, dv, kernel.max_splits),
                             "this combine", unit="row")
    rows = np.nonzero(written)                               # rows are independent
    o_view = np.swapaxes(out_arr, -3, -2)                     # views: the caller's layout
    l_view = lse_arr if layout != "combine" else np.swapaxes(lse_arr, -2, -1)
    for start in range(0, len(rows[0]), size):
        part = tuple(ix[start: start + size] for ix in rows)
        res_o, res_l = _combine_rows(np.ascontiguousarray(lse_c[(slice(None), *part)]),
                                     o[(slice(None), *part)], count[part], kernel, mufu,
                                     _OUT_FORMATS[odt])
        o_view[part], l_view[part] = res_o, res_l
    return out_arr, lse_arr


def _canonical(out_partial: np.ndarray, lse_partial: np.ndarray, layout: str):
    """:func:`combine`'s partials in one order, checked against ``layout``: (O [S, ..., H, Sq,
    dv], LSE [S, ..., H, Sq]), views of the caller's arrays."""
    names = {"forward": ("[num_splits, ..., seqlen, heads, head_dim_v]", "[num_splits, ..., heads, seqlen]"),
             "accum": ("[num_splits, ..., heads, seqlen, head_dim_v]", "[num_splits, ..., heads, seqlen]"),
             "combine": ("[num_splits, ..., seqlen, heads, head_dim_v]", "[num_splits, ..., seqlen, heads]")}
    o_name, l_name = names[layout]
    if out_partial.ndim < 4:
        raise ValueError(f"out_partial: expected {o_name} (layout {layout!r}), got shape "
                         f"{list(out_partial.shape)}")
    o = out_partial if layout == "accum" else np.swapaxes(out_partial, -3, -2)
    want = o.shape[:-1]
    want_given = want if layout != "combine" else (*want[:-2], want[-1], want[-2])
    if lse_partial.shape != want_given:
        raise ValueError(f"lse_partial: expected {l_name} = {list(want_given)} to match out_partial "
                         f"{list(out_partial.shape)} (layout {layout!r}), got {list(lse_partial.shape)}")
    if o.shape[0] < 1:
        raise ValueError("out_partial: the split axis (axis 0) is empty")
    return o, lse_partial if layout != "combine" else np.swapaxes(lse_partial, -2, -1)


def _split_counts(num_splits_dynamic, rows_shape: tuple, static: int, num: int,
                  least: int = 2) -> np.ndarray:
    """int64 ``rows_shape`` ([..., heads, seqlen]): the splits each row reads, ``static`` or
    :func:`combine`'s ``num_splits_dynamic`` broadcast, checked against the ``num`` given for
    the rows written (those reading at least ``least``)."""
    if num_splits_dynamic is None:
        count = np.full(rows_shape, static, dtype=np.int64)
    else:
        dyn = np.asarray(num_splits_dynamic)
        if dyn.dtype.kind not in "iu":
            raise ValueError(f"num_splits_dynamic: expected ints, got dtype {dyn.dtype}")
        try:
            count = np.broadcast_to(dyn.astype(np.int64), rows_shape)
        except ValueError:
            raise ValueError(f"num_splits_dynamic: shape {list(dyn.shape)} does not broadcast to the "
                             f"rows {list(rows_shape)} ([..., heads, seqlen])") from None
        if count.size and (count.min() < 0 or count.max() > static):
            raise ValueError(f"num_splits_dynamic: expected counts in 0..num_splits ({static}), got "
                             f"{int(count.min())}..{int(count.max())}")
    written = count >= least
    if written.any() and int(count[written].max()) > num:
        raise ValueError(f"out_partial: rows read {int(count[written].max())} splits but only {num} "
                         "are given (axis 0)")
    return count


def _buffer(name: str, given, shape: tuple, dtype: np.dtype, fill) -> np.ndarray:
    if given is None:
        return np.full(shape, fill, dtype=dtype)
    if not isinstance(given, np.ndarray) or type(given) is not np.ndarray:
        raise ValueError(f"{name}: expected None or a plain numpy.ndarray, got {type(given).__name__}")
    if given.shape != tuple(shape) or given.dtype != dtype:
        raise ValueError(f"{name}: expected shape {list(shape)} and dtype {dtype}, got "
                         f"{list(given.shape)} {given.dtype}")
    if not given.flags.writeable:
        raise ValueError(f"{name}: the array is read-only")
    return given
