"""Deterministic operand tiles for probing tensor-core arithmetic (device probes and CI replay).

A block of tiles (A [T, M, K], B [T, K, N] as narrow-format bit patterns, C [T, M, N] as float32
bit patterns) mixes, tile by tile: normal-distributed values; uniform random finite bit
patterns; exponent spread beyond 30 binades where the format allows it; massive cancellation
(pairs of products that cancel exactly, leaving small terms); C far above and far below the
products; subnormal operands and a subnormal C; integer data whose exact sum sits on float32
rounding boundaries; and tiles with one inf or NaN operand.

Only ``PCG64.random_raw`` feeds the generator (stable across NumPy versions). The recorded
device digests in ``simulator/data/device/mma_*`` were made from these blocks: changing this
module needs a new device sweep.
"""

from __future__ import annotations

import numpy as np

from ..numerics import FORMATS, convert

SEED = 0x7E45_0090
CATEGORIES = ("normal", "normal", "bits", "spread", "cancel", "c_big", "c_small",
              "subnormal", "ties", "special")
_SPREAD = {"bf16": 40, "f16": 14, "e4m3": 8, "e5m2": 15}


class _Rng:
    def __init__(self, *key: int):
        self._bg = np.random.PCG64(np.random.SeedSequence([SEED, *key]))

    def uniform(self, shape) -> np.ndarray:
        n = int(np.prod(shape))
        return ((self._bg.random_raw(n) >> np.uint64(11)).astype(np.float64) * 2.0**-53).reshape(shape)

    def normal(self, shape) -> np.ndarray:
        u1, u2 = self.uniform(shape), self.uniform(shape)
        return np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2 * np.pi * u2)  # Box-Muller, stable

    def ints(self, shape, lo: int, hi: int) -> np.ndarray:
        n = int(np.prod(shape))
        return (self._bg.random_raw(n) % np.uint64(hi - lo + 1)).astype(np.int64).reshape(shape) + lo

    def bits(self, shape) -> np.ndarray:
        n = int(np.prod(shape))
        return (self._bg.random_raw(n) >> np.uint64(32)).astype(np.uint32).reshape(shape)


def _to_fmt(x: np.ndarray, fmt: str) -> np.ndarray:
    """float64 -> narrow bits (round to nearest even, saturating: no accidental infinities)."""
    return convert(x.astype(np.float32), fmt, satfinite=True).view(FORMATS[fmt].uint)


def _finite_bits(raw: np.ndarray, fmt: str) -> np.ndarray:
    """Random bit patterns of the format, with inf/NaN codes moved to finite ones."""
    if fmt in ("bf16", "f16"):
        u = (raw & 0xFFFF).astype(np.uint16)
        exp_mask = 0x7F80 if fmt == "bf16" else 0x7C00
        bad = (u & exp_mask) == exp_mask
        u[bad] &= np.uint16(~(exp_mask ^ (exp_mask >> 1)) & 0xFFFF)  # clear the exponent's top bit
        return u
    u = (raw & 0xFF).astype(np.uint8)
    if fmt == "e4m3":
        u[(u & 0x7F) == 0x7F] -= 1
    else:  # e5m2: exponent 11111 is inf/NaN
        u[(u & 0x7C) == 0x7C] &= 0xFB
    return u


def _category_values(cat: str, fmt: str, rng: _Rng, shape_a, shape_b, shape_c):
    """float64 A, B values (or raw bits) and float32 C for one category."""
    if cat == "normal":
        return rng.normal(shape_a), rng.normal(shape_b), 4 * rng.normal(shape_c)
    if cat == "bits":
        return (_finite_bits(rng.bits(shape_a), fmt), _finite_bits(rng.bits(shape_b), fmt),
                rng.normal(shape_c) * np.exp2(rng.ints(shape_c, -10, 10)))
    if cat == "spread":
        s = _SPREAD[fmt]
        a = rng.normal(shape_a) * np.exp2(rng.ints(shape_a, -s, s))
        b = rng.normal(shape_b) * np.exp2(rng.ints(shape_b, -s, s))
        return a, b, rng.normal(shape_c) * np.exp2(rng.ints(shape_c, -2 * s, 2 * s))
    if cat == "cancel":
        a, b = rng.normal(shape_a), rng.normal(shape_b)
        a[..., 1::2] = a[..., 0::2]
        b[..., 1::2, :] = -b[..., 0::2, :]
        a[..., -1] *= 2.0**-9  # the one product left uncancelled is small
        return a, b, rng.normal(shape_c) * 2.0**-12
    if cat == "c_big":
        a, b = rng.normal(shape_a), rng.normal(shape_b)
        return a, b, rng.normal(shape_c) * np.exp2(rng.ints(shape_c, 5, 24))
    if cat == "c_small":
        return rng.normal(shape_a), rng.normal(shape_b), rng.normal(shape_c) * 2.0**-30
    if cat == "subnormal":
        tiny = {"bf16": -133, "f16": -24, "e4m3": -9, "e5m2": -16}[fmt]
        a = rng.ints(shape_a, -7, 7) * 2.0**tiny
        b = rng.normal(shape_b) * np.exp2(rng.ints(shape_b, 0, 6))
        return a, b, rng.ints(shape_c, -(1 << 20), 1 << 20) * 2.0**-149
    if cat == "ties":
        a, b = rng.ints(shape_a, -6, 6).astype(np.float64), rng.ints(shape_b, -6, 6).astype(np.float64)
        a[..., 0] = 0.5 * rng.ints(shape_a[:-1], -3, 3)
        c = (rng.ints(shape_c, 1 << 23, 1 << 24) * np.exp2(rng.ints(shape_c, 0, 3)))
        return a, b, c * np.where(rng.uniform(shape_c) < 0.5, -1.0, 1.0)
    raise ValueError(cat)


def mma_block(fmt: str, m: int, n: int, k: int, block: int, tiles: int):
    """Tiles ``block`` of an M x N x K instruction on ``fmt`` operands.

    Returns:
        (A bits [tiles, m, k], B bits [tiles, k, n], C float32 bits [tiles, m, n]); A and B as
        uint16 (bf16, f16) or uint8 (e4m3, e5m2).
    """
    if fmt not in _SPREAD:
        raise ValueError(f"fmt: unknown format {fmt!r}; supported: {', '.join(_SPREAD)}")
    uint = FORMATS[fmt].uint
    A = np.empty((tiles, m, k), dtype=uint)
    B = np.empty((tiles, k, n), dtype=uint)
    C = np.empty((tiles, m, n), dtype=np.uint32)
    ncat = len(CATEGORIES)
    for ci, cat in enumerate(CATEGORIES):
        idx = np.arange(ci, tiles, ncat)
        if idx.size == 0:
            continue
        rng = _Rng(["bf16", "f16", "e4m3", "e5m2"].index(fmt), m, n, k, block, ci)
        shape_a, shape_b, shape_c = (idx.size, m, k), (idx.size, k, n), (idx.size, m, n)
        base = "normal" if cat == "special" else cat
        a, b, c = _category_values(base, fmt, rng, shape_a, shape_b, shape_c)
        a = a if a.dtype == uint else _to_fmt(a, fmt)
        b = b if b.dtype == uint else _to_fmt(b, fmt)
        c = c.astype(np.float32).view(np.uint32)
        if cat == "special":
            _inject_specials(rng, fmt, a, b, c)
        A[idx], B[idx], C[idx] = a, b, c
    return A, B, C


def _inject_specials(rng: _Rng, fmt: str, a, b, c) -> None:
    """One non-finite value per tile: inf or NaN in A or B, or inf in C."""
    t = a.shape[0]
    inf = {"bf16": 0x7F80, "f16": 0x7C00, "e5m2": 0x7C}.get(fmt)
    nan = {"bf16": 0x7FC0, "f16": 0x7E00, "e4m3": 0x7F, "e5m2": 0x7E}[fmt]
    rows = np.arange(t)
    which = rng.ints((t,), 0, 3)
    pos_a = (rows, rng.ints((t,), 0, a.shape[1] - 1), rng.ints((t,), 0, a.shape[2] - 1))
    pos_b = (rows, rng.ints((t,), 0, b.shape[1] - 1), rng.ints((t,), 0, b.shape[2] - 1))
    code_a = np.where(which == 0, nan, inf if inf is not None else nan).astype(a.dtype)
    sign = (rng.ints((t,), 0, 1) * (0x8000 if a.dtype == np.uint16 else 0x80)).astype(a.dtype)
    sel_a = which <= 1
    a[tuple(p[sel_a] for p in pos_a)] = code_a[sel_a] | sign[sel_a]
    sel_b = which == 2
    b[tuple(p[sel_b] for p in pos_b)] = np.array(nan if inf is None else inf, dtype=b.dtype) | sign[sel_b]
    sel_c = which == 3
    c[rows[sel_c], 0, 0] = np.uint32(0xFF800000)
