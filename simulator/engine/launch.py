"""How the compiled engine's parallel kernels are launched: numba's threading layer, and each
kernel compiled twice from one Python function, parallel and serial.

numba's fork-safe ``workqueue`` layer costs about 120 us per parallel launch (2-core
development VM: a 64 x 128 wgmma's row kernel took 152 us launched in parallel on one thread
against 34 us serial; the ``omp`` layer's launch took no measurable time). The forward
launches thousands of kernels (about 3,100 in a 1 x 4096 x 8 x 128 causal forward), so a
kernel called while numba's pool runs one thread (``engine.set_threads(1)``) runs its serial
twin: no launch, the same arithmetic (``prange`` runs as ``range``).

Importing this module imports numba, sets its threading layer (below) before any parallel
kernel runs, and registers the engine's cache locator (:class:`EngineCacheLocator`: a kernel
cached from other sources of the engine is stale): every kernel module of the engine imports
it before it defines a kernel.
"""

from __future__ import annotations

import functools
import os
import types
import warnings
from pathlib import Path

import numba
from numba.core import caching
from numba.core import event as numba_event

from . import sources

# GNU OpenMP, numba's default pool where TBB is absent, aborts a process that forks after using
# it (process-pool executors fork); the workqueue pool is fork-safe, and the engine serialises
# its parallel launches, which that pool needs. NUMBA_THREADING_LAYER, when set, is kept.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"



# the modules imported so far (the package, this module) as they were loaded; each kernel
# module records itself when its first kernel is decorated (EngineCacheLocator)
sources.note_loaded()
_PACKAGE = sources.PACKAGE_DIR


class EngineCacheLocator(caching._CacheLocator):
    """numba's cache locator for the engine's kernels: where numba's own choice puts them
    (``NUMBA_CACHE_DIR``, the in-tree ``__pycache__``, the user cache), with a source stamp
    that is :func:`.sources.loaded_digest` (the engine's sources as this process loaded them,
    computed when the kernel is decorated) plus numba's own stamp of the kernel's file.

    numba alone stamps a cached kernel with its own file, while the kernels inline functions
    of sibling modules (``ex2_packed.lookup`` into ``fused_softmax.softmax_step``,
    ``intrinsics`` everywhere): after an edit of a sibling alone it would load machine code
    compiled from the old one. With the digest in the stamp, a kernel cached by a process
    that loaded other sources (an older checkout, a notebook that imported a sibling after a
    ``git pull``) is stale to every process that loaded these, which compiles it again."""

    def __init__(self, inner):
        self._inner = inner

    def ensure_cache_path(self):
        self._inner.ensure_cache_path()

    def get_cache_path(self):
        return self._inner.get_cache_path()

    def get_source_stamp(self):
        return (sources.loaded_digest(), self._inner.get_source_stamp())

    def get_disambiguator(self):
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        try:
            ours = Path(py_file).resolve().parent == _PACKAGE
        except (OSError, ValueError):
            ours = False
        if not ours:
            return None
        for other in caching.CacheImpl._locator_classes:
            inner = None if other is cls else other.from_function(py_func, py_file)
            if inner is not None:
                return cls(inner)
        return None


if EngineCacheLocator not in caching.CacheImpl._locator_classes:
    caching.CacheImpl._locator_classes.insert(0, EngineCacheLocator)


def _cache_probe():  # a function of this package, for the cache locators to place
    return None


def disk_cache_usable() -> bool:
    """Whether numba can cache the engine's kernels on disk: some locator (the package's
    ``__pycache__``, ``NUMBA_CACHE_DIR``, the user's cache) is writable. Where none is (a
    read-only install with an unwritable home), the kernels compile in memory in every process,
    with a warning once, instead of failing at their first use."""
    try:
        caching.FunctionCache(_cache_probe)
    except RuntimeError as exc:  # numba: "cannot cache function ...: no locator available"
        warnings.warn(f"simulator.engine: numba has no writable cache location ({exc}); the "
                      "compiled kernels are compiled in memory in every process (set "
                      "NUMBA_CACHE_DIR to a writable folder to keep them)", RuntimeWarning,
                      stacklevel=2)
        return False
    return True


#: the options of every engine kernel: nogil (task threads), cached on disk where possible
JIT = dict(cache=disk_cache_usable(), nogil=True)

#: the line said once per process when the engine's kernels start compiling (no cached machine
#: code for these sources: a fresh install, an edited engine, no writable cache)
COMPILE_NOTE = ("simulator.engine: compiling the compiled engine's kernels for this install "
                "(once: later processes load them from numba's cache; 20-60 s on 2 cores)")


def _note_on_terminal(text: str) -> None:
    """The default compile note: one line on stderr where someone watches it, a terminal or a
    Jupyter kernel's stderr (a notebook cell shows it); a log file, a pipe or a test's
    captured stderr gets nothing."""
    import sys

    stream = sys.stderr
    try:
        if stream is not None and (stream.isatty() or _in_a_notebook(stream)):
            print(text, file=stream, flush=True)
    except (AttributeError, OSError, ValueError):  # stderr closed or replaced
        pass


def _in_a_notebook(stream) -> bool:
    """Whether ``stream`` is a Jupyter kernel's output stream (ipykernel's, which says it is no
    terminal though a notebook shows what it receives under the running cell)."""
    return type(stream).__module__.split(".")[0] == "ipykernel"


class _CompileNote(numba_event.Listener):
    """numba's ``numba:compile`` event (a real compile, after a cache miss; a cache load
    raises none) for a function of this package: the note, once per process."""

    def __init__(self):
        self.note = _note_on_terminal
        self.said = False

    def on_start(self, event):
        if self.said or self.note is None:
            return
        func = getattr(event.data.get("dispatcher"), "py_func", None)
        if getattr(func, "__module__", "").startswith(__package__ + "."):
            self.said = True
            self.note(COMPILE_NOTE)

    def on_end(self, event):
        pass


_COMPILE_NOTE = _CompileNote()
numba_event.register("numba:compile", _COMPILE_NOTE)


def set_compile_note(note) -> None:
    """Where the once-per-process compile note goes: a callable ``note(line)`` (the ``run``
    command's stderr notes), or None for none; the default writes it to stderr when stderr
    is a terminal (:data:`COMPILE_NOTE`). ``note`` is checked by the public entry,
    :func:`simulator.flash.evaluator.set_compile_note`."""
    _COMPILE_NOTE.note = note


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
