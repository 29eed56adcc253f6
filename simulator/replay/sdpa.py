"""Replay of the recordings of PyTorch SDPA's flash backend (FlashAttention-2 as PyTorch builds
it, recorded by ``python -m simulator measure sdpa_record``; ``simulator/data/device/sdpa/``)
through :func:`simulator.sdpa.flash_attention_forward`.

Per forward case: the inputs regenerated from the frozen case
(:func:`simulator.replay.sdpa_cases.make_inputs`), the emulator on the recording's GPU (the
record whose CUDA name the recording gives: its SM count decides FA2's split count), and the
recorded out (uint16 bits) and logsumexp (float32 bits) compared element by element. A case the
op refused on the device must be refused by the emulator too.
"""

from __future__ import annotations

import numpy as np

from ..gpus import GPUS
from ..io import DEVICE_DATA_DIR, read_json, read_npz
from . import sdpa_cases as sc

FOLDER = DEVICE_DATA_DIR / "sdpa"
REPORT = FOLDER / "sdpa_forward_report.json"
SAMPLE = FOLDER / "sdpa_forward_sample.npz"
DROPOUT = FOLDER / "sdpa_dropout.npz"
REGENERATE = "python3 -m simulator measure sdpa_record --out OUT (on a Hopper GPU with torch)"

__all__ = ["FOLDER", "check_all", "check_case", "check_dropout_case", "gpu_of", "load",
           "recorded"]


def recorded() -> bool:
    """Whether the recordings are in the package (they are made on a GPU)."""
    return REPORT.exists()


def load():
    """``(report, sample)``: the report (provenance, per-case records) and the forward sample."""
    return read_json(REPORT, REGENERATE), read_npz(SAMPLE, REGENERATE)


def gpu_of(report: dict) -> str:
    """The GPU key whose record names the recording's GPU, with its SM count.

    Raises:
        ValueError: a GPU no record names (its bits would be another chip's).
    """
    prov = report["provenance"]
    for key, g in GPUS.items():
        if g.name == prov["gpu"] and g.sm_count == prov["sm_count"]:
            return key
    raise ValueError(f"the recording's GPU {prov['gpu']!r} ({prov['sm_count']} SMs) has no record "
                     "in simulator.gpus")


def check_case(record: dict, sample, gpu: str) -> dict:
    """One recorded forward case through the emulator: ``{"values", "differ", "refused"}``."""
    from ..sdpa import flash_attention_forward

    case = record["case"]
    q, k, v = sc.make_inputs(case)
    i = record["index"]
    if "error" in record:  # the op refused: so must the emulator
        try:
            flash_attention_forward(q, k, v, is_causal=case["causal"], scale=case["scale"],
                                    enable_gqa=True, gpu=gpu)
        except ValueError:
            return {"values": 0, "differ": 0, "refused": True}
        return {"values": 1, "differ": 1, "refused": False}
    out, lse = flash_attention_forward(q, k, v, is_causal=case["causal"], scale=case["scale"],
                                       enable_gqa=True, gpu=gpu)
    want_out, want_lse = sample[f"c{i}_out"], sample[f"c{i}_lse"]
    differ = int((np.ascontiguousarray(out).view(np.uint16) != want_out).sum())
    differ += int((lse.view(np.uint32) != want_lse.view(np.uint32)).sum())
    return {"values": int(want_out.size + want_lse.size), "differ": differ, "refused": False}


def check_dropout_case(record: dict, npz, gpu: str) -> dict:
    """One recorded dropout call: out and logsumexp bits under the recorded Philox state, and
    the keep mask against the debug mask's sign bits (a dropped P is stored negated, so the
    sign bit marks it, +0 included) at every position the causal mask allows.

    Returns ``{"values", "differ", "refused"}``.
    """
    from ..numerics.philox import dropout_keep
    from ..sdpa import flash_attention_forward

    case, i = record["case"], record["index"]
    q, k, v = sc.make_inputs(case)
    if "error" in record:
        return {"values": 0, "differ": 0, "refused": True}
    seed, offset = record["philox"][:2]
    out, lse = flash_attention_forward(q, k, v, case["dropout_p"], case["causal"], case["scale"],
                                       philox_seed=seed, philox_offset=offset, enable_gqa=True,
                                       gpu=gpu)
    want_out, want_lse = npz[f"d{i}_out"], npz[f"d{i}_lse"]
    differ = int((np.ascontiguousarray(out).view(np.uint16) != want_out).sum())
    differ += int((lse.view(np.uint32) != want_lse.view(np.uint32)).sum())
    values = int(want_out.size + want_lse.size)
    if f"d{i}_mask" in npz:
        bits = npz[f"d{i}_mask"]
        sign = np.uint16(0x8000) if bits.dtype == np.uint16 else np.uint32(0x80000000)
        dropped = (bits & sign) != 0
        b, h, sq, sk = bits.shape
        keep = dropout_keep(seed, offset, b, h, sq, sk, case["dropout_p"])
        rows, cols = np.arange(sq)[:, None], np.arange(sk)[None, :]
        seen = (cols <= rows + sk - sq) if case["causal"] else np.ones((sq, sk), bool)
        differ += int(((keep == dropped) & seen).sum())
        values += int(seen.sum()) * b * h
    return {"values": values, "differ": differ, "refused": False}


def _dropout_rows(report: dict, gpu: str, quick: bool) -> list[dict]:
    if not DROPOUT.exists() or not report.get("dropout"):
        return []
    npz = read_npz(DROPOUT, REGENERATE)
    records = report["dropout"][:: 4 if quick else 1]
    values = differ = 0
    for r in records:
        res = check_dropout_case(r, npz, gpu)
        values += res["values"]
        differ += res["differ"]
    return [{"check": f"sdpa flash forward with dropout ({len(records)} calls: out, LSE, the "
                      "Philox keep mask)", "cases": values, "mismatches": differ, "detail": ""}]


def check_all(quick: bool = False) -> list[dict]:
    """Rows for ``verify``: every recorded forward case (every fourth with ``quick``)."""
    if not recorded():
        return [{"check": "sdpa flash backend (no recordings in the package yet)", "cases": 0,
                 "mismatches": 0, "detail": REGENERATE}]
    report, sample = load()
    gpu = gpu_of(report)
    records = report["forward"][:: 4 if quick else 1]
    values = differ = 0
    for r in records:
        res = check_case(r, sample, gpu)
        values += res["values"]
        differ += res["differ"]
    name = report["provenance"]["gpu"].removeprefix("NVIDIA ")
    return [{"check": f"sdpa flash forward ({len(records)} calls, torch "
                      f"{report['provenance']['torch']}, {name})", "cases": values,
             "mismatches": differ, "detail": ""}] + _dropout_rows(report, gpu, quick)
