"""What the measurement runs share: running a run's ``main`` with one-line errors when no GPU
is usable, and compiling the forward kernel's NVRTC option sets in parallel before a run."""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor

from ..device import forward as dev
from ..device import runtime
from ..device.runtime import DeviceUnavailable


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
    """Run a device script's ``main(argv)``; without a usable GPU print one line (what is
    missing and how to install it) and return 2, the project's exit code for an input or
    environment error, instead of a traceback (1 means: emulator and device disagree)."""
    import sys  # noqa: PLC0415

    try:
        return main(argv)
    except DeviceUnavailable as exc:
        # under ``python -m`` the module is __main__; its spec still has the dotted name
        prog = getattr(main.__globals__.get("__spec__"), "name", main.__module__)
        print(f"python -m {prog}: {exc}", file=sys.stderr)
        return 2
