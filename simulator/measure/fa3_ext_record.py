"""Record the real FA3 library (fa3-fwd) on the inference-API calls of
:mod:`simulator.replay.fa3_ext_cases`: qv (MLA), KV-cache calls with varlen queries / new
keys (rotary among them) and ``scheduler_metadata``.

    python -m simulator measure fa3_ext_record --out DIR [--draw N --workers W --seed S]
    python -m simulator measure fa3_ext_record --out DIR --plan PLAN.json   (on the GPU host)

Without ``--draw``: every case of :func:`simulator.replay.fa3_ext_cases.matrix` on the
library; ``DIR/fa3_ext_report.json`` holds per case the digests of out, softmax_lse and the
caches after the call (:func:`simulator.replay.fa3_api_cases.result_bits`), the library's
``get_scheduler_metadata`` array in full where the case uses it (and the digests of the same
call without it), or the library's error; ``DIR/fa3_ext_sample.npz`` the full out / lse bits
of every 4th call. With ``--draw N``: N hypothesis-drawn cases
(:func:`simulator.replay.fa3_ext_cases.drawn_calls`) run on the library while ``W`` spawned
workers emulate them; ``DIR/fa3_ext_drawn_report.json`` holds the counts, every disagreeing
case and a sample of agreeing ones with the library's digests (replayed in CI). ``--write-plan
FILE --draw N`` only draws (hypothesis, here) and writes the cases; ``--plan FILE`` (.json or
.json.gz) runs a written plan (on a GPU host without hypothesis). Hypothesis's draws are not
the same in every environment, so the plan the recording ran is kept:
``simulator/data/device/fa3_ext_drawn_plan.json.gz``. Exit codes:
0 all agree, 1 a disagreement, 2 no GPU / library.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

from ..device import fa3_library, runtime
from ..errors import OneLineParser
from ..io import save_npz_atomic, write_json_atomic
from ..replay.common import digest
from ..replay.fa3_api_cases import args_digest, result_bits
from . import fa3_api_replay

SAMPLE_EVERY = 4
DRAWN_SAMPLE_EVERY = 10


def library(case: dict, plain_too: bool = False) -> dict:
    """The library's digests of one case (and its scheduler metadata), or its error."""
    from ..replay.fa3_ext import canonical_metadata  # noqa: PLC0415
    from ..replay.fa3_ext_cases import call_args, metadata_args  # noqa: PLC0415

    name, args = call_args(case)
    rec = {}
    try:
        if args.get("scheduler_metadata") == "auto":
            md = fa3_library.scheduler_metadata(metadata_args(name, args))
            # the entries FA3 never writes (torch.empty memory) are set to 0 in the record
            rec["metadata"] = canonical_metadata(md, metadata_args(name, args)["batch_size"]).tolist()
            if plain_too:
                plain = {k: v for k, v in args.items() if k != "scheduler_metadata"}
                got = fa3_library.call(name, plain)
                bits = result_bits(name, plain, got["out"], got["lse"], caches=got)
                rec["without_metadata"] = {k: digest(v).hex() for k, v in bits.items()}
                name, args = call_args(case)  # fresh caches for the call with metadata
            args["scheduler_metadata"] = md
        got = fa3_library.call(name, args)
    except RuntimeError as exc:
        return {"error": str(exc).splitlines()[0][:300]}
    bits = result_bits(name, args, got["out"], got["lse"], caches=got)
    rec.update({k: digest(v).hex() for k, v in bits.items()})
    rec["_bits"] = bits
    return rec


def rare(case: dict) -> bool:
    """Cases the drawn sample keeps whatever their index: rotary with no new key at all (FA3
    then runs without AppendKV, so without rotary), and appends by a varlen launch with a
    sequence of no query rows (which appends nothing)."""
    no_new = "lens_new" in case and not sum(case["lens_new"])
    empty_q = "lens_q" in case and 0 in case["lens_q"] and (
        case.get("seqlen_new") or sum(case.get("lens_new", [])))
    return bool((case.get("rotary") and no_new) or empty_q)


def record_matrix(out_dir: Path) -> dict:
    from ..replay.fa3_ext_cases import call_args, matrix  # noqa: PLC0415

    records, sample, t0 = [], {}, time.time()
    for i, case in enumerate(matrix()):
        name, args = call_args(case)
        rec = {"case": case, "function": name,
               "inputs": args_digest({k: v for k, v in args.items() if k != "scheduler_metadata"})}
        got = library(case, plain_too=True)
        bits = got.pop("_bits", None)
        rec.update(got)
        if bits is not None and i % SAMPLE_EVERY == 0 and bits["out"].size <= 100_000:
            sample[f"c{i}_out"], sample[f"c{i}_lse"] = bits["out"], bits["lse"]
        records.append(rec)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_npz_atomic(out_dir / "fa3_ext_sample.npz", **sample)
    report = {"provenance": fa3_library.provenance() | {"date": time.strftime("%Y-%m-%d"),
                                                        "wheel_sha256": fa3_library.WHEEL_SHA256},
              "cases": records, "sample_every": SAMPLE_EVERY,
              "counts": {"cases": len(records), "refused": sum("error" in r for r in records),
                         "seconds": round(time.time() - t0, 1)},
              "regenerate": "python3 -m simulator measure fa3_ext_record --out DIR"}
    write_json_atomic(out_dir / "fa3_ext_report.json", report)
    return report["counts"]


def draw_cases(n: int, seed_value: int) -> list[dict]:
    """``n`` drawn cases of :func:`simulator.replay.fa3_ext_cases.drawn_calls` (hypothesis
    with a fixed seed, no database, generation only)."""
    from ..replay.fa3_ext_cases import drawn_calls  # noqa: PLC0415

    return fa3_api_replay.draw_cases(n, seed_value, drawn_calls())


def record_drawn(out_dir: Path, drawn: list[dict], seed_value: int, workers: int,
                 time_limit: float) -> dict:
    from ..replay.fa3_ext import emulate  # noqa: PLC0415

    t0 = time.time()
    n = len(drawn)
    refused = []

    def digests_only(case: dict) -> dict:
        lib = library(case)
        lib.pop("_bits", None)
        refused.append("error" in lib)
        return lib

    compared, bad, sample, stopped = fa3_api_replay.compare_live(
        drawn, digests_only, emulate, workers, t0 + time_limit if time_limit else None,
        lambda i, case: i % DRAWN_SAMPLE_EVERY == 0 or rare(case), chunksize=2)
    refused = sum(refused)
    report = {"provenance": fa3_library.provenance() | {"date": time.strftime("%Y-%m-%d")},
              "cases_asked": n, "cases": compared, "refused": refused,
              "distinct_cases": len({json.dumps(c, sort_keys=True) for c in drawn[:compared]}),
              "disagreements": len(bad), "stopped": stopped, "seed": seed_value,
              "workers": workers, "elapsed_s": round(time.time() - t0, 1),
              "disagreeing": bad[:1000], "sample": sample,
              "regenerate": "python3 -m simulator measure fa3_ext_record --out DIR --draw N --seed S"}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "fa3_ext_drawn_report.json", report)
    return {k: report[k] for k in ("cases", "refused", "disagreements", "stopped", "elapsed_s")}


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m simulator measure fa3_ext_record",
                       description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--draw", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=max(1, (mp.cpu_count() or 2) - 1))
    ap.add_argument("--time-limit", type=float, default=0.0)
    ap.add_argument("--plan", type=Path, help="run the drawn cases written in this file")
    ap.add_argument("--write-plan", type=Path, help="draw --draw N cases into this file and stop")
    args = ap.parse_args(argv)
    if args.draw < 0 or args.workers < 1:
        ap.error("--draw must be >= 0 and --workers >= 1")
    if args.write_plan:
        write_json_atomic(args.write_plan, {"seed": args.seed,
                                            "cases": draw_cases(args.draw, args.seed)})
        return 0
    ok, why = fa3_library.available()
    if not ok:
        raise runtime.DeviceUnavailable(why)
    if args.plan:
        raw = args.plan.read_bytes()
        plan = json.loads(gzip.decompress(raw) if args.plan.suffix == ".gz" else raw)
        drawn, seed_value = plan["cases"], plan["seed"]
    elif args.draw:
        drawn, seed_value = draw_cases(args.draw, args.seed), args.seed
    else:
        print(json.dumps(record_matrix(args.out)))
        return 0
    res = record_drawn(args.out, drawn, seed_value, args.workers, args.time_limit)
    print(json.dumps(res))
    return 1 if res["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(runtime.run_script(main))
