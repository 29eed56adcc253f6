"""Print the NumPy specification engine's benchmark table (docs/speed.md) from fresh
measurements (and the recorded device run).

Runs every CPU benchmark's ``measure()`` in this process with the same BLAS thread count
(``--threads``, default 1), then formats one Markdown row per ratio; the device row is read
from ``benchmarks/results/bench_device.json`` (written by ``bench_device.py`` on the H200).
``--json PATH`` also keeps the raw rows. Run: ``python benchmarks/table.py > table.md`` and
paste it over that table in docs/speed.md. Takes a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import bench_backward
import bench_flash
import bench_hw
import bench_mma
import bench_mufu
import bench_numerics
import bench_startup
from timing import blas_info, blas_threads, emit, machine

RESULTS = Path(__file__).resolve().parent / "results"


def _ratio(r: dict) -> str:
    if r.get("ratio") is None:
        return f"{r['ours_s'] * 1e3:.2f} ms (no anchor installed)"
    def unit(t):
        return f"{t:.2f} s" if t >= 1 else f"{t * 1e3:.2f} ms" if t < 0.01 else f"{t * 1e3:.1f} ms"

    if r["faster"]:
        return f"{r['ratio']:.1f}x faster ({unit(r['ours_s'])} vs {unit(r['anchor_s'])})"
    return f"{r['ratio']:.1f}x ({unit(r['ours_s'])} vs {unit(r['anchor_s'])})"


def _met(r: dict) -> str:
    t = r.get("target", "-")
    if t == "-" or r.get("ratio") is None:
        return t
    bound = float(t.split()[1].rstrip("x"))
    ok = r["ratio"] >= bound if r["faster"] else r["ratio"] <= bound
    return f"{t}: {'met' if ok else 'missed'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--no-triton", action="store_true")
    args = ap.parse_args()
    rows = []
    rows += bench_numerics.measure(threads=args.threads)[0]
    rows += bench_mufu.measure(threads=args.threads)
    rows += bench_hw.measure(threads=args.threads)[0]
    rows += bench_mma.measure(threads=args.threads)
    rows += bench_flash.measure(threads=args.threads, triton=not args.no_triton)
    rows += bench_backward.measure(threads=args.threads)
    startup = bench_startup.measure()
    with blas_threads(args.threads):
        blas = blas_info()
    print(f"Measured on {machine()}; BLAS {blas}; medians after warm-up, ratios side by side "
          f"in one process (`python benchmarks/table.py`):")
    print()
    print("| script | measures | ratio (ours vs anchor) | target |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print(f"| `{r['script']}` | {r['measures']} | {_ratio(r)} | {_met(r)} |")
    for r in startup:
        lo, hi = r["spread_s"]
        peak = f"{r['peak_mb']:.0f} MB"
        met = r["target"] if r["target"] == "-" else \
            f"{r['target']}: {'met' if r['ours_s'] < float(r['target'].split()[1]) else 'missed'}"
        if r["peak_target_mb"]:
            ok = "met" if r["peak_mb"] <= r["peak_target_mb"] else "missed"
            peak += f" (target <= {r['peak_target_mb']} MB: {ok})"
        print(f"| `{r['script']}` | {r['measures']} | {r['ours_s']:.2f} s (median; {lo:.2f}-{hi:.2f}), "
              f"peak {peak} | {met} |")
    dev = json.loads((RESULTS / "bench_device.json").read_text())
    s = dev["shape"]
    for res in dev["results"]:
        print(f"| `bench_device.py` (on the {dev['device']['gpu']}, {dev['device']['date_utc'][:10]}) | "
              f"the CUDA twin vs torch SDPA, batch {s['batch']}, {s['heads']} heads, {s['seqlen_q']}, "
              f"d {s['head_dim']}{', causal' if res['causal'] else ''} | "
              f"{res['ratio_ours_over_torch_throughput']:.2f}x torch's throughput | - |")
    emit(rows + startup, args.json)


if __name__ == "__main__":
    main()
