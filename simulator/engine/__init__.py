"""Which engine evaluates the hot loops: the NumPy model (the readable specification) or its
compiled twin (numba, same bits).

One switch for the whole process, and one for a block of a thread::

    from simulator import engine
    engine.set_engine("numba")        # or "numpy", or "auto" (the default)
    with engine.use_engine("numpy"):  # this thread's block (and the tasks its launches start)
        ...

``SIMULATOR_ENGINE=numpy|numba|auto`` in the environment sets the start value (it reaches
process-pool and dask workers too). ``"auto"`` takes the compiled path when numba is installed
and the work is large enough that a first compile (a few seconds, once per machine) is a small
part of its NumPy time: a whole launch's (``flash.forward`` and ``flash.backward`` pick their
evaluator once, :func:`launch_compiled`), else the call's (``mma.gemm`` called directly); never
what ran before in the process. Small launches (the default ``python -m simulator run``) stay
on NumPy. Both engines give the same bits (``tests/test_engine*.py``): speed only.

This module never imports numba itself: the kernels (:mod:`.dotadd`, :mod:`.softmax`) are
imported, and compiled, on their first use.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import threading

import numpy as np

from ..gpus import DEFAULT_GPU
from .arguments import require_float32_array as _require_float32_array
from .arguments import rows3 as _rows3
from .sources import note_loaded as _note_loaded

# the package's own sources as imported, for the compiled kernels' cache stamp (.sources)
_note_loaded()

__all__ = ["ENGINES", "AUTO_MIN_WORK", "AUTO_MIN_ELEMENTS", "available", "decode_operand",
           "carry", "decoded_supported", "dot_add", "dot_add_decoded", "dot_add_supported",
           "launch_compiled", "launching", "pool_threads", "softmax_shaped",
           "ex2", "ex2_ffma_rows", "get_engine", "mark_compiled", "numba_dot_add", "numba_softmax",
           "serial_thread", "set_engine", "set_threads", "task_threads",
           "softmax_exp2", "softmax_row_max", "softmax_row_sum", "softmax_scale_rows",
           "use_engine", "wants_numba"]

ENGINES = ("auto", "numpy", "numba")
#: "auto" compiles a kernel for calls of at least this many products (multiply-adds or
#: elements): about 3 s of NumPy time for the dot-add, the order of one kernel's cold compile.
AUTO_MIN_WORK = 1 << 27
#: "auto" compiles an elementwise kernel (the softmax steps) for calls of at least this many
#: elements: about 2 s of NumPy time (some 100 ns per element and step), a cold compile's order.
AUTO_MIN_ELEMENTS = 1 << 24
_AUTO_MIN = {"softmax": AUTO_MIN_ELEMENTS}

_CALL_LOCK = threading.Lock()
_state = {"engine": None, "compiled": set(), "available": None}
#: per thread: ``setting`` of a :func:`use_engine` block or an executor task (:func:`carry`),
#: ``launch``: whether the launch running in it takes every call compiled under "auto"
_local = threading.local()


def _check(name) -> str:
    if name not in ENGINES:
        raise ValueError(f"engine: expected one of {ENGINES}, got {name!r}")
    if name == "numba" and not available():
        raise ValueError("engine: 'numba' needs the numba package (pip install numba)")
    return name


def available() -> bool:
    """Whether numba is installed (checked once, without importing it)."""
    if _state["available"] is None:
        _state["available"] = importlib.util.find_spec("numba") is not None
    return _state["available"]


def get_engine() -> str:
    """The engine setting the calling thread runs on now: ``"auto"``, ``"numpy"`` or
    ``"numba"`` (its :func:`use_engine` block's, an executor task's caller's, else the
    process's :func:`set_engine` / ``SIMULATOR_ENGINE``).

    Raises:
        ValueError: ``SIMULATOR_ENGINE`` holds another value.
    """
    block = getattr(_local, "setting", None)
    if block is not None:
        return block
    if _state["engine"] is None:
        env = os.environ.get("SIMULATOR_ENGINE", "auto").strip().lower() or "auto"
        if env not in ENGINES:
            raise ValueError(f"SIMULATOR_ENGINE: expected one of {ENGINES}, got {env!r}")
        _state["engine"] = "auto" if env == "numba" and not available() else env
    return _state["engine"]


def set_engine(name: str) -> str:
    """Set the engine for this process (a :func:`use_engine` block running in a thread keeps
    its own until it ends); returns the previous process setting.

    Raises:
        ValueError: ``name`` is not in :data:`ENGINES`, or ``"numba"`` without numba.
    """
    name = _check(name)
    try:
        previous = _state["engine"] if _state["engine"] is not None else get_engine()
    except ValueError:  # a bad SIMULATOR_ENGINE: the explicit setting replaces it
        previous = "auto"
    _state["engine"] = name
    return previous


@contextlib.contextmanager
def use_engine(name: str):
    """``with use_engine("numba"): ...``: the engine for a block of the calling thread (and
    the executor tasks and task threads its launches start, :func:`carry`); other threads
    keep theirs, and the previous setting is back after the block.

    Raises:
        ValueError: as :func:`set_engine`.
    """
    before = getattr(_local, "setting", None)
    _local.setting = _check(name)
    try:
        yield
    finally:
        _local.setting = before


def mark_compiled(kernel: str) -> None:
    """Record that ``kernel`` ran compiled in this process (a record only: "auto" decides by
    the work, never by what ran before)."""
    _state["compiled"].add(kernel)


def wants_numba(kernel: str, work: int) -> bool:
    """Whether a call of ``work`` products (``"dotadd"``) or elements (``"softmax"``) to
    ``kernel`` should take the compiled path."""
    name = get_engine()
    if name == "numpy":
        return False
    if name == "numba":
        return available()
    return available() and (getattr(_local, "launch", False)
                            or work >= _AUTO_MIN.get(kernel, AUTO_MIN_WORK))


def launch_compiled(work: int) -> bool:
    """Whether a launch of ``work`` products runs compiled, once for all its calls: under
    ``"auto"`` by ``work`` (:data:`AUTO_MIN_WORK`) or an enclosing :func:`launching` block's
    choice; ``work`` 0: what the setting (and an enclosing launch) alone takes."""
    return wants_numba("dotadd", work)


@contextlib.contextmanager
def launching(work: int):
    """``with launching(work): ...``: under ``"auto"``, every kernel call of the block (in this
    thread, and in tasks wrapped by :func:`carry`) takes the compiled engine when the whole
    launch has ``work`` >= :data:`AUTO_MIN_WORK` products, however small each call is (a
    forward's calls are one K/V block of a chunk of CTAs each: judged alone, they would all
    stay on NumPy). Nested launches keep the outer choice; an explicit ``"numpy"`` or
    ``"numba"`` setting always wins."""
    before = getattr(_local, "launch", False)
    _local.launch = before or (available() and work >= AUTO_MIN_WORK)
    try:
        yield
    finally:
        _local.launch = before


def carry(task):
    """``task`` for another thread or process of an executor (a picklable partial of a
    module-level ``task``), run there on the engine the calling thread runs: its setting
    (``"numpy"``, ``"numba"``) or, under ``"auto"``, its :func:`launching` choice, whatever
    the worker's own setting (a process pool started before :func:`set_engine`, dask's
    workers)."""
    name = get_engine()
    return functools.partial(_carried, None if name == "auto" else name,
                             bool(getattr(_local, "launch", False)), task)


def _carried(name, launch: bool, task, *args, **kwargs):
    before = getattr(_local, "setting", None), getattr(_local, "launch", False)
    _local.setting, _local.launch = name, launch
    try:
        return task(*args, **kwargs)
    finally:
        _local.setting, _local.launch = before


def _forget_in_child() -> None:
    """A forked child (a process pool's worker) starts with no block or launch of the
    parent's thread that forked it: its tasks get theirs from :func:`carry`."""
    _local.setting, _local.launch = None, False


def set_threads(n: int | None = None) -> int:
    """Threads of the compiled kernels' parallel loops (numba's pool): ``n``, or every core
    numba sees when None; returns the count now in force. Benchmarks pass 1. The count is
    the calling thread's; ``flash.backward``, and ``flash.forward`` where its chunks are large
    enough or its groups many enough (a causal launch's), run their chunks on up to that many
    threads (:func:`task_threads`).

    Raises:
        ValueError: ``n`` not a positive int, or numba missing.
    """
    if not available():
        raise ValueError("n: threads apply to the numba engine, and numba is not installed")
    import numba

    from . import launch  # noqa: F401  (sets numba's threading layer before its pool starts)

    if n is None:
        n = numba.config.NUMBA_NUM_THREADS
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive int, got {n!r}")
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    return numba.get_num_threads()


def task_threads(work: int) -> int:
    """Threads for the independent tasks of a launch of ``work`` products: numba's pool size
    (:func:`pool_threads`) where it runs compiled, else 1. Each runs the serial twins
    (:func:`serial_thread`): a kernel launch per K/V block of a few CTAs is too small to share."""
    return pool_threads() if wants_numba("dotadd", work) else 1


def pool_threads() -> int:
    """numba's pool size in the calling thread (:func:`set_threads`)."""
    import numba

    from . import launch  # noqa: F401  (sets numba's threading layer before its pool starts)

    return numba.get_num_threads()


def serial_thread() -> None:
    """Make the calling thread run the compiled kernels' serial twins (numba's pool size is
    per thread): the initializer of :func:`task_threads`' workers."""
    import numba

    numba.set_num_threads(1)


def _launch_lock():
    """The lock around a compiled call: numba's fork-safe workqueue pool takes one parallel
    launch at a time; a thread whose pool size is 1 runs the serial twins (no launch) and
    takes none, so task threads run side by side."""
    import numba

    return _CALL_LOCK if numba.get_num_threads() > 1 else contextlib.nullcontext()


def numba_dot_add(p, work: int) -> bool:
    """Whether ``simulator.mma`` should run a dot-add of ``work`` products with parameters
    ``p`` (a ``FusedDotAdd``) through :func:`dot_add`."""
    return wants_numba("dotadd", work) and dot_add_supported(p)


def dot_add_supported(p) -> bool:
    """Whether :func:`dot_add` evaluates the parameters ``p`` (a ``FusedDotAdd``)."""
    from . import dotadd

    return dotadd.supports(p)


def decoded_supported(p, kblock: int) -> bool:
    """Whether :func:`dot_add_decoded` evaluates the parameters ``p`` with k = ``kblock``
    (:func:`dot_add_supported`, one fused step per k-block: every wgmma family)."""
    if not dot_add_supported(p):
        return False
    from . import operands

    return operands.supports(p, kblock)


def dot_add(a64, b64, c, p, kblock: int):
    """The compiled chained fused dot-add (:func:`simulator.engine.dotadd.gemm`): A [..., M, K]
    and B [..., K, N] as float64 exact values or as the narrow operands (bf16, f16, e4m3,
    e5m2: decoded in the kernel's first pass), float32 C [..., M, N], K in sequential blocks of
    ``kblock``; returns float32 [..., M, N] with the NumPy engine's bits.

    Raises:
        ValueError: as :func:`simulator.engine.dotadd.gemm`.
    """
    from . import dotadd

    with _launch_lock():
        out = dotadd.gemm(a64, b64, c, p, kblock)
    mark_compiled("dotadd")
    return out


def decode_operand(x: np.ndarray, p, index=None):
    """A GEMM operand decoded once for :func:`dot_add_decoded`
    (:func:`simulator.engine.operands.decode`): ``x`` [R, rows, cols] narrow or float64,
    ``p`` the instruction's ``FusedDotAdd``, ``index`` [B] the entry each batch entry of the
    GEMM reads (default all R in order).

    Raises:
        ValueError: as :func:`simulator.engine.operands.decode`.
    """
    from . import operands

    return operands.decode(x, p, index)


def dot_add_decoded(a, b, c: np.ndarray, p, kblock: int, c_index=None) -> np.ndarray:
    """:func:`dot_add` on operands decoded once (:func:`decode_operand`), each batch entry
    reading the entries its index names (:func:`simulator.engine.operands.gemm`): float32
    [R, M, N] with :func:`dot_add`'s bits.

    Raises:
        ValueError: as :func:`simulator.engine.operands.gemm`.
    """
    from . import operands

    with _launch_lock():
        out = operands.gemm(a, b, c, p, kblock, c_index)
    mark_compiled("dotadd")
    return out


# ---- the forward's softmax steps (:mod:`.softmax`) ------------------------------------------------
def numba_softmax(x, rowcol: bool = True) -> bool:
    """Whether a softmax step on the array ``x`` should run compiled: the engine's choice for
    ``x.size`` elements and a shape the kernels take (:func:`softmax_shaped`)."""
    return softmax_shaped(x, rowcol) and wants_numba("softmax", x.size)


def softmax_shaped(x, rowcol: bool = True) -> bool:
    """Whether the softmax kernels take the array ``x``, whichever engine is set: a non-empty
    float32 ndarray (no subclass), scores ``[..., T, nrow, ncol]`` with T = 32 or 128 when
    ``rowcol``, else an O accumulator ``[..., rows, d]``."""
    if not (type(x) is np.ndarray and x.dtype == np.float32 and x.size > 0):
        return False
    return x.ndim >= 3 and x.shape[-3] in (32, 128) if rowcol else x.ndim >= 2


def _ex2_packed():
    """:mod:`.ex2_packed`, imported on first use (it imports numba)."""
    from . import ex2_packed

    return ex2_packed


def _launch(kernel, *args):
    with _launch_lock():
        kernel(*args)
    mark_compiled("softmax")


def softmax_row_max(scores: np.ndarray, prev) -> np.ndarray:
    """Compiled ``quad_allreduce(thread_reduce(scores, prev, op="max", zero_init=prev is None),
    "max")`` (:func:`simulator.engine.softmax.row_max`).

    Args:
        scores: float32 ``[..., T, nrow, ncol]``, T a multiple of 4, ncol >= 1.
        prev: float32 ``[..., T, nrow]`` (broadcasting against the scores' rows), or None for
            ``zero_init``.
    Returns:
        float32 ``[..., T, nrow]``, the NumPy model's bits.
    """
    from . import softmax

    s4 = np.ascontiguousarray(scores).reshape((-1,) + scores.shape[-3:])
    lead = scores.shape[:-1]
    out = np.empty(lead, dtype=np.float32)
    o3 = out.reshape(s4.shape[:-1])
    p3 = o3 if prev is None else _rows3(prev, lead)
    _launch(softmax.row_max, s4, p3, prev is None, o3, o3.view(np.uint32))
    return out


def softmax_exp2(scores: np.ndarray, scale, neg_max, table) -> np.ndarray:
    """Compiled ``ex2(ffma(scores, scale[..., None], neg_max[..., None], ftz=True))``
    (:func:`simulator.engine.softmax.scaled_exp2`).

    Args:
        scores: float32 ``[..., T, nrow, ncol]``.
        scale, neg_max: float32, broadcasting against ``[..., T, nrow]``.
        table: the int32 MUFU.EX2 table of the MUFU model (``MufuModel.ex2_table()``), or None: then
            only the FFMA is evaluated and the caller applies its ex2. The kernel reads the
            packed form of a MUFU model's own table (:func:`.ex2_packed.for_table`, built
            once) or, for any other table or one the packing cannot hold, the table itself.
    Returns:
        float32 of the scores' shape.
    Raises:
        TypeError: ``scores`` is not a float32 array of 3 or more dimensions, ``table`` not an
            array, or ``scale`` / ``neg_max`` not a float32 array or ``numpy.float32``.
        ValueError: ``table`` not MUFU.EX2's int32 [2^24]; ``scale`` / ``neg_max`` that do
            not broadcast to ``scores.shape[:-1]``.
    """
    from . import softmax

    _require_float32_array("scores", scores, min_ndim=3)
    if table is not None:
        if not isinstance(table, np.ndarray):
            raise TypeError(f"table: expected an int32 array or None, got {type(table).__name__}")
        if table.dtype != np.int32 or table.shape != (1 << 24,):
            raise ValueError(f"table: expected MUFU.EX2's int32 [{1 << 24}], got {table.dtype} "
                             f"{table.shape}")
        table = np.ascontiguousarray(table)
    lead = scores.shape[:-1]
    scale3, neg3 = _rows3(scale, lead, "scale"), _rows3(neg_max, lead, "neg_max")
    if scores.size == 0:
        return np.empty(scores.shape, dtype=np.float32)
    s4 = np.ascontiguousarray(scores).reshape((-1,) + scores.shape[-3:])
    out = np.empty(scores.shape, dtype=np.float32)
    o4 = out.reshape(s4.shape)
    packed = None if table is None else _ex2_packed().for_table(table)
    mode = (softmax.EX2_NONE if table is None else
            softmax.EX2_TABLE if packed is None else softmax.EX2_PACKED)
    bits, centres = packed if packed is not None else (_NO_BITS, _NO_CENTRES)
    _launch(softmax.scaled_exp2, s4, scale3, neg3,
            table if table is not None else _NO_TABLE, bits, centres, mode, o4,
            o4.view(np.uint32))
    return out


def softmax_step_ready(mufu: str) -> bool:
    """Whether :func:`softmax_step` runs for the MUFU model ``mufu`` (a GPU key or
    ``"ideal"``, as :func:`simulator.numerics.mufu.model` takes it): its MUFU.EX2 table exists
    (not ``"ideal"``) and packs (:func:`simulator.engine.ex2_packed.pack`)."""
    return _ex2_packed().for_model(mufu) is not None


def softmax_step(s: np.ndarray, positions: np.ndarray, scale, row_max: np.ndarray,
                 row_sum: np.ndarray, first: bool, check_inf: bool, max_offset: int, fmt: str,
                 emin: int, mufu: str = DEFAULT_GPU):
    """One K/V block's softmax step of the forward compiled in one call
    (:func:`simulator.engine.fused_softmax.softmax_step`): ``Softmax.max_get_scale``, then
    ``online_softmax``, then P's ``convert`` to ``fmt`` and its decode as the P V GEMM's A.

    Args:
        s: float32 [G, W, M, N]: each warpgroup's scores in matrix order.
        positions: int [T, nrow, ncol]: the position in the M x N tile of each thread's
            register (``rowcol_view``'s ``row * N + col``).
        scale: float32 broadcasting against [G, W] (scale_log2 per warpgroup).
        row_max, row_sum: float32 [G, W, T, nrow], the state before the block (not changed).
        first, check_inf, max_offset: as ``Softmax``'s steps (Max_offset 0 or 8).
        fmt: P's format (``"bf16"``, ``"f16"``, ``"e4m3"``, ``"e5m2"``), converted as
            ``simulator.numerics.convert``'s default form.
        emin: the P V instruction's operand exponent floor (``FusedDotAdd.emin``).
        mufu: the MUFU model (a GPU key); :func:`softmax_step_ready` must hold for it.
    Returns:
        ``(row_max, row_sum, scores_scale, p)``: the new state and scores_scale float32
        [G, W, T, nrow], and P as an :class:`simulator.engine.operands.Decoded` [G, W * M, N].
    Raises:
        ValueError: arguments of the wrong kind or shape, positions that are not each tile
            position once or a thread count not a multiple of 4, a Max_offset other than 0
            or 8, an unknown ``fmt``, ``emin`` not an int in [-126, 127], a MUFU model whose
            table does not pack.
    """
    from . import fused_softmax

    packed = _ex2_packed().for_model(mufu)
    if packed is None:
        raise ValueError(f"mufu: {mufu!r} has no packed MUFU.EX2 table for the compiled step")
    with _launch_lock():
        out = fused_softmax.block_step(s, positions, scale, row_max, row_sum, first, check_inf,
                                       max_offset, fmt, emin, packed)
    mark_compiled("softmax")
    return out


def backward_ds(p: np.ndarray, dp: np.ndarray, dpsum: np.ndarray, dtanh, fmt: str, emin: int):
    """The backward's dS step of an m_block compiled in one call
    (:func:`simulator.engine.backward_steps.ds_step`): ``dS = P (dP - dPsum)`` (FADD.FTZ of the
    negated dPsum, FMUL.FTZ; times ``dtanh`` with softcap), P and dS converted to ``fmt``
    and decoded as the gradient GEMMs' A operands.

    Args:
        p, dp: float32 [A, M, N]; dpsum: float32 [A, M] (one per row); dtanh: float32
            [A, M, N] or None (no softcap).
        fmt: the input format (``"bf16"``, ``"f16"``, ...), converted as
            ``simulator.numerics.convert``'s default form; emin: the GEMMs' operand exponent
            floor (``FusedDotAdd.emin``).
    Returns:
        ``(P^T, dS, dS^T)``: :class:`simulator.engine.operands.Decoded` [A, N, M], [A, M, N],
        [A, N, M], with ``convert`` + :func:`decode_operand`'s values and codes.
    Raises:
        ValueError: arguments of the wrong kind or shape, an unknown ``fmt``, ``emin`` not an
            int in [-126, 127].
    """
    from . import backward_steps as _ds

    with _launch_lock():
        out = _ds.run(p, dp, dpsum, dtanh, fmt, emin)
    mark_compiled("softmax")
    return out


_NO_BITS = np.zeros(1, dtype=np.uint32)
_NO_CENTRES = np.zeros(1, dtype=np.float32)


def ex2_ffma_rows(x: np.ndarray, scale, neg, mufu: str = DEFAULT_GPU) -> np.ndarray:
    """Compiled ``ex2(ffma(x, scale[..., None], neg[..., None], ftz=True), mufu)``
    (FFMA.FTZ then MUFU.EX2, :func:`simulator.engine.softmax.scaled_exp2`): the backward's
    ``P = ex2(S * scale_log2 - LSE_log2)``.

    Args:
        x: float32 ``[..., n]``.
        scale, neg: float32, broadcasting against ``x.shape[:-1]`` (one value per row).
        mufu: the MUFU model, a GPU key (its verified table) or ``"ideal"``.
    Returns:
        float32 of x's shape, the NumPy model's bits.
    Raises:
        TypeError: ``x`` not a float32 array of 1 or more dimensions, ``scale`` or ``neg``
            not a float32 array or ``numpy.float32`` (nothing is cast).
        ValueError: ``scale`` / ``neg`` that do not broadcast to x's rows (named there
            ``scale`` / ``neg_max``, as :func:`softmax_exp2` takes them).
    """
    from ..numerics.mufu import ex2, model

    _require_float32_array("x", x, min_ndim=1)
    per_row = [_require_float32_array(n, v)[..., None] for n, v in (("scale", scale), ("neg", neg))]
    table = model(mufu).ex2_table()
    x2 = x if x.ndim >= 2 else x[None]
    rows = np.ascontiguousarray(x2).reshape(x2.shape[:-1] + (1, x2.shape[-1]))
    p = softmax_exp2(rows, *per_row, table)  # its checks broadcast them to x's rows
    p = p.reshape(x.shape)
    return p if table is not None else ex2(p, mufu)


def ex2(x, mufu: str = DEFAULT_GPU) -> np.ndarray:
    """Compiled MUFU.EX2 of the GPU ``mufu`` (``simulator.numerics.mufu.ex2(x, mufu)``, ``.ftz``) on
    a float32 array of any shape or a ``numpy.float32``, from the packed table
    (:func:`simulator.engine.softmax.ex2_rows`); returns a float32 array of x's shape with the
    NumPy model's bits.

    Raises:
        TypeError: ``x`` is not float32, or is an ndarray subclass (as the NumPy model).
    """
    from ..numerics import mufu as _mufu
    from . import softmax

    x = _require_float32_array("x", x)
    table = _mufu.model(mufu).ex2_table()
    if table is None:  # "ideal": correctly rounded, no table to compile from
        return _mufu.ex2(x, mufu)
    packed = _ex2_packed().for_table(table)
    if packed is None or x.size == 0:  # a table the packing cannot hold (or no element)
        return softmax_exp2(np.ascontiguousarray(x).reshape(1, -1, 1, 1), np.float32(1),
                            np.float32(0), table).reshape(x.shape)
    # rows of 2^14 where they divide the size (rows are what the parallel kernel shares out)
    rows = (-1, 1 << 14) if x.size % (1 << 14) == 0 else (1, -1)
    x2 = np.ascontiguousarray(x).reshape(rows)
    out = np.empty(x2.shape, dtype=np.uint32)
    _launch(softmax.ex2_rows, x2, *packed, out)
    return out.view(np.float32).reshape(x.shape)


def softmax_row_sum(p: np.ndarray, sum_scale, prev) -> np.ndarray:
    """Compiled thread-local row_sum of ``online_softmax`` (:func:`simulator.engine.softmax.
    row_sums`): ``p[0] + p[1] + ...`` when ``prev`` is None, else ``ffma(sum_scale, prev, p[0])
    + p[1] + ...``.

    Args:
        p: float32 ``[..., T, nrow, ncol]``.
        sum_scale, prev: float32 broadcasting against ``[..., T, nrow]`` (both None, or both
            given).
    Returns:
        float32 ``[..., T, nrow]``.
    """
    from . import softmax

    p4 = np.ascontiguousarray(p).reshape((-1,) + p.shape[-3:])
    lead = p.shape[:-1]
    out = np.empty(lead, dtype=np.float32)
    o3 = out.reshape(p4.shape[:-1])
    first = prev is None
    _launch(softmax.row_sums, p4, o3 if first else _rows3(sum_scale, lead),
            o3 if first else _rows3(prev, lead), first, o3, o3.view(np.uint32))
    return out


def softmax_scale_rows(acc: np.ndarray, scale) -> np.ndarray:
    """Compiled ``fmul(acc, scale[..., None], ftz=True)`` (:func:`simulator.engine.softmax.
    scale_rows`): acc float32 ``[..., rows, d]``, scale float32 broadcasting against
    ``[..., rows]``; returns float32 of acc's shape."""
    from . import softmax

    a3 = np.ascontiguousarray(acc).reshape((-1,) + acc.shape[-2:])
    s2 = _rows3(scale, acc.shape[:-1]).reshape(a3.shape[:-1])
    out = np.empty(acc.shape, dtype=np.float32)
    o3 = out.reshape(a3.shape)
    _launch(softmax.scale_rows, a3, s2, o3, o3.view(np.uint32))
    return out


_NO_TABLE = np.zeros(1, dtype=np.int32)
_NO_TABLE.setflags(write=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
