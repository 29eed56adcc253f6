"""Replay of the backward recordings of PyTorch SDPA's flash backend
(``simulator/data/device/sdpa/sdpa_backward.npz`` with the backward records of
``sdpa_forward_report.json``, made by ``python -m simulator measure sdpa_record``) through
:func:`simulator.sdpa.flash_attention_backward` and :func:`simulator.sdpa.backward_spread`.

Per backward case: q, k, v and grad_out regenerated from the frozen case
(:mod:`simulator.replay.sdpa_cases`), the device's own forward output and logsumexp (``b{i}_out``
bits, ``b{i}_lse``) fed to the emulated backward, so that the backward is checked alone. Runs 0-2
(``torch.use_deterministic_algorithms(True)``) must equal the emulated deterministic gradients
bit for bit; runs 3-5 (the default) must lie inside the emulated spread (dK / dV: one value).
``b{i}_{dq,dk,dv}_runs`` hold run 0's bits in row 0 and, in row r > 0, run r's bits XOR run 0's.
"""

from __future__ import annotations

import numpy as np

from ..io import read_npz
from . import sdpa_cases as sc
from .sdpa import FOLDER, REGENERATE, gpu_of, load, recorded

NPZ = FOLDER / "sdpa_backward.npz"
NAMES = ("dq", "dk", "dv")

__all__ = ["NPZ", "check_all", "check_backward_case", "run_bits"]


def run_bits(npz, index: int, name: str) -> np.ndarray:
    """uint16 ``[6, ...]``: the six recorded runs' bits of gradient ``name`` of case ``index``
    (the XOR encoding undone)."""
    rows = np.asarray(npz[f"b{index}_{name}_runs"])
    return np.concatenate([rows[:1], rows[1:] ^ rows[:1]])


def _philox(record: dict) -> tuple[int | None, int | None]:
    """(seed, offset) of a dropout case: the op's Philox tensors' values in order (PyTorch's op
    returns both in its first Philox tensor, ``[seed, offset]``, the second one empty)."""
    vals = record.get("philox") or []
    if len(vals) < 2:
        return None, None
    return int(vals[0]), int(vals[1])


def check_backward_case(record: dict, npz, gpu: str) -> dict:
    """One recorded backward case through the emulator.

    Args:
        record: the case's entry of the report's ``"backward"`` list.
        npz: the loaded ``sdpa_backward.npz`` (mapping of array names to arrays).
        gpu: the recording's GPU key (:func:`simulator.replay.sdpa.gpu_of`).
    Returns:
        ``{"values", "det_differ", "default_outside", "refused"}``: values compared (three
        deterministic and three default runs of dq, dk, dv), deterministic bits differing from
        the emulation, default-run values outside the emulated spread, and whether the case was
        refused (by the device, then the emulator must refuse too: one differing value if not).
    Source: simulator/measure/sdpa_record.py (``record_backward``: the format).
    """
    from ..flash.spread import contains
    from ..sdpa import backward_spread, flash_attention_backward

    case = record["case"]
    q, k, v = sc.make_inputs(case)
    dout = sc.make_grad(case)
    p = float(case.get("dropout_p", 0.0))
    seed, offset = _philox(record)
    i = record["index"]
    if "error" in record:
        try:
            lse0 = np.zeros(q.shape[:3], np.float32)
            flash_attention_backward(dout, q, k, v, q, lse0, p, case["causal"], seed, offset,
                                     case["scale"], deterministic=True, gpu=gpu)
        except ValueError:
            return {"values": 0, "det_differ": 0, "default_outside": 0, "refused": True}
        return {"values": 1, "det_differ": 1, "default_outside": 0, "refused": False}
    out = np.asarray(npz[f"b{i}_out"]).view(q.dtype)
    lse = np.asarray(npz[f"b{i}_lse"], np.float32)
    args = (dout, q, k, v, out, lse, p, case["causal"], seed, offset, case["scale"])
    det = flash_attention_backward(*args, deterministic=True, gpu=gpu)
    spread = backward_spread(*args, gpu=gpu)
    values = det_differ = outside = 0
    for name, want in zip(NAMES, det, strict=True):
        runs = run_bits(npz, i, name)
        got = np.ascontiguousarray(want).view(np.uint16)
        values += runs.size
        det_differ += int((runs[:3] != got[None]).sum())
        lo, hi = spread[name]
        for r in runs[3:]:
            outside += int((~contains(lo, hi, r.view(q.dtype))).sum())
    return {"values": values, "det_differ": det_differ, "default_outside": outside,
            "refused": False}


def check_all(quick: bool = False) -> list[dict]:
    """Rows for ``verify``: every recorded backward case (every fourth with ``quick``)."""
    if not recorded() or not NPZ.exists():
        return [{"check": "sdpa flash backward (no recordings in the package yet)", "cases": 0,
                 "mismatches": 0, "detail": REGENERATE}]
    report, _ = load()
    npz = read_npz(NPZ, REGENERATE)
    gpu = gpu_of(report)
    records = report.get("backward", [])[:: 4 if quick else 1]
    values = bad = 0
    for r in records:
        res = check_backward_case(r, npz, gpu)
        values += res["values"]
        bad += res["det_differ"] + res["default_outside"]
    name = report["provenance"]["gpu"].removeprefix("NVIDIA ")
    return [{"check": f"sdpa flash backward ({len(records)} calls, deterministic bits and default "
                      f"runs in the spread, {name})", "cases": values, "mismatches": bad,
             "detail": ""}]
