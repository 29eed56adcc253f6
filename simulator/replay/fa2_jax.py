"""Replay of flash-attn 2.x's kernels as PyPI flash-attn-jax 0.6.2 ships them, recorded on a
Hopper GPU (``python -m simulator measure fa2_jax_record``; packed by
``scripts/pack_jax_recordings.py`` into ``simulator/data/device/fa2_jax/``), through
:mod:`simulator.fa2` (the fast-math build, :data:`simulator.flash.mainloop_fwd_fa2.FLASH_ATTN`).

* forward: every recorded call's out and LSE against the recorded digests (full bits where the
  sample has them). The split-KV calls at head dims 160 / 224 are counted apart
  (``library_defect``): the library's glue sizes ``out_accum`` by ``round_multiple(d, 32)``
  while the kernel strides it by ``head_size_rounded`` (192 / 256) and writes past it.
* varlen: full bits (each sequence's rows of the padded ``[batch, heads, max_seqlen_q]`` LSE;
  the rows past a sequence's length are not written by the kernel).
* backward: on the recorded forward's out and LSE, the kernel's dQ and per-query-head dK / dV
  (the GQA group sum comes after, in the glue: XLA's float32 sum of the group in order,
  rounded once) in deterministic mode against all three runs' digests; in default mode dK / dV
  against the digests and every default run's dQ inside :func:`simulator.fa2.backward_spread`
  (the runs' values where they differ from the deterministic run are in the sample).
"""

from __future__ import annotations

import numpy as np

from ..io import DEVICE_DATA_DIR, read_json, read_npz
from . import fa2_jax_cases as fc
from .common import digest
from .sdpa import gpu_of

FOLDER = DEVICE_DATA_DIR / "fa2_jax"
REPORT = FOLDER / "fa2_jax_report.json"
SAMPLE = FOLDER / "fa2_jax_sample.npz"
DRAWN_REPORT = FOLDER / "fa2_jax_drawn_report.json"
DRAWN = FOLDER / "fa2_jax_drawn.npz"
REGENERATE = ("bash scripts/device_fa2_jax_session.sh (a Hopper GPU with jax), then python "
              "scripts/pack_jax_recordings.py RESULTS_DIR")

__all__ = ["FOLDER", "check_all", "check_backward", "check_forward", "check_varlen", "load",
           "recorded"]


def recorded() -> bool:
    return REPORT.exists()


def load():
    """``(report, sample)``."""
    return read_json(REPORT, REGENERATE), read_npz(SAMPLE, REGENERATE)


def _hex(x: np.ndarray) -> str:
    return digest(np.ascontiguousarray(x)).hex()


def _u16(x) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint16)


def _inputs(case: dict):
    import ml_dtypes  # noqa: PLC0415

    dt = ml_dtypes.bfloat16 if case["dtype"] == "bf16" else np.float16
    return tuple(x.view(dt) for x in fc.make_input_bits(case)), dt


def check_forward(rec: dict, sample, gpu: str) -> dict:
    """One forward call: ``{"values", "differ"}`` (values: out and LSE elements compared)."""
    from ..fa2 import flash_attn_func  # noqa: PLC0415

    case, i = rec["case"], rec["index"]
    (q, k, v), _ = _inputs(case)
    out, lse, _ = flash_attn_func(q, k, v, softmax_scale=case["scale"], causal=case["causal"],
                                  window_size=tuple(case["window"]), return_attn_probs=True,
                                  gpu=gpu)
    values = out.size + lse.size
    if f"c{i}_out" in sample:
        differ = int((_u16(out) != sample[f"c{i}_out"]).sum())
        differ += int((lse.view(np.uint32) != sample[f"c{i}_lse"].view(np.uint32)).sum())
        return {"values": values, "differ": differ}
    differ = (out.size if _hex(_u16(out)) != rec["out"] else 0) + \
        (lse.size if _hex(lse.view(np.uint32)) != rec["lse"] else 0)
    return {"values": values, "differ": differ}


def check_varlen(rec: dict, sample, gpu: str) -> dict:
    """One varlen call against its full recorded bits."""
    from ..fa2 import flash_attn_varlen_func  # noqa: PLC0415

    case, i = rec["case"], rec["index"]
    (q, k, v), _ = _inputs(case)
    cq, ck = fc.cu_seqlens(case["seqlens_q"]), fc.cu_seqlens(case["seqlens_k"])
    out, lse, _ = flash_attn_varlen_func(q, k, v, cq, ck, max(case["seqlens_q"]),
                                         max(case["seqlens_k"]), softmax_scale=case["scale"],
                                         causal=case["causal"], window_size=tuple(case["window"]),
                                         return_attn_probs=True, gpu=gpu)
    want = sample[f"v{i}_lse"]
    differ = int((_u16(out) != sample[f"v{i}_out"]).sum())
    values = out.size
    for s in range(len(case["seqlens_q"])):
        a, b = cq[s], cq[s + 1]
        differ += int((lse[:, a:b].view(np.uint32) != want[s, :, : b - a].view(np.uint32)).sum())
        values += lse[:, a:b].size
    return {"values": values, "differ": differ}


def _glue_sum(x: np.ndarray, heads_kv: int, fmt: str) -> np.ndarray:
    """flash-attn-jax's GQA sum of per-query-head dK / dV (``einops.reduce`` in XLA): float32,
    the group's heads in order, rounded once."""
    from ..numerics import convert  # noqa: PLC0415

    b, sk, h, d = x.shape
    parts = x.astype(np.float32).reshape(b, sk, heads_kv, h // heads_kv, d)
    acc = np.zeros((b, sk, heads_kv, d), np.float32)
    for j in range(h // heads_kv):
        acc = (acc + parts[:, :, :, j]).astype(np.float32)
    return convert(acc, fmt)


def check_backward(rec: dict, sample, gpu: str) -> dict:
    """One backward case: ``{"values", "differ", "outside", "default_values"}``."""
    from ..flash.backward_fa2 import backward_fa2  # noqa: PLC0415
    from ..flash.mainloop_bwd_fa2 import FLASH_ATTN_BWD  # noqa: PLC0415
    from ..flash.spread import contains  # noqa: PLC0415

    case, i = rec["case"], rec["index"]
    (q, k, v), dt = _inputs(case)
    g = fc.grad_bits(case).view(dt)
    o, lse = _recorded_forward(rec, sample, q, k, v, gpu)
    h, hk = case["heads"], case["heads_kv"]
    ke, ve = (np.repeat(x, h // hk, axis=2) for x in (k, v))  # the kernel's per-query-head dK / dV
    kw = dict(softmax_scale=case["scale"], causal=case["causal"], window=tuple(case["window"]),
              build=FLASH_ATTN_BWD, gpu=gpu)
    det = backward_fa2(g, q, ke, ve, o, lse, deterministic=True, **kw)
    dflt = backward_fa2(g, q, ke, ve, o, lse, deterministic=False, spread=True, **kw)
    out = {"values": 0, "differ": 0, "outside": 0, "default_values": 0}
    for name in ("dq", "dk", "dv"):
        mine = _u16(getattr(det, name))
        out["values"] += mine.size
        if any(_hex(mine) != run[name] for run in rec["det"]):
            out["differ"] += mine.size if f"b{i}_{name}_det" not in sample else \
                int((mine != sample[f"b{i}_{name}_det"]).sum()) or mine.size
    for name in ("dk", "dv"):
        mine = _u16(getattr(dflt, name))
        if any(_hex(mine) != run[name] for run in rec["default"]):
            out["differ"] += mine.size
        if "glue" in rec:
            summed = _u16(_glue_sum(getattr(det, name), hk, "bf16" if case["dtype"] == "bf16" else "f16"))
            out["values"] += summed.size
            if _hex(summed) != rec["glue"][name]:
                out["differ"] += summed.size
    lo, hi = (np.asarray(a, np.float32).ravel() for a in dflt.spread["dq"])
    det_dq = _u16(det.dq).ravel()
    for j, run in enumerate(rec["default"]):
        idx, val = sample[f"b{i}_dq_r{j}_idx"], sample[f"b{i}_dq_r{j}_val"]
        rebuilt = det_dq.copy()
        rebuilt[idx] = val
        if _hex(rebuilt.reshape(det.dq.shape)) != run["dq"]:
            out["differ"] += det_dq.size
        inside = contains(lo, hi, rebuilt.view(dt))
        out["default_values"] += det_dq.size
        out["outside"] += int((~inside).sum())
    return out


def _recorded_forward(rec, sample, q, k, v, gpu):
    """The forward the backward ran on: the emulator's (its digests checked against the
    recorded ones, which must agree), or, where the library's forward was a ``library_defect``
    split launch, the recorded bits (the backward takes them as inputs)."""
    from ..fa2 import flash_attn_func  # noqa: PLC0415

    case, i = rec["case"], rec["index"]
    if "library_defect" in rec:
        return sample[f"b{i}_out"].view(q.dtype), sample[f"b{i}_lse"]
    o, lse, _ = flash_attn_func(q, k, v, softmax_scale=case["scale"], causal=case["causal"],
                                window_size=tuple(case["window"]), return_attn_probs=True, gpu=gpu)
    if _hex(_u16(o)) != rec["out"] or _hex(lse.view(np.uint32)) != rec["lse"]:
        raise AssertionError(f"backward case {rec['index']}: the emulated forward differs from "
                             "the recorded one")
    return o, lse


def check_drawn(quick: bool = False) -> list[dict]:
    """Rows for the drawn calls (:func:`simulator.replay.fa2_jax_cases.drawn_cases`, recorded
    with ``--drawn``): forward digests; backward as :func:`check_backward` (every tenth call
    with ``quick``)."""
    if not DRAWN_REPORT.exists():
        return []
    report = read_json(DRAWN_REPORT, REGENERATE)
    arrays = read_npz(DRAWN, REGENERATE)
    gpu = gpu_of(report)
    step = 10 if quick else 1
    n = report["drawn"]
    if [r["case"] for r in report["forward"]] != fc.drawn_cases(n - n // 4) or \
            [r["case"] for r in report["backward"]] != fc.drawn_cases(n // 4, backward=True):
        raise AssertionError("fa2_jax_drawn_report.json: the drawn case lists changed")
    values = differ = 0
    fwd = [r for r in report["forward"][::step] if "error" not in r]
    for r in fwd:
        x = check_forward(r, {}, gpu)
        values += x["values"]
        differ += x["differ"]
    rows = [{"check": f"fa2 flash-attn-jax drawn forward ({len(fwd)} calls)", "cases": values,
             "mismatches": differ, "detail": ""}]
    bwd = [r for r in report["backward"][::step] if "error" not in r]
    tot = {"values": 0, "differ": 0, "outside": 0, "default_values": 0}
    for r in bwd:
        for key, x in check_backward(r, arrays, gpu).items():
            tot[key] += x
    rows.append({"check": f"fa2 flash-attn-jax drawn backward ({len(bwd)} calls x 6 runs)",
                 "cases": tot["values"] + tot["default_values"],
                 "mismatches": tot["differ"] + tot["outside"], "detail": ""})
    return rows


def check_all(quick: bool = False) -> list[dict]:
    """Rows for ``verify`` (every third call of each list with ``quick``)."""
    if not recorded():
        return [{"check": "fa2 flash-attn-jax (no recordings in the package)", "cases": 0,
                 "mismatches": 0, "detail": REGENERATE}]
    report, sample = load()
    gpu = gpu_of(report)
    step = 3 if quick else 1
    name = report["provenance"]["gpu"].removeprefix("NVIDIA ")
    rows = []
    fwd = [r for r in report["forward"][::step] if "error" not in r]
    values = differ = defect_differ = defects = 0
    for r in fwd:
        res = check_forward(r, sample, gpu)
        if "library_defect" in r:
            defects += 1
            defect_differ += res["differ"] > 0
            continue
        values += res["values"]
        differ += res["differ"]
    rows.append({"check": f"fa2 flash-attn-jax forward ({len(fwd) - defects} calls, {name})",
                 "cases": values, "mismatches": differ,
                 "detail": f"{defects} split-KV calls at head dims 160/224 set apart (library "
                           f"writes past out_accum; {defect_differ} differ)" if defects else ""})
    var = report["varlen"][::step]
    values = differ = 0
    for r in var:
        res = check_varlen(r, sample, gpu)
        values += res["values"]
        differ += res["differ"]
    rows.append({"check": f"fa2 flash-attn-jax varlen ({len(var)} calls)", "cases": values,
                 "mismatches": differ, "detail": ""})
    bwd = [r for r in report["backward"][::step] if "error" not in r]
    tot = {"values": 0, "differ": 0, "outside": 0, "default_values": 0}
    for r in bwd:
        for key, x in check_backward(r, sample, gpu).items():
            tot[key] += x
    rows.append({"check": f"fa2 flash-attn-jax backward ({len(bwd)} calls x 3 runs, "
                          "deterministic bits)", "cases": tot["values"],
                 "mismatches": tot["differ"], "detail": ""})
    rows.append({"check": "fa2 flash-attn-jax backward (default runs' dQ inside the spread)",
                 "cases": tot["default_values"], "mismatches": tot["outside"], "detail": ""})
    return rows + check_drawn(quick)

