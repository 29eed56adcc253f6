"""Replay the real FA3 library's recorded qv, varlen KV-cache and ``scheduler_metadata`` calls
(:mod:`simulator.replay.fa3_ext_cases`) through ``simulator.fa3``.

``simulator/data/device/fa3_ext_report.json`` holds per call the library's digests of out,
softmax_lse and the caches after the call, and for ``scheduler_metadata`` calls the library's
``get_scheduler_metadata`` array (compared with the emulator's field by field) and the digests
of the same call without it; ``fa3_ext_sample.npz`` the full bits of a sample;
``fa3_ext_drawn_report.json`` a sample of the hypothesis-drawn calls compared live on the H200.
"""

from __future__ import annotations

import numpy as np

from .. import fa3
from ..errors import RecordedDataError
from ..io import DEVICE_DATA_DIR as DATA
from ..io import read_json, read_npz
from .common import digest, row
from .fa3_api_cases import args_digest, result_bits
from .fa3_ext_cases import call_args, metadata_args

REPORT = DATA / "fa3_ext_report.json"
SAMPLE = DATA / "fa3_ext_sample.npz"
DRAWN = DATA / "fa3_ext_drawn_report.json"
REGENERATE = "python3 -m simulator measure fa3_ext_record --out DIR (H200, fa3-fwd 0.0.3)"


def emulate_bits(case: dict) -> tuple[dict, dict]:
    """(the emulator's bits of one case as :func:`result_bits` gives them, extras): extras
    holds ``metadata`` (the emulator's ``get_scheduler_metadata`` array) where the case uses
    it. Raises what ``simulator.fa3`` raises."""
    name, args = call_args(case)
    extras = {}
    if args.get("scheduler_metadata") == "auto":
        md = fa3.get_scheduler_metadata(**metadata_args(name, args))
        extras["metadata"] = md
        args["scheduler_metadata"] = md
    out, lse = getattr(fa3, name)(**args)[:2]  # kvcache: (out, lse, *accum)
    return result_bits(name, args, out, lse), extras


def emulate(case: dict) -> dict:
    """The emulator's digests of one case (a worker's task), or its error; with the metadata
    array as a list, as the library's record has it."""
    try:
        bits, extras = emulate_bits(case)
    except (ValueError, TypeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    got = {k: digest(v).hex() for k, v in bits.items()}
    if "metadata" in extras:
        got = {"metadata": extras["metadata"].tolist(), **got}
    return got


def metadata_fields(batch: int, size: int, local: bool = False) -> dict[str, slice]:
    """Where each field of a scheduler-metadata array of ``size`` ints lies
    (:mod:`simulator.fa3.metadata`; ``local``: a local launch, whose batches are not sorted)."""
    b_r = -(-batch // 4) * 4
    names = ["num_splits_dynamic", "num_m_blocks", "varlen_batch_idx", "num_nheads_in_l2"]
    if local:
        names.remove("varlen_batch_idx")
    vectors = (size - 1) // b_r
    fields = {n: slice(i * b_r, i * b_r + batch) for i, n in enumerate(names[:vectors])}
    return fields | {"semaphore": slice(size - 1, size)}


def canonical_metadata(md, batch: int) -> np.ndarray:
    """A scheduler-metadata array with the entries FA3 never writes (from ``batch`` to the
    rounded batch in each vector: ``torch.empty`` memory) set to 0, as the emulator has them."""
    md = np.array(md, dtype=np.int32)
    keep = np.zeros(md.size, dtype=bool)
    for sl in metadata_fields(batch, md.size).values():
        keep[sl] = True
    md[~keep] = 0
    return md


def check_case(index: int, record: dict, sample: dict) -> dict:
    """One recorded call: ``{"ok", "differ", "values"}``.

    Raises:
        RecordedDataError: the regenerated arguments differ from the recording's.
    """
    name, args = call_args(record["case"])
    if args_digest({k: v for k, v in args.items() if k != "scheduler_metadata"}) != record["inputs"]:
        raise RecordedDataError(f"ext call {index}: regenerated arguments differ from the "
                                f"recording's; regenerate with `{REGENERATE}`")
    if "error" in record:
        try:
            emulate_bits(record["case"])
        except (ValueError, TypeError):
            return {"ok": True, "differ": {}, "values": 0}
        return {"ok": False, "differ": {"refused by the library only": True}, "values": 0}
    bits, extras = emulate_bits(record["case"])
    differ = {k: digest(v).hex() != record[k] for k, v in bits.items()}
    if "without_metadata" in record:  # FA3: same bits with the metadata as without
        differ["metadata changes bits"] = record["without_metadata"] != {
            k: record[k] for k in record["without_metadata"]}
        want = np.asarray(record["metadata"], dtype=np.int32)
        md = extras["metadata"]
        if md.shape != want.shape:
            differ["metadata size"] = True
        else:
            for field, sl in metadata_fields(record["case"]["batch"], want.size).items():
                differ[f"metadata {field}"] = not np.array_equal(md[sl], want[sl])
    for key in ("out", "lse"):
        if f"c{index}_{key}" in sample:
            want_bits = sample[f"c{index}_{key}"].view(bits[key].dtype)
            differ[f"{key} values"] = int(np.count_nonzero(bits[key] != want_bits))
    return {"ok": not any(differ.values()), "differ": differ,
            "values": sum(int(v.size) for v in bits.values())}


def _kind(case: dict) -> str:
    if case["dtype"] == "e4m3":
        return "e4m3"
    if case.get("qv"):
        return f"qv {case['api']}"
    if case.get("metadata"):
        return "metadata"
    return "packed " + "+".join(k for k in ("lens_q", "lens_new", "rotary") if case.get(k))


def _cost(case: dict) -> int:
    keys = case.get("seqlen_cache") or case.get("seqlen_k") or sum(case.get("seqlens_k", [1]))
    return case["batch"] * case["heads"] * keys * (case["head_dim"] + case.get("head_dim_v", 0))


def quick_sample(records: list[dict], per_kind: int = 3) -> list[int]:
    """The ``per_kind`` cheapest recorded calls of each kind (qv per entry point, each packed
    combination, metadata, e4m3): every code path in seconds, for ``verify --quick``."""
    kinds: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        kinds.setdefault(_kind(r["case"]), []).append(i)
    return sorted(i for idx in kinds.values()
                  for i in sorted(idx, key=lambda j: _cost(records[j]["case"]))[:per_kind])


def check_all(quick: bool = False) -> list[dict]:
    """``verify`` rows: the recorded calls (:func:`quick_sample` when ``quick``) and the drawn
    sample (every 10th when ``quick``)."""
    report = read_json(REPORT, REGENERATE)
    sample = read_npz(SAMPLE, REGENERATE)
    records = report["cases"]
    picked = quick_sample(records) if quick else range(len(records))
    results = [(i, check_case(i, records[i], sample)) for i in picked]
    bad = [f"{i}: {[k for k, v in r['differ'].items() if v]}" for i, r in results if not r["ok"]]
    rows = [row(f"FA3 qv, varlen KV-cache and scheduler_metadata calls vs the real library, "
                f"{len(results)} calls", sum(r["values"] for _, r in results), len(bad),
                "; ".join(bad[:3]))]
    if DRAWN.exists():
        drawn = read_json(DRAWN, REGENERATE)["sample"]
        drawn = drawn[::10] if quick else drawn
        miss = [rec for rec in drawn if emulate(rec["case"]) != {k: v for k, v in rec.items() if k != "case"}]
        rows.append(row(f"FA3 qv / varlen KV-cache / metadata hypothesis-drawn calls (sampled) vs the "
                        f"real library, {len(drawn)} calls", len(drawn), len(miss),
                        "; ".join(str(m["case"])[:80] for m in miss[:2])))
    return rows
