"""Set the real FA3 libraries' recordings made on another GPU (``scripts/device_h100_libraries.sh``)
beside the H200's shipped ones (``simulator/data/device/``), case by case: the same frozen
case (the same inputs digest) must give the same output digests. The H200's recordings are
replayed against the emulator by ``python -m simulator verify``, so equal digests carry that
check over to the other GPU.

    python scripts/h100_library_compare.py RESULTS_DIR [--json OUT.json]

RESULTS_DIR holds ``library/fa3_library_report.json`` (fa3-fwd 0.0.3's case matrix),
``api/fa3_api_report.json`` (its Python-API calls) and ``backward/fa3_backward_report.json``
(flash-attn3-jax 0.2.3's backward matrix: the forward's digests, the deterministic runs'
digests of dQ / dK / dV / dpsum / LSE_log2, and whether the default runs differed), and
optionally ``backward_hyp/fa3_backward_hyp_report.json`` (the H200's drawn backward cases
re-recorded, ``scripts/device_h100_drawn.sh``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "simulator" / "data" / "device"


def _cases(report: dict, key: str) -> list[dict]:
    return report[key] if isinstance(report[key], list) else list(report[key].values())


def compare_forward(new: dict, old: dict, key: str, fields: tuple[str, ...]) -> dict:
    """Per case: the inputs digest must agree (the same frozen case) and each field's digest."""
    a, b = _cases(new, key), _cases(old, key)
    out = {"cases": len(a), "h200_cases": len(b), "inputs_differ": 0, "differ": 0,
           "refused_both": 0, "compared_values": 0, "differing_cases": []}
    for i, (x, y) in enumerate(zip(a, b, strict=False)):  # unequal lists: "cases" says so
        if x.get("inputs") != y.get("inputs"):
            out["inputs_differ"] += 1
            continue
        if "error" in x or "error" in y:
            out["refused_both"] += ("error" in x) and ("error" in y)
            if ("error" in x) != ("error" in y):
                out["differ"] += 1
                out["differing_cases"].append(i)
            continue
        bad = [f for f in fields if f in y and x.get(f) != y.get(f)]
        out["compared_values"] += sum(f in y for f in fields)
        if bad:
            out["differ"] += 1
            out["differing_cases"].append(i)
    return out


def compare_backward(new: dict, old: dict) -> dict:
    out = {"cases": 0, "differ": 0, "differing_cases": [], "default_runs_differed": 0}
    old_matrix = {json.dumps(r["case"], sort_keys=True): r for r in old["matrix"]}
    for r in new["matrix"]:
        y = old_matrix.get(json.dumps(r["case"], sort_keys=True))
        if y is None or "det" not in r or "det" not in y:
            continue
        out["cases"] += 1
        same = r["out"] == y["out"] and r["lse"] == y["lse"] and r["det"] == y["det"]
        if not same:
            out["differ"] += 1
            out["differing_cases"].append(r.get("index", out["cases"] - 1))
        out["default_runs_differed"] += any(run[n]["differ"] for run in r["default"]
                                            for n in run)
    return out


def slim_hyp(report: dict) -> dict:
    """The drawn backward report (``fa3_backward_record --hyp``) cut to what the comparison
    reads: per case its name, the forward's out / LSE digests and the deterministic run's."""
    return {"provenance": report["provenance"],
            "cases": [{"name": r["case"]["name"], "varlen": _varlen(r["case"]), "out": r["out"],
                       "lse": r["lse"], "det": r["det"]} for r in report["hyp"] if "det" in r]}


def _varlen(case: dict) -> bool:
    return any(case.get(k) is not None for k in ("seqlens_q", "seqused_q", "seqused_k"))


def compare_hyp(slim: dict, old: dict) -> dict:
    """The drawn backward cases against the H200's (``fa3_backward_hyp_report.json``) by case
    name: out, LSE, dQ, dK, dV everywhere; dpsum and LSE_log2 (the backward's scratch buffers)
    only without varlen / seqused, where every row of them is written (with them the rows
    past a sequence hold whatever the buffer held)."""
    by_name = {r["case"]["name"]: r for r in old["hyp"] if "det" in r}
    out = {"cases": 0, "differ": 0, "differing_cases": [], "scratch_compared": 0}
    for r in slim["cases"]:
        y = by_name.get(r["name"])
        if y is None:
            continue
        out["cases"] += 1
        names = ("dq", "dk", "dv") + (() if r["varlen"] else ("dpsum", "lse_log2"))
        out["scratch_compared"] += not r["varlen"]
        if r["out"] != y["out"] or r["lse"] != y["lse"] or \
                any(r["det"][n] != y["det"][n] for n in names):
            out["differ"] += 1
            out["differing_cases"].append(r["name"])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--slim-hyp", type=Path, help="write the drawn backward digests here")
    args = ap.parse_args(argv)
    load = lambda p: json.loads(Path(p).read_text())  # noqa: E731
    res = {}
    lib = load(args.results / "library" / "fa3_library_report.json")
    res["gpu"] = lib["provenance"].get("gpu")
    res["library"] = compare_forward(lib, load(H200 / "fa3_library_report.json"), "cases",
                                     ("out", "lse"))
    api = load(args.results / "api" / "fa3_api_report.json")
    res["api"] = compare_forward(api, load(H200 / "fa3_api_report.json"), "cases",
                                 ("out", "lse", "k_cache", "v_cache"))
    bwd = load(args.results / "backward" / "fa3_backward_report.json")
    res["backward"] = compare_backward(bwd, load(H200 / "fa3_backward_report.json"))
    hyp_path = args.results / "backward_hyp" / "fa3_backward_hyp_report.json"
    if hyp_path.exists():
        slim = slim_hyp(load(hyp_path))
        res["backward_hyp"] = compare_hyp(slim, load(H200 / "fa3_backward_hyp_report.json"))
        if args.slim_hyp:
            args.slim_hyp.write_text(json.dumps(slim, separators=(",", ":")) + "\n")
    for name in [n for n in ("library", "api", "backward", "backward_hyp") if n in res]:
        r = res[name]
        print(f"{name:9s} {r['cases']:4d} cases, {r['differ']} differ from the H200's "
              f"{'(inputs differ: ' + str(r['inputs_differ']) + ')' if r.get('inputs_differ') else ''}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    return 1 if any(res[n]["differ"] for n in ("library", "api", "backward", "backward_hyp")
                    if n in res) else 0


if __name__ == "__main__":
    sys.exit(main())
