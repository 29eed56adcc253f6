"""How the compiled engine's parallel kernels are launched: numba's threading layer, and each
kernel compiled twice from one Python function, parallel and serial.

numba's fork-safe ``workqueue`` layer costs about 120 us per parallel launch (2-core
development VM: a 64 x 128 wgmma's row kernel took 152 us launched in parallel on one thread
against 34 us serial; the ``omp`` layer's launch took no measurable time). The forward
launches thousands of kernels (about 3,100 in a 1 x 4096 x 8 x 128 causal forward), so a
kernel called while numba's pool runs one thread (``engine.set_threads(1)``) runs its serial
twin: no launch, the same arithmetic (``prange`` runs as ``range``).

Importing this module imports numba and sets its threading layer (below) before any parallel
kernel runs: every kernel module of the engine imports it.
"""

from __future__ import annotations

import functools
import os
import types

import numba

# GNU OpenMP, numba's default pool where TBB is absent, aborts a process that forks after using
# it (process-pool executors fork); the workqueue pool is fork-safe, and the engine serialises
# its parallel launches, which that pool needs. NUMBA_THREADING_LAYER, when set, is kept.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"

JIT = dict(cache=True, nogil=True)


class Kernel:
    """A kernel compiled from one Python function twice: ``parallel`` (``prange`` over its
    independent rows) and ``serial``; calling it runs ``serial`` when numba's pool runs one
    thread (``numba.get_num_threads()``), else ``parallel``. Both are cached on disk, under
    distinct names."""

    def __init__(self, func):
        functools.update_wrapper(self, func)
        self.parallel = numba.njit(parallel=True, **JIT)(func)
        # a copy of the function under its own name: numba's cache files are named by it
        twin = types.FunctionType(func.__code__, func.__globals__, func.__name__ + "_serial",
                                  func.__defaults__, func.__closure__)
        twin.__qualname__ = func.__qualname__ + "_serial"
        twin.__module__ = func.__module__
        self.serial = numba.njit(**JIT)(twin)

    def __call__(self, *args):
        return (self.serial if numba.get_num_threads() == 1 else self.parallel)(*args)


def parallel_kernel(func) -> Kernel:
    """Decorator: ``func`` as a :class:`Kernel`."""
    return Kernel(func)
