"""MMA register fragment layouts as vectorised bijections (thread, register) <-> (row, col).

A *layout* says which thread of a warpgroup (or warp) holds which matrix element in which of
its registers. The emulator keeps a fragment as an array ``[..., thread, register]``; a layout
turns it into the ``[..., rows, cols]`` matrix and back with one fancy-indexing step.

Layouts provided (``g = lane >> 2`` is the quad, PTX ``groupID``; ``q = lane % 4`` the lane in
the quad, PTX ``threadID_in_group``; ``w`` the warp in the warpgroup):

* ``accumulator_layout("m64n{N}k16")`` / ``"m64n{N}k32"``: the wgmma f32 accumulator D of a
  warpgroup, N = 8..256 step 8, N/2 registers per thread::

      row = 16 w + g + 8 ((i >> 1) & 1),   col = 8 (i >> 2) + 2 q + (i & 1)

  (PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate: Register Fragments",
  figure "WGMMA .m64nNk16 register fragment layout for accumulator matrix D"; the k32 FP8 shapes
  have the same D layout.)
* ``accumulator_layout("m16n8k16")`` / ``"m16n8k32"``: the mma.sync f32 accumulator of one warp,
  4 registers: the formula above with w = 0 and N = 8 (PTX ISA "Matrix Fragments for
  mma.m16n8k16 with floating point type" / "... mma.m16n8k32").
* ``a_operand_layout(shape)``: the A operand in registers, one entry per *element* (16-bit types
  pack 2 elements per 32-bit register, 8-bit types 4; element ``e`` sits in register
  ``e // packing`` at bits ``16 (e % 2)`` resp. ``8 (e % 4)``). k16 (bf16/f16), 8 elements::

      row = 16 w + g + 8 ((e >> 1) & 1),   col = 2 q + (e & 1) + 8 (e >> 2)

  k32 (e4m3/e5m2), 16 elements::

      row = 16 w + g + 8 ((e >> 2) & 1),   col = 4 q + (e & 3) + 16 (e >> 3)

  For wgmma with A in registers (m64nNk16 / m64nNk32, any N) w is the warp; for mma.sync w = 0.
* ``b_operand_layout("m16n8k16" | "m16n8k32")``: mma.sync B operand (K x 8), used by the probes.

Every formula is checked against the H200 by ``python -m simulator measure hw_probe`` (recorded in
``simulator/data/device/hw_layouts.npz`` and ``hw_report.json``; tests in
``tests/test_hw_layouts.py``).

The row/column view (:func:`rowcol_view`) is the per-thread ``(nrow, ncol)`` tensor that
FlashAttention-3's ``convert_layout_acc_rowcol`` (hopper/utils.h) makes of an accumulator
fragment; ``hopper/softmax.h``'s loops walk it. For the SM90 accumulator, whose per-thread CuTe
layout is ``((2, 2, N/8), MMA_M, MMA_N)`` with register index
``r = v0 + 2 v1 + 4 v2 + (N/2) (m + MMA_M n)`` (CuTe's compact fragment order), the view is
``rows = (v1, m)``, ``cols = (v0, v2, n)``: ``mi = v1 + 2 m``, ``ni = v0 + 2 v2 + (N/4) n``.
For the mma.sync (SM80) accumulator ``((2, 2), MMA_M, MMA_N)``: ``mi = v1 + 2 m``,
``ni = v0 + 2 n``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np

from ..numerics.bits import is_int, reject_subclass
from .threads import WARP_SIZE, WARPGROUP_SIZE, thread_index

_SHAPE_RE = re.compile(r"^m(\d+)n(\d+)k(\d+)$")
_SOURCE_WGMMA = ('PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate '
                 'Instructions: Register Fragments"; measured: simulator/data/device/hw_layouts.npz')
_SOURCE_MMA = ('PTX ISA, "Matrix Fragments for mma.m16n8k16 / mma.m16n8k32"; '
               'measured: simulator/data/device/hw_layouts.npz')


@dataclass(frozen=True)
class MmaShape:
    """A parsed MMA shape string.

    Fields: ``m``, ``n``, ``k`` (ints); ``kind`` is ``"wgmma"`` (m64, a warpgroup of 128
    threads) or ``"mma.sync"`` (m16n8, one warp of 32 threads); ``threads`` 128 or 32.
    """

    m: int
    n: int
    k: int
    kind: str
    threads: int

    @property
    def name(self) -> str:
        """The canonical spelling, e.g. ``"m64n128k16"``."""
        return f"m{self.m}n{self.n}k{self.k}"


def parse_shape(shape: str) -> MmaShape:
    """Parse ``"m64n{N}k16"``, ``"m64n{N}k32"``, ``"m16n8k16"`` or ``"m16n8k32"``.

    Raises:
        ValueError: saying what is wrong: not of the form mMnNkK; M not 64 or 16; for m64, N
            not a multiple of 8 or outside 8..256; for m16, N not 8; K not 16 or 32.
    """
    if not isinstance(shape, str):
        raise TypeError(f"shape: expected a string like 'm64n128k16', got {type(shape).__name__}")
    mt = _SHAPE_RE.match(shape.strip().lower())
    if not mt:
        raise ValueError(f"shape {shape!r}: expected the form 'm64n<N>k16', 'm64n<N>k32', "
                         f"'m16n8k16' or 'm16n8k32'")
    m, n, k = (int(v) for v in mt.groups())
    if k not in (16, 32):
        raise ValueError(f"shape {shape!r}: K must be 16 (bf16/f16) or 32 (e4m3/e5m2), got {k}")
    if m == 64:
        if n % 8 != 0:
            raise ValueError(f"shape {shape!r}: wgmma N must be a multiple of 8, got {n}")
        if not 8 <= n <= 256:
            raise ValueError(f"shape {shape!r}: wgmma N must be in 8..256, got {n}")
        return MmaShape(64, n, k, "wgmma", WARPGROUP_SIZE)
    if m == 16:
        if n != 8:
            raise ValueError(f"shape {shape!r}: mma.sync m16 shapes have N = 8, got {n}")
        return MmaShape(16, 8, k, "mma.sync", WARP_SIZE)
    raise ValueError(f"shape {shape!r}: M must be 64 (wgmma) or 16 (mma.sync), got {m}")


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Layout:
    """A register fragment layout: a bijection (thread, register) <-> (row, col).

    Attributes:
        name: e.g. ``"m64n128k16 accumulator"``.
        shape: the parsed :class:`MmaShape`.
        operand: ``"C"`` (accumulator, f32), ``"A"`` or ``"B"``.
        threads: 128 (warpgroup) or 32 (warp).
        rows, cols: the matrix shape (M x N for C, M x K for A, K x N for B), tiles included.
        row, col: int32 arrays ``(threads, registers)``: the element each register holds.
        thread_of, reg_of: int32 arrays ``(rows, cols)``: the inverse map.
        packing: elements per 32-bit register (1 for f32 accumulators, 2 for 16-bit operands,
            4 for 8-bit operands); ``registers`` counts elements, not 32-bit registers.
        tiles: ``(MMA_M, MMA_N)`` repeats of the instruction tile (accumulators only).
        source: where the layout comes from (PTX ISA section, device measurement file).
    """

    name: str
    shape: MmaShape
    operand: str
    threads: int
    rows: int
    cols: int
    row: np.ndarray
    col: np.ndarray
    packing: int = 1
    tiles: tuple[int, int] = (1, 1)
    source: str = ""
    thread_of: np.ndarray = field(init=False, repr=False)
    reg_of: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        row, col = np.asarray(self.row), np.asarray(self.col)
        if row.shape != col.shape or row.ndim != 2 or row.shape[0] != self.threads:
            raise ValueError(f"{self.name}: row/col must both be ({self.threads}, R), "
                             f"got {row.shape} and {col.shape}")
        if row.size != self.rows * self.cols:
            raise ValueError(f"{self.name}: {row.size} (thread, register) slots for a "
                             f"{self.rows}x{self.cols} matrix")
        flat = row.astype(np.int64) * self.cols + col
        if row.min() < 0 or row.max() >= self.rows or col.min() < 0 or col.max() >= self.cols:
            raise ValueError(f"{self.name}: (row, col) out of the {self.rows}x{self.cols} matrix")
        counts = np.bincount(flat.ravel(), minlength=self.rows * self.cols)
        if not np.all(counts == 1):
            raise ValueError(f"{self.name}: not a bijection ({int((counts != 1).sum())} elements "
                             f"held by zero or several slots)")
        t = np.broadcast_to(np.arange(self.threads)[:, None], row.shape)
        r = np.broadcast_to(np.arange(row.shape[1])[None, :], row.shape)
        thread_of = np.empty(self.rows * self.cols, np.int32)
        reg_of = np.empty(self.rows * self.cols, np.int32)
        thread_of[flat.ravel()] = t.ravel()
        reg_of[flat.ravel()] = r.ravel()
        object.__setattr__(self, "row", _frozen(row.astype(np.int32)))
        object.__setattr__(self, "col", _frozen(col.astype(np.int32)))
        object.__setattr__(self, "thread_of", _frozen(thread_of.reshape(self.rows, self.cols)))
        object.__setattr__(self, "reg_of", _frozen(reg_of.reshape(self.rows, self.cols)))

    @property
    def registers(self) -> int:
        """Fragment entries per thread (elements; 32-bit registers = registers / packing)."""
        return self.row.shape[1]

    def __repr__(self) -> str:
        return (f"Layout({self.name!r}, threads={self.threads}, registers={self.registers}, "
                f"matrix={self.rows}x{self.cols})")

    # ---- checks ------------------------------------------------------------------------
    def check_fragment(self, values, what: str = "fragment") -> np.ndarray:
        """Return ``values`` as an array ``[..., threads, registers]`` or raise ValueError.

        Raises:
            ValueError: fewer than 2 dimensions, a thread axis other than ``threads`` long, a
                register count other than ``registers``, or an ndarray subclass (a masked
                array); the message says which.
        """
        reject_subclass(what, values, ValueError)
        v = np.asarray(values)
        if v.ndim < 2:
            raise ValueError(f"{what}: expected an array [..., thread, register], got shape "
                             f"{v.shape}")
        if v.shape[-2] != self.threads:
            unit = "warpgroup" if self.threads == WARPGROUP_SIZE else "warp"
            raise ValueError(f"{what}: thread axis (-2) has length {v.shape[-2]}, but {self.name} "
                             f"is held by a {unit} of {self.threads} threads; shape {v.shape}")
        if v.shape[-1] != self.registers:
            raise ValueError(f"{what}: {v.shape[-1]} registers per thread, but {self.name} has "
                             f"{self.registers} per thread; shape {v.shape}")
        return v

    def check_matrix(self, m, what: str = "matrix") -> np.ndarray:
        """Return ``m`` as an array ``[..., rows, cols]`` or raise ValueError saying what differs
        (also for an ndarray subclass such as a masked array)."""
        reject_subclass(what, m, ValueError)
        m = np.asarray(m)
        if m.ndim < 2 or m.shape[-2:] != (self.rows, self.cols):
            raise ValueError(f"{what}: expected [..., {self.rows}, {self.cols}] for {self.name}, "
                             f"got shape {m.shape}")
        return m

    # ---- the bijection, both ways ------------------------------------------------------
    def to_matrix(self, values) -> np.ndarray:
        """Fragment ``[..., threads, registers]`` -> matrix ``[..., rows, cols]`` (same dtype)."""
        v = self.check_fragment(values)
        return v[..., self.thread_of, self.reg_of]

    def from_matrix(self, m) -> np.ndarray:
        """Matrix ``[..., rows, cols]`` -> fragment ``[..., threads, registers]`` (same dtype)."""
        m = self.check_matrix(m)
        return m[..., self.row, self.col]

    def locate(self, thread, reg) -> tuple[np.ndarray, np.ndarray]:
        """``(row, col)`` held by register ``reg`` of ``thread`` (int arrays, broadcast)."""
        t, r = np.broadcast_arrays(np.asarray(thread), np.asarray(reg))
        if t.size and (t.min() < 0 or t.max() >= self.threads):
            raise ValueError(f"thread must be in 0..{self.threads - 1}")
        if r.size and (r.min() < 0 or r.max() >= self.registers):
            raise ValueError(f"reg must be in 0..{self.registers - 1} for {self.name}")
        return self.row[t, r].astype(np.int64), self.col[t, r].astype(np.int64)

    def owner(self, row, col) -> tuple[np.ndarray, np.ndarray]:
        """``(thread, register)`` holding element ``(row, col)`` (int arrays, broadcast)."""
        i, j = np.broadcast_arrays(np.asarray(row), np.asarray(col))
        if i.size and (i.min() < 0 or i.max() >= self.rows or j.min() < 0 or j.max() >= self.cols):
            raise ValueError(f"(row, col) must lie in the {self.rows}x{self.cols} matrix")
        return self.thread_of[i, j].astype(np.int64), self.reg_of[i, j].astype(np.int64)


def _thread_grid(threads: int, regs: int):
    ti = thread_index(threads=threads)
    w = ti.warp[:, None]
    g = ti.quad[:, None]
    q = ti.lane_in_quad[:, None]
    e = np.arange(regs)[None, :]
    return w, g, q, e


@functools.lru_cache(maxsize=256)
def _accumulator(shape: str, tiles: tuple[int, int]) -> Layout:
    s = parse_shape(shape)
    mma_m, mma_n = tiles
    v = s.n // 2 if s.kind == "wgmma" else 4  # registers per instruction tile
    w, g, q, e = _thread_grid(s.threads, v * mma_m * mma_n)
    vi = e % v  # value inside the instruction tile
    m = (e // v) % mma_m
    n = e // (v * mma_m)
    row = 16 * w + g + 8 * ((vi >> 1) & 1) + s.m * m
    col = 8 * (vi >> 2) + 2 * q + (vi & 1) + s.n * n
    tile_txt = "" if tiles == (1, 1) else f" x tiles {mma_m}x{mma_n}"
    return Layout(name=f"{s.name} accumulator{tile_txt}", shape=s, operand="C",
                  threads=s.threads, rows=s.m * mma_m, cols=s.n * mma_n, row=row, col=col,
                  packing=1, tiles=tiles,
                  source=_SOURCE_WGMMA if s.kind == "wgmma" else _SOURCE_MMA)


def accumulator_layout(shape: str, *, tiles: tuple[int, int] = (1, 1)) -> Layout:
    """f32 accumulator (C/D) layout of ``shape``.

    Args:
        shape: ``"m64n{N}k16"`` / ``"m64n{N}k32"`` (wgmma, 128 threads, N/2 registers) or
            ``"m16n8k16"`` / ``"m16n8k32"`` (mma.sync, 32 threads, 4 registers).
        tiles: ``(MMA_M, MMA_N)``: the fragment of a tiled MMA that repeats the instruction tile
            MMA_M times down and MMA_N times across; register ``r = v + V (m + MMA_M n)``
            (V registers per instruction tile; CuTe's compact fragment order).
    Returns:
        a cached, read-only :class:`Layout`; ``layout.row``, ``layout.col`` are int32 arrays
        ``(128, N/2)`` for a single wgmma tile.
    Raises:
        ValueError: bad shape (N not a multiple of 8, N > 256, ...), tiles not positive ints,
            or a tiled matrix of more than ``MAX_FRAGMENT_ELEMENTS`` (2^22) elements.
    Source: module docstring; device check in ``simulator/data/device/hw_layouts.npz``.
    """
    s = parse_shape(shape)
    return _accumulator(s.name, _check_tiles(tiles, s))


#: largest tiled fragment (matrix elements) a layout is built for: 2^22, e.g. 2048 x 2048, so
#: that a mistyped ``tiles`` fails at once instead of exhausting memory
MAX_FRAGMENT_ELEMENTS = 1 << 22


def _check_tiles(tiles, shape: MmaShape | None = None) -> tuple[int, int]:
    try:
        parts = tuple(tiles)
    except TypeError:
        parts = ()
    if len(parts) != 2 or not all(is_int(t) and t >= 1 for t in parts):
        raise ValueError(f"tiles must be a pair of positive ints (MMA_M, MMA_N), got {tiles!r}")
    mma_m, mma_n = (int(t) for t in parts)
    if shape is not None and shape.m * mma_m * shape.n * mma_n > MAX_FRAGMENT_ELEMENTS:
        raise ValueError(f"tiles {tiles!r}: a {shape.name} accumulator tiled {mma_m} x {mma_n} is "
                         f"a {shape.m * mma_m} x {shape.n * mma_n} matrix; at most "
                         f"{MAX_FRAGMENT_ELEMENTS:,} elements are supported")
    return mma_m, mma_n


@functools.lru_cache(maxsize=64)
def _a_operand(shape: str) -> Layout:
    s = parse_shape(shape)
    elems = 8 if s.k == 16 else 16
    w, g, q, e = _thread_grid(s.threads, elems)
    if s.k == 16:
        row = 16 * w + g + 8 * ((e >> 1) & 1)
        col = 2 * q + (e & 1) + 8 * (e >> 2)
    else:
        row = 16 * w + g + 8 * ((e >> 2) & 1)
        col = 4 * q + (e & 3) + 16 * (e >> 3)
    dt = "bf16/f16" if s.k == 16 else "e4m3/e5m2"
    name = (f"m64nNk{s.k} A operand in registers ({dt})" if s.kind == "wgmma"
            else f"{s.name} A operand ({dt})")
    return Layout(name=name, shape=s, operand="A", threads=s.threads, rows=s.m, cols=s.k,
                  row=row, col=col, packing=32 // (16 if s.k == 16 else 8),
                  source=_SOURCE_WGMMA if s.kind == "wgmma" else _SOURCE_MMA)


def a_operand_layout(shape: str) -> Layout:
    """Register layout of the A operand (M x K) of wgmma with A in registers, or of mma.sync.

    Args:
        shape: ``"m64n{N}k16"`` / ``"m64n{N}k32"`` (the A fragment does not depend on N; N is
            still validated) or ``"m16n8k16"`` / ``"m16n8k32"``.
    Returns:
        :class:`Layout` with one entry per element: 8 (k16, 2 per 32-bit register) or 16 (k32, 4
        per register); rows x cols = 64 x K (wgmma) or 16 x K (mma.sync).
    Raises:
        ValueError: bad shape.
    """
    s = parse_shape(shape)
    return _a_operand(f"m{s.m}n{8 if s.kind == 'wgmma' else s.n}k{s.k}")


@functools.lru_cache(maxsize=8)
def _b_operand(shape: str) -> Layout:
    s = parse_shape(shape)
    elems = 4 if s.k == 16 else 8
    _, g, q, e = _thread_grid(WARP_SIZE, elems)
    if s.k == 16:
        row = 2 * q + (e & 1) + 8 * (e >> 1)
    else:
        row = 4 * q + (e & 3) + 16 * (e >> 2)
    col = np.broadcast_to(g, row.shape)
    return Layout(name=f"{s.name} B operand", shape=s, operand="B", threads=WARP_SIZE,
                  rows=s.k, cols=8, row=row, col=col, packing=32 // (16 if s.k == 16 else 8),
                  source=_SOURCE_MMA)


def b_operand_layout(shape: str) -> Layout:
    """Register layout of the mma.sync B operand (K x 8): ``k = 2q + (e&1) + 8(e>>1)`` (k16) or
    ``k = 4q + (e&3) + 16(e>>2)`` (k32), ``n = g``.

    Raises:
        ValueError: not an mma.sync shape (wgmma reads B from shared memory only).
    """
    s = parse_shape(shape)
    if s.kind != "mma.sync":
        raise ValueError(f"shape {shape!r}: wgmma takes B from shared memory; a B register "
                         f"layout exists for mma.sync shapes m16n8k16 / m16n8k32 only")
    return _b_operand(s.name)


@dataclass(frozen=True, eq=False)
class RowColView:
    """The (nrow, ncol) per-thread view of an accumulator fragment (``convert_layout_acc_rowcol``).

    Attributes:
        layout: the accumulator :class:`Layout` it views.
        reg: int32 ``(nrow, ncol)``: fragment register of entry ``(mi, ni)`` (same for all
            threads). ``hopper/softmax.h`` loops ``for ni: for mi:`` (thread_reduce_) or
            ``for mi: for ni:`` (scale_apply_exp2, rescale_o) over it.
        row: int32 ``(threads, nrow)``: matrix row of ``mi`` for each thread.
        col: int32 ``(threads, ncol)``: matrix column of ``ni`` for each thread.
    """

    layout: Layout
    reg: np.ndarray
    row: np.ndarray
    col: np.ndarray

    @property
    def nrow(self) -> int:
        """Rows per thread (``kNRows`` of ``Softmax``: 2 * MMA_M)."""
        return self.reg.shape[0]

    @property
    def ncol(self) -> int:
        """Columns per thread (N/4 * MMA_N for wgmma, 2 * MMA_N for mma.sync)."""
        return self.reg.shape[1]

    def apply(self, values) -> np.ndarray:
        """Fragment ``[..., threads, registers]`` -> ``[..., threads, nrow, ncol]`` (a copy)."""
        v = self.layout.check_fragment(values)
        return v[..., self.reg]

    def row_values(self, per_thread) -> np.ndarray:
        """Row state held per thread ``[..., threads, nrow]`` (the same in every thread of a
        quad, as softmax.h's row_max / row_sum / scores_scale after the quad allreduce) ->
        ``[..., M]``, one value per matrix row (a copy).

        Raises:
            ValueError: trailing shape is not (threads, nrow).
        """
        v = np.asarray(per_thread)
        want = (self.layout.threads, self.nrow)
        if v.ndim < 2 or v.shape[-2:] != want:
            raise ValueError(f"per_thread: expected [..., {want[0]}, {want[1]}] for "
                             f"{self.layout.name}, got shape {v.shape}")
        rows = np.empty(v.shape[:-2] + (self.layout.shape.m * self.layout.tiles[0],), dtype=v.dtype)
        rows[..., self.row] = v
        return rows

    def unapply(self, tensor) -> np.ndarray:
        """``[..., threads, nrow, ncol]`` -> fragment ``[..., threads, registers]`` (a copy).

        Raises:
            ValueError: trailing shape is not (threads, nrow, ncol), or an ndarray subclass.
        """
        reject_subclass("row/col tensor", tensor, ValueError)
        t = np.asarray(tensor)
        want = (self.layout.threads, self.nrow, self.ncol)
        if t.ndim < 3 or t.shape[-3:] != want:
            raise ValueError(f"row/col tensor: expected [..., {want[0]}, {want[1]}, {want[2]}] "
                             f"for {self.layout.name}, got shape {t.shape}")
        out = np.empty(t.shape[:-2] + (self.layout.registers,), dtype=t.dtype)
        out[..., self.reg.ravel()] = t.reshape(t.shape[:-2] + (-1,))
        return out


@functools.lru_cache(maxsize=256)
def _rowcol(layout: Layout) -> RowColView:
    s = layout.shape
    mma_m, mma_n = layout.tiles
    if s.kind == "wgmma":
        nb = s.n // 8  # v2 extent
        mi = np.arange(2 * mma_m)[:, None]
        ni = np.arange(2 * nb * mma_n)[None, :]
        v1, m = mi % 2, mi // 2  # rows = (v1, m)
        v0, v2, n = ni % 2, (ni // 2) % nb, ni // (2 * nb)  # cols = (v0, v2, n)
        reg = v0 + 2 * v1 + 4 * v2 + (s.n // 2) * (m + mma_m * n)
    else:
        mi = np.arange(2 * mma_m)
        ni = np.arange(2 * mma_n)
        reg = (ni[None, :] % 2 + 2 * (mi[:, None] % 2)
               + 4 * (mi[:, None] // 2 + mma_m * (ni[None, :] // 2)))
    reg = reg.astype(np.int32)
    row = layout.row[:, reg[:, 0]]
    col = layout.col[:, reg[0, :]]
    # the view is only a view if every row of it is one matrix row and every column one column
    assert np.array_equal(layout.row[:, reg], np.broadcast_to(row[:, :, None],
                                                              (layout.threads,) + reg.shape))
    assert np.array_equal(layout.col[:, reg], np.broadcast_to(col[:, None, :],
                                                              (layout.threads,) + reg.shape))
    return RowColView(layout=layout, reg=_frozen(reg), row=_frozen(row), col=_frozen(col))


def rowcol_view(layout: Layout | str, *, tiles: tuple[int, int] = (1, 1)) -> RowColView:
    """Row/column view of an accumulator fragment, as ``convert_layout_acc_rowcol`` builds it.

    Args:
        layout: an accumulator :class:`Layout`, or a shape string (then ``tiles`` applies).
    Returns:
        :class:`RowColView`; for one m64nNk16 tile ``nrow = 2``, ``ncol = N/4`` and
        ``reg[mi, ni] = (ni & 1) + 2 mi + 4 (ni >> 1)``.
    Raises:
        ValueError: the layout is not an accumulator layout.
    Source: FlashAttention-3 hopper/utils.h ``convert_layout_acc_rowcol`` (SM90 and SM80
    branches) applied to CuTe's accumulator fragment layouts; see the module docstring.
    """
    if isinstance(layout, str):
        layout = accumulator_layout(layout, tiles=tiles)
    if not isinstance(layout, Layout) or layout.operand != "C":
        raise ValueError(f"rowcol_view needs an accumulator layout, got {layout!r}")
    return _rowcol(layout)
