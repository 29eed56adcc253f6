"""Replay the real FA3 library's recorded Python-API calls through ``simulator.fa3``.

``simulator/data/device/fa3_api_report.json`` holds, per call of
:func:`simulator.replay.fa3_api_cases.matrix` (``flash_attn_func`` with splits,
``flash_attn_varlen_func``, ``flash_attn_with_kvcache``), digests of the library's out and
softmax_lse bits on the H200 (rows FA3 leaves unwritten set to 0 / -inf), of the KV caches after
the call, and for split calls of the Split kernel's partial outputs; ``fa3_api_sample.npz`` the
full bits of a sample. :func:`check_case` makes the same call on ``simulator.fa3`` and compares.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import fa3, flash
from ..errors import RecordedDataError
from ..io import DEVICE_DATA_DIR as DATA
from ..io import read_json, read_npz
from .common import digest, row
from .fa3_api_cases import args_digest, call_args, canonical_partials, result_bits

REPORT = DATA / "fa3_api_report.json"
SAMPLE = DATA / "fa3_api_sample.npz"
REGENERATE = "python3 -m simulator measure fa3_library_record --api --out DIR (H200, fa3-fwd 0.0.3)"


@dataclass
class CallResult:
    """One recorded call: ``ok`` when every recorded digest (and sampled value) agrees."""

    index: int
    label: str
    ok: bool
    differ: dict
    values: int = 0


def load() -> tuple[dict, dict]:
    """(report, sample arrays); RecordedDataError when missing or damaged."""
    return read_json(REPORT, REGENERATE), read_npz(SAMPLE, REGENERATE)


def label(case: dict) -> str:
    """Short text for a call."""
    if case["api"] == "combine":
        return (f"combine b{case['batch']} sq{case['seqlen_q']} h{case['heads']} "
                f"dv{case['head_dim_v']} splits {case['num_splits']} -> {case['out_dtype']}")
    extra = {"kvcache": f"cache {case.get('seqlen_cache')} new {case.get('seqlen_new')}",
             "varlen": f"seqlens_q {case.get('seqlens_q')}", "func": f"sk {case.get('seqlen_k')}"}
    dv = f"/{case['head_dim_v']}" if "head_dim_v" in case else ""
    return (f"{case['api']} {case['dtype']} b{case['batch']} h{case['heads']}/{case['heads_kv']} "
            f"d{case['head_dim']}{dv} splits {case['num_splits']} {extra[case['api']]}"
            + (" causal" if case["causal"] else ""))


def check_case(index: int, record: dict, sample: dict, digest) -> CallResult:
    """Make one recorded call on ``simulator.fa3`` and compare with the library's bits.

    Raises:
        RecordedDataError: the regenerated arguments do not match the recording's digest.
    """
    name, args = call_args(record["case"])
    if args_digest(args) != record["inputs"]:
        raise RecordedDataError(f"API call {index}: regenerated arguments differ from the "
                                f"recording's (the generator changed?); regenerate with `{REGENERATE}`")
    got = result_bits(name, args, *getattr(fa3, name)(**args)[:2])  # kvcache: (out, lse, *accum)
    if "out_accum" in record:  # the Split kernel's partials, in FA3's layout
        part = flash.forward(args["q"], args["k"], args["v"], softmax_scale=args["q"].shape[-1] ** -0.5,
                             causal=args["causal"], softcap=args["softcap"],
                             q_descale=args["q_descale"], k_descale=args["k_descale"],
                             v_descale=args["v_descale"], num_splits=args["num_splits"])
        o_acc, l_acc = canonical_partials(np.ascontiguousarray(np.swapaxes(part.out, 2, 3)), part.lse)
        got["out_accum"], got["lse_accum"] = o_acc.view(np.uint32), l_acc.view(np.uint32)
    differ = {k: digest(v).hex() != record[k] for k, v in got.items()}
    for key in ("out", "lse", "out_accum", "lse_accum"):
        if f"c{index}_{key}" in sample:
            want = sample[f"c{index}_{key}"].view(got[key].dtype)
            differ[f"{key} values"] = int(np.count_nonzero(got[key] != want))
    return CallResult(index, label(record["case"]), not any(differ.values()), differ,
                      sum(int(v.size) for v in got.values()))


def check_all(quick: bool = False) -> list[dict]:
    """``verify`` rows: every recorded API call (every 8th when ``quick``)."""

    report, sample = load()
    records = report["cases"]
    picked = range(0, len(records), 8) if quick else range(len(records))
    results = [check_case(i, records[i], sample, digest) for i in picked]
    bad = [r for r in results if not r.ok]
    return [row(f"FA3 API calls (varlen, KV cache, split-KV, head_dim_v, combine) vs the real "
                f"library, {len(results)} calls", sum(r.values for r in results), len(bad),
                "; ".join(r.label for r in bad[:3]))] + check_drawn(quick)


DRAWN_REPORTS = ("fa3_api_replay_report.json", "fa3_api_replay_dv_report.json")


def check_drawn(quick: bool = False) -> list[dict]:
    """``verify`` row: the sampled hypothesis-drawn calls of the device replays
    (``python -m simulator measure fa3_api_replay``), emulated again and compared with the
    library's recorded digests (every 4th when ``quick``)."""

    sample = [rec for name in DRAWN_REPORTS for rec in read_json(DATA / name, REGENERATE)["sample"]]
    picked = sample[::4] if quick else sample
    bad, results, missed = [], 0, 0
    for rec in picked:
        got, n = _emulate_counted(rec["case"])
        results += n
        if got != {k: v for k, v in rec.items() if k != "case"}:
            bad.append(rec)
            missed += n or 1  # all of a disagreeing call: the recording keeps digests, not values
    return [row(f"FA3 API hypothesis-drawn calls (sampled) vs the real library, {len(picked)} calls",
                results, missed, "; ".join(label(r["case"]) for r in bad[:3]))]


def _emulate_counted(case: dict) -> tuple[dict, int]:
    """:func:`emulate`'s digests and the number of values they cover (0 for a refused call)."""
    name, args = call_args(case)
    try:
        out, lse = getattr(fa3, name)(**args)[:2]  # kvcache: (out, lse, *accum)
    except (ValueError, TypeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}, 0
    bits = result_bits(name, args, out, lse)
    return _hex_digests(bits), sum(v.size for v in bits.values())


def digests(name: str, args: dict, out, lse, caches: dict | None = None) -> dict:
    """Digests of the bits a call is compared on (:func:`simulator.replay.fa3_api_cases.result_bits`)."""
    return _hex_digests(result_bits(name, args, out, lse, caches))


def _hex_digests(bits: dict) -> dict:
    return {k: digest(v).hex() for k, v in bits.items()}


def emulate(case: dict) -> dict:
    """The emulator's digests for one case (runs in a worker), or its error."""
    return _emulate_counted(case)[0]
