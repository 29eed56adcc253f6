"""The mma.sync m16n8k32 FP8 sweep's frozen tiles and its replay.

``python -m simulator measure mma_fp8_sweep`` (:mod:`simulator.measure.mma_fp8_sweep`, which says
what each part tests and why) ran the tiles of :func:`make_tiles` on the H200 and recorded the
device's D bits as :func:`record` keeps them (``simulator/data/device/mma_fp8_sweep_<fmt>.npz``
and ``.json``); :func:`check` regenerates the tiles (checked by their SHA-256) and compares the
shipped model with the recording. Changing the tile generators needs a new device sweep.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..mma.instructions import params_for
from ..numerics import FORMATS, convert
from .common import digest, row
from .mma_probes import emulate_probe

PARTS = ("pairs", "triples", "zeros")


BLOCK = 64   # tiles per recorded digest


HEAD = 256   # tiles whose raw D bits are recorded


#: per FP8 format: (mantissa bits, largest normal exponent, smallest normal exponent), OCP FP8
#: (e4m3 as ml_dtypes.float8_e4m3fn: no infinity, 448 the largest finite)
FP8_FIELDS = {"e4m3": (3, 8, -6), "e5m2": (2, 15, -14)}


def _to_bits(x: np.ndarray, fmt: str) -> np.ndarray:
    """float64 values (exact or nearly) -> fp8 bits, round to nearest, saturating."""
    return convert(x.astype(np.float32), fmt, satfinite=True).view(FORMATS[fmt].uint)


def _mant(rng, shape, mbits):
    return 1.0 + rng.integers(0, 1 << mbits, shape) / float(1 << mbits)


def _sign(rng, shape):
    return np.where(rng.integers(0, 2, shape) == 1, -1.0, 1.0)


def pair_tiles(fmt: str, rng, reps: int = 8):
    """Part 0: A [T,16,32], B [T,32,8] float64, C zeros, kpos [T,3] for every ordered K pair."""
    mbits, top, _ = FP8_FIELDS[fmt]
    kb, ks = np.nonzero(~np.eye(32, dtype=bool))        # 992 ordered pairs
    kb, ks = np.repeat(kb, reps), np.repeat(ks, reps)
    t = kb.size
    rows, cols = np.arange(16), np.arange(8)
    # gap = (ea_big + eb_big) - (ea_small + eb_small) = 10 + i + j
    ea_s = (top - 1 if fmt == "e4m3" else top - 2) - rows          # e4m3: 7 .. -8, e5m2: 13 .. -2
    eb_s = (top - 9 if fmt == "e4m3" else top - 8) - cols          # e4m3: -1 .. -8, e5m2: 7 .. 0
    sa = _sign(rng, (t, 16))
    sb = _sign(rng, (t, 8))
    same = np.zeros((t, 8))
    same[np.arange(t), rng.integers(0, 8, t)] = 1.0                # one same-sign column per tile
    flip = np.where(same == 1.0, -1.0, 1.0)
    a = np.zeros((t, 16, 32))
    b = np.zeros((t, 32, 8))
    ti = np.arange(t)
    a[ti, :, kb] = sa * _mant(rng, (t, 16), mbits) * 2.0**top
    b[ti, kb, :] = sb * _mant(rng, (t, 8), mbits) * 2.0**top
    a[ti, :, ks] = -sa * _mant(rng, (t, 16), mbits) * 2.0**ea_s
    b[ti, ks, :] = flip * sb * _mant(rng, (t, 8), mbits) * 2.0**eb_s
    kpos = np.stack([kb, ks, np.full(t, -1)], axis=1)
    return a, b, np.zeros((t, 16, 8), np.float32), kpos


def triple_tiles(fmt: str, rng, tiles: int = 2000):
    """Part 1: three nonzero products at random distinct K positions, wide gaps, C = 0."""
    mbits, top, emin = FP8_FIELDS[fmt]
    kpos = np.argsort(rng.random((tiles, 32)), axis=1)[:, :3]
    ti = np.arange(tiles)
    a = np.zeros((tiles, 16, 32))
    b = np.zeros((tiles, 32, 8))
    lo = {"e4m3": emin, "e5m2": emin + 4}[fmt]
    for n, k in enumerate(kpos.T):  # the three product slots: large, middle, small
        ea = top - rng.integers(0, 3, (tiles, 16)) if n == 0 else rng.integers(lo, top + 1, (tiles, 16))
        eb = top - rng.integers(0, 3, (tiles, 8)) if n == 0 else rng.integers(lo, top - 2, (tiles, 8))
        a[ti[:, None], :, k[:, None]] = (_sign(rng, (tiles, 16)) * _mant(rng, (tiles, 16), mbits)
                                         * 2.0**ea)[:, None, :]
        b[ti[:, None], k[:, None], :] = (_sign(rng, (tiles, 8)) * _mant(rng, (tiles, 8), mbits)
                                         * 2.0**eb)[:, None, :]
    return a, b, np.zeros((tiles, 16, 8), np.float32), kpos


def zero_tiles(fmt: str, rng, tiles: int = 64):
    """Part 2: signed zeros, exact cancellations (same step / across steps), special C values.

    Rows pick the zero signs of A: row % 4 = 0 all -0, 1 all +0, 2 -0 at step-1 positions and +0
    at step-2 positions, 3 random; B columns are all +0 (even j) or all -0 (odd j), so an output
    sees all-(-0) products, all-(+0) products, or one sign per step. C comes from 16 values,
    chosen by (row // 4, j // 2): +-0, +-2^-149, +-1, +-2^-126, +-(2^-126 - 2^-149),
    +-random subnormals, +-1, +-0.
    Tile kinds (t % 4): 0 zeros only; 1, 2, 3 add v * w - v * w, with both products in step 1,
    both in step 2, or one in each step.
    """
    mbits, top, _ = FP8_FIELDS[fmt]
    rows, cols, ks = np.arange(16), np.arange(8), np.arange(32)
    neg_a = np.stack([np.ones(32, bool), np.zeros(32, bool), ks % 4 < 2, np.zeros(32, bool)])[rows % 4]
    neg_a = np.broadcast_to(neg_a, (tiles, 16, 32)) | ((rows % 4 == 3)[:, None]
                                                      & (rng.integers(0, 2, (tiles, 16, 32)) == 1))
    a = np.where(neg_a, -0.0, 0.0)
    b = np.broadcast_to(np.where(cols % 2 == 1, -0.0, 0.0), (tiles, 32, 8)).copy()
    kind = np.arange(tiles) % 4
    k1 = np.where(kind == 2, 2, 0)
    k2 = np.choose(kind, [1, 1, 3, 2])  # kind 0 ignores it
    ti = np.arange(tiles)
    v = _sign(rng, (tiles, 16)) * _mant(rng, (tiles, 16), mbits) * 2.0**rng.integers(0, top, (tiles, 16))
    w = _mant(rng, (tiles, 8), mbits) * 2.0**rng.integers(0, top, (tiles, 8))
    c_ = kind > 0
    a[ti[c_], :, k1[c_]] = v[c_]
    a[ti[c_], :, k2[c_]] = v[c_]
    b[ti[c_], k1[c_], :] = w[c_]
    b[ti[c_], k2[c_], :] = -w[c_]
    tiny, small = 2.0**-149, 2.0**-126
    sub = rng.integers(2, 1 << 23, (tiles, 16, 8)) * tiny
    cvals = np.array([0.0, -0.0, tiny, -tiny, 1.0, -1.0, small, -small,
                      small - tiny, -(small - tiny), 0.0, -0.0, 1.0, -1.0, 0.0, -0.0])
    c = np.broadcast_to(cvals.reshape(4, 4)[rows // 4][:, cols // 2], (tiles, 16, 8))
    rnd = (rows // 4 == 2)[:, None] & (cols // 2 >= 2)[None, :]
    c = np.where(rnd, np.copysign(sub, c), c).astype(np.float32)  # +-random subnormals there
    kpos = np.stack([np.where(c_, k1, -1), np.where(c_, k2, -1), np.full(tiles, -1)], axis=1)
    return a, b, c, kpos


def make_tiles(fmt: str, seed: int = 90):
    """All parts: A, B fp8 bits, C float32 bits, part [T] and kpos [T, 3]."""
    if fmt not in FP8_FIELDS:
        raise ValueError(f"fmt: {fmt!r}; supported: {', '.join(FP8_FIELDS)}")
    rng = np.random.default_rng([seed, list(FP8_FIELDS).index(fmt)])
    parts = [pair_tiles(fmt, rng), triple_tiles(fmt, rng), zero_tiles(fmt, rng)]
    a = np.concatenate([p[0] for p in parts])
    b = np.concatenate([p[1] for p in parts])
    c = np.concatenate([p[2] for p in parts]).astype(np.float32)
    kpos = np.concatenate([p[3] for p in parts]).astype(np.int8)
    part = np.concatenate([np.full(p[0].shape[0], n, np.int8) for n, p in enumerate(parts)])
    return _to_bits(a, fmt), _to_bits(b, fmt), c.view(np.uint32), part, kpos


def input_sha256(A, B, C) -> str:
    """SHA-256 of the regenerated operand bits: the recording stores D only."""
    h = hashlib.sha256()
    for x in (A, B, C):
        h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()


def record(D: np.ndarray, part: np.ndarray) -> dict[str, np.ndarray]:
    """What the repository keeps of the device's D bits [T, 16, 8]: digests and raw samples."""
    digests = np.array([np.frombuffer(digest(D[t:t + BLOCK]), np.uint8)
                        for t in range(0, D.shape[0], BLOCK)])
    return {"digests": digests, "head": D[:HEAD], "zeros": D[part == PARTS.index("zeros")]}


def check(fmt: str, recorded: dict, meta: dict) -> list[dict]:
    """``verify`` rows: the shipped model against a recorded sweep (digests and raw parts).

    Raises:
        RecordedDataError: the regenerated inputs are not the ones the device ran (other NumPy
            random streams), or a recorded array has another shape or dtype than the sweep
            writes: the recording cannot be checked, it must be regenerated.
    """
    from ..errors import RecordedDataError

    name = f"mma_sync_m16n8k32_{fmt}"
    regen = f"rerun `python -m simulator measure mma_fp8_sweep --out DIR --fmt {fmt}` on a GPU"
    A, B, C, part, _ = make_tiles(fmt)
    if input_sha256(A, B, C) != meta["input_sha256"] or meta["tiles"] != A.shape[0]:
        raise RecordedDataError(f"mma_fp8_sweep_{fmt}: the regenerated inputs are not the "
                                f"recorded ones (other random streams?); {regen}")
    emu = emulate_probe(name, A, B, C, params_for("mma_sync", fmt))
    mine = record(emu, part)
    for key, want in mine.items():  # the recording must have exactly the expected layout
        got = recorded[key]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise RecordedDataError(f"mma_fp8_sweep_{fmt}.npz: {key!r} is {got.dtype} "
                                    f"{got.shape}, expected {want.dtype} {want.shape}; {regen}")
    bad_blocks = np.flatnonzero(np.any(mine["digests"] != recorded["digests"], axis=1))
    rows = [row(f"{name} sweep, raw {key}", recorded[key].size,
                np.count_nonzero(mine[key] != recorded[key])) for key in ("head", "zeros")]
    rows.append(row(f"{name} sweep, digests of {len(mine['digests'])} blocks", emu.size,
                    min(emu.size, len(bad_blocks) * BLOCK * 128),
                    f"blocks with differing digest: {bad_blocks[:20].tolist()}" if len(bad_blocks) else ""))
    return rows
