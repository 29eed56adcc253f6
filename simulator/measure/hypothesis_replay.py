"""Emulator against device on hypothesis-drawn attention inputs.

    python -m simulator measure hypothesis_replay --out DIR [--cases N] [--workers W] [--seed S]
    python -m simulator measure hypothesis_replay --out DIR --database DB [--cases N]

Cases come from :func:`replay_cases` (:func:`simulator.strategies.attention_inputs` with the
block parameters restricted to :data:`CONFIGS`, so that 36 NVRTC modules serve every case).

Deep run (default): ``N`` cases are drawn in ``W`` shards, shard ``i`` by hypothesis with seed
``S + i``, each in its own (spawned) process that also runs the emulator on its cases; the parent
runs every case on the GPU as the shards stream them in and compares the bits of O and LSE.
Every disagreeing case (inputs and device bits) goes to ``DIR/replay_disagreements.npz`` as a
new golden; a sample of agreeing cases, inputs and device bits, goes to
``DIR/replay_sample.npz`` (CI replays it through the emulator without a GPU); the counts,
timings, the distribution of what was drawn and provenance go to ``DIR/replay_report.json``.

Database replay (``--database DB``): the cases are run in this process by hypothesis itself,
with the example database ``DB``: the examples stored there for the device check of
:func:`make_device_check` (inputs that disagreed before, found by this script or by
``tests/test_device_live.py``) are replayed first, then up to ``N`` new ones drawn; a
disagreement is shrunk, saved in ``DB`` and, with every disagreeing input seen on the way,
written to ``DIR/replay_disagreements.npz``.
Hypothesis keys its database per test function, so only examples stored for this check are
replayed: the CPU property tests' stored examples belong to their own tests.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as queue_mod
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from .. import flash
from .. import strategies as sst
from ..device.forward import KERNEL, forward, kernel_options
from ..device.runtime import device_info, require_gpu, source_sha256
from ..errors import OneLineParser
from ..io import save_npz_atomic, write_json_atomic
from ..replay.hypothesis import case_digest, kwargs_to_json, pack_cases, result_bits
from .common import precompile_options

#: (kblock_m, kblock_n, schedule) the replay draws from
CONFIGS = [(128, 128, "intra_wg_overlap"), (64, 64, "plain"), (192, 96, "intra_wg_overlap")]
FORMATS = ("bf16", "f16", "e4m3")
HEAD_DIMS = (64, 128)
#: against the real FA3 library (``--target library``): its dtypes, head dims in every kernel
#: head-dim class (multiples of 16 so that e4m3 accepts them too), no local windows (the
#: published wheel has none) and FA3's own dispatch (no block arguments)
LIBRARY_FORMATS = ("bf16", "e4m3")
LIBRARY_HEAD_DIMS = (16, 48, 64, 80, 96, 112, 128, 144, 176, 192, 224, 256)
TARGETS = ("twin", "library")
MAX_SEQLEN = 200
#: budget of the recorded sample of agreeing cases (raw bytes before compression)
SAMPLE_BYTES = 6 << 20
SAMPLE_MAX_ELEMENTS = 48_000  # q + k + v elements of one sampled case
SAMPLE_STRIDE = 97            # every 97th case of a shard is a sampling candidate


@st.composite
def replay_cases(draw, target: str = "twin"):
    """An :class:`simulator.strategies.AttentionCase` in one of :data:`FORMATS`, head_dim in
    :data:`HEAD_DIMS`, sequence lengths up to :data:`MAX_SEQLEN` and block parameters from
    :data:`CONFIGS`; for ``target="library"`` one of :data:`LIBRARY_FORMATS` and
    :data:`LIBRARY_HEAD_DIMS`, no local window, and FA3's dispatch."""
    if target == "library":
        dtype = draw(st.sampled_from(list(LIBRARY_FORMATS)))
        return draw(sst.attention_inputs(dtype=dtype, max_seqlen=MAX_SEQLEN,
                                         head_dims=LIBRARY_HEAD_DIMS, local=False, blocks=False))
    dtype = draw(st.sampled_from(list(FORMATS)))
    case = draw(sst.attention_inputs(dtype=dtype, max_seqlen=MAX_SEQLEN, head_dims=HEAD_DIMS))
    km, kn, sched = draw(st.sampled_from(CONFIGS))
    case.kwargs.update(kblock_m=km, kblock_n=kn, schedule=sched)
    return case


def all_kernel_options() -> list[tuple[str, ...]]:
    """NVRTC option sets of every kernel configuration :func:`replay_cases` can draw (36)."""
    return sorted({kernel_options(fmt, d, km, kn, softcap, sched)
                   for fmt in FORMATS for d in HEAD_DIMS for km, kn, sched in CONFIGS
                   for softcap in (False, True)})


def collect(n: int, seed_value: int | None = None, target: str = "twin"):
    """``n`` drawn cases as (q, k, v, kwargs) tuples: derandomised when ``seed_value`` is None,
    else drawn with that seed. (hypothesis's draws are not guaranteed across its versions, and
    seeded runs of thousands of examples were seen to drift between processes after a few
    hundred: docs/properties.md.)"""
    cases = []

    def record(case):
        cases.append((case.q, case.k, case.v, dict(case.kwargs)))

    if n:
        _run_hypothesis(record, n, seed_value, target)
    return cases


def _run_hypothesis(body, n: int, seed_value: int | None, target: str = "twin") -> None:
    test = given(replay_cases(target))(body)
    if seed_value is not None:
        test = seed(seed_value)(test)
    settings(database=None, derandomize=seed_value is None, max_examples=n,
             phases=[Phase.generate], deadline=None, suppress_health_check=list(HealthCheck))(test)()


def _describe(qkv, kw: dict) -> tuple[str, ...]:
    """Labels counted in the report: what kind of case this was."""
    q, k = qkv[0], qkv[1]
    finite = all(np.isfinite(x.astype(np.float32)).all() for x in qkv)
    mask = "causal" if kw.get("causal") else ("local" if "window" in kw else "none")
    return (f"dtype={q.dtype}", f"head_dim={q.shape[-1]}",
            f"blocks={kw.get('kblock_m', 'fa3')}x{kw.get('kblock_n', 'fa3')} "
            f"{kw.get('schedule', 'fa3')}", f"mask={mask}",
            f"softcap={'yes' if kw.get('softcap', 0) > 0 else 'no'}",
            f"seqlens_k={'yes' if 'seqlens_k' in kw else 'no'}",
            f"gqa={'yes' if q.shape[2] != k.shape[2] else 'no'}",
            f"nonfinite_inputs={'no' if finite else 'yes'}")


# --- the deep run: shards drawn and emulated in worker processes, the GPU in the parent ------

def _warm_up_emulator() -> None:
    x = np.zeros((1, 1, 1, 64), sst.DTYPES["bf16"])
    flash.forward(x, x, x)


def _emulate(q, k, v, kw):
    try:
        out, lse = flash.forward(q, k, v, **kw)
        return (*result_bits(out, lse), "")
    except (ValueError, TypeError) as exc:  # invalid drawn arguments: the device must agree
        return None, None, f"{type(exc).__name__}: {exc}"


def _shard_worker(shard: int, n: int, seed_value: int, out_queue, target: str = "twin") -> None:
    """Draw ``n`` cases with hypothesis seed ``seed_value``, emulate each, stream them out."""
    count = 0

    def body(case):
        nonlocal count
        kw = dict(case.kwargs)
        out_queue.put((shard, count, case.q, case.k, case.v, kw, *_emulate(case.q, case.k, case.v, kw)))
        count += 1

    try:
        _run_hypothesis(body, n, seed_value, target)
        out_queue.put((shard, None, count, ""))
    except BaseException as exc:  # reported by the parent; the shard's cases so far still count
        out_queue.put((shard, None, count, f"{type(exc).__name__}: {exc}"[:500]))


def _device_bits(q, k, v, kw, target: str = "twin"):
    """The device's (O bits, LSE bits, error): any exception, a launch failure included, is the
    device's answer for this case (recorded as a disagreement unless the emulator also
    rejected the arguments), so that one bad case cannot end a long run unrecorded.
    ``target``: "twin" (kernels/fa3_forward.cu) or "library" (the real FA3)."""
    try:
        if target == "library":
            from ..device import fa3_library  # noqa: PLC0415 - needs torch, only for this target

            return (*result_bits(*fa3_library.forward(q, k, v, **kw)), "")
        return (*result_bits(*forward(q, k, v, **kw)), "")
    except Exception as exc:
        return None, None, f"{type(exc).__name__}: {exc}"[:500]


def _agree(emu, dev) -> bool:
    """Both rejected the arguments, or both gave identical O and LSE bits."""
    (eo, el, ee), (do, dl, de) = emu, dev
    if ee or de:
        return bool(ee) and bool(de)
    return np.array_equal(eo, do) and np.array_equal(el, dl)


#: files a run writes into its --out folder (an earlier run's files there are refused)
OUTPUT_FILES = ("replay_report.json", "replay_disagreements.npz", "replay_disagreements.json",
                "replay_sample.npz", "replay_sample.json")
MAX_RECORDED = 200  # disagreeing cases kept with their inputs (all are counted)
STALL_S = 900       # no case from any worker for this long ends the run as stalled


def _check_out_dir(out_dir: str) -> None:
    """Raises ValueError when ``out_dir`` already holds files of an earlier run."""
    old = [f for f in OUTPUT_FILES if os.path.exists(os.path.join(out_dir, f))]
    if old:
        raise ValueError(f"--out: {out_dir} already holds {', '.join(old)} from an earlier run; "
                         "choose an empty folder")


def _bad_record(record: dict, emu, dev) -> dict:
    return {**record, "out": dev[0] if dev[0] is not None else np.zeros(0, np.uint16),
            "lse": dev[1] if dev[1] is not None else np.zeros(0, np.uint32),
            "device_error": dev[2], "emulator_error": emu[2]}


@dataclass
class DeepTally:
    """What a deep run has compared so far (the parent's state, passed around explicitly)."""

    seen: int = 0
    repeats: int = 0            # cases whose inputs were already compared in this run
    rejected_by_both: int = 0
    disagreements: int = 0
    digests: set = field(default_factory=set)
    labels: Counter = field(default_factory=Counter)
    bad: list = field(default_factory=list)
    sample: list = field(default_factory=list)
    sample_bytes: int = 0
    shard_errors: dict = field(default_factory=dict)

    def add(self, shard: int, idx: int, seed_value: int, q, k, v, kw: dict, emu, dev) -> None:
        digest = case_digest(q, k, v, kw)
        self.seen += 1
        repeat = digest in self.digests
        self.repeats += repeat
        self.digests.add(digest)
        self.labels.update(_describe((q, k, v), kw))
        record = {"q": q, "k": k, "v": v, "kwargs": kw, "shard": shard, "index": idx,
                  "seed": seed_value, "input_digest": digest}
        if not _agree(emu, dev):
            self.disagreements += 1
            if len(self.bad) < MAX_RECORDED:  # a repeat too: the device may answer differently
                self.bad.append(_bad_record(record, emu, dev))
        elif emu[2]:
            self.rejected_by_both += 1
        elif (not repeat and idx % SAMPLE_STRIDE == 0 and self.sample_bytes < SAMPLE_BYTES
              and q.size + k.size + v.size <= SAMPLE_MAX_ELEMENTS):
            self.sample.append({**record, "out": dev[0], "lse": dev[1]})
            self.sample_bytes += q.nbytes + k.nbytes + v.nbytes + dev[0].nbytes + dev[1].nbytes


def _consume(results, procs: dict, tally: DeepTally, seed0: int, t0: float, time_limit: float,
             progress, target: str = "twin") -> str:
    """Compare every streamed case on the GPU until each shard is finished or has died.
    Returns "" for a complete run, else why it stopped ("time limit", "stalled")."""
    finished: set[int] = set()
    last_item = time.time()
    while len(finished) < len(procs):
        if time_limit and time.time() - t0 > time_limit:
            return "time limit"
        try:
            item = results.get(timeout=2.0)
        except queue_mod.Empty:
            for shard, p in procs.items():  # a worker that died without its final message
                if shard not in finished and not p.is_alive():
                    finished.add(shard)
                    tally.shard_errors[shard] = f"worker exited with code {p.exitcode} before finishing"
            if time.time() - last_item > STALL_S:
                return "stalled"
            continue
        last_item = time.time()
        if item[1] is None:
            finished.add(item[0])
            if item[3]:
                tally.shard_errors[item[0]] = item[3][:500]
            continue
        shard, idx, q, k, v, kw, *emu = item
        tally.add(shard, idx, seed0 + shard, q, k, v, kw, emu, _device_bits(q, k, v, kw, target))
        if tally.seen % 5000 == 0:
            progress(f"{tally.seen} cases, {tally.disagreements} disagreements ({time.time() - t0:.0f} s)")
    return ""


def run_deep(out_dir: str, cases: int, workers: int, seed0: int, time_limit: float = 0.0,
             progress=print, target: str = "twin") -> dict:
    """The deep run (module docstring); returns the report it writes. With ``time_limit`` > 0
    (seconds) the run stops taking cases after that long; a worker that dies, or no case for
    :data:`STALL_S` seconds, also ends it; the report then says why (``stopped``) and holds
    the cases compared so far. Whatever happens, the report and recorded cases are written.

    Raises:
        ValueError: ``out_dir`` holds an earlier run's files.
    """
    _check_out_dir(out_dir)
    t0 = time.time()
    _warm_up_emulator()  # decode and cache the MUFU tables once: the workers then load the cache
    # spawned, not forked: this process has the CUDA driver (and its threads) initialised
    ctx = mp.get_context("spawn")
    results = ctx.Queue(maxsize=8 * workers)
    per = [cases // workers + (1 if i < cases % workers else 0) for i in range(workers)]
    procs = {i: ctx.Process(target=_shard_worker, args=(i, per[i], seed0 + i, results, target),
                            daemon=True)
             for i in range(workers) if per[i]}
    for p in procs.values():
        p.start()
    tally = DeepTally()
    stopped, t_compiled = "aborted", 0.0
    try:
        if target == "twin":
            precompile_options(all_kernel_options(), max(2, workers // 2), progress)
        t_compiled = time.time() - t0
        stopped = _consume(results, procs, tally, seed0, t0, time_limit, progress, target)
    finally:  # also on an unexpected error or Ctrl-C: stop the workers, keep what was compared
        for p in procs.values():
            if p.is_alive():
                p.terminate()
            p.join(timeout=60)
        report = _write_deep(out_dir, tally, cases, seed0, len(procs), stopped, t0, t_compiled,
                             target)
    progress(f"{tally.seen} cases ({tally.seen - tally.repeats} distinct), {tally.disagreements} "
             f"emulator/device disagreements ({time.time() - t0:.0f} s)"
             + (f"; stopped: {stopped}" if stopped else ""))
    return report


def _write_deep(out_dir, tally: DeepTally, cases, seed0, shards, stopped, t0, t_compiled,
                target: str = "twin") -> dict:
    os.makedirs(out_dir, exist_ok=True)
    for name, recs in (("replay_disagreements", tally.bad), ("replay_sample", tally.sample)):
        if recs:
            arrays, meta = pack_cases(recs)
            save_npz_atomic(os.path.join(out_dir, f"{name}.npz"), **arrays)
            write_json_atomic(os.path.join(out_dir, f"{name}.json"), meta)
    report = {
        "device": device_info(), "target": target, **_target_provenance(target),
        "mode": "deep", "cases": tally.seen, "distinct_cases": tally.seen - tally.repeats,
        "cases_asked": cases, "disagreements": tally.disagreements,
        "recorded_disagreements": len(tally.bad), "stopped": stopped,
        "stopped_at_time_limit": stopped == "time limit",
        "rejected_by_both": tally.rejected_by_both,
        "shards": shards, "seeds": [seed0, seed0 + shards - 1],
        "shard_errors": tally.shard_errors, "sampled_cases": len(tally.sample),
        "strategy": ({"formats": list(FORMATS), "head_dims": list(HEAD_DIMS),
                      "max_seqlen": MAX_SEQLEN, "configs": [list(c) for c in CONFIGS]}
                     if target == "twin" else
                     {"formats": list(LIBRARY_FORMATS), "head_dims": list(LIBRARY_HEAD_DIMS),
                      "max_seqlen": MAX_SEQLEN, "configs": "FA3 dispatch", "local": False}),
        "drawn": dict(sorted(tally.labels.items())),
        "disagreeing": [{"input_digest": b["input_digest"], "kwargs": kwargs_to_json(b["kwargs"]),
                         "device_error": b["device_error"], "emulator_error": b["emulator_error"]}
                        for b in tally.bad[:50]],
        "hypothesis_version": _hypothesis_version(),
        "compile_s": round(t_compiled, 1), "elapsed_s": round(time.time() - t0, 1)}
    write_json_atomic(os.path.join(out_dir, "replay_report.json"), report)
    return report


def _target_provenance(target: str) -> dict:
    """The kernel source's sha256 (twin) or the library's provenance (wheel, sha256s)."""
    if target == "library":
        from ..device import fa3_library  # noqa: PLC0415

        return {"library": fa3_library.provenance()}
    return {"kernel_sha256": source_sha256(KERNEL)}


def _hypothesis_version() -> str:
    import hypothesis

    return hypothesis.__version__


# --- database replay: hypothesis drives the device check itself -----------------------------

@dataclass
class CheckLog:
    """What a device check saw: ``ran`` cases, and the disagreeing ones (``found``, records as
    :func:`simulator.replay.hypothesis.pack_cases` takes them)."""

    ran: int = 0
    found: list[dict] = field(default_factory=list)
    first: list[str] = field(default_factory=list)  # input digests of the first cases run


def make_device_check(log: CheckLog):
    """The test body of the database replay and of the live pytest property test: run one case
    on the GPU and in the emulator, record every disagreeing input in ``log`` (deduplicated by
    digest) and raise AssertionError. Every check this factory makes has the same source and
    name, hence the same hypothesis database key, so both store and replay the same examples."""

    def device_check(case) -> None:
        log.ran += 1
        kw = dict(case.kwargs)
        if len(log.first) < 5:
            log.first.append(case_digest(case.q, case.k, case.v, kw))
        emu = _emulate(case.q, case.k, case.v, kw)
        dev = _device_bits(case.q, case.k, case.v, kw)
        if _agree(emu, dev):
            return
        digest = case_digest(case.q, case.k, case.v, kw)
        if all(f["input_digest"] != digest for f in log.found):
            log.found.append(_bad_record({"q": case.q, "k": case.k, "v": case.v, "kwargs": kw,
                                          "input_digest": digest}, emu, dev))
        raise AssertionError(f"emulator and device disagree on {case!r} "
                             f"(emulator error {emu[2]!r}, device error {dev[2]!r})")

    return device_check


def device_property(database, max_examples: int, log: CheckLog | None = None):
    """The hypothesis test ``given(replay_cases())(device_check)`` with ``database`` (an
    ExampleDatabase or None): examples stored for it are replayed first (Phase.reuse), then new
    ones drawn; a failure is shrunk and saved. What the check saw goes to ``log``."""
    check = make_device_check(CheckLog() if log is None else log)
    return settings(database=database, max_examples=max_examples, deadline=None,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                    suppress_health_check=list(HealthCheck))(given(replay_cases())(check))


def _database_entries(db_dir: str) -> int:
    return sum(len(files) for _, _, files in os.walk(db_dir)) if os.path.isdir(db_dir) else 0


def run_database(out_dir: str, db_dir: str, cases: int, progress=print) -> dict:
    """The database replay (module docstring); returns the report it writes. ``cases`` in the
    report counts every run of the check, hypothesis's re-runs and shrinking included. The
    report and the disagreeing inputs are written whatever hypothesis raises at the end
    (a failure, a flaky failure, an error), then the error is described in ``failure``.

    Raises:
        ValueError: ``out_dir`` holds an earlier run's files.
    """
    _check_out_dir(out_dir)
    t0 = time.time()
    precompile_options(all_kernel_options(), max(2, (os.cpu_count() or 4) // 2), progress)
    entries_before = _database_entries(db_dir)
    log = CheckLog()
    failure = ""
    try:
        device_property(DirectoryBasedExampleDatabase(db_dir), cases, log)()
    except Exception as exc:  # AssertionError, FlakyFailure, ...: the run's outcome, recorded
        failure = f"{type(exc).__name__}: {exc}"[:2000]
    bad = log.found
    os.makedirs(out_dir, exist_ok=True)
    if bad:
        arrays, meta = pack_cases(bad)
        save_npz_atomic(os.path.join(out_dir, "replay_disagreements.npz"), **arrays)
        write_json_atomic(os.path.join(out_dir, "replay_disagreements.json"), meta)
    report = {"device": device_info(), "kernel_sha256": source_sha256(KERNEL), "mode": "database",
              "database": os.path.abspath(db_dir), "database_entries_before": entries_before,
              "database_entries_after": _database_entries(db_dir), "max_examples": cases,
              "cases": log.ran, "first_cases": log.first, "disagreements": len(bad),
              "shrunk_failure": failure,
              "hypothesis_version": _hypothesis_version(), "elapsed_s": round(time.time() - t0, 1)}
    write_json_atomic(os.path.join(out_dir, "replay_report.json"), report)
    progress(f"database replay: {report['cases']} check runs, {len(bad)} disagreeing inputs "
             f"({time.time() - t0:.0f} s)")
    return report


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not (np.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got {text}")
    return value


EPILOG = """exit codes: 0 every asked case compared, no disagreement; 1 emulator and device
disagree on some case (recorded as goldens); 2 bad arguments or output folder, or no GPU; 3 the run is
incomplete (time limit, a worker failed or stalled, or hypothesis raised something other
than a disagreement)."""


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m simulator measure hypothesis_replay",
                                 description=__doc__.splitlines()[0], epilog=EPILOG)
    ap.add_argument("--out", required=True, help="folder for the report and recorded cases")
    ap.add_argument("--cases", "--generate", type=_positive, default=1000,
                    help="cases to draw (default 1000)")
    ap.add_argument("--workers", type=_positive, default=None,
                    help="deep run: shards drawn and emulated in parallel (default: CPUs - 1)")
    ap.add_argument("--seed", type=int, default=None, help="deep run: hypothesis seed of shard 0 (default 0)")
    ap.add_argument("--time-limit", type=_seconds, default=None,
                    help="deep run: stop after this many seconds and report what was compared")
    ap.add_argument("--database", help="replay this hypothesis example database instead")
    ap.add_argument("--target", choices=TARGETS, default="twin",
                    help="deep run: the device side, our twin kernel (default) or the real FA3 "
                         "library (fa3-fwd, needs torch)")
    args = ap.parse_args(argv)
    deep_only = [f"--{n.replace('_', '-')}" for n in ("workers", "seed", "time_limit")
                 if getattr(args, n) is not None]
    if args.target != "twin":
        deep_only.append("--target")
    if args.database and deep_only:
        ap.error(f"{', '.join(deep_only)}: only for the deep run, not with --database")
    try:
        _check_out_dir(args.out)
    except ValueError as exc:
        ap.error(str(exc))
    require_gpu()  # fail fast, before anything is drawn (no GPU: one line, exit 2)
    if args.database:
        rep = run_database(args.out, args.database, args.cases)
        incomplete = bool(rep["shrunk_failure"]) and not rep["disagreements"]
    else:
        rep = run_deep(args.out, args.cases, args.workers or max(1, (os.cpu_count() or 2) - 1),
                       args.seed or 0, args.time_limit or 0.0, target=args.target)
        incomplete = bool(rep["stopped"] or rep["shard_errors"]) or rep["cases"] < rep["cases_asked"]
    if rep["disagreements"]:
        return 1
    return 3 if incomplete else 0


if __name__ == "__main__":
    from .common import run_script

    sys.exit(run_script(main))
