"""Deterministic random and adversarial float32 operands for checking arithmetic bit by bit.

The device sweep (``python -m simulator measure numerics_sweep``) runs these operands through the
H200 and the emulator; CI regenerates the same blocks from the same seeds and checks the emulator
against the recorded device digests. Only ``PCG64.random_raw`` is used, whose stream NumPy keeps
stable across versions, so a block is the same on every machine.

A block of ``size`` cases mixes, in fixed proportions: uniform random bit patterns; operands of
close exponents (rounding of every kind); near-cancellation; exact rounding ties; the subnormal
range and its boundary with the normal range (where ``.ftz`` acts); the overflow boundary; and
special values (+-0, +-inf, NaNs with several payloads, extreme subnormals and normals).

The recorded device digests (``simulator/data/device/numerics_digests.npz``) were made from
these exact blocks: any change here, even to the order of random draws, needs a new device
sweep, and the replay tests fail until it is done.
"""

from __future__ import annotations

import numpy as np

SEED = 0x5F3A_2026
OPS = ("fadd", "fsub", "fmul", "ffma", "fmax", "fmin")
ARITY = {"fadd": 2, "fsub": 2, "fmul": 2, "ffma": 3, "fmax": 2, "fmin": 2}
BLOCK_SIZE = 1 << 20

SPECIALS = np.array(
    [
        0x00000000, 0x80000000,  # +-0
        0x7F800000, 0xFF800000,  # +-inf
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FFFFFFF, 0x7FA00000,  # NaNs
        0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00400000,  # subnormals
        0x00800000, 0x80800000, 0x00800001,  # smallest normals
        0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE,  # largest finite
        0x3F800000, 0xBF800000, 0x3F000000, 0x40000000, 0x33800000,  # 1, -1, 0.5, 2, 2^-24
    ],
    dtype=np.uint32,
)


class _Bits:
    """Stable random source built on PCG64.random_raw only."""

    def __init__(self, *key: int):
        self._bg = np.random.PCG64(np.random.SeedSequence([SEED, *key]))

    def u32(self, n: int) -> np.ndarray:
        return (self._bg.random_raw(n) >> np.uint64(32)).astype(np.uint32)

    def ints(self, n: int, lo: int, hi: int) -> np.ndarray:
        """Integers in [lo, hi] (modulo bias is irrelevant here)."""
        span = np.uint64(hi - lo + 1)
        return (self._bg.random_raw(n) % span).astype(np.int64) + lo

    def sign(self, n: int) -> np.ndarray:
        return (self.u32(n) & np.uint32(0x80000000)).astype(np.uint32)


def _pack(sign, exp, mant) -> np.ndarray:
    exp = np.clip(np.asarray(exp, dtype=np.int64), 0, 255).astype(np.uint32)
    return (sign | (exp << np.uint32(23)) | (mant & np.uint32(0x7FFFFF))).astype(np.uint32)


def _exp_of(u: np.ndarray) -> np.ndarray:
    return ((u >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)


def _split(size: int, weights: list[float]) -> list[int]:
    counts = [int(size * w) for w in weights]
    counts[0] += size - sum(counts)
    return counts


def _binary_block(op: str, rng: _Bits, size: int) -> tuple[np.ndarray, np.ndarray]:
    n_rand, n_close, n_cancel, n_tie, n_sub, n_edge, n_over, n_spec = _split(
        size, [0.45, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05]
    )
    parts_a, parts_b = [], []

    def add(a, b):
        parts_a.append(a)
        parts_b.append(b)

    add(rng.u32(n_rand), rng.u32(n_rand))

    ea = rng.ints(n_close, 1, 254)
    add(_pack(rng.sign(n_close), ea, rng.u32(n_close)),
        _pack(rng.sign(n_close), np.clip(ea + rng.ints(n_close, -3, 3), 1, 254), rng.u32(n_close)))

    a = _pack(rng.sign(n_cancel), rng.ints(n_cancel, 1, 254), rng.u32(n_cancel))
    flip = rng.u32(n_cancel) & np.uint32(0x80000000)
    b = (a ^ flip).astype(np.int64) + rng.ints(n_cancel, -4, 4)
    add(a, np.clip(b, 0, 0xFFFFFFFF).astype(np.uint32))

    if op == "fmul":
        # b = 2^k * (1 + 2^-j): the product's discarded bits are a shifted copy of a's.
        a = _pack(rng.sign(n_tie), rng.ints(n_tie, 64, 190), rng.u32(n_tie))
        j = rng.ints(n_tie, 1, 23).astype(np.uint32)
        b = _pack(rng.sign(n_tie), rng.ints(n_tie, 100, 154), np.uint32(1) << (np.uint32(23) - j))
    else:
        # b sits 23..26 binades below a with a short mantissa: sums land on midpoints.
        a = _pack(rng.sign(n_tie), rng.ints(n_tie, 30, 254), rng.u32(n_tie))
        eb = _exp_of(a) - rng.ints(n_tie, 23, 26)
        b = _pack(rng.sign(n_tie), eb, rng.u32(n_tie) & np.uint32(0x7C0000))
    add(a, b)

    if op == "fmul":
        # products from just below the subnormal range to just above the normal boundary
        ea = rng.ints(n_sub, 40, 90)
        eb = 127 - 126 + 127 - ea + rng.ints(n_sub, -25, 2)
        mant_a = np.where(rng.u32(n_sub) & 1, rng.u32(n_sub), np.uint32(0x7FFFFF))
        add(_pack(rng.sign(n_sub), ea, mant_a), _pack(rng.sign(n_sub), eb, rng.u32(n_sub)))
    else:
        add(_pack(rng.sign(n_sub), rng.ints(n_sub, 0, 2), rng.u32(n_sub)),
            _pack(rng.sign(n_sub), rng.ints(n_sub, 0, 2), rng.u32(n_sub)))

    if op == "fmul":
        a, b = _near_min_normal_product(rng, n_edge, exp_sum=-126)
        add(a, b)
    else:
        # sums straddling 2^-126: exact subnormal results of normal operands
        a = _pack(rng.sign(n_edge), rng.ints(n_edge, 1, 3), rng.u32(n_edge))
        add(a, (a ^ np.uint32(0x80000000)) + rng.ints(n_edge, 0, 1 << 24).astype(np.uint32))

    if op == "fmul":
        ea = rng.ints(n_over, 120, 200)
        eb = 254 + 127 - ea + rng.ints(n_over, -1, 1)
        add(_pack(rng.sign(n_over), ea, rng.u32(n_over)), _pack(rng.sign(n_over), eb, rng.u32(n_over)))
    else:
        add(_pack(rng.sign(n_over), rng.ints(n_over, 252, 254), rng.u32(n_over) | np.uint32(0x700000)),
            _pack(rng.sign(n_over), rng.ints(n_over, 250, 254), rng.u32(n_over)))

    k = len(SPECIALS)
    add(SPECIALS[rng.ints(n_spec, 0, k - 1)], SPECIALS[rng.ints(n_spec, 0, k - 1)])
    return np.concatenate(parts_a), np.concatenate(parts_b)


def _near_min_normal_product(rng: _Bits, n: int, exp_sum: int):
    """Operands whose exact product is 2^exp_sum * (1 - j^2 * 2^-46) (j = 1..4095), a sliver
    below a power of two: with exp_sum = -126 it rounds up to the smallest normal, which tells
    whether .ftz judges tininess before or after rounding."""
    j = rng.ints(n, 1, 4095).astype(np.uint32)
    ea = rng.ints(n, 40, 100)
    eb = exp_sum + 254 - ea
    a = _pack(rng.sign(n), ea, j)
    # b = 2^(eb-127) * (1 - j * 2^-23), written with the next lower exponent; +-1 ulp jitter
    # (draw order matters: the recorded device digests were made with sign drawn first)
    sign_b = rng.sign(n)
    mant_b = (np.uint32(1 << 23) - np.uint32(2) * j) + rng.ints(n, -1, 1).astype(np.uint32)
    b = _pack(sign_b, eb - 1, mant_b)
    return a, b


def _round_product_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        p = a.view(np.float32).astype(np.float64) * b.view(np.float32).astype(np.float64)
        return p.astype(np.float32).view(np.uint32)


def _fma_block(rng: _Bits, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_rand, n_near, n_cancel, n_tie, n_trap, n_sub, n_edge, n_over, n_spec = _split(
        size, [0.3, 0.15, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05]
    )
    pa, pb, pc = [], [], []

    def add(a, b, c):
        pa.append(a)
        pb.append(b)
        pc.append(c)

    add(rng.u32(n_rand), rng.u32(n_rand), rng.u32(n_rand))

    ea, eb = rng.ints(n_near, 64, 190), rng.ints(n_near, 64, 190)
    ec = ea + eb - 127 + rng.ints(n_near, -30, 30)
    add(_pack(rng.sign(n_near), ea, rng.u32(n_near)), _pack(rng.sign(n_near), eb, rng.u32(n_near)),
        _pack(rng.sign(n_near), np.clip(ec, 1, 254), rng.u32(n_near)))

    a = _pack(rng.sign(n_cancel), rng.ints(n_cancel, 64, 190), rng.u32(n_cancel))
    b = _pack(rng.sign(n_cancel), rng.ints(n_cancel, 64, 190), rng.u32(n_cancel))
    c = (_round_product_bits(a, b) ^ np.uint32(0x80000000)).astype(np.int64)
    c = np.clip(c + rng.ints(n_cancel, -2, 2), 0, 0xFFFFFFFF).astype(np.uint32)
    add(a, b, c)

    # short mantissas make a*b exact in few bits; c a binade below the last kept bit
    short = np.uint32(0x7FF000)
    a = _pack(rng.sign(n_tie), rng.ints(n_tie, 64, 190), rng.u32(n_tie) & short)
    b = _pack(rng.sign(n_tie), rng.ints(n_tie, 64, 190), rng.u32(n_tie) & short)
    ec = _exp_of(a) + _exp_of(b) - 127 - rng.ints(n_tie, 22, 26)
    add(a, b, _pack(rng.sign(n_tie), ec, rng.u32(n_tie) & np.uint32(0x7E0000)))

    # double-rounding traps: a*b = 2^k * (1 - j^2 * 2^-46) is half an ulp of c, minus a sliver
    # far below float64 precision of the sum, so RN53(a*b + c) is an exact float32 midpoint.
    j = rng.ints(n_trap, 1, 127).astype(np.uint32)
    ea, eb = rng.ints(n_trap, 70, 180), rng.ints(n_trap, 70, 180)
    a = _pack(rng.sign(n_trap), ea, j)
    b = _pack(rng.sign(n_trap), eb - 1, np.uint32(0x7FFFFF) - (j - np.uint32(1)) * np.uint32(2) - 1)
    ec = ea + eb - 1 - 127 + 24 + rng.ints(n_trap, 0, 1)
    add(a, b, _pack(rng.sign(n_trap), np.clip(ec, 1, 254), rng.u32(n_trap)))

    ea = rng.ints(n_sub, 40, 90)
    eb = 1 + 127 - ea + rng.ints(n_sub, -25, 2)
    add(_pack(rng.sign(n_sub), ea, rng.u32(n_sub)), _pack(rng.sign(n_sub), eb, rng.u32(n_sub)),
        _pack(rng.sign(n_sub), rng.ints(n_sub, 0, 2), rng.u32(n_sub)))

    # results a sliver below 2^-126: the product alone (c = +-0 or a subnormal), or a product
    # near 2^-125 minus c = 2^-126
    half = n_edge // 2
    a1, b1 = _near_min_normal_product(rng, half, exp_sum=-126)
    c1 = SPECIALS[rng.ints(half, 0, 1)] | (rng.u32(half) & np.uint32(0x3))
    a2, b2 = _near_min_normal_product(rng, n_edge - half, exp_sum=-125)
    c2 = _pack(rng.sign(n_edge - half), 1, rng.ints(n_edge - half, 0, 2).astype(np.uint32))
    add(np.concatenate([a1, a2]), np.concatenate([b1, b2]), np.concatenate([c1, c2]))

    ea = rng.ints(n_over, 120, 200)
    eb = 254 + 127 - ea + rng.ints(n_over, -1, 1)
    add(_pack(rng.sign(n_over), ea, rng.u32(n_over)), _pack(rng.sign(n_over), eb, rng.u32(n_over)),
        _pack(rng.sign(n_over), rng.ints(n_over, 250, 254), rng.u32(n_over)))

    k = len(SPECIALS)
    add(*(SPECIALS[rng.ints(n_spec, 0, k - 1)] for _ in range(3)))
    return np.concatenate(pa), np.concatenate(pb), np.concatenate(pc)


def arith_block(op: str, block: int, size: int = BLOCK_SIZE) -> tuple[np.ndarray, ...]:
    """Operands (uint32 bit patterns, each of shape (size,)) of case block ``block`` of ``op``.

    Args:
        op: one of :data:`OPS`.
        block: block index >= 0; blocks are independent and reproducible.
        size: cases per block (>= 64).
    Returns:
        ``(a, b)`` or, for ``ffma``, ``(a, b, c)`` as uint32 arrays.
    Raises:
        ValueError: unknown op or bad block/size.
    """
    if op not in OPS:
        raise ValueError(f"op: unknown operation {op!r}; supported: {', '.join(OPS)}")
    if block < 0 or size < 64:
        raise ValueError(f"block must be >= 0 and size >= 64, got block={block}, size={size}")
    rng = _Bits(OPS.index(op), block)
    if op == "ffma":
        return _fma_block(rng, size)
    # fsub reuses the fadd mix; fmax/fmin the fadd mix too (equal values, +-0 pairs, NaNs)
    return _binary_block(op, rng, size)
