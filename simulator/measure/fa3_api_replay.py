"""``simulator.fa3`` against the real FA3 library on hypothesis-drawn API calls.

    python -m simulator measure fa3_api_replay --out DIR [--cases N] [--seed S] [--workers W]
        [--time-limit SECONDS]

Draws ``N`` calls from :func:`simulator.replay.fa3_api_cases.drawn_calls` (hypothesis, seeded;
each call is a JSON case whose arrays come from its seed), emulates them in ``W`` spawned worker
processes while this process runs each on the library, and compares the bits of out,
softmax_lse and the updated KV caches (rows FA3 leaves unwritten set to 0 / -inf). Writes
``DIR/fa3_api_replay_report.json``: counts, what was drawn, every disagreeing case, a sample of
agreeing cases with the library's digests (replayed in CI), provenance. Exit codes: 0 all
compared and agreeing, 1 a disagreement, 2 no GPU / library or bad arguments, 3 incomplete.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time
from collections import Counter
from pathlib import Path

from ..device import fa3_library, runtime
from ..errors import OneLineParser
from ..io import write_json_atomic
from ..replay.fa3_api import digests, emulate

SAMPLE_EVERY = 25


def draw_cases(n: int, seed_value: int, strategy=None) -> list[dict]:
    """``n`` drawn cases (hypothesis with a fixed seed, no database, generation only) of
    ``strategy`` (default :func:`simulator.replay.fa3_api_cases.drawn_calls`)."""
    from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: PLC0415

    from ..replay.fa3_api_cases import drawn_calls  # noqa: PLC0415

    cases: list[dict] = []

    @seed(seed_value)
    @settings(database=None, max_examples=n, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(drawn_calls() if strategy is None else strategy)
    def collect(case):
        cases.append(case)

    collect()
    return cases


def library(case: dict) -> dict:
    """The library's digests for one case, or its error."""
    from ..replay.fa3_api_cases import call_args  # noqa: PLC0415

    name, args = call_args(case)
    try:
        got = fa3_library.call(name, args)
    except RuntimeError as exc:
        return {"error": str(exc).splitlines()[0][:300]}
    return digests(name, args, got["out"], got["lse"], caches=got)


def _labels(case: dict) -> list[str]:
    if case["api"] == "combine":
        return ["api=combine", f"num_splits={case['num_splits']}", f"out_dtype={case['out_dtype']}",
                f"head_dim_v={case['head_dim_v']}"]
    return [f"head_dim_v={case.get('head_dim_v', case['head_dim'])}",
            f"api={case['api']}", f"dtype={case['dtype']}", f"head_dim={case['head_dim']}",
            f"gqa={case['heads'] // case['heads_kv']}", f"num_splits={case['num_splits']}",
            f"causal={case['causal']}", f"softcap={case['softcap'] > 0}"]


def compare_live(cases: list[dict], library_fn, emulate_fn, workers: int, deadline: float | None,
                 keep, chunksize: int = 4) -> tuple[int, list, list, str]:
    """Each case on the library (``library_fn``, in this process) while ``workers`` spawned
    processes emulate it (``emulate_fn``, picklable), in order, until ``deadline`` (a
    ``time.time()`` value, or None). A case disagrees when the two results differ, unless both
    are errors; an agreeing case the library ran goes to the sample when ``keep(i, case)``.

    Returns:
        (cases compared, disagreeing {case, library, emulator} dicts, sampled {case, **library}
        dicts, "time limit" or "").
    """
    compared, bad, sample, stopped = 0, [], [], ""
    ctx = mp.get_context("spawn")  # this process has CUDA initialised: no fork
    with ctx.Pool(workers) as pool:
        pending = pool.imap(emulate_fn, cases, chunksize=chunksize)
        for i, case in enumerate(cases):
            if deadline is not None and time.time() > deadline:
                stopped = "time limit"
                break
            lib = library_fn(case)
            emu = next(pending)
            compared += 1
            if emu != lib and not ("error" in emu and "error" in lib):
                bad.append({"case": case, "library": lib, "emulator": emu})
            elif keep(i, case) and "error" not in lib:
                sample.append({"case": case, **lib})
        pool.terminate()
    return compared, bad, sample, stopped


def run(out_dir: Path, cases: int, seed_value: int, workers: int, time_limit: float) -> dict:
    t0 = time.time()
    drawn = draw_cases(cases, seed_value)
    keys = [json.dumps(c, sort_keys=True) for c in drawn]
    compared, bad, sample, stopped = compare_live(
        drawn, library, emulate, workers, t0 + time_limit if time_limit else None,
        lambda i, case: i % SAMPLE_EVERY == 0)
    labels = Counter(label for case in drawn[:compared] for label in _labels(case))
    report = {"provenance": fa3_library.provenance() | {"date": time.strftime("%Y-%m-%d")},
              "cases_asked": cases, "cases": compared, "distinct_cases": len(set(keys[:compared])),
              "disagreements": len(bad), "stopped": stopped, "seed": seed_value,
              "workers": workers, "elapsed_s": round(time.time() - t0, 1),
              "drawn": dict(sorted(labels.items())), "disagreeing": bad[:100], "sample": sample,
              "regenerate": "python3 -m simulator measure fa3_api_replay --out DIR --cases N --seed S"}
    write_json_atomic(out_dir / "fa3_api_replay_report.json", report)
    return report


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m simulator measure fa3_api_replay",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=max(1, (mp.cpu_count() or 2) - 1))
    ap.add_argument("--time-limit", type=float, default=0.0)
    args = ap.parse_args(argv)
    if args.cases < 1 or args.workers < 1 or not args.time_limit >= 0:
        ap.error("--cases and --workers must be >= 1, --time-limit >= 0")
    ok, why = fa3_library.available()
    if not ok:
        raise runtime.DeviceUnavailable(why)
    rep = run(args.out, args.cases, args.seed, args.workers, args.time_limit)
    print(json.dumps({k: rep[k] for k in ("cases", "distinct_cases", "disagreements", "stopped",
                                          "elapsed_s")}))
    if rep["disagreements"]:
        return 1
    return 3 if rep["stopped"] or rep["cases"] < rep["cases_asked"] else 0


if __name__ == "__main__":
    sys.exit(runtime.run_script(main))
