"""Record the twin backward (``kernels/fa3_backward.cu``) on the cases of
:func:`simulator.replay.twin_backward.cases`.

Run on a machine with an sm_90 GPU, from the repository root::

    PYTHONUNBUFFERED=1 python3 -m simulator measure twin_backward_record --out OUTDIR

Per case the inputs are regenerated (:func:`simulator.replay.bwd_cases.case_inputs`); out and
LSE come from ``--inputs`` (an ``.npz`` of the emulator forward's ``{key}_out`` /
``{key}_lse`` bits, written by :func:`write_inputs` on any machine) or, without it, from the
twin forward (:func:`simulator.device.forward.forward`, bit-exact with the emulator's). The
twin backward runs and is checked against a float64 reference (a broken kernel shows here,
before any bit comparison). Written atomically to OUTDIR: ``twin_backward_report.json`` and
``twin_backward_sample.npz`` (format and replay: :mod:`simulator.replay.twin_backward`).
With ``--traces`` it records instead the step traces of one CTA per entry of
:data:`simulator.replay.twin_backward.TRACES` (``twin_backward_traces.*``).
"""

from __future__ import annotations

import functools
import sys
import time

import numpy as np

from ..device import backward as dev
from ..device import forward as dev_forward
from ..flash.reference import reference_backward
from ..io import save_npz_atomic
from ..replay import bwd_cases
from ..replay import twin_backward as twin
from ..replay.common import digest
from .common import kernel_provenance, out_parser, run_script, write_recordings

#: sanity bound on the relative Frobenius error of dq, dk, dv against float64
REL_TOL = {"bf16": 5e-2, "f16": 2e-2}


def write_inputs(path, only: str | None = None, progress=print) -> None:
    """The emulator forward's out / lse bits of every case (``{key}_out``, ``{key}_lse``), for
    ``--inputs`` (runs on the CPU)."""
    arrays = {}
    for i, case in enumerate(twin.cases()):
        if only is not None and only not in case["name"]:
            continue
        x = twin.inputs(case)
        arrays[f"c{i}_out"] = twin.bits(x["out"])
        arrays[f"c{i}_lse"] = twin.bits(x["lse"])
        progress(f"inputs c{i} {case['name']}")
    save_npz_atomic(path, **arrays)


def _rel(got: np.ndarray, ref: np.ndarray) -> float:
    """||got - ref|| / ||ref||, the norm floored at 1e-2 per value (a gradient that is exactly
    zero in float64, e.g. one key per row, is rounding noise in the kernel)."""
    g = got.astype(np.float64)
    return float(np.linalg.norm(g - ref) / max(np.linalg.norm(ref), 1e-2 * np.sqrt(ref.size)))


def record_case(key: str, case: dict, given: dict | None,
                sample_max: int = twin.SAMPLE_MAX_VALUES) -> tuple[dict, dict]:
    """One case on the GPU: its report entry and its sample arrays (full bits when it has at
    most ``sample_max`` dq + dk + dv values)."""
    x = bwd_cases.case_inputs(case)
    kw = twin.backward_kwargs(case)
    if given is not None:
        dt = x["q"].dtype
        out = given[f"{key}_out"].view(dt).reshape(x["q"].shape)
        lse = given[f"{key}_lse"].view(np.float32)
        source = "emulator forward (--inputs)"
    else:
        out, lse = dev_forward.forward(x["q"], x["k"], x["v"], **kw)
        source = "twin forward"
    xs = {**{n: x[n] for n in ("q", "k", "v", "dout")}, "out": out, "lse": lse}
    t0 = time.time()
    res = twin.run_backward(dev.backward, case, xs)
    seconds = round(time.time() - t0, 3)
    got = {**twin.outputs(res), "out": twin.bits(out), "lse": twin.bits(lse)}
    refs = dict(zip(("dq", "dk", "dv"), reference_backward(x["dout"], x["q"], x["k"], x["v"], **kw),
                    strict=True))
    rel = {n: _rel(getattr(res, n), refs[n]) for n in ("dq", "dk", "dv")}
    ok = all(np.isfinite(v) and v <= REL_TOL[case["dtype"]] for v in rel.values())
    entry = {"key": key, "case": case, "inputs_from": source, "seconds": seconds,
             "digests": {n: digest(b).hex() for n, b in got.items()},
             "rel_err": rel, "sanity_ok": bool(ok)}
    size = sum(got[n].size for n in ("dq", "dk", "dv"))
    sample = {f"{key}_{n}": b for n, b in got.items()} if size <= sample_max else {}
    return entry, sample


def run(out_dir: str, inputs_path: str | None = None, only: str | None = None,
        full: bool = False, progress=print) -> int:
    """Record every case (or those whose name contains ``only``); returns the number that
    failed (an exception or the sanity check). ``full``: also write every case's bits to
    ``twin_backward_full.npz`` (for locating differences; not committed)."""
    from ..device import runtime  # noqa: PLC0415

    info = runtime.device_info()
    info.update(kernel_provenance(dev.KERNEL))
    info["nvrtc_options"] = list(dev.kernel_options("bf16"))
    given = None
    if inputs_path:
        with np.load(inputs_path) as f:
            given = {k: f[k] for k in f.files}
    entries, sample, everything, failures = [], {}, {}, 0
    for i, case in enumerate(twin.cases()):
        if only is not None and only not in case["name"]:
            continue
        key = f"c{i}"
        try:
            entry, arrays = record_case(key, case, given, 1 << 40 if full else twin.SAMPLE_MAX_VALUES)
            small = sum(arrays[f"{key}_{n}"].size for n in ("dq", "dk", "dv")) if arrays else 0
            if small and small <= twin.SAMPLE_MAX_VALUES:
                sample.update(arrays)
            everything.update(arrays)
            progress(f"[{key:>3s}] {case['name']:34s} rel dq {entry['rel_err']['dq']:.2e} dk "
                     f"{entry['rel_err']['dk']:.2e} dv {entry['rel_err']['dv']:.2e} "
                     f"{'ok' if entry['sanity_ok'] else 'FAILED SANITY'} ({entry['seconds']} s)")
        except Exception as exc:
            entry = {"key": key, "case": case, "error": f"{type(exc).__name__}: {exc}"[:3000],
                     "sanity_ok": False}
            progress(f"[{key:>3s}] {case['name']:34s} ERROR {entry['error'][:1500]}")
        failures += not entry["sanity_ok"]
        entries.append(entry)
    report = {"provenance": info, "entries": entries, "failures": failures,
              "generator": "simulator.replay.twin_backward.cases / bwd_cases.case_inputs",
              "sample": f"full bits of the cases with at most {twin.SAMPLE_MAX_VALUES} dq + dk "
                        "+ dv values: {key}_{name} uint16 / uint32"}
    files = {twin.SAMPLE_FILE: sample}
    if full:
        files["twin_backward_full.npz"] = everything
    write_recordings(out_dir, twin.REPORT_FILE, report, files)
    progress(f"{len(entries) - failures}/{len(entries)} cases passed the sanity check")
    return failures


def record_traces(out_dir: str, progress=print) -> int:
    """The step traces of :data:`simulator.replay.twin_backward.TRACES` on the GPU (inputs:
    the emulator's forward, :func:`simulator.replay.twin_backward.inputs`): digests of every
    array in ``twin_backward_traces.json``, the full bits of the small traces in
    ``twin_backward_traces.npz``. Returns the number of traces that failed."""
    from ..device import runtime  # noqa: PLC0415

    info = runtime.device_info()
    info.update(kernel_provenance(dev.KERNEL))
    traces, sample, failures = [], {}, 0
    for i, (name, cta) in enumerate(twin.TRACES):
        case = twin.trace_case(name)
        key = f"t{i}"
        try:
            res = twin.run_backward(functools.partial(dev.backward, trace=cta), case,
                                    twin.inputs(case))
            got = twin.trace_bits(res.trace)
            entry = {"key": key, "case": case, "cta": list(cta),
                     "digests": {n: digest(b).hex() for n, b in got.items()}}
            size = sum(b.size for n, b in got.items() if n != "m_blocks")
            if size <= twin.TRACE_SAMPLE_MAX:
                sample.update({f"{key}_{n}": b for n, b in got.items()})
            progress(f"[{key}] {name} {cta}: m_blocks {got['m_blocks'].tolist()}, {size} values")
        except Exception as exc:
            entry = {"key": key, "case": case, "cta": list(cta),
                     "error": f"{type(exc).__name__}: {exc}"[:3000]}
            failures += 1
            progress(f"[{key}] {name} ERROR {entry['error'][:1500]}")
        traces.append(entry)
    report = {"provenance": info, "traces": traces, "failures": failures,
              "sample": f"full bits of the traces of at most {twin.TRACE_SAMPLE_MAX} values: "
                        "{key}_{array} uint32 (m_blocks int64)"}
    write_recordings(out_dir, twin.TRACE_REPORT_FILE, report, {twin.TRACE_SAMPLE_FILE: sample})
    return failures


def main(argv=None) -> int:
    ap = out_parser("twin_backward_record", __doc__.split("\n\n")[0])
    ap.add_argument("--inputs", default=None, help=".npz of the emulator forward's out / lse "
                    "bits per case (write_inputs); default: the twin forward's")
    ap.add_argument("--only", default=None, help="record the cases whose name contains this")
    ap.add_argument("--full", action="store_true", help="also write every case's bits "
                    "(twin_backward_full.npz)")
    ap.add_argument("--traces", action="store_true", help="record the step traces of "
                    "twin_backward.TRACES instead (twin_backward_traces.*)")
    args = ap.parse_args(argv)
    if args.traces:
        return 1 if record_traces(args.out) else 0
    return 1 if run(args.out, args.inputs, args.only, args.full) else 0


if __name__ == "__main__":
    sys.exit(run_script(main))
