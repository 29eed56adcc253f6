"""Replay of the real FA3 paged-KV recording (``fa3_paged_*``, flash-attn3-jax 0.2.3 on the
H200; :mod:`simulator.measure.fa3_paged_record`).

Per recorded case the inputs are regenerated (:mod:`simulator.replay.paged_cases`) and
``simulator.fa3.flash_attn_with_kvcache`` with the case's ``page_table`` must give the
library's out and softmax_lse digests; where the library's AppendKV writes reached the caches
read back, the emulator's pools after the append must give their digests too. ``quick``
replays every ``QUICK_EVERY``-th case.
"""

from __future__ import annotations

import numpy as np

from .. import fa3
from ..io import read_json, read_npz
from . import paged_cases
from .common import DATA_DIR, digest, row

REPORT = DATA_DIR / "fa3_paged_report.json"
SAMPLE = DATA_DIR / "fa3_paged_sample.npz"
QUICK_EVERY = 8
REGENERATE = ("python -m simulator measure fa3_paged_record --out DIR (on an H200 with jax and "
              "flash-attn3-jax 0.2.3), then copy the report and sample here")


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def emulate(case: dict) -> dict:
    """The emulator's out, lse and pools after the call, for one case."""
    x = paged_cases.case_inputs(case)
    kc, vc = x["k_cache"].copy(), x["v_cache"].copy()
    out, lse, *_ = fa3.flash_attn_with_kvcache(
        x["q"], kc, vc, k=x["k"], v=x["v"], cache_seqlens=x["cache_seqlens"],
        cache_batch_idx=x["cache_batch_idx"], cache_leftpad=x["cache_leftpad"],
        page_table=x["page_table"], causal=x["causal"], window_size=x["window_size"],
        num_splits=x["num_splits"], return_softmax_lse=True)
    return {"out": out, "lse": lse, "k_cache": kc, "v_cache": vc}


def check(entry: dict) -> dict:
    """One recorded entry against the emulator: ``{"mismatches": [names], "values": n}``."""
    got = emulate(entry["case"])
    names = ["out", "lse"] + (["k_cache", "v_cache"] if entry.get("cache_written") else [])
    bad = [n for n in names if digest(bits(got[n])).hex() != entry[n]]
    return {"mismatches": bad, "values": int(got["out"].size + got["lse"].size)}


def entries(report: dict) -> list[dict]:
    """The recorded cases the library ran (its refusals left out)."""
    return [e for e in report["cases"] if "error" not in e]


def replay(quick: bool = False, workers: int = 1) -> list[dict]:
    """verify rows: the recorded paged calls (``quick``: every ``QUICK_EVERY``-th), and the
    full bits of the sampled ones."""
    report = read_json(REPORT, REGENERATE)
    todo = entries(report)[:: QUICK_EVERY if quick else 1]
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415

        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(check, todo, chunksize=1))
    else:
        results = [check(e) for e in todo]
    bad = [f"{e['key']} {e['case']['name']}: {', '.join(r['mismatches'])}"
           for e, r in zip(todo, results, strict=True) if r["mismatches"]]
    refused = len(report["cases"]) - len(entries(report))
    rows = [row(f"fa3 paged KV ({len(todo)} calls, flash-attn3-jax, H200)",
                sum(r["values"] for r in results), len(bad),
                f"out / softmax_lse digests (and the pools after AppendKV where the library's "
                f"writes were read back); {refused} calls the library refused"
                + (f"; first: {bad[0]}" if bad else ""))]
    sample = read_npz(SAMPLE, REGENERATE)
    keys = sorted({k.rsplit("_", 1)[0] for k in sample})
    by_key = {e["key"]: e for e in report["cases"]}
    sbad, svals = 0, 0
    for key in keys[:: QUICK_EVERY if quick else 1]:
        got = emulate(by_key[key]["case"])
        for n in ("out", "lse"):
            svals += got[n].size
            sbad += not np.array_equal(bits(got[n]), sample[f"{key}_{n}"])
    rows.append(row(f"fa3 paged KV sample ({len(keys)} calls in full)", svals, sbad,
                    "every out / softmax_lse value's bits"))
    return rows
