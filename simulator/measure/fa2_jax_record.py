"""Record what flash-attn 2.x's kernels compute on a Hopper GPU, as PyPI ``flash-attn-jax``
0.6.2 builds them (``flash_api.cpython-312-x86_64-linux-gnu.so``: sm_80 cubins and PTX; on
sm_90 the driver JIT-compiles the PTX), on the frozen cases of
:mod:`simulator.replay.fa2_jax_cases`.

Run on the GPU host with jax and the unpacked package on ``PYTHONPATH``
(``scripts/device_fa2_jax_session.sh`` does both)::

    python3 -m simulator measure fa2_jax_record --out OUTDIR [--workers 12]

The XLA FFI targets are called as the package's glue calls them: ``flash_mha_fwd`` through
``flash_attn_jax.flash_fwd.flash_mha_fwd`` (out, LSE; the split-KV count is chosen inside
from the SM count), ``flash_mha_varlen_fwd`` through ``flash_attn_jax.varlen_fwd``, and
``flash_mha_bwd`` through an ``ffi_call`` of this file that passes ``deterministic`` (the
glue always passes False) and returns the kernel's dK / dV per query head (the glue sums
them over a GQA group with ``einops.reduce``; for GQA cases the glue's own result is kept
too, ``*_glue``). Case groups (phase, kernel head dim, dtype) run in ``--workers``
processes at once. Written to OUTDIR: ``fa2_jax_report.json`` (provenance, per case the
inputs' digest, the error text or the outputs' digests, whether two identical forward calls
agreed, the first call's seconds), ``fa2_jax_forward.npz`` (``c{i}_out`` uint16, ``c{i}_lse``
float32, and ``v{i}_*`` for varlen), ``fa2_jax_drawn.npz`` (the drawn forward cases, index
152 on) and ``fa2_jax_backward.npz`` (``b{i}_{dq,dk,dv}_{default,det}``: uint16 ``[3, ...]``,
row 0 run 0's bits, rows 1-2 XOR run 0's; ``b{i}_{dk,dv}_glue``).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from ..io import save_npz_atomic, write_json_atomic
from ..replay import fa2_jax_cases as fc
from ..replay.common import digest
from . import jax_ffi as jf
from .common import out_parser

REPORT = "fa2_jax_report.json"
NPZ = {"forward": "fa2_jax_forward.npz", "drawn": "fa2_jax_drawn.npz",
       "backward": "fa2_jax_backward.npz"}
#: forward cases from this index on are the drawn block (their own npz)
DRAWN_FROM = 152
RUNS = 3


def kernel_head_dim(d: int) -> int:
    """flash_api.cpp's ``head_size_rounded`` (multiple of 32 up to 128, of 64 above)."""
    return -(-d // 32) * 32 if d <= 128 else -(-d // 64) * 64


def case_lists(drawn: int) -> dict[str, list[dict]]:
    """The phases' case lists: the frozen ones, or with ``drawn`` N the drawn calls
    (:func:`simulator.replay.fa2_jax_cases.drawn_cases`: 3N/4 forward, N/4 backward)."""
    if drawn:
        return {"forward": fc.drawn_cases(drawn - drawn // 4), "varlen": [],
                "backward": fc.drawn_cases(drawn // 4, backward=True)}
    return {"forward": fc.forward_cases(), "varlen": fc.varlen_cases(),
            "backward": fc.backward_cases()}


def groups(drawn: int = 0) -> list[tuple[str, int, str]]:
    """(phase, kernel head dim, dtype) of every case group, in a fixed order."""
    keys = set()
    for phase, cases in case_lists(drawn).items():
        for c in cases:
            keys.add((phase, kernel_head_dim(c["head_dim"]), c["dtype"]))
    return sorted(keys)


def _hex(x: np.ndarray) -> str:
    return digest(x).hex()


class Library:
    """flash-attn-jax's entry points on the GPU."""

    def __init__(self):
        self.jax, self.jnp = jf.jax_modules()
        import flash_attn_jax  # noqa: PLC0415,F401  (registers the FFI targets)
        from flash_attn_jax import flash_fwd, util, varlen_fwd  # noqa: PLC0415
        from flash_attn_jax.flash_bwd import flash_mha_bwd  # noqa: PLC0415

        self.flash_fwd, self.varlen_fwd, self.glue_bwd = flash_fwd, varlen_fwd, flash_mha_bwd
        self.sm_count = util.get_sm_count()
        self._bwd = {}

    def dev(self, bits, dtype):
        return jf.to_device(self.jax, self.jnp, bits, dtype)

    def forward(self, case, q, k, v):
        wl, wr = case["window"]
        out, lse = self.flash_fwd.flash_mha_fwd(q, k, v, softmax_scale=case["scale"],
                                                is_causal=case["causal"],
                                                window_size_left=wl, window_size_right=wr)
        return jf.bits16(self.jax, self.jnp, out), jf.f32(lse)

    def varlen(self, case, q, k, v):
        wl, wr = case["window"]
        cq = self.jax.device_put(fc.cu_seqlens(case["seqlens_q"]))
        ck = self.jax.device_put(fc.cu_seqlens(case["seqlens_k"]))
        out, lse = self.varlen_fwd.flash_mha_varlen_fwd(
            q, k, v, cq, ck, max_seqlen_q=max(case["seqlens_q"]),
            max_seqlen_k=max(case["seqlens_k"]), softmax_scale=case["scale"],
            is_causal=case["causal"], window_size_left=wl, window_size_right=wr)
        return jf.bits16(self.jax, self.jnp, out), jf.f32(lse)

    def _bwd_fn(self, shape_key, case, deterministic):
        key = (shape_key, case["causal"], tuple(case["window"]), case["scale"], deterministic)
        if key not in self._bwd:
            self._bwd[key] = self.jax.jit(lambda *a: self._bwd_call(case, deterministic, *a))
        return self._bwd[key]

    def _bwd_call(self, case, deterministic, dout, q, k, v, out, lse):
        jax, jnp = self.jax, self.jnp
        n, lq, hq, d = q.shape
        lk = k.shape[1]
        scale = case["scale"] if case["scale"] is not None else 1.0 / math.sqrt(d)
        lq_r, d_r = -(-lq // 128) * 128, -(-d // 32) * 32
        if deterministic:
            splits = max(1, (self.sm_count + n * hq - 1) // (n * hq))
            acc = (splits, n, lq_r, hq, d_r)
        else:
            acc = (n, lq_r, hq, d_r)
        types = [jax.ShapeDtypeStruct((n, lq, hq, d), q.dtype),
                 jax.ShapeDtypeStruct((n, lk, hq, d), q.dtype),
                 jax.ShapeDtypeStruct((n, lk, hq, d), q.dtype),
                 jax.ShapeDtypeStruct((n, hq, lq_r), jnp.float32),
                 jax.ShapeDtypeStruct(acc, jnp.float32)]
        wl, wr = case["window"]
        return jax.ffi.ffi_call("flash_mha_bwd", result_shape_dtypes=types,
                                has_side_effect=False, input_layouts=[None] * 6,
                                output_layouts=[None] * 5)(
            dout, q, k, v, out, lse, softmax_scale=scale, is_causal=case["causal"],
            window_size_left=wl, window_size_right=wr, deterministic=deterministic)[:3]

    def backward(self, case, dout, q, k, v, out, lse, deterministic):
        fn = self._bwd_fn((q.shape, k.shape), case, deterministic)
        return [jf.bits16(self.jax, self.jnp, x) for x in fn(dout, q, k, v, out, lse)]

    def backward_glue(self, case, dout, q, k, v, out, lse):
        wl, wr = case["window"]
        res = self.glue_bwd(dout, q, k, v, out, lse, softmax_scale=case["scale"],
                            is_causal=case["causal"], window_size_left=wl,
                            window_size_right=wr)
        return [jf.bits16(self.jax, self.jnp, x) for x in res]


def record_forward(lib, cases, indices, varlen: bool, log):
    recs, arrays = [], {}
    tag = "v" if varlen else "c"
    for i in indices:
        case = cases[i]
        qb, kb, vb = fc.make_input_bits(case)
        rec = {"index": i, "case": case, "inputs": fc.sc.input_digest(case, qb, kb, vb)}
        try:
            q, k, v = (lib.dev(x, case["dtype"]) for x in (qb, kb, vb))
            call = lib.varlen if varlen else lib.forward
            t0 = time.time()
            out, lse = call(case, q, k, v)
            rec["first_seconds"] = round(time.time() - t0, 2)
            out2, lse2 = call(case, q, k, v)
            rec["repeat_identical"] = bool(np.array_equal(out, out2)
                                           and np.array_equal(lse.view(np.uint32),
                                                              lse2.view(np.uint32)))
            rec.update(out=_hex(out), lse=_hex(lse.view(np.uint32)), out_shape=list(out.shape),
                       lse_shape=list(lse.shape))
            arrays[f"{tag}{i}_out"], arrays[f"{tag}{i}_lse"] = out, lse
        except Exception as exc:  # recorded: the case's error text
            rec["error"] = jf.first_line(exc)
            log(f"{tag}{i}: {rec['error'][:200]}")
        recs.append(rec)
    return recs, arrays


def record_backward(lib, cases, indices, log):
    recs, arrays = [], {}
    for i in indices:
        case = cases[i]
        qb, kb, vb = fc.make_input_bits(case)
        gb = fc.grad_bits(case)
        rec = {"index": i, "case": case, "inputs": fc.sc.input_digest(case, qb, kb, vb, gb)}
        try:
            q, k, v, g = (lib.dev(x, case["dtype"]) for x in (qb, kb, vb, gb))
            wl, wr = case["window"]
            o, lse = lib.flash_fwd.flash_mha_fwd(q, k, v, softmax_scale=case["scale"],
                                                 is_causal=case["causal"],
                                                 window_size_left=wl, window_size_right=wr)
            ob = jf.bits16(lib.jax, lib.jnp, o)
            arrays[f"b{i}_out"], arrays[f"b{i}_lse"] = ob, jf.f32(lse)
            rec["out"], rec["lse"] = _hex(ob), _hex(jf.f32(lse).view(np.uint32))
            t0 = time.time()
            det_dq = None
            for mode, det in (("det", True), ("default", False)):
                runs = [lib.backward(case, g, q, k, v, o, lse, det) for _ in range(RUNS)]
                rec[mode] = [{n: _hex(r[j]) for j, n in enumerate(("dq", "dk", "dv"))}
                             for r in runs]
                for j, name in enumerate(("dq", "dk", "dv")):
                    stack = jf.runs_bits([r[j] for r in runs])
                    arrays[f"b{i}_{name}_{mode}"] = stack
                    rec[f"{name}_{mode}_agree"] = bool(not stack[1:].any())
                det_dq = runs[0][0].ravel() if det else det_dq
                if not det:
                    for r_i, r in enumerate(runs):
                        idx = np.flatnonzero(r[0].ravel() != det_dq).astype(np.int32)
                        arrays[f"b{i}_dq_r{r_i}_idx"] = idx
                        arrays[f"b{i}_dq_r{r_i}_val"] = r[0].ravel()[idx]
            rec["first_seconds"] = round(time.time() - t0, 2)
            if case["heads_kv"] != case["heads"]:
                _, dk, dv = lib.backward_glue(case, g, q, k, v, o, lse)
                arrays[f"b{i}_dk_glue"], arrays[f"b{i}_dv_glue"] = dk, dv
                rec["glue"] = {"dk": _hex(dk), "dv": _hex(dv)}
        except Exception as exc:
            rec["error"] = jf.first_line(exc)
            log(f"b{i}: {rec['error'][:200]}")
        recs.append(rec)
    return recs, arrays


def run_worker(out: Path, k: int, workers: int, log, drawn: int = 0) -> int:
    mine = set(groups(drawn)[k::workers])
    lib = Library()
    log(f"worker {k}: groups {sorted(mine)} sm_count {lib.sm_count}")
    lists = case_lists(drawn)
    fwd, var, bwd = lists["forward"], lists["varlen"], lists["backward"]

    def pick(phase, cases):
        return [i for i, c in enumerate(cases)
                if (phase, kernel_head_dim(c["head_dim"]), c["dtype"]) in mine]

    records, arrays = {}, {}
    for phase, cases, fn in (("forward", fwd, lambda ix: record_forward(lib, fwd, ix, False, log)),
                             ("varlen", var, lambda ix: record_forward(lib, var, ix, True, log)),
                             ("backward", bwd, lambda ix: record_backward(lib, bwd, ix, log))):
        ix = pick(phase, cases)
        t0 = time.time()
        recs, arr = fn(ix)
        records[phase] = recs
        if drawn:  # digests only, and the default runs' dQ where it left the deterministic bits
            arr = {n: a for n, a in arr.items() if "_dq_r" in n}
        arrays.update(arr)
        log(f"worker {k}: {phase} {len(ix)} cases in {time.time() - t0:.1f} s")
        write_json_atomic(out / f"part{k}.json", records, compact=True)
        save_npz_atomic(out / f"part{k}.npz", **arrays)
    return 0


def main(argv=None) -> int:
    ap = out_parser("fa2_jax_record", __doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--worker", type=int, default=-1, help=argparse_hidden())
    ap.add_argument("--drawn", type=int, default=0,
                    help="record N drawn calls instead (digests; fa2_jax_drawn_report.json, "
                         "fa2_jax_drawn_dq.npz)")
    args = ap.parse_args(argv)
    out, log = jf.start(args.out)
    t0 = time.time()

    if args.worker >= 0:
        return run_worker(out, args.worker, args.workers, log, args.drawn)
    jax, _ = jf.jax_modules()
    from flash_attn_jax import util  # noqa: PLC0415

    prov = jf.provenance(jax, {
        "build": "flash-attn-jax 0.6.2 (PyPI), flash_api.cpython-312-x86_64-linux-gnu.so",
        "sm_count_library": util.get_sm_count(),
        "cases_sha256": hashlib.sha256(Path(fc.__file__).read_bytes()).hexdigest(),
        "recorder_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()})
    log(json.dumps(prov))
    extra = ["--drawn", str(args.drawn)] if args.drawn else []
    codes = jf.spawn_workers("fa2_jax_record", out, args.workers, extra, log)
    records, arrays = jf.merge_parts(out, args.workers)
    report = {"provenance": prov, "worker_exit_codes": codes, "seconds": round(time.time() - t0),
              **records}
    if args.drawn:
        report["drawn"] = args.drawn
        write_json_atomic(out / "fa2_jax_drawn_report.json", report, compact=True)
        save_npz_atomic(out / "fa2_jax_drawn_dq.npz", **arrays)
        for phase, recs in records.items():
            log(f"drawn {phase}: {len(recs)} recorded, "
                f"{sum('error' in r for r in recs)} errors")
        return 0
    write_json_atomic(out / REPORT, report, compact=True)
    fwd = {n: a for n, a in arrays.items() if n[0] in "cv"}
    drawn = {n: fwd.pop(n) for n in list(fwd) if n[0] == "c"
             and int(n[1:].split("_")[0]) >= DRAWN_FROM}
    save_npz_atomic(out / NPZ["forward"], **fwd)
    save_npz_atomic(out / NPZ["drawn"], **drawn)
    save_npz_atomic(out / NPZ["backward"], **{n: a for n, a in arrays.items() if n[0] == "b"})
    for phase, recs in records.items():
        bad = [r["index"] for r in recs if "error" in r]
        log(f"{phase}: {len(recs)} recorded, {len(bad)} errors {bad[:20]}")
    return 0


def argparse_hidden():
    import argparse  # noqa: PLC0415

    return argparse.SUPPRESS


if __name__ == "__main__":
    from .common import run_script  # noqa: PLC0415

    sys.exit(run_script(main))
