"""Record what PyTorch's ``scaled_dot_product_attention`` flash backend (FlashAttention-2 as
PyTorch builds it for sm_90) computes, on the frozen cases of
:mod:`simulator.replay.sdpa_cases`.

Run on a machine with an sm_90 GPU and torch, from the repository root::

    PYTHONUNBUFFERED=1 python3 -m simulator measure sdpa_record --out OUTDIR

(``--dry-run`` needs no torch: it regenerates every case's inputs and writes the report's
skeleton, provenance left out.) The op is called directly,
``torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal,
return_debug_mask, scale=...)`` with q, k, v in SDPA's layout ``[batch, heads, seqlen,
head_dim]``. Written atomically to OUTDIR (one phase's files as soon as it ends):

* ``sdpa_forward_report.json``: provenance (GPU, SM count, compute capability, driver, CUDA,
  torch, ``torch.nn.attention._get_flash_version()``, the ops' schemas, the SDPBackend enum,
  the date, the SHA-256 of the case generator and of this file); ``forward``: per case the
  case, the digest of its inputs (:func:`simulator.replay.sdpa_cases.input_digest`), the
  backend ``torch._fused_sdp_choice`` picks, the op's error text or BLAKE2b-128 digests of
  out (uint16 bits) and logsumexp (float32 bits, as uint32), whether a second identical call
  gave the same bits, whether ``F.scaled_dot_product_attention`` under
  ``sdpa_kernel(SDPBackend.FLASH_ATTENTION)`` gave the op's bits (and whether the default
  dispatch did), and the CUDA kernels launched (torch.profiler; indices into
  ``kernel_names``); ``dropout`` and ``backward``: likewise per case (below);
* ``sdpa_forward_sample.npz``: every accepted forward case's ``c{i}_out`` (uint16 bits,
  ``[batch, heads, seqlen_q, head_dim]``) and ``c{i}_lse`` (float32 ``[batch, heads,
  seqlen_q]``); ``c{i}_fsdpa_out`` where the op refused and F.sdpa ran (padding the head
  dim), and for the first ``FSDPA_SAMPLES`` cases whose F.sdpa bits differ from the op's;
* ``sdpa_dropout.npz``: per dropout case ``d{i}_out``, ``d{i}_lse``, ``d{i}_mask`` (the debug
  attention mask's bits, cropped to ``[..., :seqlen_q, :seqlen_k]``; its full shape and
  dtype, and whether the rest is zero, are in the report) and ``d{i}_philox`` (the returned
  Philox tensors' values as uint64: the report says which tensor held what);
  ``torch.manual_seed(case["seed"])`` before each call;
* ``sdpa_backward.npz``: per backward case the forward's ``b{i}_out``, ``b{i}_lse`` and
  ``b{i}_{dq,dk,dv}_runs`` (uint16 ``[6, ...]``): runs 0-2 under
  ``torch.use_deterministic_algorithms(True)``, 3-5 without; row 0 is run 0's bits, row r > 0
  is run r's bits XOR run 0's (zero where the runs agree).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np

from ..io import save_npz_atomic, write_json_atomic
from ..replay import sdpa_cases as sc
from ..replay.common import digest
from .common import out_parser

REPORT_FILE = "sdpa_forward_report.json"
FORWARD_NPZ = "sdpa_forward_sample.npz"
DROPOUT_NPZ = "sdpa_dropout.npz"
BACKWARD_NPZ = "sdpa_backward.npz"
REGEN = ("python3 -m simulator measure sdpa_record --out DIR (sm_90 GPU, torch), then copy "
         "into simulator/data/device/sdpa/ and run python scripts/make_manifest.py --folder "
         "simulator/data/device/sdpa")
PHASES = ("forward", "dropout", "backward")
PROFILE_BUDGET_S = 90.0
#: F.sdpa outputs kept in full where they differ from an accepted op call (all where it refused)
FSDPA_SAMPLES = 8


def _hex(bits: np.ndarray) -> str:
    return digest(bits).hex()


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _first_line(exc: BaseException, n: int = 400) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())[:n]


def _ops(torch) -> dict:
    """The ops the run calls (a function, so a CPU harness can stand in for them)."""
    return {"forward": torch.ops.aten._scaled_dot_product_flash_attention,
            "backward": torch.ops.aten._scaled_dot_product_flash_attention_backward,
            "choice": torch._fused_sdp_choice}


class Recorder:
    """One run: torch, the device, the kernel-name table and the profiler's time budget."""

    def __init__(self, torch, device: str, profile: bool):
        import torch.nn.functional as F  # noqa: PLC0415
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415

        self.torch, self.F, self.SDPBackend, self.sdpa_kernel = torch, F, SDPBackend, sdpa_kernel
        self.dev = torch.device(device)
        self.ops = _ops(torch)
        self.backend_names = {int(v.value): k for k, v in SDPBackend.__members__.items()}
        self.kernel_names: list[str] = []
        self.profile_left = PROFILE_BUDGET_S if profile else 0.0

    # ---- tensors -------------------------------------------------------------------------
    def tensor(self, bits: np.ndarray, dtype: str):
        t = self.torch.from_numpy(np.ascontiguousarray(bits).view(np.int16))
        return t.view(self.torch.bfloat16 if dtype == "bf16" else self.torch.float16).to(self.dev)

    def sync(self) -> None:
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize()

    def bits16(self, t) -> np.ndarray:
        return t.detach().contiguous().view(self.torch.int16).cpu().numpy().view(np.uint16)

    def f32(self, t) -> np.ndarray:
        return t.detach().contiguous().float().cpu().numpy()

    def describe(self, t) -> dict | str | int | float:
        """Type, dtype, shape, device and (small tensors) values of a returned object (the
        error text where it cannot: a description never fails the call it describes)."""
        try:
            return self._describe(t)
        except Exception as exc:  # noqa: BLE001
            return f"undescribed: {_first_line(exc)}"

    def _describe(self, t) -> dict | str | int | float:
        torch = self.torch
        if not isinstance(t, torch.Tensor):
            return {"type": type(t).__name__, "value": t if isinstance(t, (int, float)) else str(t)}
        d = {"dtype": str(t.dtype), "shape": list(t.shape), "device": str(t.device),
             "stride": list(t.stride())}
        if t.numel() <= 8:
            flat = t.detach().cpu().reshape(-1)  # a 0-d tensor (the op's `unused`) too
            if t.dtype in (torch.uint64, torch.int64):
                d["values"] = [int(x) for x in flat.view(torch.int64).numpy().view(np.uint64)]
            else:
                d["values"] = flat.tolist()
        return d

    def philox_values(self, t) -> np.ndarray:
        if t.numel() == 0:
            return np.zeros(0, np.uint64)
        if t.element_size() == 8:
            return t.detach().cpu().reshape(-1).view(self.torch.int64).numpy().view(np.uint64)
        return t.detach().cpu().reshape(-1).to(self.torch.int64).numpy().astype(np.uint64)

    # ---- calls ----------------------------------------------------------------------------
    def kernels(self, fn) -> list[int] | str:
        """Indices into ``kernel_names`` of the GPU kernels ``fn`` launches (torch.profiler),
        within the profiler's time budget; "" when profiling is off or spent."""
        if self.profile_left <= 0 or self.dev.type != "cuda":
            return ""
        from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

        t0 = time.time()
        try:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                fn()
                self.sync()
            names = []
            for e in prof.events():
                if "CUDA" in str(getattr(e, "device_type", "")) and e.name not in names:
                    names.append(e.name)
        except Exception as exc:  # profiler unusable: say so once, stop profiling
            self.profile_left = 0.0
            return f"profiler: {_first_line(exc)}"
        self.profile_left -= time.time() - t0
        out = []
        for name in names:
            if name not in self.kernel_names:
                self.kernel_names.append(name)
            out.append(self.kernel_names.index(name))
        return out

    def choice(self, q, k, v, case: dict, dropout_p: float = 0.0):
        kw = {"attn_mask": None, "dropout_p": dropout_p, "is_causal": case["causal"],
              "scale": case["scale"]}
        gqa = case["heads_kv"] != case["heads"]
        try:
            got = int(self.ops["choice"](q, k, v, **kw, enable_gqa=gqa))
        except TypeError:  # no enable_gqa in this torch
            try:
                got = int(self.ops["choice"](q, k, v, **kw))
            except Exception as exc:
                return _first_line(exc)
        except Exception as exc:
            return _first_line(exc)
        return self.backend_names.get(got, str(got))

    def flash(self, q, k, v, case: dict, dropout_p: float = 0.0, debug: bool = False):
        res = self.ops["forward"](q, k, v, dropout_p, case["causal"], debug, scale=case["scale"])
        self.sync()
        return res

    def fsdpa(self, q, k, v, case: dict, flash_only: bool = True):
        kw = {"is_causal": case["causal"], "scale": case["scale"]}
        if case["heads_kv"] != case["heads"]:
            kw["enable_gqa"] = True
        ctx = (self.sdpa_kernel(self.SDPBackend.FLASH_ATTENTION) if flash_only
               else contextlib.nullcontext())
        with ctx:
            out = self.F.scaled_dot_product_attention(q, k, v, **kw)
        self.sync()
        return out


def provenance(torch, ops: dict) -> dict:
    """The GPU, the software and the ops' schemas."""
    p = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
         "numpy": np.__version__, "torch": torch.__version__, "cuda": torch.version.cuda,
         "cudnn": str(torch.backends.cudnn.version()),
         "cases_sha256": _file_sha256(Path(sc.__file__)),
         "recorder_sha256": _file_sha256(Path(__file__))}
    try:
        from torch.nn.attention import _get_flash_version  # noqa: PLC0415

        p["flash_version"] = str(_get_flash_version())
    except Exception as exc:
        p["flash_version"] = _first_line(exc)
    if torch.cuda.is_available():
        prop = torch.cuda.get_device_properties(0)
        p.update({"gpu": prop.name, "sm_count": prop.multi_processor_count,
                  "compute_capability": f"{prop.major}.{prop.minor}",
                  "total_memory": prop.total_memory,
                  "l2_cache_size": getattr(prop, "L2_cache_size", None)})
    try:
        p["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        p["driver"] = "unknown"
    schemas = {}
    for name in ("_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_flash_attention_backward", "_fused_sdp_choice",
                 "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                 "_flash_attention_forward", "_flash_attention_backward"):
        try:
            schemas[name] = str(getattr(torch.ops.aten, name).default._schema)
        except Exception as exc:
            schemas[name] = _first_line(exc)
    p["schemas"] = schemas
    from torch.nn.attention import SDPBackend  # noqa: PLC0415

    p["sdp_backend_enum"] = {k: int(v.value) for k, v in SDPBackend.__members__.items()}
    b = torch.backends.cuda
    p["sdp_flags"] = {n: bool(getattr(b, n)()) for n in
                      ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled",
                       "cudnn_sdp_enabled", "is_flash_attention_available") if hasattr(b, n)}
    p["deterministic_default"] = bool(torch.are_deterministic_algorithms_enabled())
    return p


def record_forward(r: Recorder, cases: list[dict], log) -> tuple[list[dict], dict]:
    records, arrays, returns_logged, stored_fsdpa = [], {}, False, 0
    for i, case in enumerate(cases):
        qb, kb, vb = sc.make_input_bits(case)
        rec = {"index": i, "case": case, "inputs": sc.input_digest(case, qb, kb, vb)}
        q, k, v = (r.tensor(x, case["dtype"]) for x in (qb, kb, vb))
        rec["choice"] = r.choice(q, k, v, case)
        out = None
        try:
            res = r.flash(q, k, v, case)
            out, lse = r.bits16(res[0]), r.f32(res[1])
            rec.update(out=_hex(out), lse=_hex(lse.view(np.uint32)), out_shape=list(out.shape),
                       lse_shape=list(lse.shape), out_stride=list(res[0].stride()))
            if not returns_logged:
                rec["returns"] = [r.describe(x) for x in res]
                returns_logged = True
            arrays[f"c{i}_out"], arrays[f"c{i}_lse"] = out, lse
            res2 = r.flash(q, k, v, case)
            rec["repeat_identical"] = bool(np.array_equal(r.bits16(res2[0]), out)
                                           and np.array_equal(r.f32(res2[1]).view(np.uint32),
                                                              lse.view(np.uint32)))
            rec["kernels"] = r.kernels(partial(r.flash, q, k, v, case))
        except Exception as exc:
            rec["error"] = _first_line(exc)
        for flash_only, key in ((True, "fsdpa"), (False, "sdpa_default")):
            try:
                fo = r.bits16(r.fsdpa(q, k, v, case, flash_only))
                same = out is not None and np.array_equal(fo, out)
                rec[f"{key}_equal"] = bool(same)
                if not same:
                    rec[f"{key}_out"] = _hex(fo)
                    if flash_only and (out is None or stored_fsdpa < FSDPA_SAMPLES):
                        arrays[f"c{i}_fsdpa_out"] = fo
                        stored_fsdpa += out is not None
            except Exception as exc:
                rec[f"{key}_error"] = _first_line(exc)
        records.append(rec)
        if "error" in rec and "CUDA error" in rec["error"]:
            log(f"forward case {i}: {rec['error']}; stopping the phase (context unusable?)")
            break
        if i % 25 == 0:
            log(f"forward {i}/{len(cases)} choice={rec['choice']} "
                f"{'error: ' + rec['error'][:120] if 'error' in rec else 'ok'}")
    return records, arrays


def record_dropout(r: Recorder, cases: list[dict], log) -> tuple[list[dict], dict]:
    torch = r.torch
    records, arrays = [], {}
    for i, case in enumerate(cases):
        qb, kb, vb = sc.make_input_bits(case)
        rec = {"index": i, "case": case, "inputs": sc.input_digest(case, qb, kb, vb)}
        q, k, v = (r.tensor(x, case["dtype"]) for x in (qb, kb, vb))
        p = case["dropout_p"]
        rec["choice"] = r.choice(q, k, v, case, p)
        try:
            torch.manual_seed(case["seed"])
            res = r.flash(q, k, v, case, p, debug=True)
            out, lse = r.bits16(res[0]), r.f32(res[1])
            rec["returns"] = [r.describe(x) for x in res]
            rec.update(out=_hex(out), lse=_hex(lse.view(np.uint32)))
            arrays.update({f"d{i}_out": out, f"d{i}_lse": lse})
            philox = np.concatenate([r.philox_values(res[6]), r.philox_values(res[7])])
            rec["philox"] = [int(x) for x in philox]
            arrays[f"d{i}_philox"] = philox
            mask = res[8]
            rec.update(mask_dtype=str(mask.dtype), mask_shape=list(mask.shape))
            if mask.dim() == 4:
                sq, sk = case["seqlen_q"], case["seqlen_k"]
                crop = mask[..., :sq, :sk]
                rest = mask.clone()
                rest[..., :sq, :sk] = 0
                rec.update(mask_outside_zero=bool((rest == 0).all().item()),
                           mask_negative=int((crop < 0).sum().item()),
                           mask_zero=int((crop == 0).sum().item()),
                           mask_elements=int(crop.numel()))
                mbits = (r.bits16(crop) if mask.element_size() == 2
                         else r.f32(crop).view(np.uint32))
                rec["mask"] = _hex(mbits)
                arrays[f"d{i}_mask"] = mbits
            torch.manual_seed(case["seed"])
            res2 = r.flash(q, k, v, case, p, debug=True)
            rec["repeat_identical"] = bool(np.array_equal(r.bits16(res2[0]), out))
            torch.manual_seed(case["seed"])
            res3 = r.flash(q, k, v, case, p, debug=False)
            rec["same_without_debug_mask"] = bool(np.array_equal(r.bits16(res3[0]), out))
            res4 = r.flash(q, k, v, case, p, debug=False)  # the generator moved on
            rec["philox_next_call"] = [int(x) for x in np.concatenate(
                [r.philox_values(res4[6]), r.philox_values(res4[7])])]
            rec["kernels"] = r.kernels(partial(r.flash, q, k, v, case, p, debug=False))
        except Exception as exc:
            rec["error"] = _first_line(exc)
        records.append(rec)
    log(f"dropout: {len(records)} cases, {sum('error' in x for x in records)} refused")
    return records, arrays


def _backward_runs(r: Recorder, args: tuple, case: dict) -> tuple[list, list[str]]:
    """Six (dq, dk, dv) bit triples: three deterministic runs, three default; warnings seen."""
    torch = r.torch
    runs, seen = [], []
    try:
        for det in (True, False):
            torch.use_deterministic_algorithms(det)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(3):
                    g = r.ops["backward"](*args, scale=case["scale"])
                    r.sync()
                    runs.append(tuple(r.bits16(x) for x in g))
            seen += [str(w.message)[:300] for w in caught if str(w.message)[:300] not in seen]
    finally:
        torch.use_deterministic_algorithms(False)
    return runs, seen


def record_backward(r: Recorder, cases: list[dict], log) -> tuple[list[dict], dict]:
    torch = r.torch
    records, arrays = [], {}
    for i, case in enumerate(cases):
        qb, kb, vb = sc.make_input_bits(case)
        gb = sc.grad_bits(case)
        rec = {"index": i, "case": case, "inputs": sc.input_digest(case, qb, kb, vb, gb)}
        q, k, v, dout = (r.tensor(x, case["dtype"]) for x in (qb, kb, vb, gb))
        p = case["dropout_p"]
        try:
            torch.manual_seed(case["seed"])
            fwd = r.flash(q, k, v, case, p)
            out, lse = r.bits16(fwd[0]), r.f32(fwd[1])
            rec.update(out=_hex(out), lse=_hex(lse.view(np.uint32)))
            if p:
                rec["philox"] = [int(x) for x in np.concatenate(
                    [r.philox_values(fwd[6]), r.philox_values(fwd[7])])]
            args = (dout, q, k, v, fwd[0], fwd[1], fwd[2], fwd[3], fwd[4], fwd[5], p,
                    case["causal"], fwd[6], fwd[7])
            runs, seen = _backward_runs(r, args, case)
            rec["warnings"] = seen
            arrays[f"b{i}_out"], arrays[f"b{i}_lse"] = out, lse
            for j, name in enumerate(("dq", "dk", "dv")):
                bits = [run[j] for run in runs]
                digs = [_hex(b) for b in bits]
                rec[name] = digs
                rec[f"{name}_shape"] = list(bits[0].shape)
                rec[f"{name}_det_agree"] = len(set(digs[:3])) == 1
                rec[f"{name}_default_agree"] = len(set(digs[3:])) == 1
                rec[f"{name}_default_equals_det"] = len(set(digs)) == 1
                rec[f"{name}_values_differing"] = [int((b != bits[0]).sum()) for b in bits]
                arrays[f"b{i}_{name}_runs"] = np.stack([bits[0]] + [b ^ bits[0] for b in bits[1:]])
            rec["kernels_det"] = r.kernels(partial(_det_call, r, args, case, True))
            rec["kernels_default"] = r.kernels(partial(_det_call, r, args, case, False))
            if not p:
                rec.update(_autograd_check(r, case, qb, kb, vb, dout, runs[0]))
        except Exception as exc:
            rec["error"] = _first_line(exc)
            torch.use_deterministic_algorithms(False)
        records.append(rec)
        if i % 10 == 0:
            log(f"backward {i}/{len(cases)} {'error: ' + rec['error'][:120] if 'error' in rec else 'ok'}")
    return records, arrays


def _det_call(r: Recorder, args: tuple, case: dict, det: bool):
    r.torch.use_deterministic_algorithms(det)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return r.ops["backward"](*args, scale=case["scale"])
    finally:
        r.torch.use_deterministic_algorithms(False)


def _autograd_check(r: Recorder, case: dict, qb, kb, vb, dout, det_run) -> dict:
    """F.sdpa's autograd under the flash backend, deterministic mode: same dq, dk, dv bits as
    the op's deterministic run?"""
    torch = r.torch
    try:
        leaves = [r.tensor(x, case["dtype"]).requires_grad_(True) for x in (qb, kb, vb)]
        torch.use_deterministic_algorithms(True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = r.fsdpa(*leaves, case)
            out.backward(dout)
        r.sync()
        same = all(np.array_equal(r.bits16(t.grad), b) for t, b in zip(leaves, det_run, strict=True))
        return {"fsdpa_autograd_equal_det": bool(same)}
    except Exception as exc:
        return {"fsdpa_autograd_error": _first_line(exc)}
    finally:
        torch.use_deterministic_algorithms(False)


def _skeleton(phases, limit: int = 0) -> dict:
    """The report's cases with their input digests, no device results (--dry-run)."""
    rep = {}
    lists = {"forward": sc.forward_cases, "dropout": sc.dropout_cases,
             "backward": sc.backward_cases}
    for ph in phases:
        cases = lists[ph]()[:limit] if limit else lists[ph]()
        rep[ph] = [{"index": i, "case": c, "inputs": sc.case_digest(c, ph == "backward")}
                   for i, c in enumerate(cases)]
    return rep


def summary(report: dict) -> str:
    """The table printed last."""
    lines = [f"{'phase':9s} {'cases':>5s} {'accepted':>8s} {'refused':>7s}  notes"]
    fw = report.get("forward", [])
    if fw:
        acc = [x for x in fw if "out" in x]
        choices: dict[str, int] = {}
        for x in fw:
            choices[x["choice"]] = choices.get(x["choice"], 0) + 1
        lines.append(f"{'forward':9s} {len(fw):5d} {len(acc):8d} {len(fw) - len(acc):7d}  "
                     f"repeat identical {sum(bool(x.get('repeat_identical')) for x in acc)}/"
                     f"{len(acc)}; F.sdpa(flash) == op {sum(bool(x.get('fsdpa_equal')) for x in acc)}"
                     f"/{len(acc)} (F.sdpa errors {sum('fsdpa_error' in x for x in fw)}); "
                     f"default SDPA == op {sum(bool(x.get('sdpa_default_equal')) for x in acc)}")
        lines.append(f"{'':9s} choices: {json.dumps(choices)}")
    dr = report.get("dropout", [])
    if dr:
        acc = [x for x in dr if "out" in x]
        lines.append(f"{'dropout':9s} {len(dr):5d} {len(acc):8d} {len(dr) - len(acc):7d}  "
                     f"repeat identical {sum(bool(x.get('repeat_identical')) for x in acc)}; "
                     f"same w/o debug mask {sum(bool(x.get('same_without_debug_mask')) for x in acc)}")
    bw = report.get("backward", [])
    if bw:
        acc = [x for x in bw if "dq" in x]
        cnt = {k: sum(bool(x.get(k)) for x in acc) for k in
               ("dq_det_agree", "dq_default_agree", "dq_default_equals_det", "dk_det_agree",
                "dk_default_agree", "dv_default_agree", "fsdpa_autograd_equal_det")}
        lines.append(f"{'backward':9s} {len(bw):5d} {len(acc):8d} {len(bw) - len(acc):7d}  "
                     + ", ".join(f"{k} {v}" for k, v in cnt.items()))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = out_parser("sdpa_record", __doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="no torch: regenerate the inputs and write the report skeleton")
    ap.add_argument("--phases", default=",".join(PHASES), help="comma-separated subset of "
                    + ", ".join(PHASES))
    ap.add_argument("--limit", type=int, default=0, help="only the first N cases of each phase")
    ap.add_argument("--device", default="cuda", help="torch device (cpu: a harness test)")
    ap.add_argument("--no-profile", action="store_true", help="no torch.profiler kernel names")
    ap.add_argument("--drawn", type=int, default=0, help="record N drawn calls instead "
                    "(sdpa_drawn_report.json, sdpa_drawn.npz)")
    ap.add_argument("--time-limit", type=float, default=0.0,
                    help="with --drawn: seconds after which no further call starts")
    args = ap.parse_args(argv)
    phases = [p for p in args.phases.split(",") if p]
    if set(phases) - set(PHASES):
        ap.error(f"--phases: unknown {sorted(set(phases) - set(PHASES))}")
    out = Path(args.out)
    t0 = time.time()

    def log(msg):
        print(f"[{time.time() - t0:7.1f} s] {msg}", flush=True)

    if args.dry_run:
        rep = {"dry_run": True, **_skeleton(phases, args.limit)}
        write_json_atomic(out / REPORT_FILE, rep, compact=True)
        log(f"dry run: {', '.join(f'{p} {len(rep[p])}' for p in phases)} cases -> {out / REPORT_FILE}")
        return 0
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    try:
        import torch  # noqa: PLC0415
    except ImportError as exc:
        from ..device.runtime import DeviceUnavailable  # noqa: PLC0415

        raise DeviceUnavailable(f"sdpa_record needs torch ({exc})") from None
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        from ..device.runtime import DeviceUnavailable  # noqa: PLC0415

        raise DeviceUnavailable("torch sees no CUDA GPU")
    rec = Recorder(torch, args.device, not args.no_profile)
    report = {"provenance": provenance(torch, rec.ops), "regenerate": REGEN}
    if args.drawn:
        limit = t0 + args.time_limit if args.time_limit else float("inf")
        from .sdpa_drawn import record_drawn  # noqa: PLC0415

        drawn, arrays = record_drawn(rec, args.drawn, log, limit, _backward_runs)
        report.update(drawn, drawn_asked=args.drawn)
        save_npz_atomic(out / "sdpa_drawn.npz", **arrays)
        write_json_atomic(out / "sdpa_drawn_report.json", report, compact=True)
        return 0
    prov = report["provenance"]
    log(f"{prov.get('gpu')} sm_count={prov.get('sm_count')} cc={prov.get('compute_capability')} "
        f"driver={prov['driver']} torch={prov['torch']} cuda={prov['cuda']} "
        f"flash={prov['flash_version']}")
    for name, schema in prov["schemas"].items():
        log(f"schema {name}: {schema}")
    lists = {"forward": (sc.forward_cases, record_forward, FORWARD_NPZ),
             "dropout": (sc.dropout_cases, record_dropout, DROPOUT_NPZ),
             "backward": (sc.backward_cases, record_backward, BACKWARD_NPZ)}
    for ph in phases:
        make, record, npz = lists[ph]
        cases = make()[:args.limit] if args.limit else make()
        t1 = time.time()
        report[ph], arrays = record(rec, cases, log)
        report[f"{ph}_seconds"] = round(time.time() - t1, 1)
        report["kernel_names"] = rec.kernel_names
        save_npz_atomic(out / npz, **arrays)
        write_json_atomic(out / REPORT_FILE, report, compact=True)
        log(f"{ph}: {len(report[ph])} cases in {report[ph + '_seconds']} s -> {out / npz} "
            f"({(out / npz).stat().st_size} bytes)")
    print(summary(report), flush=True)
    return 0


if __name__ == "__main__":
    from .common import run_script  # noqa: PLC0415

    sys.exit(run_script(main))
