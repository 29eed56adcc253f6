"""Record what FlashAttention-3 as PyPI ``dew-flash-attn-cu13`` 0.3.6 builds it
(``libdew_flash_attn3.so``, sm_90a) computes, forward and backward, on the frozen cases of
:mod:`simulator.replay.dew_fa3_cases`.

Run on the GPU host with jax, ``DEW_FA3_LIB`` naming the library and its CUDA 13 runtime on
the loader's path (``scripts/device_fa2_jax_session.sh`` sets both)::

    python3 -m simulator measure dew_fa3_record --out OUTDIR

The library's four XLA FFI targets (``dew_flash3_mha_fwd``, ``_bwd``, ``_varlen_fwd``,
``_varlen_bwd``) are registered from the library with ``jax.ffi.pycapsule`` and called with
the argument and result shapes of the package's own glue (``dew_flash_attn/__init__.py``):
attributes ``softmax_scale`` (float64), ``is_causal``, ``window_size_left`` / ``_right``
(int64), ``max_seqlen`` / ``max_seqlen_k`` for varlen; the backward's two float32 scratch
buffers of ``heads * (tokens + 128 * (sequences + 1))``. Its backward has no deterministic
switch (the FFI takes none), so each backward case runs three times in the default mode.
Written to OUTDIR: ``dew_fa3_report.json`` (provenance, per case the inputs' digest, the
error text or digests of out / LSE / dQ / dK / dV per run, whether the runs agreed),
``dew_fa3_forward.npz`` (``f{i}_out``, ``f{i}_lse``), ``dew_fa3_dq.npz`` (``b{i}_dq``: uint16
``[3, ...]``, row 0 run 0's bits, rows 1-2 XOR run 0's; ``b{i}_out``, ``b{i}_lse``: the
forward the backward ran on) and ``dew_fa3_dkdv_sample.npz`` (``b{i}_dk``, ``b{i}_dv`` run 0
for every ``SAMPLE_EVERY``-th case; the rest by digest; with GQA, whose dK / dV are
reduce-added over the group in any order, ``b{i}_{dk,dv}_runs`` stacks of the three runs).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from ..io import save_npz_atomic, write_json_atomic
from ..replay import dew_fa3_cases as dc
from ..replay.common import digest
from . import jax_ffi as jf
from .common import out_parser

REPORT = "dew_fa3_report.json"
RUNS = 3
SAMPLE_EVERY = 10


def _hex(x: np.ndarray) -> str:
    return digest(np.ascontiguousarray(x)).hex()


class Library:
    """The library's FFI targets, registered with jax."""

    def __init__(self, path: str):
        self.jax, self.jnp = jf.jax_modules()
        self.lib = ctypes.cdll.LoadLibrary(path)
        for suffix in ("_fwd", "_bwd", "_varlen_fwd", "_varlen_bwd"):
            name = "dew_flash3_mha" + suffix
            self.jax.ffi.register_ffi_target(name, self.jax.ffi.pycapsule(getattr(self.lib, name)),
                                             platform="CUDA")
        self.lib.dew_flash3_architectures.restype = ctypes.c_char_p
        self.architectures = self.lib.dew_flash3_architectures().decode()

    def dev(self, bits, dtype):
        return jf.to_device(self.jax, self.jnp, bits, dtype)

    @staticmethod
    def attrs(case, d):
        scale = case["scale"] if case["scale"] is not None else 1.0 / math.sqrt(d)
        return {"softmax_scale": np.float64(scale), "is_causal": bool(case["causal"]),
                "window_size_left": np.int64(case["window"][0]),
                "window_size_right": np.int64(case["window"][1])}

    def starts(self, case):
        if "seqlens_q" not in case:
            return None
        return (self.jax.device_put(dc.cu_seqlens(case["seqlens_q"])),
                self.jax.device_put(dc.cu_seqlens(case["seqlens_k"])))

    def forward(self, case, q, k, v):
        jax, jnp = self.jax, self.jnp
        st = self.starts(case)
        heads = q.shape[-2]
        lse_shape = (heads, q.shape[0]) if st else (q.shape[0], heads, q.shape[1])
        types = (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct(lse_shape, jnp.float32),
                 jax.ShapeDtypeStruct((1, 1, 1, 1), jnp.float32),
                 jax.ShapeDtypeStruct((1, 1, 1), jnp.float32))
        a = self.attrs(case, q.shape[-1])
        if st:
            res = jax.ffi.ffi_call("dew_flash3_mha_varlen_fwd", types)(
                q, k, v, *st, max_seqlen=np.int64(max(case["seqlens_q"])),
                max_seqlen_k=np.int64(max(case["seqlens_k"])), **a)
        else:
            res = jax.ffi.ffi_call("dew_flash3_mha_fwd", types)(q, k, v, **a)
        return res[0], res[1]

    def backward(self, case, g, q, k, v, o, lse):
        jax, jnp = self.jax, self.jnp
        st = self.starts(case)
        tokens, seqs = ((q.shape[0], len(case["seqlens_q"])) if st
                        else (q.shape[0] * q.shape[1], q.shape[0]))
        scratch = jax.ShapeDtypeStruct((q.shape[-2] * (tokens + 128 * (seqs + 1)),), jnp.float32)
        types = (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct(k.shape, q.dtype),
                 jax.ShapeDtypeStruct(v.shape, q.dtype), scratch, scratch)
        a = self.attrs(case, q.shape[-1])
        if st:
            res = jax.ffi.ffi_call("dew_flash3_mha_varlen_bwd", types)(
                g, q, k, v, o, lse, *st, max_seqlen=np.int64(max(case["seqlens_q"])),
                max_seqlen_k=np.int64(max(case["seqlens_k"])), **a)
        else:
            res = jax.ffi.ffi_call("dew_flash3_mha_bwd", types)(g, q, k, v, o, lse, **a)
        return [jf.bits16(jax, jnp, x) for x in res[:3]]


def record_forward(lib, cases, log):
    recs, arrays = [], {}
    for i, case in enumerate(cases):
        qb, kb, vb = dc.make_input_bits(case)
        rec = {"index": i, "case": case, "inputs": dc.case_digest(case)}
        try:
            q, k, v = (lib.dev(x, case["dtype"]) for x in (qb, kb, vb))
            o, lse = lib.forward(case, q, k, v)
            out, lse = jf.bits16(lib.jax, lib.jnp, o), jf.f32(lse)
            o2, lse2 = lib.forward(case, q, k, v)
            rec["repeat_identical"] = bool(
                np.array_equal(jf.bits16(lib.jax, lib.jnp, o2), out)
                and np.array_equal(jf.f32(lse2).view(np.uint32), lse.view(np.uint32)))
            rec.update(out=_hex(out), lse=_hex(lse.view(np.uint32)), lse_shape=list(lse.shape))
            arrays[f"f{i}_out"], arrays[f"f{i}_lse"] = out, lse
        except Exception as exc:
            rec["error"] = jf.first_line(exc)
            log(f"f{i}: {rec['error'][:200]}")
        recs.append(rec)
        if i % 20 == 0:
            log(f"forward {i}/{len(cases)}")
    return recs, arrays


def record_backward(lib, cases, log, deadline, only_gqa=False, drawn=False):
    """Per case: the forward, then three backward runs. Arrays: dQ stacks (``drawn``: only
    where the runs differ), dK / dV stacks with GQA (``drawn``: groups of 3 or more), run 0's
    dK / dV of every ``SAMPLE_EVERY``-th case (not when ``drawn``)."""
    recs, dq_arrays, sample = [], {}, {}
    for i, case in enumerate(cases):
        if only_gqa and case["heads_kv"] == case["heads"]:
            continue
        if time.time() > deadline:
            log(f"backward: stopped at case {i} (time budget)")
            break
        qb, kb, vb = dc.make_input_bits(case)
        gb = dc.grad_bits(case)
        rec = {"index": i, "case": case, "inputs": dc.case_digest(case, backward=True)}
        try:
            q, k, v, g = (lib.dev(x, case["dtype"]) for x in (qb, kb, vb, gb))
            o, lse = lib.forward(case, q, k, v)
            ob, lb = jf.bits16(lib.jax, lib.jnp, o), jf.f32(lse)
            rec["out"], rec["lse"] = _hex(ob), _hex(lb.view(np.uint32))
            if not drawn:
                dq_arrays[f"b{i}_out"], dq_arrays[f"b{i}_lse"] = ob, lb
            runs = [lib.backward(case, g, q, k, v, o, lse) for _ in range(RUNS)]
            for j, name in enumerate(("dq", "dk", "dv")):
                stack = jf.runs_bits([r[j] for r in runs])
                rec[f"{name}_runs"] = [_hex(r[j]) for r in runs]
                rec[f"{name}_agree"] = bool(not stack[1:].any())
                group = case["heads"] // case["heads_kv"]
                if name == "dq":
                    if not drawn or stack[1:].any():
                        dq_arrays[f"b{i}_dq"] = stack
                elif group > 1 and (not drawn or group >= 3):  # reduce-adds over the group
                    sample[f"b{i}_{name}_runs"] = stack
                elif i % SAMPLE_EVERY == 0 and not drawn:
                    sample[f"b{i}_{name}"] = runs[0][j]
        except Exception as exc:
            rec["error"] = jf.first_line(exc)
            log(f"b{i}: {rec['error'][:200]}")
        recs.append(rec)
        if i % 25 == 0:
            log(f"backward {i}/{len(cases)}")
    return recs, dq_arrays, sample


def main(argv=None) -> int:
    ap = out_parser("dew_fa3_record", __doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=0, help="only the first N cases of each list")
    ap.add_argument("--budget-s", type=float, default=240.0, help="stop the backward after this")
    ap.add_argument("--drawn", type=int, default=0,
                    help="record N drawn backward calls instead (dew_fa3_drawn_report.json, "
                         "dew_fa3_drawn.npz)")
    ap.add_argument("--only-gqa", action="store_true",
                    help="only the backward's GQA cases (dK / dV of every run in full), into "
                         "dew_fa3_gqa_report.json / dew_fa3_gqa.npz")
    args = ap.parse_args(argv)
    out, log = jf.start(args.out)
    t0 = time.time()

    path = os.environ.get("DEW_FA3_LIB", "libdew_flash_attn3.so")
    lib = Library(path)
    prov = jf.provenance(lib.jax, {
        "build": "dew-flash-attn-cu13 0.3.6 (PyPI), libdew_flash_attn3.so",
        "library_sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(),
        "library_architectures": lib.architectures,
        "cases_sha256": hashlib.sha256(Path(dc.__file__).read_bytes()).hexdigest(),
        "recorder_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()})
    log(json.dumps(prov))
    fwd, bwd = dc.forward_cases(), dc.backward_cases()
    if args.limit:
        fwd, bwd = fwd[:args.limit], bwd[:args.limit]
    report = {"provenance": prov}
    if args.drawn:
        cases = dc.drawn_backward_cases(args.drawn)
        report["backward"], dq, sample = record_backward(lib, cases, log, t0 + args.budget_s,
                                                         drawn=True)
        report["drawn"] = args.drawn
        save_npz_atomic(out / "dew_fa3_drawn.npz", **dq, **sample)
        write_json_atomic(out / "dew_fa3_drawn_report.json", report, compact=True)
        log(f"drawn backward: {len(report['backward'])} cases, "
            f"{sum('error' in r for r in report['backward'])} errors")
        return 0
    if args.only_gqa:
        report["backward"], dq, sample = record_backward(lib, bwd, log, t0 + args.budget_s, True)
        save_npz_atomic(out / "dew_fa3_gqa.npz", **dq, **sample)
        write_json_atomic(out / "dew_fa3_gqa_report.json", report, compact=True)
        log(f"gqa backward: {len(report['backward'])} cases")
        return 0
    report["forward"], farr = record_forward(lib, fwd, log)
    save_npz_atomic(out / "dew_fa3_forward.npz", **farr)
    write_json_atomic(out / REPORT, report, compact=True)
    report["backward"], dq, sample = record_backward(lib, bwd, log, t0 + args.budget_s)
    report["seconds"] = round(time.time() - t0, 1)
    save_npz_atomic(out / "dew_fa3_dq.npz", **dq)
    save_npz_atomic(out / "dew_fa3_dkdv_sample.npz", **sample)
    write_json_atomic(out / REPORT, report, compact=True)
    for phase in ("forward", "backward"):
        recs = report[phase]
        bad = [r["index"] for r in recs if "error" in r]
        log(f"{phase}: {len(recs)} recorded, {len(bad)} errors {bad[:20]}")
    bw = [r for r in report["backward"] if "dq_runs" in r]
    log("backward runs agree: " + ", ".join(
        f"{n} {sum(r[n + '_agree'] for r in bw)}/{len(bw)}" for n in ("dq", "dk", "dv")))
    return 0


if __name__ == "__main__":
    from .common import run_script  # noqa: PLC0415

    sys.exit(run_script(main))
