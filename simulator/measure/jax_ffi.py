"""What the recorders of JAX-packaged FlashAttention builds share (PyPI ``flash-attn-jax``'s
FA2, ``dew-flash-attn``'s FA3): uint16 bits to device arrays and back, the GPU's provenance,
one-line errors, and running a recorder's case groups in parallel worker processes (each
build's kernels load on first use; flash-attn-jax's are sm_80 PTX that the driver
JIT-compiles per module, seconds to a minute each, so the groups of different modules run
side by side).

Import :func:`jax_modules` only on the GPU host: nothing here imports jax at module level.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def start(out: str) -> tuple[Path, object]:
    """A recorder's output folder (made) and its ``log(msg)``: lines stamped with the seconds
    since this call, flushed."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - t0:7.1f} s] {msg}", flush=True)

    return folder, log


def jax_modules():
    """``(jax, jax.numpy)`` with 64-bit off and preallocation off (several processes share
    the GPU)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    return jax, jnp


def to_device(jax, jnp, bits: np.ndarray, dtype: str):
    """uint16 bits -> a device array of bf16 / fp16 (bit for bit)."""
    x = jax.device_put(np.ascontiguousarray(bits, dtype=np.uint16))
    return jax.lax.bitcast_convert_type(x, jnp.bfloat16 if dtype == "bf16" else jnp.float16)


def bits16(jax, jnp, x) -> np.ndarray:
    """A bf16 / fp16 device array's uint16 bits on the host."""
    return np.asarray(jax.lax.bitcast_convert_type(x, jnp.uint16))


def f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def first_line(exc: BaseException, n: int = 400) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())[:n]


def provenance(jax, extra: dict) -> dict:
    """The GPU (name, SM count, compute capability), driver, jax and host."""
    dev = jax.devices()[0]
    p = {"date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
         "python": platform.python_version(), "numpy": np.__version__,
         "jax": jax.__version__, "gpu": getattr(dev, "device_kind", str(dev)),
         "sm_count": int(getattr(dev, "core_count", 0) or 0),
         "compute_capability": str(getattr(dev, "compute_capability", "")), **extra}
    for field in ("driver_version", "clocks.max.sm", "memory.total", "pci.device_id"):
        try:
            p[field] = subprocess.run(
                ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                capture_output=True, text=True, check=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            p[field] = "unknown"
    return p


def runs_bits(runs: list[np.ndarray]) -> np.ndarray:
    """``[n, ...]`` uint16: row 0 run 0's bits, row r > 0 run r's bits XOR run 0's."""
    first = runs[0]
    return np.stack([first] + [r ^ first for r in runs[1:]])


def spawn_workers(module: str, out: Path, workers: int, extra: list[str], log,
                  env_of=None) -> list[int]:
    """Run ``python -m simulator measure MODULE --out OUT --worker k --workers W`` for each k
    at once; returns their exit codes (each worker's output goes to OUT/worker{k}.log).
    ``env_of(k)``: worker k's environment (default: this process's)."""
    procs = []
    for k in range(workers):
        f = open(out / f"worker{k}.log", "w")  # noqa: SIM115  (closed below)
        cmd = [sys.executable, "-m", "simulator", "measure", module, "--out", str(out),
               "--worker", str(k), "--workers", str(workers), *extra]
        env = None if env_of is None else env_of(k)
        procs.append((subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env), f))
    codes = []
    t0 = time.time()
    for k, (p, f) in enumerate(procs):
        codes.append(p.wait())
        f.close()
        log(f"worker {k} exit {codes[-1]} ({time.time() - t0:.0f} s)")
    return codes


def merge_parts(out: Path, workers: int) -> tuple[dict, dict]:
    """The workers' ``part{k}.json`` (lists of records per phase) and ``part{k}.npz`` merged:
    (records per phase sorted by index, arrays)."""
    records: dict[str, list] = {}
    arrays: dict[str, np.ndarray] = {}
    for k in range(workers):
        pj, pn = out / f"part{k}.json", out / f"part{k}.npz"
        if pj.exists():
            for phase, recs in json.loads(pj.read_text()).items():
                records.setdefault(phase, []).extend(recs)
        if pn.exists():
            with np.load(pn) as z:
                arrays.update({n: z[n] for n in z.files})
    for recs in records.values():
        recs.sort(key=lambda r: r["index"])
    return records, arrays
