"""The forward's CTAs in chunks: bounded working memory, and tasks for an executor.

CTAs never exchange data inside one launch, so the group loop of :func:`flash.forward` may run
them in any partition and order: every chunk is a set of CTAs with the same K/V block range
and masking steps, run as one vectorised call, and the bits of every output are those of the
serial run. The chunk size follows from a memory budget (the estimate below), and with an
executor (any ``concurrent.futures.Executor``: a ``ProcessPoolExecutor``, or
``dask.distributed.Client.get_executor()``) each chunk is one task whose result, O and LSE
of its CTAs, the caller stores. With an executor of W workers, W chunks may be in memory at
once, so each chunk is sized to a W-th of what the budget leaves after the padded inputs and
outputs (a process pool's workers also hold their own copy of the padded inputs, which the
budget of the calling process does not count).
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import FIRST_COMPLETED, Executor, ThreadPoolExecutor, wait

import numpy as np

#: default working-memory budget of flash.forward, bytes
DEFAULT_MEMORY_BUDGET = 4 << 30


def cta_bytes(kblock_m: int, kblock_n: int, head_dim_v: int, head_dim: int = 0,
              compiled: bool = True) -> int:
    """Working memory of one forward CTA inside a chunk, bytes: an upper estimate of the group
    loop's arrays (scores, probabilities and the tensor-core model's working arrays per score;
    the O accumulator and its products per output value). Measured with tracemalloc on bf16
    forwards of 12-32 CTAs, head dims 64-256: 1.9-2.7 MB per CTA; this gives 2.4-3.5, and
    at most 0.82x of it was measured compiled in chunks of one CTA up. Without ``compiled``
    (the NumPy engine) small chunks cost more, its GEMM's working arrays (about a byte per
    product term) over the kBlockM x kBlockN x ``max(head_dim, head_dim_v)`` of the larger
    GEMM: chunks of 1-2 CTAs measured 3.2-6.3 MB a CTA at head dims 64-256; this adds
    2 bytes a term."""
    per_cta = kblock_m * (kblock_n * 80 + head_dim_v * 48)
    if not compiled:
        per_cta += 2 * kblock_m * kblock_n * max(head_dim, head_dim_v)
    return per_cta


def backward_cta_bytes(kblock_m: int, kblock_n: int, kernel_head_dim: int,
                       compiled: bool = False) -> int:
    """Working memory of one backward CTA inside a chunk of (batch, head) rows, bytes: an upper
    estimate of its m_block step (five GEMMs, S / dP / P / dS and their roundings, the masks)
    and its own K / V tiles, on the NumPy engine or, with ``compiled``, where every kernel
    call of the launch runs compiled. Measured with tracemalloc on bf16 backwards (head dims
    64-256, causal, softcap, spread; chunks of one and two rows): the NumPy engine's GEMM
    (about a byte per product term) makes it 2.5-4.0 MB per CTA in one-row chunks (this
    gives 3.7-5.7), the compiled engine 0.64-1.0 MB (this gives 0.75-1.4)."""
    if compiled:
        return kblock_m * (64 * kblock_n + 48 * kernel_head_dim)
    return kblock_m * kblock_n * (4 * kernel_head_dim + 64)


#: working bytes per float32 accumulator value of a chunk of the backward's postprocess
#: (``* scale`` rounded once through float64, the GQA reduce-adds, the rounding to the input
#: type): measured with tracemalloc on chunks of one (batch, kv head) row, bf16, head dims
#: 64-256, 1-4 query heads per kv head, with and without spread: 7-21 bytes per value
POSTPROCESS_BYTES = 32


def fixed_bytes(*arrays: np.ndarray | None) -> int:
    """Bytes of the arrays a forward holds for its whole duration (padded inputs, outputs);
    None stands for an input the call lacks (a padded qv without qv) and counts 0."""
    return int(sum(a.nbytes for a in arrays if a is not None))


def chunk_size(budget: int, fixed: int, per_cta: int, what: str, concurrent: int = 1,
               unit: str = "CTA", held: str = "padded inputs and outputs") -> int:
    """CTAs (or other ``unit``s of work) per chunk that keep ``fixed + concurrent * chunk *
    per_cta`` within ``budget``: ``concurrent`` chunks may be in memory at once (an executor's
    workers, each with its own chunk), so each gets its share of what the fixed arrays leave.

    Raises:
        MemoryError: not even one unit per concurrent chunk fits; the message gives the
            estimate and the budget.
    """
    if fixed + concurrent * per_cta > budget:
        running = "" if concurrent == 1 else f" times {concurrent} chunks running at once"
        fewer = "" if concurrent == 1 else ", fewer workers"
        raise MemoryError(
            f"memory_budget: {what} needs about {_size(fixed + concurrent * per_cta)} "
            f"({_size(fixed)} of {held} plus {_size(per_cta)} per {unit}"
            f"{running}), more than the budget of {_size(budget)}; "
            f"pass a larger memory_budget (bytes){fewer} or a smaller input")
    return max(1, (budget - fixed) // (concurrent * per_cta))


def _size(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps it at 1 or more (2.00 GiB, 3.4 MiB)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{n} bytes"


def split(ctas: np.ndarray, size: int, parts: int = 1) -> list[np.ndarray]:
    """``ctas`` [G, 4] in consecutive chunks of at most ``size`` rows, and at least ``parts``
    chunks when there are that many CTAs (so that an executor's workers all get work)."""
    count = max(math.ceil(len(ctas) / max(1, size)), min(parts, len(ctas)), 1)
    return [c for c in np.array_split(ctas, count) if len(c)]


def task_pool(threads: int) -> ThreadPoolExecutor | None:
    """None for one thread, else a pool of ``threads`` task threads, each running the compiled
    kernels' serial twins (:func:`simulator.flash.evaluator.serial_thread`; they release the
    GIL, so the tasks run side by side). The caller shuts it down."""
    if threads <= 1:
        return None
    from .evaluator import serial_thread

    return ThreadPoolExecutor(threads, initializer=serial_thread)


def affordable(threads: int, budget: int, fixed: int, per_unit: int) -> int:
    """Of ``threads`` chunks sharing this process's memory, how many may run at once within
    ``budget`` bytes, one ``per_unit`` at least each beside ``fixed`` (at least 1: where not
    even one fits, :func:`chunk_size` raises)."""
    return max(1, min(threads, (budget - fixed) // max(1, per_unit)))


def concurrency(executor, threads: int, budget: int, fixed: int, per_unit: int) -> tuple[int, bool]:
    """``(parts, shared)``: how many chunks a launch keeps in memory at once, and whether they
    share this process's memory. Serial (``executor`` None: ``threads`` task threads, 1 for
    none) and a ``ThreadPoolExecutor``'s threads share it: as many as ``budget`` affords
    (:func:`affordable`; a larger thread pool's tasks wait, :func:`gated`). Other executors'
    workers (processes, dask) hold a chunk each: all W count, each chunk gets a W-th of what
    the fixed arrays leave (:func:`chunk_size` raises where not even one unit each fits)."""
    shared = _shares_memory(executor)
    parts = threads if executor is None else workers(executor)
    return (affordable(parts, budget, fixed, per_unit) if shared else parts), shared


def shipped_bytes(executor, task_inputs: int) -> int:
    """Bytes this process holds for an executor's queued tasks beyond the shared arrays: a
    pickled copy of a task's inputs (``task_inputs`` bytes at most) for each worker and one
    more waiting (a process pool feeds its workers that far ahead); 0 for a thread pool."""
    return 0 if _shares_memory(executor) else (workers(executor) + 1) * task_inputs


def _shares_memory(executor) -> bool:
    """Whether ``executor``'s chunks run in this process (serial, or a thread pool)."""
    return executor is None or isinstance(executor, ThreadPoolExecutor)


def finished(futures: dict):
    """``(future, value)`` of ``futures`` (``{future: value}``) as they complete, each taken
    out of the dict first: once the caller has stored a result nothing holds it
    (``as_completed`` keeps every future, and so every result, until the last is done)."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            yield future, futures.pop(future)


def gated(task, concurrent: int):
    """``task`` wrapped so that at most ``concurrent`` calls run at once (thread pools larger
    than what the memory budget affords)."""
    gate = threading.BoundedSemaphore(concurrent)

    def run(*args, **kwargs):
        with gate:
            return task(*args, **kwargs)

    return run


def shutdown(pool: ThreadPoolExecutor | None) -> None:
    """Stop a :func:`task_pool` (None: nothing), dropping tasks not yet started."""
    if pool is not None:
        pool.shutdown(cancel_futures=True)


def check_executor(executor) -> Executor | None:
    """``executor`` if it is None or an object with ``submit`` (a concurrent.futures.Executor
    or a compatible one, such as dask's ClientExecutor), not an executor class.

    Raises:
        TypeError: anything else, naming the argument.
    """
    if executor is None or (not isinstance(executor, type)
                            and callable(getattr(executor, "submit", None))):
        return executor
    if isinstance(executor, type):
        raise TypeError(f"executor: expected a concurrent.futures.Executor instance (or None), "
                        f"got the class {executor.__name__}; pass {executor.__name__}(...)")
    raise TypeError(f"executor: expected a concurrent.futures.Executor (or None), got "
                    f"{type(executor).__name__}")


def check_budget(memory_budget) -> int:
    """``memory_budget`` as a positive int (None: DEFAULT_MEMORY_BUDGET).

    Raises:
        ValueError: not a positive integer, naming the argument.
    """
    if memory_budget is None:
        return DEFAULT_MEMORY_BUDGET
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, int | np.integer) \
            or memory_budget <= 0:
        raise ValueError(f"memory_budget: expected a positive int (bytes), got {memory_budget!r}")
    return int(memory_budget)


def workers(executor) -> int:
    """The executor's worker count where it says (``_max_workers``), else 2."""
    n = getattr(executor, "_max_workers", None)
    return n if isinstance(n, int) and n > 0 else 2


def check_progress(progress) -> None:
    """Raises TypeError unless ``progress`` is None, a bool or a callable."""
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        kind = type(progress)
        name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
        raise TypeError(f"progress: expected None, a bool or a callable (done, total), got "
                        f"{name} {progress!r:.40}")


#: seconds of one K/V block visit per score of the block times (kernel head dim + V head dim):
#: the cost model of :func:`estimate_seconds`. flash.forward on the 2-core AMD EPYC development
#: machine took 5.3e-9 on idle cores (the embedded default job of ``run``, tiles 192 x 192, and
#: bf16 1 x 4096 x 8 heads x 128, tiles 128 x 176, 6,144 block visits) and 1.1e-8 to 4e-8 with
#: the cores shared with other jobs (bf16 head dims 32-256 and e4m3 128, tiles 128 x 80 to
#: 192 x 192): the estimate is good to a factor of 2-3 either way
SECONDS_PER_BLOCK_ELEMENT = 1e-8
#: the same on the compiled engine (numba): bf16 1 x 4096 x 4 heads x 64, tiles 192 x 192, 1,936
#: block visits, forward 7.0 s with the 2 cores shared with a test run (7.7e-10), against 35.9 s
#: on NumPy (3.9e-9) on the same machine
COMPILED_SECONDS_PER_BLOCK_ELEMENT = 1e-9
#: the backward's cost per (kBlockM x kBlockN x head dims) step over the forward's: five GEMMs
#: a tile to the forward's two; ``benchmarks/bench_backward.py``, 1 x 1024 x 4 heads x 128:
#: 16.6 s for 416 steps of 80 x 128, the forward 6.7 s for 192 visits of 128 x 176
BACKWARD_COST = 2.5
#: a call expected to take longer than this (seconds) shows its progress by default, on a
#: terminal (``progress=None``): a long call does not run silently, a short one prints nothing
LONG_CALL_SECONDS = 10.0


def estimate_seconds(blocks: int, kblock_m: int, kblock_n: int, head_dims: int, parts: int = 1,
                     per_element: float | None = None, compiled: bool = False) -> float:
    """Expected time of ``blocks`` K/V block visits of ``kblock_m x kblock_n`` scores times
    ``head_dims`` (kernel head dim + V head dim) at ``per_element`` seconds (default
    :data:`SECONDS_PER_BLOCK_ELEMENT`, or :data:`COMPILED_SECONDS_PER_BLOCK_ELEMENT` for a
    launch that runs ``compiled``), over ``parts`` workers."""
    rate = per_element if per_element is not None else (
        COMPILED_SECONDS_PER_BLOCK_ELEMENT if compiled else SECONDS_PER_BLOCK_ELEMENT)
    return blocks * kblock_m * kblock_n * head_dims * rate / max(1, parts)


def auto_progress(progress, seconds: float):
    """``progress`` as :class:`Progress` takes it: ``None`` (the default of the forward and
    backward) becomes True where stderr is a terminal and the call is expected to take over
    :data:`LONG_CALL_SECONDS` (``seconds``: :func:`estimate_seconds`), else False (a log file,
    a pipe, a test's captured stderr, or a short call: nothing printed); any other value is
    returned as given (False: off)."""
    if progress is not None:
        return progress
    return bool(_stderr_is_tty() and seconds > LONG_CALL_SECONDS)


def _stderr_is_tty() -> bool:
    """Whether stderr is a terminal: False for None, closed or replaced (no ``isatty``)."""
    import sys

    try:
        return sys.stderr is not None and bool(sys.stderr.isatty())
    except (AttributeError, OSError, ValueError):  # a replaced or closed stderr
        return False


def _tqdm():
    """tqdm's bar class, or None where tqdm is not installed."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


class Progress:
    """Progress of a forward in K/V block visits (CTAs x blocks), with an ETA.

    ``progress`` is None or False (silent), True (a tqdm bar when stderr is a terminal and tqdm
    is installed, ``pip install -e '.[progress]'``; else one line on stderr every few seconds),
    or a callable ``progress(done, total)`` called after every chunk. ``total`` is what the
    caller expects; where more visits arrive (an estimate that was low) it grows. A line
    that cannot be written (stderr closed by its reader) ends the lines, not the work.
    """

    def __init__(self, progress, total: int, what: str = "flash.forward"):
        import sys
        import time

        self._callback = progress if callable(progress) else None
        self._bar = self._line = None
        self.total, self.done, self.what = total, 0, what
        self._clock, self._start = time.monotonic, time.monotonic()
        self._last = self._start
        self._ended = False
        if progress is True and sys.stderr is None:
            pass  # no stderr (closed at start, ``2>&-``): nowhere to show progress
        elif progress is True:
            # off a terminal (a log file, a pipe) whole lines, never a bar redrawn with \r
            tqdm = _tqdm() if _stderr_is_tty() else None
            if tqdm is None:
                self._line = sys.stderr
            else:
                self._bar = tqdm(total=total, desc=what, unit="block", file=sys.stderr,
                                 mininterval=0.5)
        else:
            check_progress(progress)

    def update(self, n: int) -> None:
        """``n`` more K/V block visits done."""
        self.done += n
        if self.done > self.total:
            self.total = self.done
            if self._bar is not None:
                self._bar.total = self.total
        if self._callback is not None:
            self._callback(self.done, self.total)
        if self._bar is not None:
            self._bar.update(n)
        if self._line is not None and not self._ended:
            now = self._clock()
            if now - self._last >= 5.0 or self.done >= self.total:
                self._last = now
                self._ended = self.done >= self.total  # the last line is printed once
                elapsed = now - self._start
                rate = self.done / max(elapsed, 1e-9)
                left = (self.total - self.done) / rate if rate > 0 else float("inf")
                when = (f"in {elapsed:.1f} s" if self.done >= self.total
                        else f"about {left:.0f} s left")
                try:
                    print(f"{self.what}: {self.done:,}/{self.total:,} K/V block visits "
                          f"({100 * self.done / max(1, self.total):.0f}%), {when}",
                          file=self._line, flush=True)
                except (AttributeError, OSError, ValueError):  # stderr closed or not a file
                    self._line = None

    def callback(self):
        """A ``progress(done, total)`` callable for :func:`simulator.flash.forward` that adds
        each forward call's visits to this bar: pass it to several successive calls (the
        sequences of a varlen launch) and the bar counts them all, with one ETA."""
        last = 0

        def step(done: int, total: int) -> None:
            nonlocal last
            self.update(done - last)
            last = 0 if done >= total else done  # a finished call: the next one starts at 0

        return step

    def close(self) -> None:
        """Close the tqdm bar, if any."""
        if self._bar is not None:
            self._bar.close()
