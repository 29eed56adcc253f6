"""Replay of the recorded H200 warpgroup probes (``simulator/data/device/hw_*``) for
``python -m simulator verify --topic hw``: accumulator layouts of every wgmma shape, shuffles
with partial masks, and softmax.h's reductions (fast-math and no-ftz builds)."""

from __future__ import annotations

import hashlib

import numpy as np

from .. import hw
from ..hw import reduce_max, reduce_sum, rowcol_view, shfl_sync, thread_reduce
from ..io import read_npz
from .common import DATA_DIR, row

REGEN = "python -m simulator measure hw_probe --out DIR` on a GPU, then copy DIR's hw_* files"


def check_layouts(rec: dict) -> list[dict]:
    bad = total = 0
    for fmt, k in (("bf16", 16), ("e4m3", 32)):
        for n in range(8, 257, 8):
            lay = hw.accumulator_layout(f"m64n{n}k{k}")
            rows, cols = rec[f"ss_{fmt}_n{n}_row"], rec[f"ss_{fmt}_n{n}_col"]
            bad += np.count_nonzero((rows != lay.row) | (cols != lay.col))
            total += rows.size
    return [row("wgmma accumulator layouts, 64 shapes (thread, register)", total, bad)]


def check_shuffles(rec: dict) -> list[dict]:
    rows = []
    for mode in hw.shuffle.MODES:
        b, c, m = rec[f"{mode}_b"], rec[f"{mode}_c"], rec[f"{mode}_mask"]
        de, pe, _ = emulate_shuffles(mode, b, c, m)
        active = ((m[:, None].astype(np.int64) >> np.arange(32)) & 1).astype(bool)
        for variant in ("", "_diverged"):
            d, p = rec[f"{mode}{variant}_d"], rec[f"{mode}{variant}_p"]
            bad = np.count_nonzero((d != de) & active) + np.count_nonzero((p != pe) & active)
            rows.append(row(f"shfl.sync.{mode}{variant} (active lanes, value + predicate)",
                             2 * np.count_nonzero(active), bad))
    return rows


def check_reductions(rec: dict) -> list[dict]:
    bad = total = 0
    for sname in sorted(REDUCE_SHAPES):
        frag, init = reduce_inputs(REDUCE_SHAPES[sname])
        for build, ftz in sorted(REDUCE_BUILDS.items()):
            for op in ("sum", "max"):
                for zi in (True, False):
                    key = f"reduce_{op}_{sname}_{'zi' if zi else 'acc'}_{build}"
                    thread, quad = emulate_reduce(op, zi, frag, init, ftz)
                    for stage, got in (("thread", thread), ("quad", quad)):
                        digests = rec[f"{key}_{stage}_digest"]
                        per_block = got.size // len(digests)
                        bad += per_block * int(np.count_nonzero(
                            np.any(block_digests(got) != digests, axis=-1)))
                        total += got.size
    return [row("thread_reduce + quad allreduce (sum, max; ftz and not), by digest", total,
                 bad)]


def check_all(quick: bool = False) -> list[dict]:
    """Rows for ``verify``; ``quick`` skips the reductions."""
    rows = check_layouts(read_npz(DATA_DIR / "hw_layouts.npz", REGEN))
    rows += check_shuffles(read_npz(DATA_DIR / "hw_shuffle.npz", REGEN))
    if not quick:
        rows += check_reductions(read_npz(DATA_DIR / "hw_reduce.npz", REGEN))
    return rows


REDUCE_SHAPES = {"n128": 64, "n40": 20}  # accumulator registers per thread


REDUCE_BLOCKS = 32


REDUCE_KEEP_BLOCKS = 4


REDUCE_SEED = 20261130


# which emulator ftz setting each build must match
REDUCE_BUILDS = {"fast": True, "nofast": True, "noftz": False}


SHFL_B = (0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 63, 64, 0x80000001,
          0xFFFFFFFF)


SHFL_C_ODD = (0x00, 0x1F, 0x0F, 0x07, 0x13, 0x0818, 0x1000, 0x1F1F, 0x101F, 0x0C1F,
              0xFFFFE01F, 0x1E00, 0x1C10, 0x0403)


SHFL_MASKS = (0x0000FFFF, 0xFFFF0000, 0x55555555, 0x0F0F0F0F, 0x00000001, 0x80000001,
              0xFFFFFFFE, 0x7FFFFFFF)


def shuffle_cases(mode: str, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Test cases for one mode: b [cases, 32], c [cases], membermask [cases] (uint32)."""
    from ..hw import c_for_width

    cs = [c_for_width(w, mode) for w in (32, 16, 8, 4, 2, 1)] + list(SHFL_C_ODD)
    b, c, m = [], [], []
    for bv in SHFL_B:
        for cv in cs:
            b.append(np.full(32, bv)), c.append(cv), m.append(0xFFFFFFFF)
    masks = list(SHFL_MASKS) + [int(x) for x in rng.integers(1, 1 << 32, 4, dtype=np.uint64)]
    for mv in masks:
        for bv, w in ((1, 32), (2, 4), (16, 32), (5, 8), (31, 32), (0, 32)):
            b.append(np.full(32, bv)), c.append(c_for_width(w, mode)), m.append(mv)
    for _ in range(24):
        small = rng.integers(0, 40, 32)
        b.append(small if rng.random() < 0.5 else rng.integers(0, 1 << 32, 32, dtype=np.uint64))
        c.append(int(rng.choice(cs))), m.append(0xFFFFFFFF)
    return (np.asarray(b, dtype=np.uint64).astype(np.uint32), np.asarray(c, dtype=np.uint32),
            np.asarray(m, dtype=np.uint32))


def shuffle_input(n_cases: int) -> np.ndarray:
    """Value lane L of case k shuffles: 0xA0000000 | (k << 8) | L, uint32 [cases, 32]."""
    k = np.arange(n_cases, dtype=np.uint32)[:, None]
    return (np.uint32(0xA0000000) | (k << np.uint32(8)) | np.arange(32, dtype=np.uint32)).astype(np.uint32)


def emulate_shuffles(mode: str, b, c, m):
    """Emulator d, p, defined for each case (loop over cases; lanes are vectorised)."""
    x = shuffle_input(len(c))
    d = np.empty_like(x)
    p = np.zeros(x.shape, bool)
    defined = np.zeros(x.shape, bool)
    for k in range(len(c)):
        r = shfl_sync(x[k], mode, b[k].astype(np.int64), int(c[k]), int(m[k]), axis=-1,
                      full=True, undefined="zero")
        d[k], p[k], defined[k] = r.value, r.pred, r.defined
    return d, p, defined


def source_lanes_all(mode: str, b, c) -> np.ndarray:
    """Source lane (after the in-range test) of every lane of every case: int [cases, 32]."""
    from ..hw import source_lanes

    return np.stack([source_lanes(mode, b[k].astype(np.int64), int(c[k]))[0]
                     for k in range(len(c))])


def reduce_inputs(nreg: int, blocks: int = REDUCE_BLOCKS, seed: int = REDUCE_SEED):
    """Deterministic float32 fragments [blocks, 128, nreg] and initial summaries [blocks, 128, 2]:
    wide exponents, cancellation, softmax-like blocks, blocks near the subnormal range,
    scattered subnormals, +-0, +-inf, NaN, near-overflow values."""
    rng = np.random.default_rng([seed, nreg])

    def draw(shape):
        mag = np.exp2(rng.uniform(-30, 30, shape))
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        x = (mag * sign).astype(np.float32)
        kind = rng.random(shape[:1])
        soft = kind < 0.25  # blocks of exp() outputs in [0, 1]
        x[soft] = rng.random((int(soft.sum()),) + shape[1:]).astype(np.float32)
        tiny = kind > 0.7  # blocks near the subnormal range: .ftz decides the bits
        tshape = (int(tiny.sum()),) + shape[1:]
        x[tiny] = (np.exp2(rng.uniform(-149, -118, tshape))
                   * np.where(rng.random(tshape) < 0.5, -1.0, 1.0)).astype(np.float32)
        u = rng.random(shape)
        bits = x.view(np.uint32)
        sub = rng.integers(1, 1 << 23, shape, dtype=np.uint32) | (
            rng.integers(0, 2, shape, dtype=np.uint32) << np.uint32(31))
        bits[u < 0.03] = sub[u < 0.03]
        specials = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000,
                             0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x80800000], dtype=np.uint32)
        sp = (u >= 0.03) & (u < 0.035)
        bits[sp] = specials[rng.integers(0, len(specials), int(sp.sum()))]
        return bits.view(np.float32)

    return draw((blocks, 128, nreg)), draw((blocks, 128, 2))


def emulate_reduce(op: str, zero_init: bool, frag: np.ndarray, init: np.ndarray, ftz: bool):
    """Emulator (thread stage, after quad allreduce) for the reduce probe."""
    nreg = frag.shape[-1]
    view = rowcol_view(f"m64n{2 * nreg}k16")
    t = view.apply(frag)
    thread = thread_reduce(t, init, op=op, zero_init=zero_init, ftz=ftz)
    full = (reduce_sum if op == "sum" else reduce_max)(t, init, zero_init=zero_init, ftz=ftz)
    return thread, full


def block_digests(x: np.ndarray) -> np.ndarray:
    """SHA-256 (first 16 bytes) of each block's bits: uint8 [blocks, 16]."""
    b = np.ascontiguousarray(x).view(np.uint32)
    return np.stack([np.frombuffer(hashlib.sha256(b[i].tobytes()).digest()[:16], np.uint8)
                     for i in range(b.shape[0])])
