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
from pathlib import Path

import numpy as np

from ..errors import RecordedDataError
from ..flash.forward import forward
from ..io import read_json, read_npz
from .fa3_cases import case_inputs, input_digest

DATA = Path(__file__).resolve().parents[1] / "data" / "device"
REPORT = DATA / "fa3_library_report.json"
SAMPLE = DATA / "fa3_library_sample.npz"
REGENERATE = "python3 -m simulator.device.fa3_library_record --out DIR (on an H200 with fa3-fwd 0.0.3)"


@dataclass
class CaseResult:
    """One case: ``ok`` (bits equal), and for sampled cases the differing value counts."""

    index: int
    label: str
    ok: bool
    out_diff: int | None = None
    lse_diff: int | None = None


def load() -> tuple[dict, dict]:
    """(report, sample arrays); RecordedDataError when missing or damaged."""
    return read_json(REPORT, REGENERATE), read_npz(SAMPLE, REGENERATE)


def inputs_for(case: dict) -> dict:
    """The forward keyword arguments of a recorded case (matrix or embedded)."""
    if "embedded" in case:
        from ..device.fa3_library_record import embedded_inputs  # noqa: PLC0415 - CPU-only helper

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
    result = CaseResult(index, label(record["case"]), ok)
    if f"c{index}_out" in sample:
        result.out_diff = int(np.count_nonzero(out != sample[f"c{index}_out"]))
        result.lse_diff = int(np.count_nonzero(lse != sample[f"c{index}_lse"]))
        result.ok = result.ok and result.out_diff == 0 and result.lse_diff == 0
    return result
