"""CuPy plumbing: availability checks, NVRTC module cache, provenance of a device run.

Kernels live in the repository's top-level ``kernels/`` folder; the wheel installs them as the
package data ``simulator/kernels/`` (pyproject.toml's ``package-dir``), so an installed package has
the device twin too. They are compiled with NVRTC through ``cupy.RawModule`` for
``sm_90a`` with ``--use_fast_math`` (FlashAttention-3's flags), unless a caller passes other
options.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import platform
import subprocess
from pathlib import Path

import numpy as np

from ..gpus import get_gpu


def _kernels_dir() -> Path:
    """The folder holding the CUDA sources: ``simulator/kernels/`` inside an installed package,
    else the checkout's top-level ``kernels/`` beside ``simulator/``."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "kernels"
    return installed if (installed / "fa3_forward.cu").is_file() else package.parent / "kernels"


KERNELS_DIR = _kernels_dir()
# the default GPU's target with its arch-specific instructions (wgmma needs sm_90a)
DEFAULT_OPTIONS = (f"-arch={get_gpu().sm_arch}a", "--use_fast_math", "-std=c++17")
INSTALL_HINT = ".venv/bin/pip install -e '.[gpu]' in the repository (installs cupy-cuda13x)"


class DeviceUnavailable(RuntimeError):
    """CuPy is not installed or sees no CUDA GPU; the message names what is missing."""


def _import_cupy():
    try:
        import cupy  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise DeviceUnavailable(f"CuPy is not installed ({exc}); install it with: {INSTALL_HINT}") from exc
    return cupy


def gpu_available() -> tuple[bool, str]:
    """Return ``(True, name)`` when CuPy sees a CUDA GPU, else ``(False, reason)``."""
    try:
        cupy = _import_cupy()
        count = cupy.cuda.runtime.getDeviceCount()
    except DeviceUnavailable as exc:
        return False, str(exc)
    except Exception as exc:  # CUDA driver missing or broken
        return False, f"CuPy is installed but CUDA is not usable: {exc}"
    if count == 0:
        return False, "CuPy is installed but sees no CUDA GPU"
    props = cupy.cuda.runtime.getDeviceProperties(0)
    return True, props["name"].decode()


def require_gpu():
    """Return the cupy module, or raise :class:`DeviceUnavailable` saying what is missing."""
    ok, why = gpu_available()
    if not ok:
        raise DeviceUnavailable(why)
    return _import_cupy()


def kernel_source(relpath: str) -> str:
    """Text of a kernel source under :data:`KERNELS_DIR` (e.g. ``"probes/numerics.cu"``)."""
    path = KERNELS_DIR / relpath
    if not path.is_file():
        raise FileNotFoundError(f"kernel source not found: {path}")
    return path.read_text()


def source_sha256(relpath: str) -> str:
    """SHA-256 of a kernel source file, recorded with every device output made from it."""
    return hashlib.sha256(kernel_source(relpath).encode()).hexdigest()


@functools.lru_cache(maxsize=32)
def load_module(relpath: str, options: tuple[str, ...] = DEFAULT_OPTIONS):
    """Compile ``kernels/<relpath>`` with NVRTC once per (source, options) and return
    the module.

    Raises:
        DeviceUnavailable: no CuPy or no GPU.
        RuntimeError: NVRTC rejected the source; the message carries the compiler log.
    """
    cupy = require_gpu()
    src = kernel_source(relpath)
    try:
        module = cupy.RawModule(code=src, options=options, backend="nvrtc")
        module.compile()
    except cupy.cuda.compiler.CompileException as exc:
        raise RuntimeError(f"NVRTC failed to compile {KERNELS_DIR / relpath}:\n"
                           f"{exc.get_message()}") from exc
    return module


#: dynamic shared memory a kernel may use without opting in (CUDA's default per block)
DEFAULT_DYNAMIC_SMEM = 48 * 1024


def allow_dynamic_smem(cupy, fn, nbytes: int) -> None:
    """Opt the kernel function ``fn`` (a ``cupy.RawModule`` function) in to ``nbytes`` of
    dynamic shared memory, as a launch above :data:`DEFAULT_DYNAMIC_SMEM` needs
    (``cudaFuncAttributeMaxDynamicSharedMemorySize``); nothing to do at or below it."""
    if nbytes <= DEFAULT_DYNAMIC_SMEM:
        return
    try:
        fn.max_dynamic_shared_size_bytes = nbytes
    except AttributeError:  # a bare cupy.cuda.function.Function
        cupy.cuda.driver.funcSetAttribute(
            fn.ptr, cupy.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)


def f32_bits(x) -> np.uint32:
    """The uint32 bits of ``x`` rounded to float32: how a kernel's float argument is passed
    (the launchers hand float32 constants as bits, so no host rounding can differ)."""
    return np.asarray(x, dtype=np.float32).reshape(()).view(np.uint32)[()]


def device_info() -> dict:
    """Provenance of the current GPU and toolchain, for every report and recorded output."""
    cupy = require_gpu()
    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(0)
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        smi = ""
    nvrtc = cupy.cuda.nvrtc.getVersion()
    return {
        "gpu": props["name"].decode(),
        "compute_capability": f"{props['major']}.{props['minor']}",
        "multiprocessors": int(props["multiProcessorCount"]),
        "driver": smi.split(",")[-1].strip() if smi else None,
        "cuda_driver_api": rt.driverGetVersion(),
        "cuda_runtime": rt.runtimeGetVersion(),
        "nvrtc": f"{nvrtc[0]}.{nvrtc[1]}",
        "cupy": cupy.__version__,
        "host": platform.node(),
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
