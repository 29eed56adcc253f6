"""Record the real FlashAttention-3 library's outputs on the case matrix and the embedded input.

Run on a machine with an sm_90 GPU, torch and the ``fa3-fwd`` wheel importable, from the
repository root::

    PYTHONUNBUFFERED=1 python3 -m simulator measure fa3_library_record --out OUTDIR

For every case of :func:`simulator.replay.fa3_cases.matrix` and for the embedded MiniLM input
(bf16 and e4m3, causal and not, padding keys absent through ``seqused_k``), the inputs are
regenerated from the case, the library runs with ``flash_attn_func``'s defaults
(:mod:`simulator.device.fa3_library`), and the bits of out and softmax_lse are recorded.
Written atomically to OUTDIR:

* ``fa3_library_report.json``: provenance (wheel, version, sha256s, torch, GPU, driver), and
  per case the case, the digest of its inputs, BLAKE2b-128 digests of the out and LSE bits, or
  the library's error message when it refused the case; with ``--twin`` also the digests of
  our twin kernel (``kernels/fa3_forward.cu``) on the same inputs with FA3's dispatch;
* ``fa3_library_sample.npz``: the full bits of every ``SAMPLE_EVERY``-th case and of the
  embedded input (``c{i}_out`` uint16, ``c{i}_lse`` uint32), replayed bit for bit in CI;
* ``fa3_library_full_{j}.npz`` (with ``--full``): the full bits of every case, for analysis
  (not committed: too large).

With ``--api`` it records the Python-API calls of :func:`simulator.replay.fa3_api_cases.matrix`
instead (``flash_attn_func`` with splits, ``flash_attn_varlen_func``,
``flash_attn_with_kvcache``): ``fa3_api_report.json`` (per call: the case, the digest of its
arguments, digests of out, softmax_lse and the updated caches, or the library's error; rows
FA3 leaves unwritten, beyond ``seqused_q``, are set to 0 / -inf first:
:func:`simulator.replay.fa3_api_cases.canonical`) and
``fa3_api_sample.npz`` (full bits of every ``SAMPLE_EVERY``-th call, ``c{i}_out`` uint16 and
``c{i}_lse`` uint32).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ..device import fa3_library, runtime
from ..device import forward as twin
from ..errors import OneLineParser
from ..io import save_npz_atomic, write_json_atomic
from ..replay import fa3_cases
from ..replay.common import digest
from ..replay.fa3_cases import case_inputs, embedded_cases, embedded_inputs, input_digest
from .common import precompile_options

REPORT_FILE = "fa3_library_report.json"
SAMPLE_FILE = "fa3_library_sample.npz"
SAMPLE_EVERY = 8


def all_cases() -> list[tuple[dict, callable]]:
    """(case, inputs function) for the matrix, then the embedded input."""
    return ([(c, case_inputs) for c in fa3_cases.matrix()]
            + [(c, embedded_inputs) for c in embedded_cases()])


def run_case(kwargs: dict):
    """The library's (out bits uint16, lse bits uint32), or its error message."""
    try:
        res = fa3_library.forward(**kwargs)
    except RuntimeError as exc:  # FA3's TORCH_CHECKs
        return str(exc).splitlines()[0][:300]
    return res.out.view(np.uint16), res.lse.view(np.uint32)


def _driver() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m simulator measure fa3_library_record",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the recordings")
    ap.add_argument("--full", action="store_true", help="also write every case's full bits")
    ap.add_argument("--twin", action="store_true", help="also run the twin kernel on every case")
    ap.add_argument("--api", action="store_true", help="record the Python-API calls instead")
    args = ap.parse_args(argv)
    ok, why = fa3_library.available()
    if not ok:
        raise runtime.DeviceUnavailable(why)
    if args.api:
        return record_api(args.out, args.full)
    prov = fa3_library.provenance() | {"driver": _driver(), "python": platform.python_version(),
                                       "date": time.strftime("%Y-%m-%d"),
                                       "wheel_sha256": fa3_library.WHEEL_SHA256}
    cases = all_cases()
    if args.twin:
        prov["twin"] = runtime.device_info() | {"kernel_sha256": runtime.source_sha256(twin.KERNEL)}
        opts = sorted({twin.make_launch_config(**make(c)).options for c, make in cases})
        precompile_options(opts, 16, print)
    records, sample, full, t0 = [], {}, [], time.time()
    for i, (case, make) in enumerate(cases):
        kwargs = make(case)
        got = run_case(kwargs)
        rec = {"case": case, "inputs": input_digest(kwargs)}
        if args.twin:
            t_out, t_lse = twin.forward(**kwargs)
            rec["twin_out"] = digest(t_out.view(np.uint16)).hex()
            rec["twin_lse"] = digest(t_lse.view(np.uint32)).hex()
        if isinstance(got, str):
            rec["error"] = got
        else:
            out, lse = got
            rec["out"], rec["lse"] = digest(out).hex(), digest(lse).hex()
            if i % SAMPLE_EVERY == 0 or "embedded" in case:
                sample[f"c{i}_out"], sample[f"c{i}_lse"] = out, lse
            if args.full:
                full.append((i, out, lse))
        records.append(rec)
    elapsed = time.time() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    save_npz_atomic(args.out / SAMPLE_FILE, **sample)
    for j in range(0, len(full), 64):
        save_npz_atomic(args.out / f"fa3_library_full_{j // 64}.npz",
                        **{f"c{i}_{n}": a for i, o, lse in full[j:j + 64]
                           for n, a in (("out", o), ("lse", lse))})
    errors = sum("error" in r for r in records)
    twin_equal = sum(r.get("twin_out") == r.get("out") and r.get("twin_lse") == r.get("lse")
                     for r in records) if args.twin else None
    write_json_atomic(args.out / REPORT_FILE, {
        "provenance": prov, "cases": records, "sample_every": SAMPLE_EVERY,
        "counts": {"cases": len(records), "refused": errors, "seconds": round(elapsed, 1),
                   "twin_equal_to_library": twin_equal},
        "regenerate": "python3 -m simulator measure fa3_library_record --out DIR (sm_90 GPU, torch, "
                      "fa3-fwd 0.0.3)"})
    print(json.dumps({"cases": len(records), "refused": errors, "seconds": round(elapsed, 1),
                      "twin_equal_to_library": twin_equal}))
    return 0


def record_api(out_dir: Path, full: bool = False) -> int:
    """The ``--api`` recording (module docstring); ``full``: every call's bits in
    ``fa3_api_full_{j}.npz`` (40 calls a file), for analysis."""
    from ..replay import fa3_api_cases  # noqa: PLC0415

    prov = fa3_library.provenance() | {"driver": _driver(), "date": time.strftime("%Y-%m-%d"),
                                       "wheel_sha256": fa3_library.WHEEL_SHA256}
    records, sample, every, t0 = [], {}, {}, time.time()
    for i, case in enumerate(fa3_api_cases.matrix()):
        name, call_args = fa3_api_cases.call_args(case)
        rec = {"case": case, "function": name, "inputs": fa3_api_cases.args_digest(call_args)}
        try:
            got = fa3_library.call(name, call_args)
        except RuntimeError as exc:
            rec["error"] = str(exc).splitlines()[0][:300]
            records.append(rec)
            continue
        bits = fa3_api_cases.result_bits(name, call_args, got["out"], got["lse"], caches=got)
        rec.update({k: digest(v).hex() for k, v in bits.items()})
        out, lse = bits["out"], bits["lse"]
        if i % SAMPLE_EVERY == 0:
            sample[f"c{i}_out"], sample[f"c{i}_lse"] = out, lse
        if full:
            every[f"c{i}_out"], every[f"c{i}_lse"] = out, lse
        if name == "flash_attn_func" and call_args["num_splits"] > 1:  # the partials too
            o_acc, l_acc = fa3_api_cases.canonical_partials(*fa3_library.split_partials(call_args))
            rec["out_accum"] = digest(o_acc.view(np.uint32)).hex()
            rec["lse_accum"] = digest(l_acc.view(np.uint32)).hex()
            rec["accum_shape"] = list(o_acc.shape)
            if len(sample) < 200 and o_acc.size <= 600_000:
                sample[f"c{i}_out_accum"], sample[f"c{i}_lse_accum"] = o_acc, l_acc
        records.append(rec)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_npz_atomic(out_dir / "fa3_api_sample.npz", **sample)
    keys = sorted({k.split("_")[0] for k in every}, key=lambda c: int(c[1:]))
    for j in range(0, len(keys), 40):
        save_npz_atomic(out_dir / f"fa3_api_full_{j // 40}.npz",
                        **{k: every[k] for c in keys[j:j + 40] for k in (f"{c}_out", f"{c}_lse")})
    errors = sum("error" in r for r in records)
    write_json_atomic(out_dir / "fa3_api_report.json", {
        "provenance": prov, "cases": records, "sample_every": SAMPLE_EVERY,
        "counts": {"cases": len(records), "refused": errors, "seconds": round(time.time() - t0, 1)},
        "regenerate": "python3 -m simulator measure fa3_library_record --api --out DIR"})
    print(json.dumps({"api_cases": len(records), "refused": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(runtime.run_script(main))
