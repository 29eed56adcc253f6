"""How the compiled engine's parallel kernels are launched: numba's threading layer, and each
kernel compiled twice from one Python function, parallel and serial.

numba's fork-safe ``workqueue`` layer costs about 120 us per parallel launch (2-core
development VM: a 64 x 128 wgmma's row kernel took 152 us launched in parallel on one thread
against 34 us serial; the ``omp`` layer's launch took no measurable time). The forward
launches thousands of kernels (about 3,100 in a 1 x 4096 x 8 x 128 causal forward), so a
kernel called while numba's pool runs one thread (``engine.set_threads(1)``) runs its serial
twin: no launch, the same arithmetic (``prange`` runs as ``range``).

Importing this module imports numba and sets its threading layer (below) before any parallel
kernel runs, and drops machine code cached from other sources of the engine (below): every
kernel module of the engine imports it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import types
from pathlib import Path

import numba

# GNU OpenMP, numba's default pool where TBB is absent, aborts a process that forks after using
# it (process-pool executors fork); the workqueue pool is fork-safe, and the engine serialises
# its parallel launches, which that pool needs. NUMBA_THREADING_LAYER, when set, is kept.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"

JIT = dict(cache=True, nogil=True)


def drop_stale_cache(package: Path = Path(__file__).parent) -> bool:
    """Removes the machine code numba cached for the modules of ``package`` (``*.nbi``,
    ``*.nbc``) when the package's sources differ from those it was compiled from; returns
    whether it did.

    numba keys a cached function by its own file's time stamp and size alone, while the
    kernels inline functions of sibling modules (``ex2_packed.lookup`` into
    ``fused_softmax.softmax_step``, ``intrinsics`` everywhere): an edit of a sibling alone (a
    checkout's ``git pull``) would keep running code compiled from the old one. The SHA-256 of
    every ``*.py`` here is kept beside the cache (``engine_sources.sha256``, written
    atomically), in the directory numba caches them in (:func:`_cache_dir`:
    ``NUMBA_CACHE_DIR``, the in-tree ``__pycache__`` or numba's user cache). Removing files
    another process is loading is safe: numba recompiles where a cache file is missing."""
    sources = sorted(package.glob("*.py"))
    cache = _cache_dir(sources[0]) if sources else None
    if cache is None or not cache.is_dir() or not os.access(cache, os.W_OK):
        return False
    digest = hashlib.sha256()
    for src in sources:
        digest.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    stamp = cache / "engine_sources.sha256"
    try:
        if stamp.read_text() == digest.hexdigest():
            return False
    except OSError:
        pass
    for src in sources:  # numba names a module's cache files "<module>.<function>-<line>..."
        for old in [*cache.glob(f"{src.stem}.*.nbi"), *cache.glob(f"{src.stem}.*.nbc")]:
            old.unlink(missing_ok=True)
    tmp = cache / f"engine_sources.sha256.{os.getpid()}.tmp"
    try:
        tmp.write_text(digest.hexdigest())
        os.replace(tmp, stamp)
    except OSError:
        tmp.unlink(missing_ok=True)
    return True


def _cache_dir(source: Path) -> Path | None:
    """The directory numba caches the functions of ``source`` in: the first of its cache
    locators that takes the file, in numba's own order; None where none does (or numba's
    internals differ from those of the versions pinned)."""
    from numba.core import caching

    for locator in getattr(caching.CacheImpl, "_locator_classes", ()):
        try:
            found = locator.from_function(drop_stale_cache, str(source))
            if found is not None:
                return Path(found.get_cache_path())
        except Exception:  # a locator that cannot serve this file: numba tries the next
            continue
    return None


drop_stale_cache()


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
