"""Which engine evaluates the hot loops: the NumPy model (the readable specification) or its
compiled twin (numba, same bits).

One switch for the whole process::

    from simulator import engine
    engine.set_engine("numba")        # or "numpy", or "auto" (the default)
    with engine.use_engine("numpy"):  # for a block
        ...

``SIMULATOR_ENGINE=numpy|numba|auto`` in the environment sets the start value (it reaches
process-pool and dask workers too). ``"auto"`` takes the compiled path when numba is installed
and the call is large enough that a first compile (a few seconds, once per machine: numba's
on-disk cache keeps the machine code) is a small part of its NumPy time (the rule depends on
the call only, never on what ran before in the process); small calls (the default ``python -m simulator run``)
stay on NumPy, so the cold start does not grow. Both engines give the same bits
(``tests/test_engine*.py``), so the choice changes speed only.

This module never imports numba itself: the kernels (:mod:`.dotadd`, :mod:`.softmax`) are
imported, and compiled, on their first use.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading

__all__ = ["ENGINES", "AUTO_MIN_WORK", "available", "dot_add", "get_engine", "mark_compiled",
           "numba_dot_add", "set_engine", "set_threads", "use_engine", "wants_numba"]

ENGINES = ("auto", "numpy", "numba")
#: "auto" compiles a kernel for calls of at least this many products (multiply-adds or
#: elements): about 3 s of NumPy time for the dot-add, the order of one kernel's cold compile.
AUTO_MIN_WORK = 1 << 27

_CALL_LOCK = threading.Lock()
_state = {"engine": None, "compiled": set(), "available": None}


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
    """The engine setting now: ``"auto"``, ``"numpy"`` or ``"numba"``.

    Raises:
        ValueError: ``SIMULATOR_ENGINE`` holds another value.
    """
    if _state["engine"] is None:
        env = os.environ.get("SIMULATOR_ENGINE", "auto").strip().lower() or "auto"
        if env not in ENGINES:
            raise ValueError(f"SIMULATOR_ENGINE: expected one of {ENGINES}, got {env!r}")
        _state["engine"] = "auto" if env == "numba" and not available() else env
    return _state["engine"]


def set_engine(name: str) -> str:
    """Set the engine for this process; returns the previous setting.

    Raises:
        ValueError: ``name`` is not in :data:`ENGINES`, or ``"numba"`` without numba.
    """
    previous = get_engine()
    _state["engine"] = _check(name)
    return previous


@contextlib.contextmanager
def use_engine(name: str):
    """``with use_engine("numba"): ...``: :func:`set_engine` for a block, restored after it."""
    previous = set_engine(name)
    try:
        yield
    finally:
        _state["engine"] = previous


def mark_compiled(kernel: str) -> None:
    """Record that ``kernel`` is compiled in this process ("auto" then always uses it)."""
    _state["compiled"].add(kernel)


def wants_numba(kernel: str, work: int) -> bool:
    """Whether a call of ``work`` products to ``kernel`` should take the compiled path."""
    name = get_engine()
    if name == "numpy":
        return False
    if name == "numba":
        return True
    return available() and work >= AUTO_MIN_WORK


def set_threads(n: int | None = None) -> int:
    """Threads of the compiled kernels' parallel loops (numba's pool): ``n``, or every core
    numba sees when None; returns the count now in force. Benchmarks pass 1.

    Raises:
        ValueError: ``n`` not a positive int, or numba missing.
    """
    if not available():
        raise ValueError("n: threads apply to the numba engine, and numba is not installed")
    import numba

    if n is None:
        n = numba.config.NUMBA_NUM_THREADS
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive int, got {n!r}")
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    return numba.get_num_threads()


def numba_dot_add(p, work: int) -> bool:
    """Whether ``simulator.mma`` should run a dot-add of ``work`` products with parameters
    ``p`` (a ``FusedDotAdd``) through :func:`dot_add`."""
    if not wants_numba("dotadd", work):
        return False
    from . import dotadd

    return dotadd.supports(p)


def dot_add(a64, b64, c, p, kblock: int):
    """The compiled chained fused dot-add (:func:`simulator.engine.dotadd.gemm`): float64
    A [..., M, K] and B [..., K, N], float32 C [..., M, N], K in sequential blocks of
    ``kblock``; returns float32 [..., M, N] with the NumPy engine's bits.

    Raises:
        ValueError: as :func:`simulator.engine.dotadd.gemm`.
    """
    from . import dotadd

    with _CALL_LOCK:  # numba's fork-safe workqueue pool takes one parallel launch at a time
        out = dotadd.gemm(a64, b64, c, p, kblock)
    mark_compiled("dotadd")
    return out
