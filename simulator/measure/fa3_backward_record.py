"""Record the real FlashAttention-3 backward (flash-attn3-jax 0.2.3) on the H200.

Run on a machine with an sm_90 GPU, jax with CUDA and the wheel importable, from the
repository root::

    PYTHONUNBUFFERED=1 python3 -m simulator measure fa3_backward_record --out OUTDIR

For every case of :func:`simulator.replay.bwd_cases.matrix`, then the drawn cases of
:func:`simulator.replay.bwd_cases.drawn` until ``--time-limit``, the inputs are regenerated
from the case, the library's forward gives out and LSE, and its backward runs three times with
``deterministic=True`` and three times with ``deterministic=False``
(:mod:`simulator.device.fa3_jax`). Written atomically to OUTDIR:

* ``fa3_backward_report.json``: provenance, and per case the case, BLAKE2b-128 digests of the
  forward's out / LSE bits, of the deterministic runs' dq, dk, dv, dPsum and LSE_log2 (and
  whether the three runs agreed), of each default-mode run's dq, dk, dv, and how many values of
  each differ from the deterministic run; or the library's error message;
* ``fa3_backward_sample.npz``: the full bits of every ``SAMPLE_EVERY``-th case small enough
  (``SAMPLE_LIMIT`` values of dq; at most ``SAMPLE_BYTES`` raw bytes per part),
  ``{m|d}{i}_{name}`` (out, lse, dq, dk, dv, dpsum, lse_log2);
* ``fa3_backward_diffs.npz``: for every case and default-mode run, the flat positions and bits
  of the values that differ from the deterministic run, packed by
  :func:`simulator.replay.bwd_cases.pack_diffs`: with the deterministic digests they rebuild
  every recorded run;
* with ``--full``, ``fa3_backward_full_{j}.npz``: the full bits of every case up to
  ``FULL_LIMIT`` values, for analysis (not committed).

With ``--ext S`` it records instead the drawn cases from index S on, then the softcap and
``seqused_*`` cases of :func:`simulator.replay.bwd_cases.extras`, into ``fa3_backward_ext_*``
files of the same layout (entries keyed ``d{i}`` and ``e{i}``; the library's gradient rows past
``seqused`` are unwritten memory and recorded as 0).

With ``--hyp CASES`` it records instead the hypothesis-drawn cases of the file CASES (written
by ``--draw N``: :func:`draw_cases`, the strategy :func:`simulator.strategies.backward_cases`),
in ``--jobs J`` processes at once, into ``fa3_backward_hyp_*`` files of the same layout
(entries keyed ``h{i}``, the case list's index).

With ``--stress R`` it records instead the cases of the committed report whose default-mode
runs differed, with R default-mode runs each: ``fa3_backward_stress_report.json`` (entries as
above, each with its ``key`` in the main report) and ``fa3_backward_stress_diffs.npz``.
"""

from __future__ import annotations

import json
import platform
import sys
import time

import numpy as np

from ..device import fa3_jax
from ..io import save_npz_atomic, write_json_atomic
from ..replay import bwd_cases
from ..replay.common import digest
from .common import out_parser

REPORT_FILE = "fa3_backward_report.json"
SAMPLE_FILE = "fa3_backward_sample.npz"
DIFFS_FILE = "fa3_backward_diffs.npz"
HYP_CASES_FILE = "fa3_backward_hyp_cases.json"
SAMPLE_LIMIT = 40_000
SAMPLE_EVERY = 4
#: raw bytes of sampled bits per part of a recording (the files travel with every device visit)
SAMPLE_BYTES = 3 << 19
FULL_LIMIT = 100_000
FULL_FILE_BYTES = 12 << 20
FULL_FILES = 4
RUNS = 3
GRADS = ("dq", "dk", "dv")


def bits(x: np.ndarray) -> np.ndarray:
    """The array's bits as unsigned ints of its width."""
    return np.ascontiguousarray(x).view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def stats_rows(case: dict, x: np.ndarray) -> np.ndarray:
    """The rows of dPsum / LSE_log2 the preprocess kernel writes, [heads, rows] (per sequence
    for varlen, at FA3's padded offsets), so that digests skip memory FA3 leaves alone."""
    if case["seqlens_q"] is None:
        return np.ascontiguousarray(x)
    is_causal, _, _, local = fa3_jax.window_flags(case["causal"], case["window"],
                                                  case["seqlen_q"], case["seqlen_k"])
    km = fa3_jax.bwd_kblock_m(is_causal, local)
    parts, start = [], 0
    for b, n in enumerate(case["seqlens_q"]):
        off = (start + b * km) // km * km
        parts.append(x[:, off: off + -(-n // km) * km])
        start += n
    return np.ascontiguousarray(np.concatenate(parts, axis=1))


def record_case(case: dict, runs: int = RUNS) -> tuple[dict, dict, dict]:
    """(report entry, full bits, default-mode diffs) of one case: ``RUNS`` deterministic runs,
    ``runs`` default-mode ones."""
    x = bwd_cases.case_inputs(case)
    kw = {"causal": x["causal"], "window": x["window"], "cu_seqlens_q": x["cu_seqlens_q"],
          "cu_seqlens_k": x["cu_seqlens_k"], "max_seqlen_q": x["max_seqlen_q"],
          "max_seqlen_k": x["max_seqlen_k"], "softmax_scale": x["softmax_scale"],
          "softcap": x["softcap"]}
    used = {"seqused_q": x["seqused_q"], "seqused_k": x["seqused_k"]}
    t0 = time.perf_counter()
    out, lse = fa3_jax.forward(x["q"], x["k"], x["v"], **kw)
    entry = {"case": case, "out": digest(bits(out)).hex(), "lse": digest(bits(lse)).hex()}

    def run(deterministic):
        r = fa3_jax.backward(x["dout"], x["q"], x["k"], x["v"], out, lse,
                             deterministic=deterministic, **kw, **used)
        for name, cu, n in (("dq", x["cu_seqlens_q"], used["seqused_q"]),
                            ("dk", x["cu_seqlens_k"], used["seqused_k"]),
                            ("dv", x["cu_seqlens_k"], used["seqused_k"])):
            r[name] = bwd_cases.unwritten_zeroed(r[name], cu, n)
        return r

    det = [run(True) for _ in range(RUNS)]
    ref = {n: bits(det[0][n]) for n in GRADS}
    ref["dpsum"] = bits(stats_rows(case, det[0]["dpsum"]))
    ref["lse_log2"] = bits(stats_rows(case, det[0]["lse_log2"]))
    entry["det"] = {n: digest(v).hex() for n, v in ref.items()}
    entry["det_identical"] = all(np.array_equal(bits(r[n]), ref[n]) for r in det[1:] for n in GRADS)
    diffs, entry["default"] = {}, []
    for j in range(runs):
        r = run(False)
        row = {}
        for n in GRADS:
            got = bits(r[n]).ravel()
            idx = np.flatnonzero(got != ref[n].ravel())
            diffs[f"r{j}_{n}_idx"] = idx.astype(np.int64)
            diffs[f"r{j}_{n}_bits"] = got[idx]
            row[n] = {"digest": digest(got.reshape(ref[n].shape)).hex(), "differ": int(idx.size)}
        entry["default"].append(row)
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    return entry, {"out": bits(out), "lse": bits(lse), **ref}, diffs


def main(argv=None) -> int:
    ap = out_parser("fa3_backward_record", __doc__.splitlines()[0])
    ap.add_argument("--drawn", type=int, default=2500, help="drawn cases at most (default 2500)")
    ap.add_argument("--time-limit", type=float, default=420.0,
                    help="seconds after which no further case starts (default 420)")
    ap.add_argument("--only", type=int, default=None, help="the first N matrix cases only")
    ap.add_argument("--full", action="store_true", help="also the analysis files (full bits)")
    ap.add_argument("--ext", type=int, default=None, metavar="S",
                    help="the extension recording instead: drawn cases from index S on, then the "
                         "softcap and seqused cases (fa3_backward_ext_* files)")
    ap.add_argument("--draw", type=int, default=None, metavar="N",
                    help="draw N backward calls with hypothesis (seed --seed) into OUT/"
                         f"{HYP_CASES_FILE}, and record nothing")
    ap.add_argument("--seed", type=int, default=20261203, help="hypothesis seed of --draw")
    ap.add_argument("--hyp", default=None, metavar="CASES",
                    help="record the drawn cases of the file CASES (fa3_backward_hyp_* files)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="processes recording at once with --hyp (each its own jax client)")
    ap.add_argument("--stress", type=int, default=0, metavar="R",
                    help="re-record the cases whose default runs differed, R default runs each")
    args = ap.parse_args(argv)
    if args.draw is not None:
        path = f"{args.out}/{HYP_CASES_FILE}"
        write_json_atomic(path, draw_cases(args.draw, args.seed), compact=True)
        print(f"wrote {path}")
        return 0
    if args.stress:
        return stress(args.out, args.stress, args.time_limit)
    start = time.perf_counter()
    report = {"provenance": {**fa3_jax.provenance(), "python": sys.version.split()[0],
                             "host": platform.node(), "date": time.strftime("%Y-%m-%d"),
                             "runs": RUNS}, "matrix": [], "drawn": []}
    sample, diffs, full_files, sampled = {}, {}, [{}], {}
    first = 0 if args.ext is None else args.ext
    parts = [("matrix", bwd_cases.matrix()[: args.only] if args.ext is None else []),
             ("drawn", bwd_cases.drawn(7, first + args.drawn)[first:])]
    if args.hyp is not None:
        from ..io import read_json  # noqa: PLC0415

        drawn_file = read_json(args.hyp, "python -m simulator measure fa3_backward_record --draw N")
        report["provenance"]["drawn"] = drawn_file["provenance"]
        report["hyp"] = []
        parts = [("hyp", drawn_file["cases"])]
    if args.ext is not None:
        report["drawn_start"] = first
        report["extra"] = []
        parts.append(("extra", bwd_cases.extras()))
    # the extras start from their own budget: they are few, and they are what --ext is for
    limits = {"matrix": args.time_limit, "drawn": args.time_limit, "hyp": args.time_limit,
              "extra": args.time_limit + 120}
    for part, cases in parts:
        for i, (entry, full, d) in enumerate(_recorded(cases, args.jobs)):
            if time.perf_counter() - start > limits[part]:
                report["stopped"] = f"time limit reached at {part} case {i}"
                break
            key = f"{part[0]}{i + (first if part == 'drawn' else 0)}"
            entry["key"] = key
            report[part].append(entry)
            size = full["dq"].size if full else 0
            nbytes = sum(v.nbytes for v in full.values())
            if (full and i % SAMPLE_EVERY == 0 and size <= SAMPLE_LIMIT
                    and sampled.get(part, 0) + nbytes <= SAMPLE_BYTES):
                sample.update({f"{key}_{n}": v for n, v in full.items()})
                sampled[part] = sampled.get(part, 0) + nbytes
            if full and args.full and size <= FULL_LIMIT:
                if sum(a.nbytes for a in full_files[-1].values()) > FULL_FILE_BYTES:
                    full_files.append({})
                if len(full_files) <= FULL_FILES:
                    full_files[-1].update({f"{key}_{n}": v for n, v in full.items()})
            diffs.update({f"{key}_{n}": v for n, v in d.items()})
            if i % 25 == 0:
                brief = {k: v for k, v in entry.items() if k in ("error", "seconds", "det_identical")}
                print(f"{part} {i}/{len(cases)} {time.perf_counter() - start:.0f} s {json.dumps(brief)}",
                      flush=True)
    report["seconds"] = round(time.perf_counter() - start, 1)
    stem = "fa3_backward" if args.ext is None else "fa3_backward_ext"
    stem = "fa3_backward_hyp" if args.hyp is not None else stem
    save_npz_atomic(f"{args.out}/{SAMPLE_FILE.replace('fa3_backward', stem)}", **sample)
    save_npz_atomic(f"{args.out}/{DIFFS_FILE.replace('fa3_backward', stem)}",
                    **bwd_cases.pack_diffs(diffs))
    for j, arrays in enumerate(full_files[:FULL_FILES] if args.full else []):
        save_npz_atomic(f"{args.out}/fa3_backward_full_{j}.npz", **arrays)
    write_json_atomic(f"{args.out}/{REPORT_FILE.replace('fa3_backward', stem)}", report,
                      compact=True)
    print(f"recorded {len(report['matrix'])} matrix, {len(report['drawn'])} drawn and "
          f"{len(report.get('extra', []))} extra cases in {report['seconds']} s")
    return 0


def _record_or_refusal(case: dict) -> tuple[dict, dict, dict]:
    """:func:`record_case`, or the library's refusal as an entry (it is a result too)."""
    try:
        return record_case(case)
    except Exception as exc:
        return {"case": case, "error": f"{type(exc).__name__}: {exc}"[:400]}, {}, {}


def _recorded(cases: list[dict], jobs: int):
    """(entry, full bits, diffs) of each case in order: in this process, or with ``jobs`` > 1
    in that many spawned processes (each with its own jax client on the GPU). Stopping the
    iteration early stops the processes."""
    if jobs <= 1:
        yield from map(_record_or_refusal, cases)
        return
    import multiprocessing as mp  # noqa: PLC0415

    with mp.get_context("spawn").Pool(jobs) as pool:
        yield from pool.imap(_record_or_refusal, cases, chunksize=1)


def draw_cases(count: int, seed: int) -> dict:
    """``count`` distinct backward calls drawn by hypothesis (seed ``seed``, generation phase
    only, no example database) from :func:`simulator.strategies.backward_cases`, named
    ``hyp{i}``: ``{"provenance": ..., "cases": [...]}``, the file ``--hyp`` records."""
    import hypothesis  # noqa: PLC0415
    from hypothesis import HealthCheck, Phase, given, settings  # noqa: PLC0415
    from hypothesis import seed as hyp_seed  # noqa: PLC0415

    from .. import strategies as sst  # noqa: PLC0415

    seen, cases = set(), []

    @settings(max_examples=4 * count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @hyp_seed(seed)
    @given(sst.backward_cases())
    def collect(case):
        key = json.dumps(case, sort_keys=True)
        if len(cases) < count and key not in seen:
            seen.add(key)
            cases.append({**case, "name": f"hyp{len(cases)}"})

    collect()
    return {"provenance": {"strategy": "simulator.strategies.backward_cases()",
                           "hypothesis": hypothesis.__version__, "seed": seed,
                           "date": time.strftime("%Y-%m-%d")},
            "cases": cases}


def stress(out: str, runs: int, time_limit: float) -> int:
    """``--stress``: the varying cases of the committed report, ``runs`` default runs each."""
    from ..io import read_json  # noqa: PLC0415
    from ..replay.fa3_backward import REGENERATE, REPORT, differed  # noqa: PLC0415

    start = time.perf_counter()
    base = read_json(REPORT, REGENERATE)
    report = {"provenance": {**fa3_jax.provenance(), "python": sys.version.split()[0],
                             "date": time.strftime("%Y-%m-%d"), "runs": runs}, "entries": []}
    diffs = {}
    todo = [(f"{part[0]}{i}", e) for part in ("matrix", "drawn") for i, e in enumerate(base[part])
            if "error" not in e and differed(e)]
    for n, (key, e) in enumerate(todo):
        if time.perf_counter() - start > time_limit:
            report["stopped"] = f"time limit reached after {n} of {len(todo)} cases"
            break
        entry, _, d = record_case(e["case"], runs)
        entry["key"] = key
        report["entries"].append(entry)
        diffs.update({f"{key}_{k}": v for k, v in d.items()})
        if n % 25 == 0:
            print(f"stress {n}/{len(todo)} {time.perf_counter() - start:.0f} s", flush=True)
    report["seconds"] = round(time.perf_counter() - start, 1)
    save_npz_atomic(f"{out}/fa3_backward_stress_diffs.npz", **bwd_cases.pack_diffs(diffs))
    write_json_atomic(f"{out}/fa3_backward_stress_report.json", report)
    print(f"stress: {len(report['entries'])} cases, {runs} default runs each, {report['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
