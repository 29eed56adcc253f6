"""What the measurement runs share: running a run's ``main`` with one-line errors when no GPU
is usable, and compiling the forward kernel's NVRTC option sets in parallel before a run."""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor

from ..device import forward as dev
from ..device import runtime
from ..device.runtime import DeviceUnavailable
from ..errors import EXIT_USAGE


def warm_compile(options: tuple[str, ...]) -> tuple[tuple[str, ...], float, str]:
    """Compile the forward kernel with ``options`` in a worker process (fills CuPy's on-disk
    kernel cache); returns ``(options, seconds, error text or "")``."""
    t0 = time.time()
    try:
        runtime.load_module(dev.KERNEL, tuple(options))
        return options, time.time() - t0, ""
    except Exception as exc:  # reported, the main loop then reports it per configuration
        return options, time.time() - t0, f"{type(exc).__name__}: {exc}"[:2000]


def precompile_options(opts: list[tuple[str, ...]], workers: int, progress) -> None:
    """Compile each NVRTC option set in parallel processes, filling CuPy's kernel cache."""
    if workers <= 1 or len(opts) <= 1:
        return
    import multiprocessing as mp  # noqa: PLC0415

    t0 = time.time()
    with ProcessPoolExecutor(max_workers=min(workers, len(opts)),
                             mp_context=mp.get_context("spawn")) as ex:
        for options, dt, err in ex.map(warm_compile, opts):
            tag = " ".join(o for o in options if o.startswith("-D"))
            progress(f"  compiled {tag} in {dt:.1f} s" + (f"  ERROR {err}" if err else ""))
    progress(f"precompiled {len(opts)} modules in {time.time() - t0:.1f} s")


def run_script(main, argv=None) -> int:
    """Run a measurement run's ``main(argv)``; returns its exit code.

    Without a usable GPU it prints one line, ``error: <what is missing and how to install it>``,
    as every command of ``python -m simulator`` does, and returns 2
    (:data:`simulator.errors.EXIT_USAGE`, an input or environment error) instead of a traceback
    (1 would mean: emulator and device disagree)."""
    import sys  # noqa: PLC0415

    try:
        return main(argv)
    except DeviceUnavailable as exc:  # the message names what is missing and how to install it
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
