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

With ``--rotary`` it records instead the cases of :func:`simulator.replay.rotary_cases.cases`
(rotary_cos / rotary_sin, contiguous and paged caches) into ``fa3_rotary_report.json`` (the
same entries, keyed ``r{i}``) and ``fa3_rotary_sample.npz``: for every case the full bits of
out, lse and the cache rows the append wrote (``r{i}_k_new``, ``r{i}_v_new``: [batch,
seqlen_new, heads_kv, 128], the rotated keys as the kernel stored them).
"""

from __future__ import annotations

import platform
import sys
import time

import numpy as np

from ..device import fa3_jax
from ..io import save_npz_atomic, write_json_atomic
from ..replay import paged_cases, rotary_cases
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
    rot = {n: x[n] for n in ("rotary_cos", "rotary_sin", "rotary_seqlens", "rotary_interleaved")
           if n in x}
    return fa3_jax.kvcache(x["q"], x["k_cache"].copy(), x["v_cache"].copy(), k=x["k"], v=x["v"],
                           cache_seqlens=x["cache_seqlens"], page_table=x["page_table"],
                           cache_batch_idx=x["cache_batch_idx"], cache_leftpad=x["cache_leftpad"],
                           causal=x["causal"], window_size=x["window_size"],
                           num_splits=x["num_splits"], **rot)


def appended_rows(x: dict, cache: np.ndarray) -> np.ndarray:
    """The rows AppendKV wrote: [batch, seqlen_new, heads_kv, head_dim] of ``cache``."""
    b, s_new = x["k"].shape[:2]
    rows = np.arange(b) if x["cache_batch_idx"] is None else x["cache_batch_idx"].astype(np.int64)
    pos = x["cache_seqlens"].astype(np.int64)[:, None] + np.arange(s_new)
    if x["page_table"] is None:
        return cache[rows[:, None], pos]
    ps = cache.shape[1]
    return cache[x["page_table"][rows[:, None], pos // ps], pos % ps]


def record_case(case: dict, rotary: bool = False) -> tuple[dict, dict]:
    """(report entry, full bits) of one case."""
    x = (rotary_cases if rotary else paged_cases).case_inputs(case)
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
    if rotary:
        full = {"out": bits(r["out"]), "lse": bits(r["lse"]),
                "k_new": bits(appended_rows(x, r["k_cache"])),
                "v_new": bits(appended_rows(x, r["v_cache"]))}
    return entry, full


def main(argv=None) -> int:
    ap = out_parser("fa3_paged_record", __doc__.splitlines()[0])
    ap.add_argument("--only", type=int, default=None, help="the first N cases only")
    ap.add_argument("--rotary", action="store_true", help="the rotary cases instead")
    args = ap.parse_args(argv)
    stem, tag = ("fa3_rotary", "r") if args.rotary else ("fa3_paged", "p")
    start = time.perf_counter()
    report = {"provenance": {**fa3_jax.provenance(), "python": sys.version.split()[0],
                             "host": platform.node(), "date": time.strftime("%Y-%m-%d"),
                             "call": "flash_mha_fwd FFI as flash_mha_with_kvcache calls it, "
                                     "num_splits > 1 with its partial buffers, 2 runs per case"},
              "cases": []}
    sample = {}
    cases = (rotary_cases if args.rotary else paged_cases).cases()[: args.only]
    for i, case in enumerate(cases):
        try:
            entry, full = record_case(case, args.rotary)
        except Exception as exc:  # the library's refusal is a result too
            entry, full = {"case": case, "error": f"{type(exc).__name__}: {exc}"[:400]}, {}
        entry["key"] = f"{tag}{i}"
        report["cases"].append(entry)
        sample.update({f"{tag}{i}_{n}": v for n, v in full.items()})
        if i % 20 == 0:
            print(f"{i}/{len(cases)} {time.perf_counter() - start:.0f} s "
                  f"{entry.get('error', '')[:120]}", flush=True)
    report["seconds"] = round(time.perf_counter() - start, 1)
    save_npz_atomic(f"{args.out}/{SAMPLE_FILE.replace('fa3_paged', stem)}", **sample)
    write_json_atomic(f"{args.out}/{REPORT_FILE.replace('fa3_paged', stem)}", report, compact=True)
    errors = sum("error" in e for e in report["cases"])
    print(f"recorded {len(report['cases'])} cases ({errors} refused) in {report['seconds']} s")
    return 0


if __name__ == "__main__":
    from .common import run_script

    raise SystemExit(run_script(main))
