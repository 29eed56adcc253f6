"""Replay of FlashAttention-3 as PyPI dew-flash-attn-cu13 0.3.6 builds it
(``libdew_flash_attn3.so``, sm_90a), recorded on a Hopper GPU (``python -m simulator measure
dew_fa3_record``, packed by ``scripts/pack_jax_recordings.py`` into
``simulator/data/device/dew_fa3/``), through :mod:`simulator.fa3`: a second real FA3 build,
with backward kernels at head dims 64, 128, 192 and 256.

The build compiles kernel head dims 64, 128, 192 and 256 only (its 96 forward and 336
backward kernels; no 96): a head dim in (64, 96] runs the 128 kernel. The emulator is given
the inputs zero-padded to the build's kernel head dim with the original head dim's default
scale, which is what the kernel computes (the columns past the head dim are zero-filled by
its loads), and its outputs are cut back.

* forward: out and LSE of every call against the recorded digests (full bits where sampled);
* backward (default mode only: the FFI has no deterministic switch; three runs): the forward
  it ran on, then dQ / dK / dV. A gradient whose three runs agree must equal the emulator's
  deterministic-order bits (by digest); a run that differs is checked inside
  :func:`simulator.fa3.backward_spread` where its bits are recorded, and counted as
  unchecked otherwise (detail column).
"""

from __future__ import annotations

import math

import numpy as np

from ..io import DEVICE_DATA_DIR, read_json, read_npz
from . import dew_fa3_cases as dc
from .common import digest
from .sdpa import gpu_of

FOLDER = DEVICE_DATA_DIR / "dew_fa3"
REPORT = FOLDER / "dew_fa3_report.json"
SAMPLE = FOLDER / "dew_fa3_sample.npz"
DRAWN_REPORT = FOLDER / "dew_fa3_drawn_report.json"
DRAWN = FOLDER / "dew_fa3_drawn.npz"
REGENERATE = ("bash scripts/device_fa2_jax_session.sh (a Hopper GPU with jax), then python "
              "scripts/pack_jax_recordings.py RESULTS_DIR")
#: the kernel head dims libdew_flash_attn3.so compiles (its kernel names)
BUILD_HEAD_DIMS = (64, 128, 192, 256)

__all__ = ["BUILD_HEAD_DIMS", "FOLDER", "build_head_dim", "check_all", "check_backward",
           "check_forward", "recorded"]


def recorded() -> bool:
    return REPORT.exists()


def build_head_dim(head_dim: int) -> int:
    """The kernel head dim dew's build runs ``head_dim`` with."""
    return next(d for d in BUILD_HEAD_DIMS if head_dim <= d)


def _hex(x: np.ndarray) -> str:
    return digest(np.ascontiguousarray(x)).hex()


def _u16(x) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint16)


def _pad(x: np.ndarray, d: int) -> np.ndarray:
    if x.shape[-1] == d:
        return x
    z = np.zeros(x.shape[:-1] + (d,), x.dtype)
    z[..., : x.shape[-1]] = x
    return z


def _inputs(case: dict, backward: bool):
    import ml_dtypes  # noqa: PLC0415

    dt = ml_dtypes.bfloat16 if case["dtype"] == "bf16" else np.float16
    q, k, v = (x.view(dt) for x in dc.make_input_bits(case))
    g = None
    if backward:
        g = dc.grad_bits(case)
        # the recorder passed the 4-d dout to the packed FFI, which read its first
        # total * heads * head_dim values: the first batch slice
        g = (g[0] if "seqlens_q" in case else g).view(dt)
    return q, k, v, g


def _varlen(case: dict) -> dict:
    if "seqlens_q" not in case:
        return {}
    return {"cu_seqlens_q": dc.cu_seqlens(case["seqlens_q"]),
            "cu_seqlens_k": dc.cu_seqlens(case["seqlens_k"]),
            "max_seqlen_q": max(case["seqlens_q"]), "max_seqlen_k": max(case["seqlens_k"])}


def _forward(case: dict, q, k, v, gpu: str):
    """The emulator's (out, lse) as the build runs the call."""
    from .. import fa3  # noqa: PLC0415

    d = case["head_dim"]
    hd = build_head_dim(d)
    scale = 1.0 / math.sqrt(d) if case["scale"] is None else case["scale"]
    qp, kp, vp = (_pad(x, hd) for x in (q, k, v))
    kw = dict(softmax_scale=scale, causal=case["causal"], window_size=tuple(case["window"]),
              return_attn_probs=True, gpu=gpu)
    var = _varlen(case)
    if var:
        out, lse = fa3.flash_attn_varlen_func(qp, kp, vp, **var, **kw)
    else:
        out, lse = fa3.flash_attn_func(qp, kp, vp, **kw)
    return np.ascontiguousarray(out[..., :d]), np.asarray(lse, np.float32)


def check_forward(rec: dict, sample, gpu: str) -> dict:
    case, i = rec["case"], rec["index"]
    q, k, v, _ = _inputs(case, False)
    out, lse = _forward(case, q, k, v, gpu)
    values = out.size + lse.size
    if f"f{i}_out" in sample:
        differ = int((_u16(out) != sample[f"f{i}_out"]).sum())
        differ += int((lse.view(np.uint32) != sample[f"f{i}_lse"].view(np.uint32)).sum())
    else:
        differ = (out.size if _hex(_u16(out)) != rec["out"] else 0) + \
            (lse.size if _hex(lse.view(np.uint32)) != rec["lse"] else 0)
    return {"values": values, "differ": differ}


def check_backward(rec: dict, sample, gpu: str) -> dict:
    """``{"values", "differ", "outside", "spread_values", "unchecked"}`` of one case."""
    from ..fa3.backward import BackwardCall, launch  # noqa: PLC0415
    from ..flash.spread import contains  # noqa: PLC0415

    case, i = rec["case"], rec["index"]
    q, k, v, g = _inputs(case, True)
    out, lse = _forward(case, q, k, v, gpu)
    res = {"values": out.size + lse.size, "differ": 0, "outside": 0, "spread_values": 0,
           "unchecked": 0}
    if _hex(_u16(out)) != rec["out"] or _hex(lse.view(np.uint32)) != rec["lse"]:
        res["differ"] += out.size
        return res
    d, hd = case["head_dim"], build_head_dim(case["head_dim"])
    scale = 1.0 / math.sqrt(d) if case["scale"] is None else case["scale"]
    var = _varlen(case)
    call = BackwardCall(_pad(g, hd), _pad(q, hd), _pad(k, hd), _pad(v, hd), _pad(out, hd), lse,
                        scale, case["causal"], tuple(case["window"]), 0.0,
                        var.get("cu_seqlens_q"), var.get("cu_seqlens_k"), var.get("max_seqlen_q"),
                        var.get("max_seqlen_k"), None, None, 0, None, None, None, gpu)
    got, _ = launch(call, deterministic=False, spread=True)
    for name in ("dq", "dk", "dv"):
        mine = np.ascontiguousarray(getattr(got, name)[..., :d])
        lo, hi = (np.ascontiguousarray(np.asarray(a, np.float32)[..., :d]).ravel()
                  for a in got.spread[name])
        res["values"] += mine.size * 3
        if rec[f"{name}_agree"] and all(h == _hex(_u16(mine)) for h in rec[f"{name}_runs"]):
            continue
        runs = _runs(sample, i, name)
        if runs is None:
            res["unchecked"] += mine.size * sum(h != _hex(_u16(mine)) for h in rec[f"{name}_runs"])
            continue
        for run in runs:
            inside = contains(lo, hi, run.ravel().view(mine.dtype))
            res["spread_values"] += run.size
            res["outside"] += int((~inside).sum())
    return res


def _runs(sample, i: int, name: str):
    """The three runs' bits of a gradient where the sample holds them (stacks: row 0 run 0,
    rows 1-2 XOR run 0; dK / dV only for the GQA cases re-recorded in full), else None."""
    key = f"b{i}_dq" if name == "dq" else f"b{i}_{name}_runs"
    if key not in sample:
        return None
    x = sample[key]
    return [x[0]] + [x[0] ^ r for r in x[1:]]


def check_drawn(quick: bool = False) -> list[dict]:
    """Rows for the drawn backward calls (:func:`simulator.replay.dew_fa3_cases.
    drawn_backward_cases`, recorded with ``--drawn``; every tenth with ``quick``)."""
    if not DRAWN_REPORT.exists():
        return []
    report = read_json(DRAWN_REPORT, REGENERATE)
    arrays = read_npz(DRAWN, REGENERATE)
    if [r["case"] for r in report["backward"]] != dc.drawn_backward_cases(report["drawn"]):
        raise AssertionError("dew_fa3_drawn_report.json: the drawn case list changed")
    gpu = gpu_of(report)
    bwd = [r for r in report["backward"][:: 10 if quick else 1] if "error" not in r]
    tot = {"values": 0, "differ": 0, "outside": 0, "spread_values": 0, "unchecked": 0}
    for r in bwd:
        for key, x in check_backward(r, arrays, gpu).items():
            tot[key] += x
    return [{"check": f"dew-flash-attn FA3 drawn backward ({len(bwd)} calls x 3 runs)",
             "cases": tot["values"] - tot["unchecked"] + tot["spread_values"],
             "mismatches": tot["differ"] + tot["outside"] + (tot["unchecked"] > 0),
             "detail": f"{tot['unchecked']} values of differing runs without recorded bits"
                       if tot["unchecked"] else ""}]


def check_all(quick: bool = False) -> list[dict]:
    """Rows for ``verify`` (every fourth case with ``quick``)."""
    if not recorded():
        return [{"check": "dew-flash-attn FA3 (no recordings in the package)", "cases": 0,
                 "mismatches": 0, "detail": REGENERATE}]
    report = read_json(REPORT, REGENERATE)
    sample = read_npz(SAMPLE, REGENERATE)
    gpu = gpu_of(report)
    step = 4 if quick else 1
    name = report["provenance"]["gpu"].removeprefix("NVIDIA ")
    fwd = [r for r in report["forward"][::step] if "error" not in r]
    values = differ = 0
    for r in fwd:
        x = check_forward(r, sample, gpu)
        values += x["values"]
        differ += x["differ"]
    rows = [{"check": f"dew-flash-attn FA3 forward ({len(fwd)} calls, {name})", "cases": values,
             "mismatches": differ, "detail": "head dims 64-256; 96 runs the 128 kernel"}]
    bwd = [r for r in report["backward"][::step] if "error" not in r]
    tot = {"values": 0, "differ": 0, "outside": 0, "spread_values": 0, "unchecked": 0}
    for r in bwd:
        for key, x in check_backward(r, sample, gpu).items():
            tot[key] += x
    rows.append({"check": f"dew-flash-attn FA3 backward ({len(bwd)} calls x 3 default runs)",
                 "cases": tot["values"] - tot["unchecked"], "mismatches": tot["differ"],
                 "detail": f"{tot['unchecked']} values of runs that differ from the emulator's "
                           "order, bits not recorded: unchecked" if tot["unchecked"] else ""})
    rows.append({"check": "dew-flash-attn FA3 backward (differing runs inside the spread)",
                 "cases": tot["spread_values"], "mismatches": tot["outside"], "detail": ""})
    return rows + check_drawn(quick)
