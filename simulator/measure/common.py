"""What the measurement runs share: running a run's ``main`` with one-line errors when no GPU
is usable, its start on the GPU (probe compiled, clock, timestamped progress lines), the
provenance of the kernel it launches, the atomic writes of its recordings, the ``--out``
option, and compiling the forward kernel's NVRTC option sets in parallel before a run."""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from ..device import forward as dev
from ..device import runtime
from ..device.runtime import DeviceUnavailable
from ..errors import EXIT_USAGE, OneLineParser
from ..io import save_npz_atomic, write_json_atomic


def warm_compile(options: tuple[str, ...]) -> tuple[tuple[str, ...], float, str]:
    """Compile the forward kernel with ``options`` in a worker process (fills CuPy's on-disk
    kernel cache); returns ``(options, seconds, error text or "")``."""
    t0 = time.time()
    try:
        runtime.load_module(dev.KERNEL, tuple(options))
        return options, time.time() - t0, ""
    except Exception as exc:  # reported, the main loop then reports it per configuration
        return options, time.time() - t0, f"{type(exc).__name__}: {exc}"[:2000]


def precompile_options(opts: list[tuple[str, ...]], workers: int, progress,
                       each: bool = True) -> None:
    """Compile each NVRTC option set in parallel processes, filling CuPy's kernel cache.

    ``each``: a progress line per compiled set (else only the sets that failed to compile)."""
    if workers <= 1 or len(opts) <= 1:
        return
    import multiprocessing as mp  # noqa: PLC0415

    t0 = time.time()
    with ProcessPoolExecutor(max_workers=min(workers, len(opts)),
                             mp_context=mp.get_context("spawn")) as ex:
        for options, dt, err in ex.map(warm_compile, opts):
            tag = " ".join(o for o in options if o.startswith("-D"))
            if each:
                progress(f"  compiled {tag} in {dt:.1f} s" + (f"  ERROR {err}" if err else ""))
            elif err:
                progress(f"  compile {tag}: {err}")
    progress(f"precompiled {len(opts)} modules in {time.time() - t0:.1f} s")


def out_parser(name: str, description: str) -> argparse.ArgumentParser:
    """The options parser of the run ``name`` (its prog is ``python -m simulator measure
    NAME``) with the required ``--out`` folder of its recordings."""
    ap = OneLineParser(prog=f"python -m simulator measure {name}",
                                 description=description)
    ap.add_argument("--out", required=True, help="output folder")
    return ap


def kernel_provenance(kernel: str) -> dict:
    """``{"kernel": "kernels/<kernel>", "kernel_sha256": ...}`` of a source under
    ``kernels/`` (the SHA-256 the replays check against the file)."""
    return {"kernel": f"kernels/{kernel}", "kernel_sha256": runtime.source_sha256(kernel)}


def forward_provenance(extra_options: tuple[str, ...] = (), progress=None) -> dict:
    """The provenance of a run of the twin forward kernel: :func:`runtime.device_info`, the
    kernel and its SHA-256, the NVRTC options (plus ``extra_options``); ``progress`` gets one
    line naming the device and the kernel's hash."""
    info = runtime.device_info()
    info.update(kernel_provenance(dev.KERNEL))
    info["nvrtc_options"] = list(runtime.DEFAULT_OPTIONS) + list(extra_options)
    if progress is not None:
        progress(f"device: {info['gpu']} driver {info['driver']} runtime {info['cuda_runtime']} "
                 f"nvrtc {info['nvrtc']}; kernel sha256 {info['kernel_sha256'][:16]}")
    return info


def write_forward_recording(out_dir, npz_name: str, report_name: str, meta: dict,
                            arrays: dict) -> str:
    """Write a forward run's recording into ``out_dir`` (created if needed), atomically: the
    ``.npz`` of ``arrays`` with ``meta`` as its JSON ``meta`` entry, then ``meta`` with the
    ``.npz``'s ``file_bytes`` as the report. Returns the ``.npz``'s path."""
    import json  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    os.makedirs(out_dir, exist_ok=True)
    path = save_npz_atomic(os.path.join(out_dir, npz_name), meta=np.array(json.dumps(meta)),
                           **arrays)
    meta["file_bytes"] = os.path.getsize(path)
    write_json_atomic(os.path.join(out_dir, report_name), meta)
    return path


@dataclass
class GpuRun:
    """A measurement run started on the GPU: CuPy, its compiled probe and its clock."""

    cupy: object
    module: object
    t0: float
    width: int = 7

    def log(self, msg: str) -> None:
        """Print ``[  12.3 s] msg`` (seconds since the start), flushed at once."""
        print(f"[{time.time() - self.t0:{self.width}.1f} s] {msg}", flush=True)

    def elapsed(self) -> float:
        """Seconds since the start, to 0.1 s (the reports' ``elapsed_s``)."""
        return round(time.time() - self.t0, 1)


def start_gpu_run(kernel: str) -> GpuRun:
    """Check the GPU (DeviceUnavailable without one), compile ``kernels/<kernel>`` with the
    default NVRTC options and start the clock."""
    cupy = runtime.require_gpu()
    module = runtime.load_module(kernel)
    return GpuRun(cupy, module, time.time())


def write_recordings(folder, report_name: str, report: dict, npz: dict[str, dict]) -> None:
    """Write a run's report (JSON) and its arrays (``npz``: file name -> arrays, one ``.npz``
    each) into ``folder``, created if needed; every file atomically, the report first."""
    os.makedirs(folder, exist_ok=True)
    write_json_atomic(os.path.join(folder, report_name), report)
    for name, arrays in npz.items():
        save_npz_atomic(os.path.join(folder, name), **arrays)


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
