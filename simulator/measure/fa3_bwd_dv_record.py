"""Record the real FlashAttention-3 backward with V's head dim unlike Q's (flash-attn3-jax).

Run on a machine with an sm_90 GPU, jax with CUDA and flash-attn3-jax 0.2.3 importable
(``pip install --no-deps --target DIR flash-attn3-jax==0.2.3 einops``, DIR on PYTHONPATH), from
the repository root::

    PYTHONUNBUFFERED=1 python -m simulator.measure.fa3_bwd_dv_record --out OUTDIR

For every case of :func:`simulator.replay.fa3_bwd_dv.cases`: the inputs are regenerated, out and
softmax_lse come from the emulated forward (the backward only reads them; their digests are
recorded), and the library's backward runs twice with ``deterministic=True`` and twice with
``deterministic=False`` (:func:`simulator.device.fa3_jax.backward`). Written atomically to
OUTDIR:

* ``fa3_bwd_dv_report.json``: provenance, and per case the case, the digests of out / lse, of
  the deterministic run's dq, dk, dv, dPsum, LSE_log2 (and whether the two runs agreed), and
  per default-mode run how many values of dq, dk, dv differ from the deterministic run; or
  the library's error message (a build without the case's kernel head dim refuses it);
* ``fa3_bwd_dv_bits.npz``: the full bits of every recorded deterministic run
  (``{name}_{dq|dk|dv|dpsum|lse_log2}``), for analysis when a digest differs.

Commit both under ``simulator/data/device/`` (with the manifest) and replay them with
:func:`simulator.replay.fa3_bwd_dv.replay`.
"""

from __future__ import annotations

import platform
import sys
import time

import numpy as np

from ..device import fa3_jax
from ..io import save_npz_atomic, write_json_atomic
from ..replay import fa3_bwd_dv
from ..replay.common import digest
from .common import out_parser

REPORT_FILE = "fa3_bwd_dv_report.json"
BITS_FILE = "fa3_bwd_dv_bits.npz"
GRADS = ("dq", "dk", "dv")
STATS = ("dpsum", "lse_log2")


def record_case(case: dict) -> tuple[dict, dict]:
    """(report entry, full bits of the deterministic run) of one case."""
    bits = fa3_bwd_dv.bits
    x = fa3_bwd_dv.case_inputs(case)
    kw = {"causal": x["causal"], "window": x["window"], "cu_seqlens_q": x["cu_seqlens_q"],
          "cu_seqlens_k": x["cu_seqlens_k"], "max_seqlen_q": x["max_seqlen_q"],
          "max_seqlen_k": x["max_seqlen_k"]}
    entry = {"case": case, "out": digest(bits(x["out"])).hex(), "lse": digest(bits(x["lse"])).hex()}
    t0 = time.perf_counter()

    def run(deterministic):
        return fa3_jax.backward(x["dout"], x["q"], x["k"], x["v"], x["out"], x["lse"],
                                deterministic=deterministic, **kw)

    det = [run(True) for _ in range(2)]
    ref = {n: bits(det[0][n]) for n in GRADS + STATS}
    entry["det"] = {n: digest(v).hex() for n, v in ref.items()}
    entry["det_identical"] = all(np.array_equal(bits(det[1][n]), ref[n]) for n in GRADS)
    entry["default"] = []
    for _ in range(2):
        r = run(False)
        entry["default"].append({n: {"differ": int((bits(r[n]) != ref[n]).sum())} for n in GRADS})
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    return entry, ref


def main(argv=None) -> int:
    ap = out_parser("fa3_bwd_dv_record", __doc__.splitlines()[0])
    ap.add_argument("--only", type=int, default=None, help="the first N cases only")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    report = {"provenance": {**fa3_jax.provenance(), "python": sys.version.split()[0],
                             "host": platform.node(), "date": time.strftime("%Y-%m-%d"),
                             "inputs": "out / softmax_lse from the emulated forward "
                                       "(simulator.fa3), digests recorded"},
              "cases": []}
    full = {}
    for i, case in enumerate(fa3_bwd_dv.cases()[: args.only]):
        try:
            entry, ref = record_case(case)
            full.update({f"{case['name']}_{n}": v for n, v in ref.items()})
        except Exception as exc:  # the library's refusal is a result too
            entry = {"case": case, "error": f"{type(exc).__name__}: {exc}"[:400]}
        report["cases"].append(entry)
        print(f"{i} {case['name']} d {case['head_dim']} dv {case['head_dim_v']}: "
              f"{entry.get('error', 'recorded')[:100]} ({time.perf_counter() - start:.0f} s)",
              flush=True)
    report["seconds"] = round(time.perf_counter() - start, 1)
    save_npz_atomic(f"{args.out}/{BITS_FILE}", **full)
    write_json_atomic(f"{args.out}/{REPORT_FILE}", report, compact=True)
    ok = sum("error" not in e for e in report["cases"])
    print(f"recorded {ok} of {len(report['cases'])} cases in {report['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
