"""Compare one GPU's measurement runs (scripts/h100_sweeps.sh) with the H200 recordings shipped
in simulator/data/device/ and the MUFU tables in simulator/data/mufu/.

Two checks per run:

* device vs emulator, as the run itself counted it on the spot (its report's mismatch counts;
  for ``mma_fp8_probe``, which counts nothing, the shipped FP8 model is run here on its tiles);
* device vs device: every array of each ``.npz`` the run wrote (per-chunk BLAKE2b digests of all
  2^32 inputs, raw result bits, samples) against the same array of the H200's recording,
  element by element (a digest row counts as one element), and for ``mufu_calibrate`` the
  checksums of the re-measured tables against the shipped ``sm90.json``.

Writes a JSON (``--json``) and prints one line per run. Runs on the device host or here:

    python scripts/h100_compare.py RESULTS_DIR [--json compare.json]

RESULTS_DIR holds one folder per run, as h100_sweeps.sh writes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
H200 = ROOT / "simulator" / "data" / "device"
MUFU = ROOT / "simulator" / "data" / "mufu"

#: run folder -> [(file written by the run, H200 counterpart in simulator/data/device)]
NPZ = {
    "numerics_sweep": [("numerics_digests.npz", "numerics_digests.npz"),
                       ("numerics_samples.npz", "numerics_samples.npz")],
    "mufu_calibrate": [("mufu_digests.npz", "mufu_digests.npz"),
                       ("mufu_samples.npz", "mufu_samples.npz")],
    "hw_probe": [(n, n) for n in ("hw_layouts.npz", "hw_shuffle.npz", "hw_reduce.npz")],
    "mma_probe": [("mma_digests.npz", "mma_digests.npz")],
    "mma_fp8_probe": [("mma_fp8_probe.npz", "mma_fp8_probe.npz")],
    "mma_fp8_sweep": [(f"mma_fp8_sweep_{f}.npz", f"mma_fp8_sweep_{f}.npz") for f in ("e4m3", "e5m2")],
    "reduce_add_probe": [("reduce_add_probe.npz", "reduce_add_probe.npz")],
}
REPORTS = {
    "numerics_sweep": ["numerics_report.json"],
    "mufu_calibrate": ["mufu_report.json", "mufu_report_partial.json"],
    "hw_probe": ["hw_report.json"],
    "mma_probe": ["mma_validate_report.json"],
    "mma_fp8_probe": ["mma_fp8_probe.json"],
    "mma_fp8_sweep": ["mma_fp8_sweep_e4m3.json", "mma_fp8_sweep_e5m2.json"],
    "reduce_add_probe": ["reduce_add_probe.json"],
}


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def compare_npz(mine: Path, theirs: Path) -> dict:
    """Per array: how many elements (digest rows for 2-D uint8 digests) differ."""
    if not mine.is_file():
        return {"missing": str(mine.name)}
    a, b = np.load(mine), np.load(theirs)
    arrays, differ = {}, 0
    for key in sorted(set(a.files) | set(b.files)):
        if key not in a.files or key not in b.files:
            arrays[key] = "only in " + ("this run" if key in a.files else "the H200 recording")
            differ += 1
            continue
        x, y = a[key], b[key]
        if x.shape != y.shape or x.dtype != y.dtype:
            arrays[key] = f"shape/dtype {x.shape} {x.dtype} vs {y.shape} {y.dtype}"
            differ += 1
            continue
        if x.ndim == 2 and x.dtype == np.uint8 and x.shape[1] == 16:  # digest rows
            n, bad = x.shape[0], int(np.any(x != y, axis=1).sum())
        else:
            n, bad = int(x.size), int(np.count_nonzero(x.view(np.uint8) != y.view(np.uint8))
                                      if x.dtype.kind not in "fiub" else np.count_nonzero(x != y))
        arrays[key] = {"elements": n, "differ": bad}
        differ += bad
    return {"arrays": arrays, "differing_elements": differ}


def emulator_counts(run: str, folder: Path) -> dict:
    """The run's own device-vs-emulator mismatch counts, per instruction or form."""
    reps = {n: _load(folder / n) for n in REPORTS[run]}
    if run == "numerics_sweep" and reps["numerics_report.json"]:
        r = reps["numerics_report.json"]
        out = {}
        for sec in ("widen_and_pack", "arithmetic", "conversions"):
            for k, v in r.get(sec, {}).items():
                n = v.get("inputs", v.get("cases", v.get("pairs")))
                out[k] = {"count": n, "mismatches": v["mismatches"]}
        return out
    if run == "mufu_calibrate":
        r = reps["mufu_report.json"] or reps["mufu_report_partial.json"]
        if not r:
            return {}
        return {k: {"count": v["inputs"], "mismatches": v["mismatches"],
                    "checked_against": v["checked_against"]}
                for k, v in r["forms"].items()} | (
                    {"_partial": True} if not reps["mufu_report.json"] else {})
    if run == "hw_probe" and reps["hw_report.json"]:
        return {"all": {"mismatches": reps["hw_report.json"]["total_mismatches"]}}
    if run == "mma_probe" and reps["mma_validate_report.json"]:
        r = reps["mma_validate_report.json"]
        out = {f"layout {k}": {"count": sum(e["outputs"] for e in v),
                               "mismatches": sum(e["mismatches"] for e in v)}
               for k, v in r["layouts"].items()}
        out.update({k: {"count": v["outputs"], "mismatches": v["mismatches"]}
                    for k, v in r.items() if isinstance(v, dict) and "mismatches" in v})
        return out
    if run == "mma_fp8_probe" and (folder / "mma_fp8_probe.npz").is_file():
        from simulator.mma.instructions import params_for  # noqa: PLC0415
        from simulator.replay.mma_probes import emulate_probe  # noqa: PLC0415

        p = np.load(folder / "mma_fp8_probe.npz")
        emu = emulate_probe("mma_sync_m16n8k32_e4m3", p["A"], p["B"], p["C"],
                            params_for("mma_sync", "e4m3"))
        return {"mma_sync_m16n8k32_e4m3 (2-3 products)": {
            "count": int(emu.size), "mismatches": int(np.count_nonzero(emu != p["D"]))}}
    if run == "mma_fp8_sweep":
        out = {}
        for r in reps.values():
            if r:
                for part, bad in r["mismatches"]["shipped"].items():
                    out[f"{r['instruction']} {part}"] = {
                        "count": r["mismatches"]["outputs"][part], "mismatches": bad}
        return out
    if run == "reduce_add_probe" and reps["reduce_add_probe.json"]:
        r = reps["reduce_add_probe.json"]
        mine = _load(H200 / "reduce_add_probe.json")
        out = {}
        for k, v in r["kernels"].items():
            model = {m: n for m, n in mine["kernels"][k]["mismatches_per_model"].items() if n == 0}
            (m,) = model  # the emulator's model of this kernel: the H200's 0-mismatch one
            out[k] = {"count": r["pairs"], "mismatches": v["mismatches_per_model"][m],
                      "model": m, "per_model": v["mismatches_per_model"]}
        return out
    return {}


def _kernel_hash(report: dict):
    return (report.get("kernel_sha256") or report.get("provenance", {}).get("kernel_sha256")
            or report.get("kernels"))


def kernel_hashes(run: str, folder: Path) -> dict:
    """Kernel SHA-256 of this run and of the H200 recording (equal: same probe source)."""
    out = {}
    for name in REPORTS[run]:
        r, h = _load(folder / name), _load(H200 / name.replace("mma_validate_report", "mma_report"))
        if r and h:
            out[name] = {"same_kernel_source": _kernel_hash(r) == _kernel_hash(h)}
    return out


def mufu_tables(folder: Path) -> dict:
    mine, shipped = _load(folder / "tables" / "sm90.json"), _load(MUFU / "sm90.json")
    if not mine:
        return {"missing": "tables/sm90.json"}
    per = {k: mine["table_blake2b"][k] == v for k, v in shipped["table_blake2b"].items()}
    return {"tables_blake2b_equal": mine["tables_blake2b"] == shipped["tables_blake2b"],
            "per_table_equal": per,
            "tanh_exceptions": [mine["exceptions"], shipped["exceptions"]],
            "device": mine["device"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out = {}
    for run, files in NPZ.items():
        folder = args.results / run
        entry = {"ran": folder.is_dir()}
        if folder.is_dir():
            entry["emulator"] = emulator_counts(run, folder)
            entry["h200_bits"] = {mine: compare_npz(folder / mine, H200 / h200)
                                  for mine, h200 in files}
            entry["kernel"] = kernel_hashes(run, folder)
            if run == "mufu_calibrate":
                entry["tables"] = mufu_tables(folder)
        out[run] = entry
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{'run':18s} {'emulator mismatches':>30s}   {'differs from the H200 recording':s}")
    worst = 0
    for run, e in out.items():
        if not e["ran"]:
            print(f"{run:18s} not run")
            worst = max(worst, 2)
            continue
        em = {k: v for k, v in e["emulator"].items() if isinstance(v, dict)}
        if not em:
            print(f"{run:18s} no report (failed or cut before its end: see its run.log)")
            worst = max(worst, 2)
            continue
        checked = sum(v.get("count") or 0 for v in em.values())
        bad = sum(v["mismatches"] for v in em.values())
        partial = " (partial)" if e["emulator"].get("_partial") else ""
        diffs = [f"{m}: {c['differing_elements']}" if "differing_elements" in c else f"{m}: missing"
                 for m, c in e["h200_bits"].items()]
        if run == "mufu_calibrate" and "tables_blake2b_equal" in e.get("tables", {}):
            diffs.append(f"tables equal: {e['tables']['tables_blake2b_equal']}")
        print(f"{run:18s} {bad:>12,} of {checked:>15,}{partial}   " + "; ".join(diffs))
        worst = max(worst, 1 if bad or any(c.get("differing_elements", 1)
                                           for c in e["h200_bits"].values()) else 0)
    return worst


if __name__ == "__main__":
    sys.exit(main())
