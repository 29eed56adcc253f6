"""Replay of FlashAttention-4's sm90 forward as PyPI flash-attn-4 4.0.0b36 (CuTe DSL 4.8.1)
computes it, recorded on a Hopper GPU (``python -m simulator measure fa4_record``, run by
``scripts/device_fa4_session.sh``; ``simulator/data/device/fa4/``), through
:mod:`simulator.fa4`.

* forward: every chosen call's out and LSE against the recorded bits (``fa4_forward.npz``),
  varlen calls included;
* the forward of every backward case (its out and LSE, ``fa4_backward.npz``);
* drawn: the hypothesis-style drawn calls (:func:`simulator.replay.fa4_cases.drawn_cases`)
  against the recorded digests;
* backward: on the recorded forward's out and LSE, :func:`simulator.fa4.flash_attn_backward`
  with ``deterministic=True`` against the three deterministic runs' dq, dk, dv bits, and every
  default run's values inside the spread of the reduce-add orders. The softcap cases are
  counted apart (FA4's softcap backward is not emulated), as are the learnable sinks' dsink.

Each record's input digest is checked first: a changed case list or generator is an error,
not a mismatch.
"""

from __future__ import annotations

import numpy as np

from ..io import DEVICE_DATA_DIR, read_json, read_npz
from . import fa4_cases as fc
from .common import digest
from .sdpa import gpu_of

FOLDER = DEVICE_DATA_DIR / "fa4"
REPORT = FOLDER / "fa4_report.json"
FORWARD = FOLDER / "fa4_forward.npz"
BACKWARD = FOLDER / "fa4_backward.npz"
DRAWN_REPORT = FOLDER / "fa4_drawn_report.json"
REGENERATE = ("bash scripts/device_fa4_session.sh prepare, then on a Hopper GPU stage1 and "
              "record (two calls while the machine is held); copy the results into "
              "simulator/data/device/fa4/ and run python scripts/make_manifest.py")

__all__ = ["FOLDER", "check_all", "check_call", "load", "recorded"]


def recorded() -> bool:
    return REPORT.exists()


def load():
    """``(report, forward sample, backward sample)``."""
    return (read_json(REPORT, REGENERATE), read_npz(FORWARD, REGENERATE),
            read_npz(BACKWARD, REGENERATE))


def _hex(x: np.ndarray) -> str:
    return digest(np.ascontiguousarray(x)).hex()


def run_case(case: dict, gpu: str):
    """``(out uint16 bits, lse float32)`` of :mod:`simulator.fa4` on a recorded case."""
    import ml_dtypes  # noqa: PLC0415

    from .. import fa4  # noqa: PLC0415

    dt = ml_dtypes.bfloat16 if case["dtype"] == "bf16" else np.float16
    q, k, v = (x.view(dt) for x in fc.make_input_bits(case))
    kw = dict(softmax_scale=case["scale"], causal=case["causal"],
              window_size=fc.window_args(case), softcap=case["softcap"],
              learnable_sink=fc.sink_logits(case) if case.get("sink") else None,
              pack_gqa=case["pack_gqa"], return_lse=True, gpu=gpu)
    if "seqlens_q" in case:
        out, lse = fa4.flash_attn_varlen_func(q, k, v, fc.cu_seqlens(case["seqlens_q"]),
                                              fc.cu_seqlens(case["seqlens_k"]), **kw)
    else:
        out, lse = fa4.flash_attn_func(q, k, v, **kw)
    return np.ascontiguousarray(out).view(np.uint16), lse


def check_call(rec: dict, case: dict, sample, prefix: str, gpu: str, backward=False) -> dict:
    """One recorded call: ``{"values", "differ"}`` against the sample's full bits
    (``{prefix}{index}_out`` / ``_lse``) where it has them, else the recorded digests."""
    if fc.case_digest(case, backward) != rec["input_digest"]:
        raise AssertionError(f"fa4 recording {prefix}{rec['index']}: the case's inputs changed "
                             "since it was recorded (replay/fa4_cases.py is frozen)")
    out, lse = run_case(case, gpu)
    lse_bits = lse.view(np.uint32)
    values = out.size + lse.size
    key = f"{prefix}{rec['index']}"
    if f"{key}_out" in sample:
        differ = int((out != sample[f"{key}_out"]).sum())
        differ += int((lse_bits != sample[f"{key}_lse"].view(np.uint32)).sum())
        return {"values": values, "differ": differ}
    differ = (out.size if _hex(out) != rec["out"] else 0) + \
        (lse.size if _hex(lse_bits) != rec["lse"] else 0)
    return {"values": values, "differ": differ}


def check_backward(rec: dict, case: dict, sample, gpu: str) -> dict:
    """One backward case: ``{"values", "differ", "outside"}`` (deterministic bits against
    runs 0-2; default runs 3-5 against the spread)."""
    import ml_dtypes  # noqa: PLC0415

    from .. import fa4  # noqa: PLC0415

    if fc.case_digest(case, True) != rec["input_digest"]:
        raise AssertionError(f"fa4 backward recording {rec['index']}: the case's inputs changed")
    i = rec["index"]
    dt = ml_dtypes.bfloat16 if case["dtype"] == "bf16" else np.float16
    q, k, v = (x.view(dt) for x in fc.make_input_bits(case))
    o, lse = sample[f"b{i}_out"].view(dt), sample[f"b{i}_lse"]
    kw = dict(softmax_scale=case["scale"], causal=case["causal"],
              window_size=fc.window_args(case), softcap=case["softcap"], gpu=gpu)
    sink = fc.sink_logits(case) if case.get("sink") else None
    res = {"values": 0, "differ": 0, "outside": 0}
    if sink is not None:  # dsink: one order, the same in every run
        *_, ds = fa4.flash_attn_backward(
            fc.grad_bits(case).view(dt), q, k, v, o, lse, deterministic=True,
            learnable_sink=sink, **kw)
        runs = sample[f"b{i}_dsink_runs"]
        bits = np.ascontiguousarray(ds).view(runs.dtype)
        res["values"] += bits.size * len(runs)
        res["differ"] += sum(int((bits != (runs[0] ^ runs[r] if r else runs[0])).sum())
                             for r in range(len(runs)))
    if "seqlens_q" in case:
        g = fc.grad_bits(dict(case, batch=1))[0].view(dt)
        cq, ck = fc.cu_seqlens(case["seqlens_q"]), fc.cu_seqlens(case["seqlens_k"])
        det = fa4.flash_attn_varlen_backward(g, q, k, v, o, lse, cq, ck, deterministic=True, **kw)
        spread = None  # varlen: the deterministic bits only
    else:
        g = fc.grad_bits(case).view(dt)
        det = fa4.flash_attn_backward(g, q, k, v, o, lse, deterministic=True, **kw)
        *_, spread = fa4.flash_attn_backward(g, q, k, v, o, lse, spread=True, **kw)
    for name, mine in zip(("dq", "dk", "dv"), det, strict=True):
        runs = sample[f"b{i}_{name}_runs"]
        bits = np.ascontiguousarray(mine).view(np.uint16)
        res["values"] += bits.size * 3
        res["differ"] += sum(int((bits != (runs[0] ^ runs[r] if r else runs[0])).sum())
                             for r in range(3))
        if spread is not None:
            lo, hi = (np.asarray(x, np.float32) for x in spread[name])
            for r in range(3, 6):
                run = (runs[0] ^ runs[r]).view(dt).astype(np.float32)
                res["outside"] += int(((run < lo) | (run > hi)).sum())
    return res


def check_backward_digests(rec: dict, case: dict, gpu: str) -> dict:
    """A drawn backward call recorded as digests: ``{"values", "differ", "default_apart"}``:
    the deterministic runs' dq, dk, dv digests against the emulator's deterministic bits; the
    default runs whose digests differ from them are counted apart (their values were not
    kept, so the spread cannot be checked)."""
    import ml_dtypes  # noqa: PLC0415

    from .. import fa4  # noqa: PLC0415

    if fc.case_digest(case, True) != rec["input_digest"]:
        raise AssertionError(f"fa4 drawn backward {rec['index']}: the case's inputs changed")
    dt = ml_dtypes.bfloat16 if case["dtype"] == "bf16" else np.float16
    q, k, v = (x.view(dt) for x in fc.make_input_bits(case))
    sink = fc.sink_logits(case) if case.get("sink") else None
    out, lse = run_case(case, gpu)
    if _hex(out) != rec["out"] or _hex(lse.view(np.uint32)) != rec["lse"]:
        return {"values": out.size + lse.size, "differ": out.size + lse.size, "default_apart": 0}
    grads = fa4.flash_attn_backward(
        fc.grad_bits(case).view(dt), q, k, v, out.view(dt), lse, softmax_scale=case["scale"],
        causal=case["causal"], window_size=fc.window_args(case), softcap=case["softcap"],
        deterministic=True, learnable_sink=sink, gpu=gpu)
    mine = {n: _hex(np.ascontiguousarray(x).view(np.uint32 if x.dtype == np.float32 else
                                                  np.uint16))
            for n, x in zip(("dq", "dk", "dv", "dsink"), grads, strict=False)}
    res = {"values": out.size + lse.size, "differ": 0, "default_apart": 0}
    for r, run in enumerate(rec["runs"]):
        for n, want in run.items():
            size = grads[("dq", "dk", "dv", "dsink").index(n)].size
            res["values"] += size if r < 3 or n == "dsink" else 0
            if want != mine[n]:
                if r < 3 or n == "dsink":
                    res["differ"] += size
                else:
                    res["default_apart"] += 1
    return res


def _drawn_rows(step: int) -> list[dict]:
    """Rows for the drawn-only visits' report (``fa4_drawn_report.json``), when present."""
    if not DRAWN_REPORT.exists():
        return []
    report = read_json(DRAWN_REPORT, REGENERATE)
    gpu = gpu_of(report)
    name = report["provenance"]["gpu"].removeprefix("NVIDIA ")
    fwd = [r for r in report["drawn_forward"][::step] if "out" in r]
    cases = fc.drawn_cases(max((r["index"] for r in report["drawn_forward"]), default=-1) + 1)
    rows = [_phase_row(f"drawn forward, {name}", fwd, cases, {}, "d", gpu)]
    bwd = [r for r in report["drawn_backward"][::step] if "runs" in r]
    bcases = fc.drawn_cases(max((r["index"] for r in report["drawn_backward"]), default=-1) + 1,
                            backward=True)
    total = {"values": 0, "differ": 0, "default_apart": 0}
    for r in bwd:
        for key, val in check_backward_digests(r, bcases[r["index"]], gpu).items():
            total[key] += val
    rows.append({"check": f"fa4 drawn backward, {name} ({len(bwd)} calls x 3 deterministic "
                          "runs, digests)", "cases": total["values"], "mismatches": total["differ"],
                 "detail": (f"{total['default_apart']} default-run gradients differ from the "
                            "deterministic bits (values not kept: not checked)"
                            if total["default_apart"] else "")})
    return rows


def _backward_row(report, sample, gpu, step) -> dict:
    cases = fc.backward_cases()
    recs = [r for r in report["backward"][::step] if "runs" in r]
    done = recs
    total = {"values": 0, "differ": 0, "outside": 0}
    for r in done:
        for key, val in check_backward(r, cases[r["index"]], sample, gpu).items():
            total[key] += val
    sinks = sum(bool(cases[r["index"]].get("sink")) for r in done)
    return {"check": f"fa4 backward ({len(done)} calls x 3 deterministic runs; default runs "
                     f"inside the spread; dsink of {sinks} sink calls x 6 runs)",
            "cases": total["values"], "mismatches": total["differ"] + total["outside"],
            "detail": (f"{total['outside']} default-run values outside the spread"
                       if total["outside"] else "")}


def _phase_row(name: str, recs, cases, sample, prefix, gpu, backward=False) -> dict:
    done = [r for r in recs if "out" in r]
    values = differ = calls_differ = 0
    for r in done:
        res = check_call(r, cases[r["index"]], sample, prefix, gpu, backward)
        values += res["values"]
        differ += res["differ"]
        calls_differ += res["differ"] > 0
    errors = sum("error" in r for r in recs)
    unstable = sum(not r.get("repeat_same", True) for r in done)
    return {"check": f"fa4 {name} ({len(done)} calls)", "cases": values, "mismatches": differ,
            "detail": ", ".join(x for x in (
                f"{calls_differ} calls differ" if calls_differ else "",
                f"{errors} refused by the library" if errors else "",
                f"{unstable} calls not repeatable on the device" if unstable else "") if x)}


def check_all(quick: bool = False) -> list[dict]:
    """Rows for ``verify`` (every fourth call of each list with ``quick``)."""
    if not recorded():
        return [{"check": "fa4 (no recordings in the package)", "cases": 0, "mismatches": 0,
                 "detail": REGENERATE}]
    report, fwd_sample, bwd_sample = load()
    gpu = gpu_of(report)
    step = 4 if quick else 1
    drawn = report["drawn_forward"]
    gpu_name = report["provenance"]["gpu"].removeprefix("NVIDIA ")
    return [
        _phase_row(f"forward, {gpu_name}", report["forward"][::step], fc.forward_cases(),
                   fwd_sample, "c", gpu),
        _phase_row("forward of the backward cases", report["backward"][::step],
                   fc.backward_cases(), bwd_sample, "b", gpu, backward=True),
        _phase_row("drawn forward", drawn[::step], fc.drawn_cases(len(drawn)), {}, "d", gpu),
        _backward_row(report, bwd_sample, gpu, step),
    ] + _drawn_rows(step)
