"""Shared helpers of the benchmark scripts (run them as ``python benchmarks/bench_*.py``).

Every ratio a script prints is measured side by side in one process: both sides warmed up
first (table loads, first touch of pages, BLAS buffers), timed in turns (round by round, so a
shared machine's load falls on both), both under the same BLAS thread
count (threadpoolctl, ``--threads``, default 1: the 2-core development machine and CI runners
differ in cores, and a 2-thread BLAS on 2 shared cores measured slower than 1 thread), and each
figure the median of several timed runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))


def median_time(fn, repeats: int, warmup: int = 1) -> float:
    """Median wall time in seconds of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed
    calls (first touch of output pages, table loads)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved_medians(fns, rounds: int, inner=None, warmup: int = 1) -> list[float]:
    """Median wall time in seconds of each of ``fns``, timed in turns: every round runs each
    function once (``inner[i]`` times for function i, averaged), so that both sides of a ratio
    see the same load on a shared machine. ``warmup`` untimed rounds first."""
    inner = inner or [1] * len(fns)
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(max(1, rounds)):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(inner[i]):
                fn()
            times[i].append((time.perf_counter() - t0) / inner[i])
    return [statistics.median(t) for t in times]


@contextlib.contextmanager
def blas_threads(n: int):
    """Limit BLAS (and OpenMP) thread pools to ``n`` threads for the block, on both sides of a
    ratio. Needs threadpoolctl (``pip install -e '.[bench]'``); refuses to run without it, since
    an unlimited pool makes ratios depend on the machine's load."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        raise SystemExit("benchmarks need threadpoolctl to fix the BLAS thread count: "
                         "pip install -e '.[bench]' (or pip install threadpoolctl)") from None
    with threadpool_limits(limits=n):
        yield


def blas_info() -> str:
    """One line naming the BLAS library NumPy uses and its thread count now."""
    from threadpoolctl import threadpool_info

    libs = [f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads)"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(libs) or "no BLAS library found by threadpoolctl"


def machine() -> str:
    """CPU model and core count, for the printed header."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cores"


def code_identity() -> dict:
    """Which code a run measured: ``commit``, git's HEAD where git answers (None elsewhere; a
    copied tree's ``.git`` may lag its files, as on the device hosts), and ``simulator_sha256``,
    the SHA-256 of every ``simulator/**/*.py`` (paths and bytes, in path order), which names
    the tree itself."""
    import hashlib
    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    digest = hashlib.sha256()
    for src in sorted((ROOT / "simulator").rglob("*.py")):
        digest.update(str(src.relative_to(ROOT)).encode() + b"\0" + src.read_bytes() + b"\0")
    return {"commit": commit, "simulator_sha256": digest.hexdigest()}


def add_common_args(ap) -> None:
    """``--threads``, ``--repeats`` and ``--json`` for every script."""
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads on both sides (default 1)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per figure (median)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows to this JSON file")


def emit(rows: list[dict], json_path: Path | None) -> None:
    """Write ``rows`` (one dict per printed ratio) to ``json_path`` when given."""
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(rows, indent=1) + "\n")


def ratio_row(script: str, measures: str, ours: float, anchor: float, anchor_name: str,
              target: str = "-", faster: bool = False) -> dict:
    """A result row: our time, the anchor's, and the ratio ours / anchor (or anchor / ours with
    ``faster``, for the anchors we must beat)."""
    ratio = anchor / ours if faster else ours / anchor
    return {"script": script, "measures": measures, "ours_s": ours, "anchor_s": anchor,
            "anchor": anchor_name, "ratio": ratio, "faster": faster, "target": target}
