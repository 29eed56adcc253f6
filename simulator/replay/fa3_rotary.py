"""Replay of the real FA3 rotary recording (``fa3_rotary_*``, flash-attn3-jax 0.2.3 on the
H200; ``python -m simulator measure fa3_paged_record --rotary``).

Per recorded case the inputs are regenerated (:mod:`simulator.replay.rotary_cases`) and
``simulator.fa3.flash_attn_with_kvcache`` with the case's rotary tables must give the
library's out and softmax_lse bits (recorded in full) and the digests of both caches after the
append (the rotated keys as the kernel stored them). A case whose query positions run past the
tables is left out: FA3 reads past them (hopper/rotary.h bounds its loads by seqlen_q only),
and the emulator refuses it. ``quick`` replays every ``QUICK_EVERY``-th case.
"""

from __future__ import annotations

import numpy as np

from .. import fa3
from ..io import read_json, read_npz
from . import rotary_cases
from .common import DATA_DIR, digest, row

REPORT = DATA_DIR / "fa3_rotary_report.json"
SAMPLE = DATA_DIR / "fa3_rotary_sample.npz"
QUICK_EVERY = 6
REGENERATE = ("python -m simulator measure fa3_paged_record --rotary --out DIR (on an H200 with "
              "jax and flash-attn3-jax 0.2.3), then copy the report and sample here")


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def past_tables(case: dict) -> bool:
    """Whether the case's query positions run past the cos / sin tables (undefined in FA3)."""
    base = case["rotary_seqlens"] or case["cache_seqlens"]
    rows = case["seqlen_q"] if (case["causal"] or case["window"] != [-1, -1]) else 1
    return max(base) + max(rows, case["seqlen_new"]) - 1 >= case["seqlen_ro"]


def check(entry: dict, sample) -> list[str]:
    """The names of the recorded results the emulator does not reproduce for one entry."""
    x = rotary_cases.case_inputs(entry["case"])
    kc, vc = x["k_cache"].copy(), x["v_cache"].copy()
    out, lse, *_ = fa3.flash_attn_with_kvcache(
        x["q"], kc, vc, k=x["k"], v=x["v"], rotary_cos=x["rotary_cos"],
        rotary_sin=x["rotary_sin"], rotary_seqlens=x["rotary_seqlens"],
        rotary_interleaved=x["rotary_interleaved"], cache_seqlens=x["cache_seqlens"],
        page_table=x["page_table"], causal=x["causal"], window_size=x["window_size"],
        num_splits=x["num_splits"], return_softmax_lse=True)
    key = entry["key"]
    bad = [n for n, got in (("out", out), ("lse", lse))
           if not np.array_equal(bits(got), sample[f"{key}_{n}"])]
    return bad + [n for n, got in (("k_cache", kc), ("v_cache", vc))
                  if digest(bits(got)).hex() != entry[n]]


def replay(quick: bool = False) -> list[dict]:
    """One verify row: the recorded rotary calls (``quick``: every ``QUICK_EVERY``-th)."""
    report = read_json(REPORT, REGENERATE)
    sample = read_npz(SAMPLE, REGENERATE)
    done = [e for e in report["cases"] if "error" not in e and not past_tables(e["case"])]
    todo = done[:: QUICK_EVERY if quick else 1]
    bad = [f"{e['key']} {e['case']['name']}: {', '.join(b)}" for e in todo
           if (b := check(e, sample))]
    values = sum(sample[f"{e['key']}_out"].size + sample[f"{e['key']}_lse"].size for e in todo)
    return [row(f"fa3 rotary append ({len(todo)} calls, flash-attn3-jax, H200)", values, len(bad),
                f"out / softmax_lse bits and both caches' digests after the append; "
                f"{len(report['cases']) - len(done)} calls left out (query positions past the "
                f"tables: undefined in FA3)" + (f"; first: {bad[0]}" if bad else ""))]
