"""Replay the real FA3 forward's recorded ``attention_chunk`` calls (flash-attn3-jax 0.2.3 on
the H200, :mod:`simulator.replay.chunk_cases`) through ``simulator.fa3``: digests of out and
softmax_lse for every call (``fa3_chunk_report.json``), full bits of the small ones
(``fa3_chunk_sample.npz``)."""

from __future__ import annotations

import numpy as np

from ..io import DEVICE_DATA_DIR as DATA
from ..io import read_json, read_npz
from .chunk_cases import emulate
from .common import digest, row

REPORT = DATA / "fa3_chunk_report.json"
SAMPLE = DATA / "fa3_chunk_sample.npz"
REGENERATE = ("python3 -m simulator measure fa3_chunk_record --out DIR (H200, flash-attn3-jax "
              "0.2.3; scripts/device_chunk_session.sh)")


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def check_case(index: int, entry: dict, sample: dict) -> dict:
    """One recorded call: ``{"ok", "differ", "values"}`` (a call the library refused must be
    refused here too)."""
    if "error" in entry:
        try:
            emulate(entry["case"])
        except ValueError:
            return {"ok": True, "differ": {}, "values": 0}
        return {"ok": False, "differ": {"refused by the library only": True}, "values": 0}
    out, lse = (_bits(x) for x in emulate(entry["case"]))
    differ = {"out": digest(out).hex() != entry["out"], "lse": digest(lse).hex() != entry["lse"]}
    for key, got in (("out", out), ("lse", lse)):
        if f"c{index}_{key}" in sample:
            differ[f"{key} values"] = int(np.count_nonzero(got != sample[f"c{index}_{key}"]))
    return {"ok": not any(differ.values()), "differ": differ, "values": out.size + lse.size}


def check_all(quick: bool = False) -> list[dict]:
    """``verify`` row: every recorded call (every 4th when ``quick``)."""
    report, sample = read_json(REPORT, REGENERATE), read_npz(SAMPLE, REGENERATE)
    entries = report["cases"]
    picked = range(0, len(entries), 4) if quick else range(len(entries))
    results = [(i, check_case(i, entries[i], sample)) for i in picked]
    bad = [f"{i}: {[k for k, v in r['differ'].items() if v]}" for i, r in results if not r["ok"]]
    return [row(f"FA3 attention_chunk calls vs the real library (flash-attn3-jax), "
                f"{len(results)} calls", sum(r["values"] for _, r in results), len(bad),
                "; ".join(bad[:3]))]
