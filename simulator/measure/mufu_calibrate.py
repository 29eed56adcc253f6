"""``python -m simulator calibrate``: measure the MUFU tables on a CUDA GPU and prove them.

Steps (any CUDA GPU; the data is named after its compute capability, e.g. ``sm90``):

1. Tables: run ``kernels/probes/mufu.cu`` on the inputs of every table of
   :mod:`simulator.numerics.mufu_data` (ex2 on the 2^-23 grid of (-1, 1), rcp and lg2 on
   [1, 2), lg2 on [0.5, 1)); for tanh run all 2^31 non-negative inputs and classify each binade
   (identity, constant 1, or a table over the mantissa with the low bits the device ignores).
2. Write ``<arch>.npz`` + ``<arch>.json`` (provenance: GPU, compute capability, driver,
   toolkit, date, kernel hash, checksum of the reconstructed tables) to ``--out``.
3. Sweep: every one of the 2^32 inputs of every form in
   :data:`simulator.replay.mufu.FORMS` (PTX with and without .ftz, tanh, and the
   CUDA-level fast-math forms) on the GPU, compared bit for bit with the NumPy emulator on the
   host's CPUs (fork pool), with a progress bar. Mismatch counts go into the provenance JSON and
   into ``mufu_report.json``; per-chunk digests and independent samples (for CI) go to
   ``--evidence-out``.

Exit status 0 when every form has 0 mismatches, 1 otherwise, 2 on bad usage.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np

from ..device.runtime import device_info
from ..errors import OneLineParser
from ..gpus import GPU
from ..io import write_bytes_atomic, write_json_atomic
from ..numerics import mufu, mufu_data
from ..replay import mufu as ev
from .common import kernel_provenance, start_gpu_run, write_recordings

GPU_CHUNK = 1 << 28
WORK_UNIT = 1 << 24
_SHARED: dict = {}  # inherited by forked workers


def _progress_bar(total: int, desc: str):
    try:
        from tqdm import tqdm  # noqa: PLC0415 - optional
        return tqdm(total=total, desc=desc, unit="chunk", mininterval=2.0, file=sys.stdout)
    except ImportError:
        class _Bar:
            def __init__(self):
                self.n = 0

            def update(self, k):
                self.n += k
                if self.n % max(1, total // 20) < k:
                    print(f"  {desc}: {self.n}/{total} chunks", flush=True)

            def close(self):
                pass
        return _Bar()


def _run_list(module, cupy, kernel: str, x_bits: np.ndarray) -> np.ndarray:
    fn = module.get_function(f"{kernel}_list")
    dx = cupy.asarray(x_bits.astype(np.uint32))
    dout = cupy.empty_like(dx)
    fn((4096,), (256,), (dx, dout, np.int64(dx.size)))
    return dout.get()


def measure_tables(module, cupy, log) -> dict[str, np.ndarray]:
    """Device results on the table inputs, plus the tanh binade classification."""
    out = {}
    # tanh structure, from all non-negative inputs
    n = 1 << 31
    dev = cupy.empty(n, dtype=cupy.uint32)
    module.get_function("tanh__range")((8192,), (256,), (np.uint32(0), dev, np.int64(n)))
    kind = np.full(256, mufu_data.TANH_TABLE, dtype=np.uint8)
    shift = np.zeros(256, dtype=np.uint8)
    for e in range(256):
        blk = dev[e << 23:(e + 1) << 23]
        xb = cupy.arange(e << 23, (e + 1) << 23, dtype=cupy.uint32)
        if e == 255:
            kind[e] = mufu_data.TANH_SPECIAL
        elif bool((blk == xb).all()):
            kind[e] = mufu_data.TANH_IDENTITY
        elif bool((blk == 0x3F800000).all()):
            kind[e] = mufu_data.TANH_ONE
        else:
            s = 0
            while s < 23:
                g = blk.reshape(-1, 1 << (s + 1))
                if not bool((g == g[:, :1]).all()):
                    break
                s += 1
            shift[e] = s
    del dev
    out["tanh_kind"], out["tanh_shift"] = kind, shift
    for name in mufu_data.TABLES:
        x = mufu_data.table_inputs(name, kind, shift)
        out[name] = _run_list(module, cupy, mufu_data.TABLE_KERNEL[name], x)
    log("tanh binades: " + ", ".join(
        f"{e}:{'ident' if k == 0 else 'one' if k == 2 else f'shift{shift[e]}'}"
        for e, k in enumerate(kind) if k != mufu_data.TANH_SPECIAL
        and (k == mufu_data.TANH_TABLE or (e > 0 and kind[e - 1] != k))))
    return out


def _check_unit(unit: int):
    form, model, dev = _SHARED["form"], _SHARED["model"], _SHARED["device"]
    start = unit * WORK_UNIT
    xb = np.arange(start, start + WORK_UNIT, dtype=np.uint64).astype(np.uint32)
    emu = mufu.FORMS[form](xb.view(np.float32), model).view(np.uint32)
    d = dev[start:start + WORK_UNIT]
    bad = np.flatnonzero(d != emu)
    examples = [{"x": f"0x{int(xb[i]):08x}", "device": f"0x{int(d[i]):08x}",
                 "emulator": f"0x{int(emu[i]):08x}"} for i in bad[:4]]
    digests = b"".join(ev.digest(d[k:k + ev.CHUNK]) for k in range(0, WORK_UNIT, ev.CHUNK))
    return unit, len(bad), examples, digests


def sweep(module, cupy, model: GPU, workers: int, log, partial=None) -> tuple[dict, dict]:
    """Every form of the MUFU probe kernel over all 2^32 inputs on the device
    against the MUFU model of ``model`` (a GPU record naming the tables under test)."""
    report, digests = {}, {}
    host = np.empty(1 << 32, dtype=np.uint32)
    dout = cupy.empty(GPU_CHUNK, dtype=cupy.uint32)
    dref = cupy.empty(GPU_CHUNK, dtype=cupy.uint32)
    n_units = (1 << 32) // WORK_UNIT
    host_forms = [f for f in ev.FORMS if f not in ev.SAME_AS]
    bar = _progress_bar(n_units * len(host_forms), "exhaustive sweep")
    ctx = mp.get_context("fork")
    for form, (kname, what, _) in ev.FORMS.items():
        t0 = time.time()
        fn = module.get_function(f"{kname}_range")
        if form in ev.SAME_AS:
            base_form = ev.SAME_AS[form]
            ref = module.get_function(f"{ev.FORMS[base_form][0]}_range")
            mism = 0
            for base in range(0, 1 << 32, GPU_CHUNK):
                fn((8192,), (256,), (np.uint32(base), dout, np.int64(GPU_CHUNK)))
                ref((8192,), (256,), (np.uint32(base), dref, np.int64(GPU_CHUNK)))
                mism += int(cupy.count_nonzero(dout != dref))
            report[form] = {"form": what, "inputs": 1 << 32, "mismatches": mism,
                            "checked_against": f"device {base_form} (same SASS: one MUFU op)",
                            "seconds": round(time.time() - t0, 1)}
            if mism == 0 and base_form in digests:
                digests[form] = digests[base_form]
            log(f"{form:11s} {what:30s} 2^32 inputs vs device {base_form}: mismatches {mism}")
            continue
        for base in range(0, 1 << 32, GPU_CHUNK):
            fn((8192,), (256,), (np.uint32(base), dout, np.int64(GPU_CHUNK)))
            dout.get(out=host[base:base + GPU_CHUNK])
        _SHARED.update(form=form, model=model, device=host)
        results = []
        with ctx.Pool(workers) as pool:
            for r in pool.imap_unordered(_check_unit, range(n_units)):
                results.append(r)
                bar.update(1)
        results.sort(key=lambda r: r[0])
        mism = sum(r[1] for r in results)
        digests[form] = np.frombuffer(b"".join(r[3] for r in results),
                                      dtype=np.uint8).reshape(ev.N_CHUNKS, 16)
        report[form] = {"form": what, "inputs": 1 << 32, "mismatches": int(mism),
                        "checked_against": "NumPy emulator (host)",
                        "examples": [e for r in results for e in r[2]][:16],
                        "seconds": round(time.time() - t0, 1)}
        log(f"{form:11s} {what:30s} 2^32 inputs  mismatches {mism}  ({time.time() - t0:.0f} s)")
        _SHARED.clear()
        if partial is not None:
            partial(report)
    bar.close()
    return report, digests


def record_samples(module, cupy, log) -> tuple[dict, dict]:
    arrays, summary = {}, {}
    for form, (kname, _, rng) in ev.FORMS.items():
        x = ev.sample_inputs(form)
        d = _run_list(module, cupy, kname, x)
        arrays.update(ev.encode_samples(form, x, d))
        summary[form] = {"samples": int(x.size), "uniform_bits": int(x.size // 2),
                         "uniform_range": [rng[0], rng[1], int(x.size - x.size // 2)]}
    log(f"recorded {len(ev.FORMS)} x {ev.SAMPLES_PER_FORM:,} samples")
    return arrays, summary


def main(argv=None) -> int:
    """Entry point of ``python -m simulator calibrate``; returns the exit status."""
    ap = OneLineParser(prog="python -m simulator calibrate",
                                 description="Measure the MUFU tables (ex2, rcp, lg2, tanh) on a "
                                 "CUDA GPU, verify them over all 2^32 inputs and write the data "
                                 "with its provenance.")
    ap.add_argument("--out", default=str(mufu_data.DATA_DIR),
                    help="folder for <arch>.npz and <arch>.json (default: the package data)")
    ap.add_argument("--evidence-out", default=str(ev.DATA_DIR),
                    help="folder for mufu_report.json, mufu_digests.npz, mufu_samples.npz")
    ap.add_argument("--arch", default=None, help="data name (default: sm<major><minor> of GPU 0)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--no-sweep", action="store_true",
                    help="measure and write the tables only (no 2^32 verification)")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error("--workers must be >= 1")
    gpu = start_gpu_run(ev.KERNEL)
    cupy, module, log = gpu.cupy, gpu.module, gpu.log
    info = device_info()
    arch = args.arch or "sm" + info["compute_capability"].replace(".", "")
    log(f"{info['gpu']} (compute capability {info['compute_capability']}, driver "
        f"{info['driver']}), data name {arch!r}")
    tables = measure_tables(module, cupy, log)
    prov = {"arch": arch, "device": info, **kernel_provenance(ev.KERNEL),
            "host_numpy": np.__version__,
            "format_version": mufu_data.FORMAT_VERSION,
            "command": "python -m simulator calibrate"}
    prov = mufu_data.save(args.out, arch, tables, prov, write_bytes_atomic)
    log(f"wrote {Path(args.out) / arch}.npz ({prov['npz_bytes'] / 1e6:.2f} MB) and .json")
    if args.no_sweep:
        return 0
    os.environ[mufu_data.ENV_DIR] = str(Path(args.out).resolve())
    mufu_data.load.cache_clear()
    mufu.clear_models()
    # the measured chip as a GPU record naming the new tables, for the MUFU model under test
    model = GPU(key=arch, name=info["gpu"],
                compute_capability=tuple(int(x) for x in info["compute_capability"].split(".")),
                sm_count=int(info["multiprocessors"]), mufu_tables=arch, tensor_cores="",
                evidence="python -m simulator calibrate")
    mufu.model(model).resolve()  # decode (and checksum-verify) before forking the workers
    ev_dir = Path(args.evidence_out)

    def partial(rep):
        write_json_atomic(ev_dir / "mufu_report_partial.json", {"device": info, "forms": rep})

    report, digests = sweep(module, cupy, model, args.workers, log, partial)
    (ev_dir / "mufu_report_partial.json").unlink(missing_ok=True)
    samples, sample_summary = record_samples(module, cupy, log)
    total = sum(r["mismatches"] for r in report.values())
    prov["sweep"] = {f: {"inputs": r["inputs"], "mismatches": r["mismatches"]}
                     for f, r in report.items()}
    prov["sweep_total_mismatches"] = int(total)
    write_json_atomic(Path(args.out) / f"{arch}.json", prov)
    full = {"device": info, "arch": arch, "kernel": f"kernels/{ev.KERNEL}",
            "kernel_sha256": prov["kernel_sha256"], "tables_blake2b": prov["tables_blake2b"],
            "host_numpy": np.__version__, "workers": args.workers, "forms": report,
            "samples": sample_summary, "total_mismatches": int(total),
            "elapsed_s": gpu.elapsed()}
    write_recordings(ev_dir, ev.REPORT.name, full,
                     {ev.DIGESTS.name: digests, ev.SAMPLES.name: samples})
    log(f"total mismatches {total}; wrote {ev_dir}")
    print(json.dumps({f: r["mismatches"] for f, r in report.items()}))
    return 0 if total == 0 else 1


if __name__ == "__main__":
    from .common import run_script

    sys.exit(run_script(main))
