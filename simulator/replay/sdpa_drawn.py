"""Replay of the drawn calls of PyTorch SDPA's flash backend (``python -m simulator measure
sdpa_record --drawn N``: ``simulator/data/device/sdpa/sdpa_drawn_report.json`` and
``sdpa_drawn.npz``): the cases of :func:`simulator.replay.sdpa_cases.drawn_cases`, digests of
every output.

* forward: out and logsumexp of :func:`simulator.sdpa.flash_attention_forward` against the
  recorded digests;
* backward: on the emulated forward (whose digests must be the recorded ones), the three
  deterministic runs' dq, dk, dv digests against :func:`simulator.sdpa.flash_attention_backward`
  (``deterministic=True``), the default runs' dk, dv digests against the same bits (one order),
  and each default run's dq (the first deterministic run's bits with the recorded differing
  values put in) by digest and inside :func:`simulator.sdpa.backward_spread`.
"""

from __future__ import annotations

import numpy as np

from ..io import read_json, read_npz
from . import sdpa_cases as sc
from .common import digest
from .sdpa import FOLDER, REGENERATE, gpu_of

REPORT = FOLDER / "sdpa_drawn_report.json"
NPZ = FOLDER / "sdpa_drawn.npz"

__all__ = ["NPZ", "REPORT", "check_all", "check_backward", "check_forward"]


def _hex(x) -> str:
    return digest(np.ascontiguousarray(x)).hex()


def _u16(x) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint16)


def check_forward(rec: dict, gpu: str) -> dict:
    from ..sdpa import flash_attention_forward  # noqa: PLC0415

    case = rec["case"]
    q, k, v = sc.make_inputs(case)
    out, lse = flash_attention_forward(q, k, v, 0.0, case["causal"], case["scale"],
                                       enable_gqa=True, gpu=gpu)
    differ = (out.size if _hex(_u16(out)) != rec["out"] else 0) + \
        (lse.size if _hex(lse.view(np.uint32)) != rec["lse"] else 0)
    return {"values": out.size + lse.size, "differ": differ}


def check_backward(rec: dict, arrays, gpu: str) -> dict:
    """``{"values", "differ", "outside"}`` of one drawn backward call."""
    from ..flash.spread import contains  # noqa: PLC0415
    from ..sdpa import backward_spread, flash_attention_backward, flash_attention_forward  # noqa: PLC0415

    case, i = rec["case"], rec["index"]
    q, k, v = sc.make_inputs(case)
    dout = sc.make_grad(case)
    out, lse = flash_attention_forward(q, k, v, 0.0, case["causal"], case["scale"],
                                       enable_gqa=True, gpu=gpu)
    res = {"values": out.size + lse.size, "differ": 0, "outside": 0}
    if _hex(_u16(out)) != rec["out"] or _hex(lse.view(np.uint32)) != rec["lse"]:
        res["differ"] += out.size
        return res
    args = (dout, q, k, v, out, lse, 0.0, case["causal"], None, None, case["scale"])
    det = flash_attention_backward(*args, deterministic=True, gpu=gpu)
    spread = backward_spread(*args, gpu=gpu)
    for name, mine in zip(("dq", "dk", "dv"), det, strict=True):
        h = _hex(_u16(mine))
        res["values"] += 6 * mine.size
        runs = rec[name]
        res["differ"] += mine.size * sum(x != h for x in runs[:3])
        if name != "dq":
            res["differ"] += mine.size * sum(x != h for x in runs[3:])
            continue
        lo, hi = (np.asarray(a, np.float32).ravel() for a in spread["dq"])
        base = _u16(mine).ravel()
        for j, want in enumerate(runs[3:]):
            idx, val = arrays[f"b{i}_dq_r{j}_idx"], arrays[f"b{i}_dq_r{j}_val"]
            rebuilt = base.copy()
            rebuilt[idx] = val
            if _hex(rebuilt.reshape(mine.shape)) != want:
                res["differ"] += mine.size
            res["outside"] += int((~contains(lo, hi, rebuilt.view(q.dtype))).sum())
    return res


def check_all(quick: bool = False) -> list[dict]:
    """Rows for ``verify --topic sdpa`` (every tenth call with ``quick``); none when the drawn
    calls are not recorded."""
    if not REPORT.exists():
        return []
    report = read_json(REPORT, REGENERATE)
    arrays = read_npz(NPZ, REGENERATE)
    n = report["drawn_asked"]
    if [r["case"] for r in report["forward"]] != sc.drawn_cases(n - n // 4)[:len(report["forward"])] \
            or [r["case"] for r in report["backward"]] != \
            sc.drawn_cases(n // 4, backward=True)[:len(report["backward"])]:
        raise AssertionError("sdpa_drawn_report.json: the drawn case lists changed")
    gpu = gpu_of(report)
    step = 10 if quick else 1
    fwd = [r for r in report["forward"][::step] if "error" not in r]
    values = differ = 0
    for r in fwd:
        x = check_forward(r, gpu)
        values += x["values"]
        differ += x["differ"]
    rows = [{"check": f"sdpa flash forward, drawn ({len(fwd)} calls)", "cases": values,
             "mismatches": differ, "detail": ""}]
    bwd = [r for r in report["backward"][::step] if "error" not in r]
    tot = {"values": 0, "differ": 0, "outside": 0}
    for r in bwd:
        for key, x in check_backward(r, arrays, gpu).items():
            tot[key] += x
    rows.append({"check": f"sdpa flash backward, drawn ({len(bwd)} calls x 6 runs)",
                 "cases": tot["values"], "mismatches": tot["differ"] + tot["outside"],
                 "detail": ""})
    return rows
