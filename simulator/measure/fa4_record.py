"""Record what FlashAttention-4's sm90 kernels (PyPI ``flash-attn-4``, ``flash_attn.cute``,
compiled by CuTe DSL at the first call of each variant) compute, on the frozen cases of
:mod:`simulator.replay.fa4_cases`.

Run on a machine with an sm_90 GPU, torch and flash-attn-4 with its CuTe DSL wheels
(``scripts/device_fa4_session.sh`` carries and installs them), from the repository root::

    PYTHONUNBUFFERED=1 python3 -m simulator measure fa4_record --out OUTDIR [--drawn N]

Calls ``flash_attn.cute.flash_attn_func`` (``flash_attn_varlen_func`` for a varlen case) with
``return_lse=True``, the case's causal / window_size / softcap / learnable_sink / softmax_scale /
pack_gqa; a backward case then runs ``out.backward(dout)`` three times with
``deterministic=True`` and three times with False, each on fresh leaf tensors. Case groups run
in ``--workers`` processes at once; each worker keeps the PTX CuTe DSL generates
(``CUTE_DSL_KEEP=ptx``). Written atomically to OUTDIR:

* ``fa4_report.json``: provenance (GPU, SM count, compute capability, driver, torch,
  flash-attn-4, nvidia-cutlass-dsl, the date, SHA-256 of the case list and of this file); per
  phase (``forward``, ``backward``, ``drawn_forward``, ``drawn_backward``) per case its index,
  the digest of its inputs (:func:`simulator.replay.fa4_cases.case_digest`), the library's
  error text or BLAKE2b-128 digests of out (uint16 bits) and lse (float32 bits), whether a
  second identical forward call gave the same bits, and for a backward case per run the
  digests of dq, dk, dv (and dsink with a learnable sink);
* ``fa4_forward.npz``: each chosen forward case's ``c{i}_out`` (uint16, flash-attn's layout)
  and ``c{i}_lse`` (float32 ``[batch, heads, seqlen_q]``, varlen ``[heads, total_q]``);
* ``fa4_backward.npz``: each chosen backward case's ``b{i}_out``, ``b{i}_lse`` and
  ``b{i}_{dq,dk,dv}_runs`` (uint16 ``[6, ...]``: row 0 run 0's bits, row r run r's XOR run 0's);
* ``fa4_ptx.tar.xz`` and ``fa4_ptx.json``: the generated PTX files and their SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

from ..io import save_npz_atomic, write_json_atomic
from ..replay import fa4_cases as fc
from ..replay.common import digest
from . import jax_ffi as jf
from .common import out_parser

REPORT = "fa4_report.json"
NPZ = {"forward": "fa4_forward.npz", "backward": "fa4_backward.npz"}
RUNS = 6  # runs 0-2 deterministic=True, 3-5 deterministic=False


def _hex(bits: np.ndarray) -> str:
    return digest(bits).hex()


class Library:
    """torch and ``flash_attn.cute`` on the GPU; arrays in and out as bits."""

    def __init__(self):
        import torch  # noqa: PLC0415
        from flash_attn.cute import interface  # noqa: PLC0415

        self.torch, self.fa = torch, interface
        self.dtypes = {"bf16": torch.bfloat16, "f16": torch.float16}

    def tensor(self, bits: np.ndarray, dtype: str, grad: bool = False):
        t = self.torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).cuda()
        t = t.view(self.dtypes[dtype])
        return t.requires_grad_(grad)

    def bits16(self, t) -> np.ndarray:
        return t.detach().contiguous().view(self.torch.int16).cpu().numpy().view(np.uint16)

    def f32(self, t) -> np.ndarray:
        return t.detach().float().contiguous().cpu().numpy()

    def call(self, case: dict, grad: bool = False, deterministic: bool = False):
        """``(out, lse, leaves)`` of one forward call (leaves: q, k, v, sink tensors)."""
        torch, fa = self.torch, self.fa
        q, k, v = (self.tensor(x, case["dtype"], grad) for x in fc.make_input_bits(case))
        sink = None
        if case.get("sink"):
            vals = torch.from_numpy(fc.sink_logits(case)).cuda()
            sink = (vals.to(torch.bfloat16) if case["sink"] == "bf16" else vals).requires_grad_(grad)
        kw = {"softmax_scale": case["scale"], "causal": case["causal"],
              "window_size": fc.window_args(case), "learnable_sink": sink,
              "softcap": case["softcap"], "pack_gqa": case["pack_gqa"],
              "deterministic": deterministic, "return_lse": True}
        if "seqlens_q" in case:
            cq = torch.from_numpy(fc.cu_seqlens(case["seqlens_q"])).cuda()
            ck = torch.from_numpy(fc.cu_seqlens(case["seqlens_k"])).cuda()
            out, lse = fa.flash_attn_varlen_func(
                q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=max(case["seqlens_q"]),
                max_seqlen_k=max(case["seqlens_k"]), **kw)
        else:
            out, lse = fa.flash_attn_func(q, k, v, **kw)
        torch.cuda.synchronize()
        return out, lse, (q, k, v, sink)


def record_forward(lib: Library, cases: list[dict], indices, keep: bool, deadline: float, log):
    records, arrays = [], {}
    for i in indices:
        case = cases[i]
        rec = {"index": i, "input_digest": fc.case_digest(case)}
        if time.time() > deadline:
            records.append({**rec, "not_run": "time limit"})
            continue
        try:
            out, lse, _ = lib.call(case)
            ob, lb = lib.bits16(out), lib.f32(lse)
            out2, lse2, _ = lib.call(case)
            rec.update(out=_hex(ob), lse=_hex(lb.view(np.uint32)),
                       repeat_same=bool(np.array_equal(ob, lib.bits16(out2))
                                        and np.array_equal(lb.view(np.uint32),
                                                           lib.f32(lse2).view(np.uint32))))
            if keep:
                arrays[f"c{i}_out"], arrays[f"c{i}_lse"] = ob, lb
        except Exception as exc:  # noqa: BLE001  (the library's refusal is a result)
            rec["error"] = jf.first_line(exc)
            log(f"forward {i}: {rec['error'][:160]}")
        records.append(rec)
    return records, arrays


def _backward_run(lib: Library, case: dict, deterministic: bool):
    out, lse, (q, k, v, sink) = lib.call(case, grad=True, deterministic=deterministic)
    dout = lib.tensor(fc.grad_bits(case) if "seqlens_q" not in case else
                      fc.grad_bits(dict(case, batch=1))[0], case["dtype"])
    out.backward(dout)
    lib.torch.cuda.synchronize()
    grads = {n: lib.bits16(t.grad) for n, t in (("dq", q), ("dk", k), ("dv", v))}
    if sink is not None:
        grads["dsink"] = lib.f32(sink.grad).view(np.uint32) if sink.dtype == lib.torch.float32 \
            else lib.bits16(sink.grad)
    return out, lse, grads


def record_backward(lib: Library, cases: list[dict], indices, keep: bool, deadline: float, log):
    records, arrays = [], {}
    for i in indices:
        case = cases[i]
        rec = {"index": i, "input_digest": fc.case_digest(case, backward=True)}
        if time.time() > deadline:
            records.append({**rec, "not_run": "time limit"})
            continue
        try:
            runs = []
            for r in range(RUNS):
                out, lse, grads = _backward_run(lib, case, deterministic=r < 3)
                runs.append(grads)
            rec.update(out=_hex(lib.bits16(out)), lse=_hex(lib.f32(lse).view(np.uint32)),
                       runs=[{n: _hex(g) for n, g in run.items()} for run in runs])
            if keep:
                arrays[f"b{i}_out"], arrays[f"b{i}_lse"] = lib.bits16(out), lib.f32(lse)
                for n in runs[0]:
                    arrays[f"b{i}_{n}_runs"] = jf.runs_bits([run[n] for run in runs])
        except Exception as exc:  # noqa: BLE001
            rec["error"] = jf.first_line(exc)
            log(f"backward {i}: {rec['error'][:160]}")
        records.append(rec)
    return records, arrays


def run_worker(out: Path, k: int, workers: int, drawn: int, drawn_bwd: int, limit_s: float,
               log, drawn_from: int = 0, chosen: bool = True) -> int:
    deadline = time.time() + limit_s
    lib = Library()
    fwd, bwd = (fc.forward_cases(), fc.backward_cases()) if chosen else ([], [])
    dfwd, dbwd = fc.drawn_cases(drawn), fc.drawn_cases(drawn_bwd, backward=True)
    records, arrays = {}, {}
    for phase, cases, fn, keep in (("forward", fwd, record_forward, True),
                                   ("backward", bwd, record_backward, True),
                                   ("drawn_forward", dfwd, record_forward, False),
                                   ("drawn_backward", dbwd, record_backward, False)):
        t0 = time.time()
        first = drawn_from if phase == "drawn_forward" else 0
        ix = range(first + k, len(cases), workers)
        records[phase], arr = fn(lib, cases, ix, keep, deadline, log)
        arrays.update(arr)
        log(f"worker {k}: {phase} {len(ix)} cases in {time.time() - t0:.1f} s")
        write_json_atomic(out / f"part{k}.json", records, compact=True)
        save_npz_atomic(out / f"part{k}.npz", **arrays)
    return 0


def _versions() -> dict:
    from importlib import metadata  # noqa: PLC0415

    v = {}
    for dist in ("flash-attn-4", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base",
                 "nvidia-cutlass-dsl-libs-cu13", "quack-kernels", "apache-tvm-ffi", "torch",
                 "cuda-bindings"):
        try:
            v[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            v[dist] = "absent"
    return v


def provenance() -> dict:
    import datetime  # noqa: PLC0415
    import platform  # noqa: PLC0415

    import torch  # noqa: PLC0415

    props = torch.cuda.get_device_properties(0)
    p = {"date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
         "python": platform.python_version(), "gpu": props.name,
         "sm_count": int(props.multi_processor_count),
         "compute_capability": f"{props.major}.{props.minor}", "cuda": torch.version.cuda,
         "versions": _versions(),
         "cases_sha256": hashlib.sha256(Path(fc.__file__).read_bytes()).hexdigest(),
         "recorder_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}
    try:
        p["driver_version"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        p["driver_version"] = "unknown"
    return p


def pack_ptx(out: Path, workers: int) -> dict:
    """The workers' PTX folders into ``fa4_ptx.tar.xz`` (one copy per distinct file) and
    their SHA-256 by file name."""
    seen: dict[str, str] = {}
    tmp = out / "fa4_ptx.tar.xz.tmp"
    with tarfile.open(tmp, "w:xz") as tar:
        for k in range(workers):
            for f in sorted((out / f"ptx{k}").glob("**/*.ptx")):
                sha = hashlib.sha256(f.read_bytes()).hexdigest()
                if sha in seen.values():
                    continue
                name = f"{len(seen):03d}_{f.name[-120:]}"
                seen[name] = sha
                tar.add(f, arcname=name)
    os.replace(tmp, out / "fa4_ptx.tar.xz")
    write_json_atomic(out / "fa4_ptx.json", seen)
    return seen


def main(argv=None) -> int:
    ap = out_parser("fa4_record", __doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--worker", type=int, default=-1, help=_hidden())
    ap.add_argument("--drawn", type=int, default=0, help="drawn forward calls (digests)")
    ap.add_argument("--drawn-backward", type=int, default=0, help="drawn backward calls")
    ap.add_argument("--drawn-from", type=int, default=0,
                    help="record the drawn forward calls from this index on")
    ap.add_argument("--no-chosen", action="store_true",
                    help="skip the chosen forward and backward cases (a drawn-only visit)")
    ap.add_argument("--time-limit", type=float, default=480.0,
                    help="seconds after which a worker records no further case")
    args = ap.parse_args(argv)
    out, log = jf.start(args.out)
    t0 = time.time()
    if args.worker >= 0:
        return run_worker(out, args.worker, args.workers, args.drawn, args.drawn_backward,
                          args.time_limit, log, args.drawn_from, not args.no_chosen)
    prov = provenance()
    log(json.dumps(prov))
    extra = ["--drawn", str(args.drawn), "--drawn-backward", str(args.drawn_backward),
             "--drawn-from", str(args.drawn_from), "--time-limit", str(args.time_limit),
             *(["--no-chosen"] if args.no_chosen else [])]
    codes = jf.spawn_workers("fa4_record", out, args.workers, extra, log, _worker_env(out))
    records, arrays = jf.merge_parts(out, args.workers)
    report = {"provenance": prov, "worker_exit_codes": codes,
              "seconds": round(time.time() - t0), **records}
    write_json_atomic(out / REPORT, report, compact=True)
    save_npz_atomic(out / NPZ["forward"], **{n: a for n, a in arrays.items() if n[0] == "c"})
    save_npz_atomic(out / NPZ["backward"], **{n: a for n, a in arrays.items() if n[0] == "b"})
    ptx = pack_ptx(out, args.workers)
    for phase, recs in records.items():
        bad = [r["index"] for r in recs if "error" in r]
        late = sum("not_run" in r for r in recs)
        log(f"{phase}: {len(recs)} cases, {len(bad)} errors {bad[:20]}, {late} not run")
    log(f"{len(ptx)} distinct PTX files")
    return 0


def _worker_env(out: Path):
    """Worker k's environment: its own PTX dump folder, made first (CuTe DSL reads the
    variables at import and dumps only into a folder that exists)."""
    def env_of(k: int) -> dict:
        (out / f"ptx{k}").mkdir(parents=True, exist_ok=True)
        return dict(os.environ, CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(out / f"ptx{k}"))
    return env_of


def _hidden():
    import argparse  # noqa: PLC0415

    return argparse.SUPPRESS


if __name__ == "__main__":
    from .common import run_script  # noqa: PLC0415

    sys.exit(run_script(main))
