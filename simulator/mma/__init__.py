"""Tensor-core arithmetic of Hopper: wgmma and mma.sync, bit for bit, per GPU (``gpu=``).

Entry points (PTX's own shape/type spelling):

    wgmma("m64n64k16.f32.bf16.bf16", A, B, C)       # one warpgroup instruction
    mma_sync("m16n8k16.f32.bf16.bf16.f32", A, B, C)  # one warp instruction
    gemm(A, B, C, instruction="wgmma.m64n64k16.f32.bf16.bf16")  # chained over K

A: [..., M, K] and B: [..., K, N] as ml_dtypes.bfloat16, numpy.float16,
ml_dtypes.float8_e4m3fn or ml_dtypes.float8_e5m2 arrays; C: [..., M, N] float32; leading axes
broadcast. The arithmetic is the fused dot-add of :mod:`simulator.mma.fused` with the
parameters of :mod:`simulator.mma.instructions`, measured on the H200
(``simulator/data/device/mma_report.json``; findings in ``docs/mma.md``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from .. import engine
from ..gpus import DEFAULT_GPU, get_gpu
from ..numerics import FORMATS, to_float32
from ..numerics.bits import reject_subclass
from .fused import FusedDotAdd, fused_dot_add
from .instructions import EXACT, PARAMETER_SETS, PARAMS, params_for

__all__ = ["EXACT", "PARAMETER_SETS", "PARAMS", "Instruction", "dot_add", "gemm", "instruction_for",
           "mma_sync", "mma_sync_fragments", "parse", "wgmma", "wgmma_fragments"]

_WGMMA_RE = re.compile(r"m64n([1-9]\d*)k(16|32)\.f32\.(bf16|f16|e4m3|e5m2)\.(bf16|f16|e4m3|e5m2)")
_MMA_RE = re.compile(r"m16n8k(16|32)\.f32\.(bf16|f16|e4m3|e5m2)\.(bf16|f16|e4m3|e5m2)\.f32")
SUPPORTED = (
    "wgmma m64nNk16.f32.{bf16,f16}.<same> (N = 8..256, step 8); "
    "wgmma m64nNk32.f32.{e4m3,e5m2}.<same>; "
    "mma.sync m16n8k16.f32.{bf16,f16}.<same>.f32; mma.sync m16n8k32.f32.{e4m3,e5m2}.<same>.f32"
)
# Chunk size (elements of the [rows, N, K+1] term tensor) that bounds the working memory.
_TERMS_PER_CHUNK = 1 << 24


@dataclass(frozen=True)
class Instruction:
    """A parsed tensor-core instruction.

    Attributes:
        kind: ``"wgmma"`` or ``"mma_sync"``.
        m, n, k: the shape.
        fmt: operand format (A and B have the same one).
        params: the fused dot-add parameters measured for this family.
        exact: whether the model reproduced every recorded device output of the family.
    """

    kind: str
    m: int
    n: int
    k: int
    fmt: str
    params: FusedDotAdd
    exact: bool

    @property
    def ptx(self) -> str:
        if self.kind == "wgmma":
            return f"wgmma.mma_async.sync.aligned.m64n{self.n}k{self.k}.f32.{self.fmt}.{self.fmt}"
        return f"mma.sync.aligned.m16n8k{self.k}.row.col.f32.{self.fmt}.{self.fmt}.f32"


def parse(kind: str, shape: str, gpu=DEFAULT_GPU) -> Instruction:
    """Parse a PTX shape/type string of ``kind`` (``"wgmma"`` or ``"mma_sync"``) into the
    instruction as ``gpu`` (a :mod:`simulator.gpus` key or record) executes it.

    Raises:
        ValueError: unsupported string, listing the supported ones; an unknown GPU or one
            without measured parameters for the family (:func:`.instructions.params_for`).
    """
    if kind not in ("wgmma", "mma_sync"):
        raise ValueError(f"kind: expected 'wgmma' or 'mma_sync', got {kind!r}")
    regex = _WGMMA_RE if kind == "wgmma" else _MMA_RE
    match = regex.fullmatch(shape) if isinstance(shape, str) else None
    if kind == "wgmma" and match:
        n, k, fa, fb = int(match[1]), int(match[2]), match[3], match[4]
        m = 64
        ok = n % 8 == 0 and 8 <= n <= 256
    elif kind == "mma_sync" and match:
        m, n, k, fa, fb = 16, 8, int(match[1]), match[2], match[3]
        ok = True
    else:
        raise ValueError(f"unsupported {kind} shape/type {shape!r}; supported: {SUPPORTED}")
    half = fa in ("bf16", "f16")
    if not ok or fa != fb or (half and k != 16) or (not half and k != 32):
        raise ValueError(f"unsupported {kind} shape/type {shape!r}; supported: {SUPPORTED} "
                         "(mixed A/B types are not probed on the device yet)")
    return Instruction(kind, m, n, k, fa, params_for(kind, fa, gpu), (kind, fa) in EXACT)


def _operand(name: str, x, fmt: str, decode: bool = True) -> np.ndarray | None:
    """The exact float64 values of operand ``x`` (None with ``decode=False``: checks only).

    Raises:
        TypeError: not an array of the format's dtype. ValueError: fewer than 2 axes.
    """
    dtype = FORMATS[fmt].dtype
    reject_subclass(name, x)
    if not isinstance(x, np.ndarray) or x.dtype != dtype:
        got = x.dtype if isinstance(x, np.ndarray) else type(x).__name__
        raise TypeError(f"{name}: expected an array of dtype {dtype} for {fmt} operands, got {got}")
    if x.ndim < 2:
        raise ValueError(f"{name}: expected shape [..., rows, cols], got {x.shape}")
    if not decode:
        return None
    if dtype.itemsize == 1:  # FP8: the 256 values of to_float32, looked up (same bits, faster)
        return _byte_values(fmt)[x.view(np.uint8)]
    return to_float32(x).astype(np.float64)


@functools.cache
def _byte_values(fmt: str) -> np.ndarray:
    """float64 ``to_float32`` of every bit pattern of a 1-byte format (read-only)."""
    table = to_float32(np.arange(256, dtype=np.uint8).view(FORMATS[fmt].dtype)).astype(np.float64)
    table.setflags(write=False)
    return table


def _accumulator(c, shape_mn: tuple[int, int]) -> np.ndarray:
    if c is None:
        return np.zeros(shape_mn, dtype=np.float32)
    reject_subclass("C", c)
    if not isinstance(c, np.ndarray) or c.dtype != np.float32:
        got = c.dtype if isinstance(c, np.ndarray) else type(c).__name__
        raise TypeError(f"C: expected a float32 array, got {got}")
    if c.ndim < 2 or c.shape[-2:] != shape_mn:
        raise ValueError(f"C: expected shape [..., {shape_mn[0]}, {shape_mn[1]}], got {c.shape}")
    return c


def dot_add(a64: np.ndarray, b64: np.ndarray, c: np.ndarray, p: FusedDotAdd, *,
            compiled: bool | None = None) -> np.ndarray:
    """``fused(a64 @ b64 + c)`` with the parameters ``p``: one instruction's k-steps
    (:func:`simulator.mma.fused.fused_dot_add`) over broadcast leading axes, in row chunks
    that bound the working memory (:data:`_TERMS_PER_CHUNK` terms).

    Args:
        a64: float64 [..., M, K] exact operand values (decoded bf16 / f16 / e4m3 / e5m2, or any
            values the instruction's alignment and truncation then apply to, e.g. an unrounded P).
        b64: float64 [..., K, N].
        c: float32 [..., M, N] accumulator.
        p: the instruction family's parameters (``Instruction.params``).
        compiled: keyword-only, as :func:`simulator.mma.fused.fused_dot_add`'s (None: the
            engine setting decides).
    Returns:
        float32 [..., M, N]; :func:`gemm` chains it over the k-steps of a longer K.
    Raises:
        ValueError: the leading (batch) shapes do not broadcast; ``p.k_steps`` does not cover K.
    Source: the fused dot-add measured on the H200 (``simulator/data/device/mma_report.json``).
    """
    try:
        lead = np.broadcast_shapes(a64.shape[:-2], b64.shape[:-2], c.shape[:-2])
    except ValueError:
        raise ValueError(f"A, B, C: leading (batch) shapes {a64.shape[:-2]}, {b64.shape[:-2]}, "
                         f"{c.shape[:-2]} do not broadcast") from None
    m, k = a64.shape[-2:]
    n = b64.shape[-1]
    a64 = np.broadcast_to(a64, lead + (m, k))
    b64 = np.broadcast_to(b64, lead + (k, n))
    c = np.broadcast_to(c, lead + (m, n))
    per_row = max(1, int(np.prod(lead, dtype=np.int64)) * n * (k + 1))  # every batch entry's
    rows = max(1, _TERMS_PER_CHUNK // per_row)
    out = np.empty(lead + (m, n), dtype=np.float32)
    for r0 in range(0, m, rows):  # a few chunks per call: bounds memory, not a per-element loop
        out[..., r0:r0 + rows, :] = fused_dot_add(a64[..., r0:r0 + rows, :], b64,
                                                   c[..., r0:r0 + rows, :], p, compiled=compiled)
    return out


def _one(kind: str, shape: str, A, B, C, gpu) -> np.ndarray:
    ins = parse(kind, shape, gpu)
    _operand("A", A, ins.fmt, decode=False)
    _operand("B", B, ins.fmt, decode=False)
    if A.shape[-2:] != (ins.m, ins.k):
        raise ValueError(f"A: expected shape [..., {ins.m}, {ins.k}] for {shape}, got {A.shape}")
    if B.shape[-2:] != (ins.k, ins.n):
        raise ValueError(f"B: expected shape [..., {ins.k}, {ins.n}] for {shape}, got {B.shape}")
    c = _accumulator(C, (ins.m, ins.n))
    if engine.numba_dot_add(ins.params, A.size * ins.n):  # the narrow operands, decoded there
        return engine.dot_add(A, B, c, ins.params, ins.k)
    return dot_add(_operand("A", A, ins.fmt), _operand("B", B, ins.fmt), c, ins.params)


def wgmma(shape: str, A, B, C=None, *, gpu=DEFAULT_GPU) -> np.ndarray:
    """One ``wgmma.mma_async`` (D = A B + C with scale-d = 1) of a warpgroup, as matrices.

    Args:
        shape: e.g. ``"m64n64k16.f32.bf16.bf16"`` or ``"m64n128k32.f32.e4m3.e4m3"``.
        A: [..., 64, K] operand array (bf16 / f16 / e4m3 / e5m2, matching ``shape``).
        B: [..., K, N] operand array of the same format.
        C: [..., 64, N] float32 accumulator, or None for zeros (scale-d = 0 gives the same).
        gpu: keyword-only: the GPU (:mod:`simulator.gpus`) whose tensor cores compute it.
    Returns:
        D: float32 [..., 64, N].
    Raises:
        ValueError: unsupported shape string or operand shapes, an unknown GPU;
        TypeError: operand dtypes.
    """
    return _one("wgmma", shape, A, B, C, gpu)


def mma_sync(shape: str, A, B, C=None, *, gpu=DEFAULT_GPU) -> np.ndarray:
    """One ``mma.sync.aligned`` of a warp (row.col), as matrices.

    Args:
        shape: ``"m16n8k16.f32.bf16.bf16.f32"``, ``"m16n8k16.f32.f16.f16.f32"``,
            ``"m16n8k32.f32.e4m3.e4m3.f32"`` or ``"m16n8k32.f32.e5m2.e5m2.f32"``.
        A: [..., 16, K]; B: [..., K, 8]; C: [..., 16, 8] float32 or None.
        gpu: keyword-only, as for :func:`wgmma`.
    Returns:
        D: float32 [..., 16, 8]. The fp8 shapes run as two chained 16-product steps split by
        k % 4 (docs/mma.md, "FP8 through mma.sync"), C added last with round-to-nearest.
    Raises:
        ValueError, TypeError: as for :func:`wgmma`.
    """
    return _one("mma_sync", shape, A, B, C, gpu)


def instruction_for(instruction, gpu=DEFAULT_GPU) -> Instruction:
    """``instruction`` as an :class:`Instruction`: one already parsed passes through, a string
    ``"wgmma.<shape>"`` / ``"mma_sync.<shape>"`` is parsed for ``gpu`` (once per distinct
    string and GPU).

    Raises:
        ValueError: anything else, or an unsupported string, naming the argument.
    """
    if isinstance(instruction, Instruction):
        return instruction
    if not isinstance(instruction, str):
        raise ValueError(f"instruction: expected an Instruction or a string 'wgmma.<shape>' or "
                         f"'mma_sync.<shape>' (e.g. 'wgmma.m64n64k16.f32.bf16.bf16'), got "
                         f"{type(instruction).__name__}")
    return _parse_named(instruction, get_gpu(gpu))


@functools.lru_cache(maxsize=256)
def _parse_named(instruction: str, gpu) -> Instruction:
    kind, _, shape = instruction.partition(".")
    if kind not in ("wgmma", "mma_sync"):
        raise ValueError(f"instruction: expected 'wgmma.<shape>' or 'mma_sync.<shape>', got {instruction!r}")
    try:
        return parse(kind, shape, gpu)
    except ValueError as exc:
        raise ValueError(f"instruction: {exc}") from None


def gemm(A, B, C=None, *, instruction: Instruction | str = "wgmma.m64n64k16.f32.bf16.bf16",
         gpu=DEFAULT_GPU, compiled: bool | None = None) -> np.ndarray:
    """A GEMM on tensor cores: K split into the instruction's k-steps, issued in ascending k.

    The result of each k-step is the C of the next (the accumulator stays in registers, as in
    FlashAttention-3's QK^T and PV GEMMs). M and N tiling does not change the arithmetic of an
    output element, so any M, N is accepted.

    Args:
        A: [..., M, K]; B: [..., K, N] (same format); C: [..., M, N] float32 or None.
        instruction: an :class:`Instruction` (from :func:`parse`, resolved once by callers that
            issue many GEMMs, as ``flash.forward``) or its string ``"wgmma.<shape>"`` /
            ``"mma_sync.<shape>"``; only k and the format matter.
        gpu: the GPU (:mod:`simulator.gpus`) a string ``instruction`` is parsed for (an
            :class:`Instruction` carries its own parameters).
        compiled: None (the engine setting decides for this call's work:
            :mod:`simulator.engine`), True (the compiled dot-add where it takes the family) or
            False (the NumPy evaluation): a launch's evaluator decides once and passes it.
            The bits are the same.
    Returns:
        float32 [..., M, N].
    Raises:
        ValueError: K not a multiple of the instruction's k, bad instruction, shape mismatch.
        TypeError: operand dtypes.
    """
    ins = instruction_for(instruction, gpu)
    _operand("A", A, ins.fmt, decode=False)
    _operand("B", B, ins.fmt, decode=False)
    m, k = A.shape[-2:]
    if B.shape[-2] != k:
        raise ValueError(f"B: expected shape [..., {k}, N] to match A's K = {k}, got {B.shape}")
    if k % ins.k:
        raise ValueError(f"A: K = {k} is not a multiple of the instruction's k = {ins.k}")
    d = _accumulator(C, (m, B.shape[-1]))
    if compiled is None:
        compiled = engine.numba_dot_add(ins.params, A.size * B.shape[-1])
    if k and compiled and engine.dot_add_supported(ins.params):
        return engine.dot_add(A, B, d, ins.params, ins.k)  # decoded there; every k-step at once
    a64, b64 = _operand("A", A, ins.fmt), _operand("B", B, ins.fmt)
    for k0 in range(0, k, ins.k):  # the kernel's sequential k-steps (K / k of them)
        d = dot_add(a64[..., k0:k0 + ins.k], b64[..., k0:k0 + ins.k, :], d, ins.params,
                    compiled=compiled)
    return d


def _same_layout(x, y) -> bool:
    return x is y or (x.row.shape == y.row.shape and np.array_equal(x.row, y.row)
                      and np.array_equal(x.col, y.col))


def _fragment_call(kind: str, shape: str, A, B, C, gpu):
    from ..hw import Fragment, a_operand_layout, accumulator_layout

    ins = parse(kind, shape, gpu)
    geometry = f"m{ins.m}n{ins.n}k{ins.k}"
    acc = accumulator_layout(geometry)
    if isinstance(A, Fragment):
        if not _same_layout(A.layout, a_operand_layout(geometry)):
            raise ValueError(f"A: fragment layout {A.layout!r} is not the A-operand layout of {geometry}")
        A = A.to_matrix()
    c = None
    if C is not None:
        if not isinstance(C, Fragment) or not _same_layout(C.layout, acc):
            raise ValueError(f"C: expected a Fragment in the accumulator layout of {geometry}")
        c = C.to_matrix()
    return Fragment.from_matrix(_one(kind, shape, A, B, c, gpu), acc)


def wgmma_fragments(shape: str, A, B, C=None, *, gpu=DEFAULT_GPU):
    """:func:`wgmma` on register fragments, as a warpgroup holds them.

    Args:
        shape: as for :func:`wgmma`.
        A: a :class:`simulator.hw.Fragment` in ``a_operand_layout("m64nNkK")`` (A from
            registers; data [..., 128, regs] of the operand dtype) or a matrix [..., 64, K]
            (A from shared memory).
        B: matrix [..., K, N] (B always comes from shared memory).
        C: a Fragment in ``accumulator_layout("m64nNkK")`` (float32 [..., 128, N/2]) or None.
        gpu: keyword-only, as for :func:`wgmma`.
    Returns:
        D as a Fragment in the accumulator layout.
    Raises:
        ValueError: a fragment in the wrong layout; otherwise as :func:`wgmma`.
    """
    return _fragment_call("wgmma", shape, A, B, C, gpu)


def mma_sync_fragments(shape: str, A, B, C=None, *, gpu=DEFAULT_GPU):
    """:func:`mma_sync` on a warp's fragments (32 threads); arguments as for
    :func:`wgmma_fragments` with the m16n8k16 / m16n8k32 layouts."""
    return _fragment_call("mma_sync", shape, A, B, C, gpu)
