"""Replay of the real FA3 backward's recordings (``fa3_backward_*``, flash-attn3-jax 0.2.3 on
the H200; :mod:`simulator.measure.fa3_backward_record`).

Per recorded case: the inputs are regenerated (:mod:`simulator.replay.bwd_cases`), the
emulator's forward must give the library's out / LSE digests, then one emulated backward
launch with the spread (:func:`simulator.fa3.backward.launch`) must give

* the digests of the deterministic runs' dq, dk, dv (and, without varlen, dPsum / LSE_log2);
* for each recorded default-mode run, rebuilt from the deterministic bits and the recorded
  differences: its recorded digest (so the differences are complete), and every value inside
  the spread ``lo <= x <= hi`` (equal bits where lo == hi).

``quick`` replays the cases whose emulation is cheap (:func:`cost` at most ``QUICK_COST``;
of the drawn ones every ``QUICK_DRAWN_EVERY``-th) and the ``QUICK_DIFFERING`` cheapest cases
whose default-mode runs differed from the deterministic one.
"""

from __future__ import annotations

import numpy as np

from .. import fa3
from ..fa3.backward import BackwardCall, launch
from ..flash.backward import m_block_range, make_backward_config
from ..flash.spread import contains
from ..io import read_json, read_npz
from . import bwd_cases
from .common import DATA_DIR, digest, row

REPORT = DATA_DIR / "fa3_backward_report.json"
SAMPLE = DATA_DIR / "fa3_backward_sample.npz"
DIFFS = DATA_DIR / "fa3_backward_diffs.npz"
STRESS_REPORT = DATA_DIR / "fa3_backward_stress_report.json"
STRESS_DIFFS = DATA_DIR / "fa3_backward_stress_diffs.npz"
#: the extension recording (``--ext``): drawn cases past the main report's, softcap, seqused
EXT_REPORT = DATA_DIR / "fa3_backward_ext_report.json"
EXT_SAMPLE = DATA_DIR / "fa3_backward_ext_sample.npz"
EXT_DIFFS = DATA_DIR / "fa3_backward_ext_diffs.npz"
#: the hypothesis-drawn recording (``--hyp``): :func:`simulator.strategies.backward_cases`
HYP_CASES = DATA_DIR / "fa3_backward_hyp_cases.json"
HYP_REPORT = DATA_DIR / "fa3_backward_hyp_report.json"
HYP_SAMPLE = DATA_DIR / "fa3_backward_hyp_sample.npz"
HYP_DIFFS = DATA_DIR / "fa3_backward_hyp_diffs.npz"
#: the cost (millions of score elements the mainloop visits) up to which ``quick`` replays a case
QUICK_COST = 0.1
QUICK_DRAWN_EVERY = 10
QUICK_DIFFERING = 12
GRADS = ("dq", "dk", "dv")
REGENERATE = ("bash scripts/device_bwd_session.sh (on an H200 with jax and flash-attn3-jax 0.2.3 "
              "in .fa3bwd/), then copy the report, sample and diffs here")


def cost(case: dict) -> float:
    """Millions of S elements the emulated backward visits (an upper estimate: masks ignored
    inside a visited block; the block ranges are the kernel's)."""
    lens = (case["seqlens_q"], case["seqlens_k"]) if case["seqlens_q"] is not None else \
        ([case["seqlen_q"]] * case["batch"], [case["seqlen_k"]] * case["batch"])
    total = 0
    for sq, sk in zip(*lens, strict=True):
        if sq == 0 or sk == 0:
            continue
        cfg = _cfg_for(case, sq, sk)
        m_min, m_max = m_block_range(cfg, np.arange(cfg.n_blocks))
        total += np.maximum(m_max - m_min, 0).sum() * cfg.tiles.kblock_m * cfg.tiles.kblock_n
    return total * case["heads"] / 1e6


def _cfg_for(case, sq, sk):
    """The kernel configuration of one sequence of ``case`` (one head, zero arrays)."""
    d = case["head_dim"]
    z = np.zeros((1, sq, 1, d), np.float16)
    zk = np.zeros((1, sk, 1, d), np.float16)
    return make_backward_config(z, z, zk, zk, z, np.zeros((1, 1, sq), np.float32),
                                causal=case["causal"], window=tuple(case["window"]),
                                max_seqlen_q=case["seqlen_q"], max_seqlen_k=case["seqlen_k"],
                                softcap=case.get("softcap", 0.0))


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def emulate(case: dict) -> dict:
    """The emulator's forward digests, backward bits and spread for one case."""
    x = bwd_cases.case_inputs(case)
    common = dict(softmax_scale=x["softmax_scale"], causal=x["causal"], window_size=x["window"],
                  softcap=x["softcap"])
    if x["cu_seqlens_q"] is None:
        out, lse = fa3.flash_attn_func(x["q"], x["k"], x["v"], return_attn_probs=True, **common)
        var = {}
    else:
        var = dict(cu_seqlens_q=x["cu_seqlens_q"], cu_seqlens_k=x["cu_seqlens_k"],
                   max_seqlen_q=x["max_seqlen_q"], max_seqlen_k=x["max_seqlen_k"])
        out, lse = fa3.flash_attn_varlen_func(x["q"], x["k"], x["v"], return_attn_probs=True,
                                              **var, **common)
    args = dict(dout=x["dout"], q=x["q"], k=x["k"], v=x["v"], out=out, softmax_lse=lse,
                seqused_q=x["seqused_q"], seqused_k=x["seqused_k"],
                cu_seqlens_q=var.get("cu_seqlens_q"), cu_seqlens_k=var.get("cu_seqlens_k"),
                max_seqlen_q=var.get("max_seqlen_q"), max_seqlen_k=var.get("max_seqlen_k"),
                **common)
    res, _ = launch(BackwardCall(**args), deterministic=False, spread=True)
    got = {"out": digest(bits(out)).hex(), "lse": digest(bits(lse)).hex(), "res": res}
    if x["cu_seqlens_q"] is None:
        got["dpsum"] = digest(bits(res.dpsum)).hex()
        got["lse_log2"] = digest(bits(res.lse_log2)).hex()
    return got


def check(key: str, entry: dict, diffs: dict, got: dict | None = None) -> dict:
    """One recorded case against the emulator (``diffs``: :func:`bwd_cases.unpack_diffs`;
    ``got``: its :func:`emulate`, computed when None): counts of what was compared and what
    differed, and ``got``."""
    got = emulate(entry["case"]) if got is None else got
    res = got["res"]
    out = {"values": 0, "mismatches": [], "default_values": 0, "outside": 0, "spread_values": 0}
    for name in ("out", "lse"):
        if got[name] != entry[name]:
            out["mismatches"].append(f"forward {name}")
    for name in GRADS + ("dpsum", "lse_log2"):
        if name in GRADS or name in got:
            mine = got[name] if name not in GRADS else digest(bits(getattr(res, name))).hex()
            if mine != entry["det"][name]:
                out["mismatches"].append(f"deterministic {name}")
    for name in GRADS:
        det = bits(getattr(res, name)).ravel()
        out["values"] += det.size
        lo, hi = (np.asarray(a, np.float32).ravel() for a in res.spread[name])
        out["spread_values"] += int(np.sum(bits(lo) != bits(hi)))
        for j, run in enumerate(entry["default"]):
            idx, vals = diffs[f"{key}_r{j}_{name}"]
            rebuilt = det.copy()
            rebuilt[idx] = vals
            if digest(rebuilt.reshape(getattr(res, name).shape)).hex() != run[name]["digest"]:
                out["mismatches"].append(f"default run {j} {name} digest")
            inside = contains(lo[idx], hi[idx], vals.view(getattr(res, name).dtype))
            out["default_values"] += int(idx.size)
            out["outside"] += int(np.sum(~inside))
    out["got"] = got
    return out


def differed(entry: dict) -> bool:
    """Whether any recorded default-mode run of ``entry`` differed from the deterministic one."""
    return any(r[n]["differ"] for r in entry["default"] for n in GRADS)


def _quick(entries: list, every: int) -> list:
    """The cheap cases (every ``every``-th) and the cheapest ones whose default runs differed."""
    costs = {k: cost(e["case"]) for k, e in entries}
    cheap = {k for i, (k, _) in enumerate(entries) if i % every == 0 and costs[k] <= QUICK_COST}
    differing = sorted((costs[k], k) for k, e in entries if differed(e))[:QUICK_DIFFERING]
    keep = cheap | {k for _, k in differing}
    return [(k, e) for k, e in entries if k in keep]


def stress_entries(report: dict) -> list[tuple[str, dict]]:
    """(key, entry) of the stress recording (``--stress``: the varying cases again, 12 default
    runs each), each entry completed with its case from the main report."""
    stress = read_json(STRESS_REPORT, REGENERATE)
    cases = {f"{p[0]}{i}": e["case"] for p in ("matrix", "drawn") for i, e in enumerate(report[p])}
    return [(e["key"], {**e, "case": cases[e["key"]]}) for e in stress["entries"]]


def entries(report: dict, part: str) -> list[tuple[str, dict]]:
    """(key, entry) of a report's part, the library's refusals left out (keys ``m{i}``,
    ``d{i}``, ``e{i}``: an entry's own ``key`` where it has one)."""
    return [(e.get("key", f"{part[0]}{i}"), e) for i, e in enumerate(report.get(part, []))
            if "error" not in e]


def replay(quick: bool = False, progress=None, workers: int = 1,
           parts: tuple[str, ...] = ("matrix", "drawn", "extra", "hyp")) -> list[dict]:
    """verify rows: the matrix, the drawn cases (both recordings), the softcap / seqused
    extras, the hypothesis-drawn calls and the stress recording of the varying ones
    (``quick``: the cheap ones, and their stress runs). A case of the stress recording reuses
    the emulation of its main entry. ``workers`` > 1: that many processes replay the cases
    (the same checks; each process reads the recordings once). ``parts``: which recorded
    parts to replay (the stress runs follow their main entries)."""
    report, ext, hyp = (read_json(p, REGENERATE) for p in (REPORT, EXT_REPORT, HYP_REPORT))
    stress = dict(stress_entries(report))
    tally = {part: _Tally() for part in ("matrix", "drawn", "extra", "hyp", "stress")}
    todo = []
    for part, rep in (("matrix", report), ("drawn", report), ("drawn", ext), ("extra", ext),
                      ("hyp", hyp)):
        some = entries(rep, part) if part in parts else []
        if quick:
            some = _quick(some, QUICK_DRAWN_EVERY if part in ("drawn", "hyp") else 1)
        todo += [(part, key, e, stress.get(key)) for key, e in some]
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415

        with ProcessPoolExecutor(workers) as pool:
            results = pool.map(check_task, todo, chunksize=1)
            _tally_all(todo, results, tally, progress)
    else:
        _tally_all(todo, map(check_task, todo), tally, progress)
    return [tally[part].row(part, 12 if part == "stress" else 3) for part in tally
            if part in parts or tally[part].calls]


def _tally_all(todo, results, tally, progress) -> None:
    for (part, key, e, st), (r, rs) in zip(todo, results, strict=True):
        tally[part].add(e, r)
        if st is not None:
            tally["stress"].add(st, rs)
        if progress:
            progress(key)


_DIFFS: dict = {}


def _diffs(stress: bool) -> dict:
    """The unpacked default-mode differences of every recording (or of the stress one), read
    once per process."""
    name = "stress" if stress else "main"
    if name not in _DIFFS:
        paths = (STRESS_DIFFS,) if stress else (DIFFS, EXT_DIFFS, HYP_DIFFS)
        _DIFFS[name] = {}
        for path in paths:
            _DIFFS[name].update(bwd_cases.unpack_diffs(read_npz(path, REGENERATE)))
    return _DIFFS[name]


def check_task(task) -> tuple[dict, dict | None]:
    """:func:`check` of one (part, key, entry, stress entry or None), without the emulated
    arrays (what a worker process sends back)."""
    _, key, e, st = task
    r = check(key, e, _diffs(False))
    rs = None if st is None else check(key, st, _diffs(True), r["got"])
    for x in (r, rs):
        if x is not None:
            x.pop("got")
    return r, rs


class _Tally:
    """Counts of one verify row."""

    def __init__(self):
        self.calls, self.bad, self.vals, self.dvals, self.outside, self.spread = 0, [], 0, 0, 0, 0

    def add(self, entry: dict, r: dict) -> None:
        self.calls += 1
        if r["mismatches"] or r["outside"]:
            self.bad.append(f"{entry['case']['name']}: {', '.join(r['mismatches'])} "
                            f"{r['outside']} outside the spread")
        self.vals += r["values"]
        self.dvals += r["default_values"]
        self.outside += r["outside"]
        self.spread += r["spread_values"]

    def row(self, part: str, runs: int) -> dict:
        return row(f"fa3 backward ({part}: {self.calls} calls, flash-attn3-jax, H200)",
                   (1 + runs) * self.vals, len(self.bad),
                   f"dq/dk/dv values of 1 deterministic + {runs} default-mode runs; mismatches "
                   f"count calls; {self.dvals:,} default-mode values that differ from "
                   f"deterministic, {self.outside} outside the spread; spread > 1 value at "
                   f"{self.spread:,}" + (f"; first: {self.bad[0]}" if self.bad else ""))
