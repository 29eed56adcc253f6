"""Record the real FlashAttention-3 ``flash_attn_with_kvcache`` with a paged KV cache
(flash-attn3-jax 0.2.3) on the H200.

Run on a machine with an sm_90 GPU, jax with CUDA and the wheel importable, from the
repository root::

    PYTHONUNBUFFERED=1 python3 -m simulator measure fa3_paged_record --out OUTDIR

For every case of :func:`simulator.replay.paged_cases.cases` the inputs are regenerated from
the case and the library runs twice (:func:`simulator.device.fa3_jax.kvcache`, fresh caches
each time). Written atomically to OUTDIR:

* ``fa3_paged_report.json``: provenance, and per case the case, BLAKE2b-128 digests of out and
  softmax_lse bits, whether the two runs agreed, whether the kernel's AppendKV writes reached
  the caches read back, and then the digests of both pools after the call; or the library's
  error message;
* ``fa3_paged_sample.npz``: the full out / lse bits of the cases of at most ``SAMPLE_LIMIT``
  output values (``p{i}_out``, ``p{i}_lse``).
"""

from __future__ import annotations

import platform
import sys
import time

import numpy as np

from ..device import fa3_jax
from ..io import save_npz_atomic, write_json_atomic
from ..replay import paged_cases
from ..replay.common import digest
from .common import out_parser

REPORT_FILE = "fa3_paged_report.json"
SAMPLE_FILE = "fa3_paged_sample.npz"
SAMPLE_LIMIT = 8192


def bits(x: np.ndarray) -> np.ndarray:
    """The array's bits as unsigned ints of its width."""
    return np.ascontiguousarray(x).view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def library_call(x: dict) -> dict:
    """One library call on fresh copies of the case's caches."""
    return fa3_jax.kvcache(x["q"], x["k_cache"].copy(), x["v_cache"].copy(), k=x["k"], v=x["v"],
                           cache_seqlens=x["cache_seqlens"], page_table=x["page_table"],
                           cache_batch_idx=x["cache_batch_idx"], cache_leftpad=x["cache_leftpad"],
                           causal=x["causal"], window_size=x["window_size"],
                           num_splits=x["num_splits"])


def record_case(case: dict) -> tuple[dict, dict]:
    """(report entry, full bits) of one case."""
    x = paged_cases.case_inputs(case)
    t0 = time.perf_counter()
    runs = [library_call(x) for _ in range(2)]
    r = runs[0]
    entry = {"case": case, "out": digest(bits(r["out"])).hex(), "lse": digest(bits(r["lse"])).hex(),
             "identical": all(np.array_equal(bits(o["out"]), bits(r["out"]))
                              and np.array_equal(bits(o["lse"]), bits(r["lse"])) for o in runs[1:]),
             "cache_written": bool(r["cache_written"])}
    if r["cache_written"]:
        entry["k_cache"] = digest(bits(r["k_cache"])).hex()
        entry["v_cache"] = digest(bits(r["v_cache"])).hex()
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    full = {"out": bits(r["out"]), "lse": bits(r["lse"])} if r["out"].size <= SAMPLE_LIMIT else {}
    return entry, full


def main(argv=None) -> int:
    ap = out_parser("fa3_paged_record", __doc__.splitlines()[0])
    ap.add_argument("--only", type=int, default=None, help="the first N cases only")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    report = {"provenance": {**fa3_jax.provenance(), "python": sys.version.split()[0],
                             "host": platform.node(), "date": time.strftime("%Y-%m-%d"),
                             "call": "flash_mha_fwd FFI as flash_mha_with_kvcache calls it, "
                                     "num_splits > 1 with its partial buffers, 2 runs per case"},
              "cases": []}
    sample = {}
    cases = paged_cases.cases()[: args.only]
    for i, case in enumerate(cases):
        try:
            entry, full = record_case(case)
        except Exception as exc:  # the library's refusal is a result too
            entry, full = {"case": case, "error": f"{type(exc).__name__}: {exc}"[:400]}, {}
        entry["key"] = f"p{i}"
        report["cases"].append(entry)
        sample.update({f"p{i}_{n}": v for n, v in full.items()})
        if i % 20 == 0:
            print(f"{i}/{len(cases)} {time.perf_counter() - start:.0f} s "
                  f"{entry.get('error', '')[:120]}", flush=True)
    report["seconds"] = round(time.perf_counter() - start, 1)
    save_npz_atomic(f"{args.out}/{SAMPLE_FILE}", **sample)
    write_json_atomic(f"{args.out}/{REPORT_FILE}", report, compact=True)
    errors = sum("error" in e for e in report["cases"])
    print(f"recorded {len(report['cases'])} cases ({errors} refused) in {report['seconds']} s")
    return 0


if __name__ == "__main__":
    from .common import run_script

    raise SystemExit(run_script(main))
