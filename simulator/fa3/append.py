"""AppendKV's write into the caller's KV caches (``flash_attn_with_kvcache`` with new ``k`` /
``v``): all of it or none of it.

The new keys and values are computed (rotated, checked) before anything is written; the
write itself is a few NumPy assignments and, for torch caches the emulator had to copy, a
copy back into the caller's tensors. Ctrl-C during it is held back until every cache is
written, then delivered; any other exception restores the old values before it propagates.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .arrays import write_back


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold back SIGINT (Ctrl-C) while the block runs and deliver it, to the handler that was
    installed, once the block has ended. Only the main thread receives Python's signal
    handlers, so elsewhere (and where the handler was not installed from Python) nothing is
    changed: there a Ctrl-C cannot interrupt the block anyway, or cannot be held back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            signal.raise_signal(signal.SIGINT)  # now for the previous handler (KeyboardInterrupt)


def append_kv(caches, origs, slots, new) -> None:
    """Write ``new`` (k, v) at ``slots`` of both ``caches`` (NumPy) and copy them back into the
    caller's ``origs``: all of it or none of it. Ctrl-C is held back until both are written
    (:func:`sigint_deferred`); any other exception restores the slots' old values before it
    propagates. Repeated slots (rows shared through ``cache_batch_idx``) take the last batch's
    values, as the kernel's batch order does.

    Args:
        caches: the NumPy arrays the emulator reads (k_cache, v_cache), written in place.
        origs: the caller's k_cache, v_cache (the same NumPy arrays, or torch tensors that
            :func:`simulator.fa3.arrays.write_back` updates).
        slots: an index into both caches (rows and positions of the new keys).
        new: the new keys and values, shaped as ``cache[slots]``.
    """
    old = [c[slots] for c in caches]  # fancy indexing: copies
    with sigint_deferred():
        try:
            for c, n in zip(caches, new, strict=True):
                c[slots] = n
            for orig, arr in zip(origs, caches, strict=True):
                write_back(orig, arr)
        except BaseException:
            for c, o in zip(caches, old, strict=True):
                c[slots] = o
            for orig, arr in zip(origs, caches, strict=True):
                write_back(orig, arr)
            raise
