"""Replay the real FA3 library's recorded outputs through the emulator (no GPU needed).

``simulator/data/device/fa3_library_report.json`` holds, per case of
:func:`simulator.replay.fa3_cases.matrix` and of the embedded input, a digest of the inputs and
BLAKE2b-128 digests of the library's out and LSE bits on the H200;
``fa3_library_sample.npz`` holds the full bits of a sample of them. :func:`check_case` runs
:func:`simulator.flash.forward` with FA3's default dispatch on the regenerated inputs and
compares bits: digests for every case, and every value for the sampled ones (so that a
mismatch names how many values differ).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import RecordedDataError
from ..flash.forward import forward
from ..io import DEVICE_DATA_DIR as DATA
from ..io import read_json, read_npz
from . import hypothesis as rr
from .common import digest, row
from .fa3_cases import case_inputs, embedded_inputs, input_digest

REPORT = DATA / "fa3_library_report.json"
SAMPLE = DATA / "fa3_library_sample.npz"
REGENERATE = "python3 -m simulator measure fa3_library_record --out DIR (on an H200 with fa3-fwd 0.0.3)"


@dataclass
class CaseResult:
    """One case: ``ok`` (bits equal), and for sampled cases the differing value counts."""

    index: int
    label: str
    ok: bool
    out_diff: int | None = None
    lse_diff: int | None = None
    values: int = 0


def load() -> tuple[dict, dict]:
    """(report, sample arrays); RecordedDataError when missing or damaged."""
    return read_json(REPORT, REGENERATE), read_npz(SAMPLE, REGENERATE)


def inputs_for(case: dict) -> dict:
    """The forward keyword arguments of a recorded case (matrix or embedded)."""
    if "embedded" in case:
        return embedded_inputs(case)
    return case_inputs(case)


def label(case: dict) -> str:
    """Short text for a case: dtype, shapes, flags."""
    if "embedded" in case:
        return f"embedded {case['embedded']} {case['dtype']}{' causal' if case['causal'] else ''}"
    flags = [f for f, on in (("causal", case["causal"]), (f"softcap {case['softcap']:g}", case["softcap"]),
                             ("seqused_k", case["seqused_k"] is not None), ("descales", case["descales"]),
                             (case["special"], case["special"] != "none")) if on]
    return (f"{case['dtype']} b{case['batch']} sq{case['seqlen_q']} sk{case['seqlen_k']} "
            f"h{case['heads']}/{case['heads_kv']} d{case['head_dim']}" + "".join(f" {f}" for f in flags))


def check_case(index: int, record: dict, sample: dict, digest) -> CaseResult:
    """Emulate one recorded case and compare with the library's bits.

    Raises:
        RecordedDataError: the regenerated inputs do not match the recording's input digest
            (the case generator changed since the recording).
    """
    kwargs = inputs_for(record["case"])
    if input_digest(kwargs) != record["inputs"]:
        raise RecordedDataError(f"case {index}: regenerated inputs differ from the recording's "
                                f"(the generator changed?); regenerate with `{REGENERATE}`")
    res = forward(**kwargs)
    out, lse = res.out.view(np.uint16), res.lse.view(np.uint32)
    ok = digest(out).hex() == record["out"] and digest(lse).hex() == record["lse"]
    result = CaseResult(index, label(record["case"]), ok, values=out.size + lse.size)
    if f"c{index}_out" in sample:
        result.out_diff = int(np.count_nonzero(out != sample[f"c{index}_out"]))
        result.lse_diff = int(np.count_nonzero(lse != sample[f"c{index}_lse"]))
        result.ok = result.ok and result.out_diff == 0 and result.lse_diff == 0
    return result


def check_all(quick: bool = False) -> list[dict]:
    """``verify`` rows: the emulator on every recorded library case (every 8th when ``quick``)
    and on the sampled hypothesis-drawn library calls (the first 10 when ``quick``)."""

    report, sample = load()
    records = report["cases"]
    picked = range(0, len(records), 8) if quick else range(len(records))
    results = [check_case(i, records[i], sample, digest) for i in picked]
    bad = [r for r in results if not r.ok]
    rows = [row(f"forward vs the real FA3 library, {len(results)} recorded calls",
                sum(r.values for r in results), len(bad), "; ".join(r.label for r in bad[:3]))]
    meta = read_json(DATA / "fa3_library_hypothesis_sample.json", REGENERATE)
    cases = rr.unpack_cases(read_npz(DATA / "fa3_library_hypothesis_sample.npz", REGENERATE), meta)
    cases = cases[:10] if quick else cases
    total = mism = 0
    for c in cases:
        out, lse = rr.result_bits(*forward(c["q"], c["k"], c["v"], **c["kwargs"]))
        total += out.size + lse.size
        mism += int(np.count_nonzero(out != c["out_bits"]) + np.count_nonzero(lse != c["lse_bits"]))
    rows.append(row(f"forward vs the real FA3 library, {len(cases)} hypothesis-drawn calls",
                    total, mism))
    return rows
