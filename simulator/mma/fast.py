"""The fused dot-add of :mod:`simulator.mma.spec`, computed with BLAS where that is exact.

The model (``spec.py``) aligns every term of an output (the K products and C) to the output's
largest exponent ``E`` and truncates it to a multiple of ``q = 2^(E - F)`` (``F`` =
``frac_bits``). A product of two ``p``-bit operands is a multiple of ``2^(ea + eb - 2(p - 1))``,
so it loses no bit to that truncation when ``ea + eb >= E - L`` with ``L = F - 2(p - 1)`` (bf16:
11, f16: 5, e4m3: 7, e5m2: 9); a normal float32 C with exponent ``ec`` and ``w`` significant
bits (24, or fewer when its low bits are zero) loses none when ``E - ec <= F - w + 1``, and as
``E`` it leaves every product clean when each has ``ea + eb >= ec - L``. For an output whose
terms are all *clean* that way the fixed-point sum is the exact sum, a multiple of ``2^(E - F)``
below ``2^(E + 8)`` in magnitude: it has at most ``F + 8 <= 33`` significant bits, so every
partial sum of it is exact in float64 and a float64 BLAS product plus C gives it bit for bit, in
any summation order.

Which outputs are clean is decided exactly with two more BLAS products of powers of two: with
weights ``2^(S e)`` (``S = 2 ceil(log2 K) + 1``), ``sum_k 2^(S ea_k) 2^(S eb_k)`` lies in
``[2^(S maxE), K 2^(S maxE)]``, so its binary exponent bounds ``S maxE`` from above to within
``log2 K``; the weights ``2^(-S e)`` bound ``-S minE`` the same way. Weights are taken relative
to per-row offsets and clipped into float64's normal range, which can only raise the sums: a
clipped output at worst counts as not clean. Every other output (about 20% of QK^T and 35% of PV
outputs per k-step in the bf16 forward of ``benchmarks/bench_flash.py``) goes through the
per-term arithmetic of ``termloop.tile_sum`` on its own, its K operand pairs gathered into a
contiguous row, with ``E`` taken from the same weight sum (exact when it was not clipped). The
result equals ``termloop.term_loop_step`` bit for bit (``tests/test_mma_fast.py`` checks it on
every recorded probe tile and on forward GEMMs).
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np

from .spec import FusedDotAdd, canonical_nan, round_to_float32, rz_to_float32
from .termloop import all_products_neg_zero, fix_special, tile_sum

_CLIP = 500                  # |binary exponent| of one weight at most: products stay normal
_EXACT_MAX = -480            # a weight sum at least 2^this has its largest term unclipped
_NO_EXP = -(1 << 20)         # exponent of a zero or non-finite operand (two still fit int32)
_BIG = 1 << 24
_OUTPUTS_PER_TILE = 1 << 16
# above this fraction of outputs not clean, a tile runs the per-term loop on all its outputs
# (gathering costs about 1.5-2x a dense output of termloop.tile_sum per gathered output)
_DENSE_FRACTION = 0.5  # the tile's float64 working arrays stay in the L2 cache


def supports(p: FusedDotAdd) -> bool:
    """Whether :func:`fused_step` applies to ``p``: the operands' significand width known
    (``p.operand_bits``) and narrow enough that a clean product fits the window."""
    return (p.operand_bits > 0 and p.frac_bits - 2 * (p.operand_bits - 1) >= 0 and p.out_bits <= 24)


_PER_TERM_ONLY = contextvars.ContextVar("per_term_only", default=False)


@contextlib.contextmanager
def per_term_model():
    """``with per_term_model(): ...``: every fused step in the block runs the per-term model of
    :mod:`simulator.mma.termloop`, the BLAS path off (same bits, slower): the reference side of
    ``benchmarks/bench_mma.py`` and ``bench_flash.py``. Scoped to the calling thread (or task)
    and restored on exit; the compiled engine (``simulator.engine``, taken for large calls
    under ``"auto"``) does not consult it, so compare under ``engine.use_engine("numpy")``."""
    token = _PER_TERM_ONLY.set(True)
    try:
        yield
    finally:
        _PER_TERM_ONLY.reset(token)


def preferred(p: FusedDotAdd) -> bool:
    """Whether fused_dot_add uses :func:`fused_step` for ``p``: it applies and the clean window
    ``L`` is at least 10 bits (bf16's 11), outside a :func:`per_term_model` block. With f16's 5
    and FP8's 7-9 most outputs of FlashAttention's GEMMs are not clean and the per-term loop
    measured as fast or faster (forward, 1 x 512 x 4 heads x 128, 2-core EPYC)."""
    return (not _PER_TERM_ONLY.get() and supports(p)
            and p.frac_bits - 2 * (p.operand_bits - 1) >= 10)


def holds_operands(a: np.ndarray, b: np.ndarray, p: FusedDotAdd) -> bool:
    """Whether every value of ``a`` and ``b`` (float64) has at most ``p.operand_bits``
    significant bits, as :func:`fused_step` assumes (values decoded from the narrow format do;
    an unrounded P of ``flash.forward(..., exact=...)`` need not): its float64 significand's
    low ``53 - operand_bits`` bits are zero (float64 subnormals, which no narrow value is, are
    refused unless zero)."""
    low = np.uint64((1 << (53 - p.operand_bits)) - 1)
    for x in (a, b):
        bits = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)
        subnormal = ((bits >> np.uint64(52)) & np.uint64(0x7FF) == 0) & (bits << np.uint64(1) != 0)
        if np.any(bits & low) or np.any(subnormal):
            return False
    return True


def weight_base(k: int) -> int:
    """S = 2 ceil(log2 K) + 1: the binary exponents of two weight sums over K terms then bound
    S (maxE - minE) to within S - 1, so the clean test is exact up to clipping."""
    return 2 * max(1, (k - 1).bit_length()) + 1


def fused_step(a: np.ndarray, b: np.ndarray, c: np.ndarray, p: FusedDotAdd) -> np.ndarray:
    """One fused dot-add step, ``d = fused(a @ b + c)``, bit-identical to the per-term model.

    Args:
        a: float64 [..., M, K] exact operand values, each with at most ``p.operand_bits``
            significant bits (as decoded from bf16 / f16 / e4m3 / e5m2).
        b: float64 [..., K, N], same format; leading axes of a, b, c broadcast.
        c: float32 [..., M, N] accumulator.
        p: parameters for which :func:`supports` holds.
    Returns:
        float32 [..., M, N]; NaN results canonical (0x7fffffff).
    Source:
        the arithmetic of :func:`simulator.mma.spec.spec_step` (H200 probes,
        ``simulator/data/device/mma_*``); only the evaluation order differs.
    """
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], np.shape(c)[:-2])
    m, k = a.shape[-2:]
    n = b.shape[-1]
    rows = int(np.prod(lead, dtype=np.int64))
    if rows * m * n == 0:
        return np.zeros(lead + (m, n), dtype=np.float32)
    a3 = np.ascontiguousarray(np.broadcast_to(a, lead + (m, k)).reshape(rows, m, k))
    b3 = np.ascontiguousarray(np.broadcast_to(b, lead + (k, n)).reshape(rows, k, n))
    c3 = np.ascontiguousarray(np.broadcast_to(np.asarray(c, dtype=np.float32), lead + (m, n))
                              .reshape(rows, m, n))
    fin_a, fin_b = np.isfinite(a3), np.isfinite(b3)
    ops_fin = bool(fin_a.all() and fin_b.all())
    a0 = a3 if ops_fin else np.where(fin_a, a3, 0.0)
    b0 = b3 if ops_fin else np.where(fin_b, b3, 0.0)
    ops = _Operands(a0, b0, p)
    total = np.empty((rows, m, n), dtype=np.float64)
    if m * n <= _OUTPUTS_PER_TILE:  # cache-sized tiles of whole batch entries
        step = _OUTPUTS_PER_TILE // (m * n)
        tiles = [(slice(r0, min(rows, r0 + step)), slice(None)) for r0 in range(0, rows, step)]
    else:  # one entry is larger: tiles of rows of A
        step = max(1, _OUTPUTS_PER_TILE // n)
        tiles = [(slice(r, r + 1), slice(m0, min(m, m0 + step)))
                 for r in range(rows) for m0 in range(0, m, step)]
    for sl in tiles:
        _tile(ops, sl, c3[sl], p, total[sl])
    d = _rz(total, p.out_bits) if p.out_round == "rz" else round_to_float32(total, p.out_round, p.out_bits)
    if ops_fin and np.isfinite(c3).all():
        d = _signed_zeros(d, total, a0, b0, c3)
    else:
        zero = total == 0
        d[zero] = 0.0  # the fixed-point sum's zero is +0; _fix_special applies the IEEE rules
        d = fix_special(d, np.where(zero, 0.0, total), a3, b3, c3, fin_a, fin_b)
    return canonical_nan(d).reshape(lead + (m, n))


def _exponents(x: np.ndarray, emin: int) -> np.ndarray:
    """max(floor(log2|x|), emin) as int32 from the float64 bits (x holds narrow-format values,
    all normal in float64); zeros get _NO_EXP."""
    e = ((x.view(np.uint64) >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int32) - 1023
    np.maximum(e, emin, out=e)
    e[x == 0] = _NO_EXP
    return e


def _weights(e: np.ndarray, offset: np.ndarray, s: int) -> np.ndarray:
    """2^(s (e - offset)) clipped to [2^-_CLIP, 2^_CLIP] (clipping only raises small weights:
    the offsets keep every unclipped one at most 1); 0 where e is _NO_EXP."""
    w = np.clip(s * (e - offset), -_CLIP, _CLIP).astype(np.int64)
    w += 1023
    w <<= 52
    w = w.view(np.float64)
    w[e == _NO_EXP] = 0.0
    return w


def _offsets(e: np.ndarray, axis: int):
    """Largest and smallest live exponent along ``axis`` (kept as a length-1 axis; 0 where
    there is none)."""
    live = e != _NO_EXP
    hi = np.where(live, e, -_BIG).max(axis=axis, keepdims=True)
    lo = np.where(live, e, _BIG).min(axis=axis, keepdims=True)
    hi[hi == -_BIG] = 0
    lo[lo == _BIG] = 0
    return hi, lo


class _Operands:
    """Per-call operand data: the values, their exponents (int32, _NO_EXP for zeros), the row
    (A) and column (B) offsets, the exponent weights, B transposed for row gathers."""

    def __init__(self, a: np.ndarray, b: np.ndarray, p: FusedDotAdd):
        self.a, self.b = a, b
        self.s = s = weight_base(a.shape[-1])
        self.ea, self.eb = _exponents(a, p.emin), _exponents(b, p.emin)
        amax, amin = _offsets(self.ea, 2)                                    # [R, M, 1]
        bmax, bmin = _offsets(self.eb, 1)                                    # [R, 1, N]
        self.wa_p, self.wb_p = _weights(self.ea, amax, s), _weights(self.eb, bmax, s)
        self.wa_q, self.wb_q = _weights(self.ea, amin, -s), _weights(self.eb, bmin, -s)
        i16 = np.int16
        self.sa_max, self.sb_max = (s * amax).astype(i16), (s * bmax).astype(i16)
        self.sa_min, self.sb_min = (s * amin).astype(i16), (s * bmin).astype(i16)
        self.bt = np.ascontiguousarray(np.swapaxes(b, 1, 2))                # [R, N, K]
        narrow = p.operand_bits <= 12
        self.a32 = a.astype(np.float32) if narrow else None
        self.bt32 = self.bt.astype(np.float32) if narrow else None


def _tile(ops: _Operands, sl: tuple, c, p: FusedDotAdd, out: np.ndarray) -> None:
    """Exact fixed-point sums of the batch entries ``sl`` into ``out`` (float64 [R, M, N]);
    c float32 [R, M, N]."""
    s = ops.s
    big_l = p.frac_bits - 2 * (p.operand_bits - 1)
    sb = sl[0]  # the batch entries (B-side arrays); sl also selects rows of A
    wp = np.matmul(ops.wa_p[sl], ops.wb_p[sb])
    wq = np.matmul(ops.wa_q[sl], ops.wb_q[sb])
    # Binary exponents, biased by 1023, from the weight sums' high 16-bit words (sums >= 0).
    # In int16 (every value below stays within +-12,000):
    #   hp = up + s (amax + bmax) >= 1023 + s maxE   (to within log2 K)
    #   hq = uq - s (amin + bmin) >= 1023 - s minE   (to within log2 K)
    hp = wp.view(np.int16)[..., 3::4] >> 4
    hp += ops.sa_max[sl]
    hp += ops.sb_max[sb]
    hq = wq.view(np.int16)[..., 3::4] >> 4
    hq -= ops.sa_min[sl]
    hq -= ops.sb_min[sb]
    lim = s * big_l + s - 1  # s (maxE - minE) <= s L + s - 1 decides maxE - minE <= L exactly
    clean = (hp + hq) <= lim + 2 * 1023
    # a normal C of w significant bits is a multiple of 2^(ec - w + 1): inside the window when
    # ec - minE <= L (C pushes no product out) and ec - w + 1 >= E - F, that is F >= w - 1 and
    # maxE - ec <= F - w + 1. w is 24, or out_bits when C's low bits are zero (the previous
    # k-step's result in a chained GEMM).
    c_zero = c == 0
    w = 24 if p.frac_bits >= 23 else p.out_bits
    below = None
    if p.frac_bits >= w - 1:
        ecb = (c.view(np.int16)[..., 1::2] >> 7) & 0xFF                    # biased exponent of C
        sec = ecb * np.int16(s)                                             # s (ec + 127)
        c_in = (hp - sec) <= s * (p.frac_bits - w + 1) + s - 1 + 1023 - 127 * s
        c_ok = (sec + hq) <= lim + 1023 + 127 * s
        c_ok &= c_in
        c_ok &= ecb > 0
        if w < 24:
            c_ok &= (c.view(np.int32) & ((1 << (24 - w)) - 1)) == 0
        c_zero |= c_ok
        if w == 24:  # products clean, C's low bits below the window (c_in False: E = maxE)
            np.invert(c_in, out=c_in)
            c_in &= clean
            below = _c_below(np.flatnonzero(c_in), ecb, wp)
    clean &= c_zero
    if below is not None:
        clean.reshape(-1)[below] = True
    dirty = np.flatnonzero(~clean)
    if dirty.size > _DENSE_FRACTION * clean.size:
        # mostly dirty (FP8's narrow window): the per-term loop over the whole tile is cheaper
        # than gathering each output's terms
        e16 = [np.maximum(e, -16000).astype(np.int16) for e in (ops.ea[sl], ops.eb[sb])]
        out[...] = tile_sum(ops.a[sl], ops.b[sb], *e16, c.astype(np.float64), p.frac_bits)
        return
    np.matmul(ops.a[sl], ops.b[sb], out=out)
    if below is not None:  # the product sums of the outputs whose C is cut: kept before + c
        flat = out.reshape(-1)
        cut = flat[below] + _truncate_c(c.reshape(-1)[below], hp.reshape(-1)[below], s,
                                        p.frac_bits)
    out += c  # exact for clean outputs: every partial sum is a float64 value
    if below is not None:
        flat[below] = cut
    if dirty.size:
        out.reshape(-1)[dirty] = _dirty(ops, sl, c, dirty, wp, hp, p.frac_bits)


def _c_below(idx: np.ndarray, ecb: np.ndarray, wp: np.ndarray):
    """The outputs at flat indices ``idx`` (products clean, ``maxE - ec >= F - 22``) whose C
    is a normal float32, so that its lowest bits fall below ``q = 2^(maxE - F)`` and ``E =
    maxE``: the model's sum is then the products' exact sum plus C truncated to a multiple of
    q (:func:`_truncate_c`), again below ``2^(E + 8)`` and a multiple of q, so exact in
    float64. Only outputs whose weight sum ``wp`` has its largest term unclipped, so that
    ``maxE = floor((hp - 1023) / s)`` exactly. None when there is none."""
    if not idx.size:
        return None
    e = ecb.reshape(-1)[idx]
    idx = idx[(e > 0) & (e < 255) & (wp.reshape(-1)[idx] >= 2.0**_EXACT_MAX)]
    return idx if idx.size else None


def _max_exponent(hp: np.ndarray, s: int) -> np.ndarray:
    """The largest product exponent ``maxE = floor((hp - 1023) / s)`` (int64), exact where the
    weight sum's largest term was not clipped (``hp - 1023`` is ``s maxE`` plus at most
    ``log2 K < s``)."""
    return (hp.astype(np.int64) - 1023) // s


def _pow2(e: np.ndarray) -> np.ndarray:
    """``2^e`` as float64 from its bits, for int64 ``e`` in float64's normal range."""
    return ((e + 1023) << 52).view(np.float64)


def _truncate_c(c: np.ndarray, hp: np.ndarray, s: int, frac_bits: int) -> np.ndarray:
    """float32 C truncated toward zero to a multiple of ``2^(maxE - F)``, as float64, with
    ``maxE`` from :func:`_max_exponent` (see :func:`_c_below`)."""
    scale = _pow2(frac_bits - _max_exponent(hp, s))  # 2^(F - maxE), normal
    return np.trunc(c.astype(np.float64) * scale) / scale


def _dirty(ops: _Operands, sl: tuple, c, f, wp, hp, frac_bits: int) -> np.ndarray:
    """Fixed-point sums of the outputs at flat indices ``f`` of the tile by the per-term model
    (the arithmetic of termloop.tile_sum), each output's K operand pairs gathered into a row."""
    sb = sl[0]
    a, bt, ea, eb, s = ops.a[sl], ops.bt[sb], ops.ea[sl], ops.eb[sb], ops.s
    rows, m, k = a.shape
    n = bt.shape[1]
    rm, j = np.divmod(f, n)                              # row of A (flat over R, M), column
    rn = (np.arange(rows * m) // m * n)[rm] + j          # column of B (flat over R, N)
    # the largest product exponent: (hp - 1023) is s maxE + [0, log2 K] when the weight sum's
    # largest term was not clipped, which holds when the sum is at least 2^_EXACT_MAX
    max_e = _max_exponent(hp.reshape(-1)[f], s)
    slow = np.flatnonzero(wp.reshape(-1)[f] < 2.0**_EXACT_MAX)
    bt = bt.reshape(rows * n, k)
    if slow.size:  # no nonzero product, or a clipped one: from the exponents themselves
        ebt = np.swapaxes(eb, 1, 2).reshape(rows * n, k)
        e = np.take(ea.reshape(rows * m, k), rm[slow], axis=0) + np.take(ebt, rn[slow], axis=0)
        max_e[slow] = e.max(axis=1)
    cf = c.reshape(-1)[f]
    ecb = (cf.view(np.int32) >> 23) & 0xFF
    c_ok = (cf != 0) & (ecb < 255)
    ec = ecb - 127
    sub = np.flatnonzero(c_ok & (ecb == 0))
    if sub.size:  # subnormal C: its exponent from frexp
        ec[sub] = np.frexp(cf[sub].astype(np.float64))[1] - 1
    c64 = cf.astype(np.float64)
    big_e = np.where(c_ok, np.maximum(max_e, ec), max_e)
    big_e[big_e < _NO_EXP // 2] = 0  # no nonzero finite term: any scale works
    scale = _pow2(frac_bits - big_e)
    sh = frac_bits - big_e
    # float32 holds every product (E <= 125: below 2^128) and the scale (|F - E| <= 126)
    if ops.a32 is not None and big_e.max() <= 125 and sh.max() <= 126:
        # in float32 (half the bytes): the products of two operands of at most 12 bits, their
        # scaled values and truncations are exact there; only the sum needs float64
        t = np.take(ops.a32[sl].reshape(rows * m, k), rm, axis=0)             # [S, K]
        t *= np.take(ops.bt32[sb].reshape(rows * n, k), rn, axis=0)
        t *= ((sh + 127).astype(np.int32) << 23).view(np.float32)[:, None]
    else:
        t = np.take(a.reshape(rows * m, k), rm, axis=0)
        t *= np.take(bt, rn, axis=0)                                        # exact products
        t *= scale[:, None]
    np.trunc(t, out=t)
    total = np.trunc(np.where(c_ok, c64, 0.0) * scale)
    total += t.astype(np.float64) @ np.ones(k)  # integers below 2^40: exact in any order
    total /= scale
    return total


def _rz(x: np.ndarray, bits: int) -> np.ndarray:
    """round_to_float32(x, "rz", bits) for finite-or-not x whose non-finite outputs are
    replaced later (x is overwritten): bits cleared in float64, then an exact cast; nonzero
    results at or below 2^-126 (where float32's quantum applies) recomputed by the reference.
    A cast that gives +-0 had ``|x| <= 2^-150``, whose truncation is that same signed zero."""
    keep = np.uint64(~((1 << (53 - bits)) - 1) & 0xFFFFFFFFFFFFFFFF)
    # in place: clearing bits below the 24th keeps zeros and non-zeros as they are, and below
    # 2^-126 it only drops bits under the float32 quantum (so the recomputation is unchanged)
    np.bitwise_and(x.view(np.uint64), keep, out=x.view(np.uint64))
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(np.float32)
    mag = r.view(np.uint32) & np.uint32(0x7FFFFFFF)
    mag -= np.uint32(1)  # zeros wrap to the top: not recomputed (the padded columns of a GEMM)
    small = np.flatnonzero(mag < np.uint32(0x00800000))
    if small.size:
        r.reshape(-1)[small] = rz_to_float32(x.reshape(-1)[small], bits)
    return r


def _signed_zeros(d, total, a, b, c):
    """An exact zero sum is +0, or -0 when C is -0 and every product is -0 (IEEE sums of
    signed zeros, as termloop.fix_special); a BLAS sum of zeros may carry either sign."""
    zero = np.flatnonzero(total == 0)
    if not zero.size:
        return d
    flat = d.reshape(-1)
    flat[zero] = 0.0
    cand = zero[c.reshape(-1)[zero].view(np.uint32) == 0x80000000]
    if cand.size:
        neg = all_products_neg_zero(a, b).reshape(-1)[cand]
        flat[cand[neg]] = -0.0
    return d
