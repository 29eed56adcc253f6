"""Device goldens of the forward: run ``kernels/fa3_forward.cu`` on a matrix of configurations.

Run on a machine with an sm_90 GPU, from the repository root::

    PYTHONUNBUFFERED=1 python3 -m simulator measure forward_goldens --out OUTDIR

For every configuration of :data:`simulator.replay.forward_goldens.CONFIGS` (dtype bf16 / f16 /
e4m3 x no mask / causal / local(64, 32) x both schedules x softcap 0 / 30, head dims 32..256,
GQA, seqlens that are and are not block multiples, a batch with ``seqlens_k = 0``, FP8
descales), the inputs are made by
:func:`simulator.flash.inputs.attention_inputs` from the configuration's seed, the kernel runs,
and the output is first checked against a float64 reference attention (a broken kernel shows up
here, before any bit comparison). Written atomically to OUTDIR:

``forward_goldens.npz`` and ``forward_report.json`` (format and replay:
:mod:`simulator.replay.forward_goldens`).

Commit both under ``simulator/data/device/``; the emulator's bit comparison regenerates the
inputs from the recorded configuration and seed.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from ..device import forward as dev
from ..flash.reference import reference
from ..replay.forward_goldens import (
    CONFIGS,
    GOLDENS_FILE,
    MAX_FILE_BYTES,
    REPORT_FILE,
    call_kwargs,
    make_inputs,
    to_planes,
)
from .common import (
    forward_provenance,
    out_parser,
    precompile_options,
    run_script,
    write_forward_recording,
)

#: sanity thresholds against the float64 reference: relative Frobenius error of O, |LSE| error
REL_TOL = {"bf16": 3e-2, "f16": 1e-2, "e4m3": 1.5e-1}
LSE_TOL = 2e-2


def options_of(cfg: dict) -> tuple[str, ...]:
    return dev.kernel_options(cfg["dtype"], cfg["head_dim"], cfg["kblock_m"], cfg["kblock_n"],
                              cfg["softcap"] > 0, cfg["schedule"])


def reference_errors(cfg: dict, inputs: dict, out: np.ndarray, lse: np.ndarray) -> dict:
    """Relative Frobenius error of O and max |LSE| error against the float64 reference; whether
    the -inf rows agree and whether everything is finite."""
    kw = call_kwargs(cfg, inputs)
    for key in ("kblock_m", "kblock_n", "schedule"):
        kw.pop(key)
    o_ref, lse_ref = reference(inputs["q"], inputs["k"], inputs["v"], **kw)
    o = out.astype(np.float64)
    rel = float(np.linalg.norm(o - o_ref) / max(np.linalg.norm(o_ref), 1e-300))
    fin = np.isfinite(lse_ref)
    lse_err = float(np.max(np.abs(lse[fin] - lse_ref[fin]))) if fin.any() else 0.0
    return {"rel_err_out": rel, "max_abs_err_lse": lse_err,
            "neg_inf_rows_agree": bool(np.array_equal(np.isneginf(lse), ~fin)),
            "all_finite_out": bool(np.all(np.isfinite(o))),
            "empty_rows": int((~fin).sum())}


def precompile(cfgs: list[dict], workers: int, progress) -> None:
    """Compile the distinct configurations in parallel processes (spawned, CUDA-safe)."""
    precompile_options(sorted({options_of(c) for c in cfgs}), workers, progress)


def run(out_dir: str, only: str | None = None, workers: int = 16, progress=print) -> int:
    """Run the matrix (or the configurations whose name contains ``only``); returns the number
    of configurations that failed (exception or sanity check)."""
    cfgs = [c for c in CONFIGS if only is None or only in c["name"]]
    info = forward_provenance(progress=progress)
    precompile(cfgs, workers, progress)
    arrays: dict[str, np.ndarray] = {}
    records = []
    failures = 0
    for i, cfg in enumerate(cfgs):
        rec = {"index": i, **cfg, "options": [o for o in options_of(cfg) if o.startswith("-D")]}
        t0 = time.time()
        try:
            inputs = make_inputs(cfg)
            out, lse = dev.forward(inputs["q"], inputs["k"], inputs["v"], **call_kwargs(cfg, inputs))
            rec["seconds"] = round(time.time() - t0, 3)
            rec["reference"] = errs = reference_errors(cfg, inputs, out, lse)
            ok = (errs["rel_err_out"] <= REL_TOL[cfg["dtype"]] and errs["max_abs_err_lse"] <= LSE_TOL
                  and errs["neg_inf_rows_agree"] and errs["all_finite_out"])
            rec["sanity_ok"] = bool(ok)
            arrays[f"c{i}_out"] = to_planes(np.ascontiguousarray(out).view(np.uint16))
            arrays[f"c{i}_lse"] = to_planes(np.ascontiguousarray(lse).view(np.uint32))
            progress(f"[{i:2d}] {cfg['name']:40s} rel_err(O) {errs['rel_err_out']:.3e}  "
                     f"max|dLSE| {errs['max_abs_err_lse']:.3e}  empty rows {errs['empty_rows']:4d}  "
                     f"{'ok' if ok else 'FAILED SANITY'}  ({rec['seconds']:.2f} s)")
        except Exception as exc:
            rec["error"] = f"{type(exc).__name__}: {exc}"[:4000]
            rec["sanity_ok"] = False
            progress(f"[{i:2d}] {cfg['name']:40s} ERROR {rec['error'][:1500]}")
        failures += not rec["sanity_ok"]
        records.append(rec)
    meta = {"provenance": info, "configs": records, "failures": failures,
            "generator": "simulator.flash.inputs.attention_inputs(seed, ...)",
            "layout": "c{i}_out: byte planes uint8 [2, batch, seqlen_q, heads, head_dim] of the "
                      "uint16 bits of O (bf16 for bf16/e4m3 inputs, f16 for f16), low byte "
                      "first; c{i}_lse: byte planes uint8 [4, batch, heads, seqlen_q] of the "
                      "float32 bits of LSE; see forward_goldens.load_goldens"}
    path = write_forward_recording(out_dir, GOLDENS_FILE, REPORT_FILE, meta, arrays)
    size = meta["file_bytes"]
    progress(f"wrote {path} ({size / 1e6:.2f} MB{' > 4 MB!' if size > MAX_FILE_BYTES else ''}); "
             f"{len(records) - failures}/{len(records)} configurations passed the sanity check")
    return failures


def main(argv=None) -> int:
    ap = out_parser("forward_goldens", __doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="run the configurations whose name contains this")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1),
                    help="parallel NVRTC compiles")
    args = ap.parse_args(argv)
    failures = run(args.out, args.only, args.workers)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(run_script(main))


