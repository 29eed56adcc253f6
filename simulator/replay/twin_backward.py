"""The twin backward's recordings (``twin_backward_*``): the frozen cases, the file format and
their replay through the emulator.

``python -m simulator measure twin_backward_record`` ran ``kernels/fa3_backward.cu`` (the
device twin of :func:`simulator.flash.backward.backward`) on the H200 for every case of
:func:`cases` and wrote, under ``simulator/data/device/``:

* ``twin_backward_report.json``: provenance (GPU, driver, NVRTC, SHA-256 of the kernel), and per
  case the case itself, the BLAKE2b-128 digests (:func:`simulator.replay.common.digest`) of the
  bits of the out / LSE the backward was given and of the twin's dq, dk, dv, dpsum, lse_log2;
* ``twin_backward_sample.npz``: the full bits of the small cases (:data:`SAMPLE_MAX_VALUES`),
  ``{key}_{name}`` as uint16 / uint32 arrays, so that a difference can be located.

A case's inputs are regenerated from it: q, k, v, dout by
:func:`simulator.replay.bwd_cases.case_inputs`, out and LSE by the emulator's forward
(:func:`simulator.flash.forward`, which the twin forward matches bit for bit); the replay runs
the emulator's backward on them and compares digests. Editing :func:`cases` changes what the
recorded bits belong to.
"""

from __future__ import annotations

import numpy as np

from .. import flash
from ..flash.backward import backward as emulated_backward
from ..io import read_json, read_npz
from . import bwd_cases
from .common import DATA_DIR, digest, row

REPORT_FILE = "twin_backward_report.json"
SAMPLE_FILE = "twin_backward_sample.npz"
REPORT = DATA_DIR / REPORT_FILE
SAMPLE = DATA_DIR / SAMPLE_FILE
#: cases with at most this many dq + dk + dv values keep their full bits in the sample
SAMPLE_MAX_VALUES = 40_000
OUTPUTS = ("dq", "dk", "dv", "dpsum", "lse_log2")
REGENERATE = ("python -m simulator measure twin_backward_record --out OUT (on an sm_90 GPU), "
              "then copy OUT/twin_backward_* here and run scripts/make_manifest.py")

_MASKS = {"none": (False, (-1, -1)), "causal": (True, (-1, -1)), "local": (False, (40, 20)),
          "right": (False, (-1, 30))}


def make_case(name, seed, hd, dtype, mask, b, sq, sk, h, hk, softcap=0.0, scale=None) -> dict:
    """A case dict (:mod:`simulator.replay.bwd_cases` keys plus ``softcap`` and ``mask``, one of
    "none", "causal", "local" (40, 20) or "right" (-1, 30))."""
    causal, window = _MASKS[mask]
    return {"name": name, "seed": seed, "dtype": dtype, "batch": b, "seqlen_q": sq,
            "seqlen_k": sk, "heads": h, "heads_kv": hk, "head_dim": hd, "causal": causal,
            "window": list(window), "seqlens_q": None, "seqlens_k": None,
            "softmax_scale": scale, "softcap": float(softcap), "mask": mask}


def cases() -> list[dict]:
    """The recorded cases: every kernel head dim (64, 96, 128, 192, 256) with no mask, causal
    (and GQA), local, softcap, softcap with causal and fp16; head dims that FA3 pads (40, 80,
    160); seqlens that are not block multiples, seqlen_q > seqlen_k causal (rows without keys),
    one-row and one-key calls, a window open on one side, a given softmax_scale. Seeds 7000 +
    index."""
    spec = []
    for hd in (64, 96, 128, 192, 256):
        spec += [
            (f"d{hd}_none_bf16", hd, "bf16", "none", 1, 150, 170, 2, 2, 0.0),
            (f"d{hd}_causal_gqa_bf16", hd, "bf16", "causal", 2, 130, 200, 2, 1, 0.0),
            (f"d{hd}_local_f16", hd, "f16", "local", 1, 180, 160, 2, 2, 0.0),
            (f"d{hd}_softcap_bf16", hd, "bf16", "none", 1, 100, 130, 2, 2, 30.0),
            (f"d{hd}_softcap_causal_gqa_f16", hd, "f16", "causal", 1, 140, 140, 4, 2, 20.0),
        ]
    spec += [
        ("d40_causal_f16", 40, "f16", "causal", 1, 97, 211, 2, 2, 0.0),
        ("d80_local_softcap_bf16", 80, "bf16", "local", 1, 120, 120, 2, 1, 15.0),
        ("d160_right_bf16", 160, "bf16", "right", 1, 90, 150, 3, 1, 0.0),
        ("d128_causal_q200_k100_bf16", 128, "bf16", "causal", 1, 200, 100, 2, 2, 0.0),
        ("d64_q1_k1_bf16", 64, "bf16", "none", 1, 1, 1, 1, 1, 0.0),
        ("d256_q1_k300_f16", 256, "f16", "none", 1, 1, 300, 2, 1, 0.0),
        ("d96_q300_k1_softcap_bf16", 96, "bf16", "none", 1, 300, 1, 1, 1, 10.0),
        ("d128_gqa6_3_f16", 128, "f16", "none", 2, 70, 90, 6, 3, 0.0),
        ("d192_local_gqa_bf16", 192, "bf16", "local", 2, 100, 120, 4, 1, 0.0),
        ("d64_scale_f16", 64, "f16", "causal", 1, 64, 64, 2, 2, 0.0),
    ]
    out = []
    for i, (name, hd, dt, mask, b, sq, sk, h, hk, sc) in enumerate(spec):
        scale = 0.3 if name == "d64_scale_f16" else None
        out.append(make_case(name, 7000 + i, hd, dt, mask, b, sq, sk, h, hk, sc, scale))
    return out


def bits(x: np.ndarray) -> np.ndarray:
    """The raw bits of a 16- or 32-bit array as uint16 / uint32."""
    return np.ascontiguousarray(x).view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def backward_kwargs(case: dict) -> dict:
    """The keyword arguments of the backward (emulator's and twin's) for ``case``."""
    return {"softmax_scale": case["softmax_scale"], "causal": case["causal"],
            "window": tuple(case["window"]), "softcap": case["softcap"]}


def inputs(case: dict) -> dict:
    """q, k, v, dout (:func:`bwd_cases.case_inputs`) and the emulator forward's out, lse."""
    x = bwd_cases.case_inputs(case)
    kw = backward_kwargs(case)
    fwd = flash.forward(x["q"], x["k"], x["v"], **kw)
    return {"q": x["q"], "k": x["k"], "v": x["v"], "dout": x["dout"], "out": fwd.out,
            "lse": fwd.lse}


def run_backward(fn, case: dict, x: dict):
    """``fn`` (the emulator's or the twin's backward) on the inputs ``x`` of ``case``."""
    return fn(x["dout"], x["q"], x["k"], x["v"], x["out"], x["lse"], **backward_kwargs(case))


def outputs(res) -> dict:
    """``{name: bits}`` of a backward result's dq, dk, dv, dpsum, lse_log2."""
    return {name: bits(getattr(res, name)) for name in OUTPUTS}


def emulate(case: dict, x: dict | None = None) -> dict:
    """The emulator's bits for ``case``: its outputs and the out / lse it was given."""
    x = inputs(case) if x is None else x
    got = outputs(run_backward(emulated_backward, case, x))
    return {**got, "out": bits(x["out"]), "lse": bits(x["lse"])}


def compare(entry: dict, got: dict, sample: dict) -> dict:
    """One recorded case against the emulator's bits ``got``: ``values`` compared, the names
    whose digests differ, and, where the sample has the twin's bits, per name the number of
    differing values and the first differing flat index."""
    res = {"values": 0, "mismatches": [], "differing": {}}
    for name in ("out", "lse") + OUTPUTS:
        if digest(got[name]).hex() != entry["digests"][name]:
            res["mismatches"].append(name)
            key = f"{entry['key']}_{name}"
            if key in sample:
                diff = np.flatnonzero(sample[key].ravel() != got[name].ravel())
                res["differing"][name] = (int(diff.size), int(diff[0]) if diff.size else -1)
        if name in OUTPUTS:
            res["values"] += int(got[name].size)
    return res


def load() -> tuple[dict, dict]:
    """The recorded report and sample (RecordedDataError when missing or corrupt)."""
    return read_json(REPORT, REGENERATE), read_npz(SAMPLE, REGENERATE)


def replay(quick: bool = False, progress=None) -> list[dict]:
    """verify rows: every recorded case's five outputs against the emulator's digests."""
    report, sample = load()
    bad, values, n = [], 0, 0
    for entry in report["entries"]:
        r = compare(entry, emulate(entry["case"]), sample)
        n += 1
        values += r["values"]
        if r["mismatches"]:
            bad.append(f"{entry['case']['name']}: {', '.join(r['mismatches'])}")
        if progress:
            progress(entry["key"])
    gpu = report.get("provenance", {}).get("gpu", "GPU")
    return [row(f"twin backward ({n} cases, kernels/fa3_backward.cu, {gpu})", values, len(bad),
                "dq, dk, dv, dpsum, lse_log2 bits of the twin against the emulator"
                + (f"; first: {bad[0]}" if bad else ""))]


# ---- step traces ------------------------------------------------------------------------------
TRACE_REPORT_FILE = "twin_backward_traces.json"
TRACE_SAMPLE_FILE = "twin_backward_traces.npz"
TRACE_REPORT = DATA_DIR / TRACE_REPORT_FILE
TRACE_SAMPLE = DATA_DIR / TRACE_SAMPLE_FILE
#: traced CTAs, (case name, (batch, head, n_block)): every kernel head dim, causal, local and
#: softcap, GQA, fp16, a padded head dim, a CTA that visits several m_blocks
TRACES = (("d64_causal_gqa_bf16", (1, 1, 1)), ("d96_local_f16", (0, 1, 0)),
          ("d128_softcap_bf16", (0, 0, 1)), ("d192_local_gqa_bf16", (1, 3, 0)),
          ("d256_none_bf16", (0, 1, 2)), ("d80_local_softcap_bf16", (0, 1, 0)),
          ("d64_softcap_causal_gqa_f16", (0, 3, 1)))
#: traces with at most this many float32 values keep their full bits in the sample
TRACE_SAMPLE_MAX = 140_000


def trace_case(name: str) -> dict:
    """The case of :func:`cases` named ``name``."""
    return next(c for c in cases() if c["name"] == name)


def trace_bits(trace: dict) -> dict:
    """``{name: uint32 bits}`` of a backward trace's float32 arrays (``m_blocks`` as int64)."""
    return {k: (v if k == "m_blocks" else bits(np.asarray(v, np.float32)))
            for k, v in trace.items()}


def emulate_trace(case: dict, where: tuple[int, int, int], x: dict | None = None) -> dict:
    """The emulator's trace of CTA ``where`` of ``case`` (:func:`trace_bits`)."""
    x = inputs(case) if x is None else x
    res = emulated_backward(x["dout"], x["q"], x["k"], x["v"], x["out"], x["lse"],
                            trace=tuple(where), **backward_kwargs(case))
    return trace_bits(res.trace)


def replay_traces(progress=None) -> list[dict]:
    """verify row: every recorded twin trace against the emulator's, array by array."""
    report = read_json(TRACE_REPORT, REGENERATE)
    bad, values = [], 0
    for entry in report["traces"]:
        got = emulate_trace(entry["case"], entry["cta"])
        for name, d in entry["digests"].items():
            if name not in got or digest(got[name]).hex() != d:
                bad.append(f"{entry['case']['name']} {tuple(entry['cta'])} {name}")
            elif name != "m_blocks":
                values += int(got[name].size)
        if set(got) != set(entry["digests"]):
            bad.append(f"{entry['case']['name']}: arrays {sorted(got)} vs {sorted(entry['digests'])}")
        if progress:
            progress(entry["key"])
    return [row(f"twin backward step traces ({len(report['traces'])} CTAs)", values, len(bad),
                "S, dP, dtanh, scores, P, dS, dQ partials per m_block and the dK / dV "
                "accumulators of one CTA, twin against emulator" + (f"; first: {bad[0]}" if bad else ""))]
