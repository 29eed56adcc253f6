"""Device sweep for the numerics layer: the H200 against the emulator, bit for bit.

Run on a machine with a CUDA GPU (16 CPU cores make the CPU side fast)::

    python -m simulator measure numerics_sweep --out OUTDIR [--blocks 96] [--workers 16]

(a) every float32 bit pattern (2^32) through each conversion of
    :data:`~simulator.replay.numerics.CONVERSIONS`; (b) ``--blocks`` blocks of 2^20
    random and adversarial operand tuples (:mod:`simulator.replay.numerics_cases`) through each
    arithmetic instruction with and without ``.ftz``; (c) every 16-bit pattern widened back to
    float32 and an x2 packing probe. The GPU runs ``kernels/probes/numerics.cu``; the emulator
    runs on the host's CPUs in parallel chunks. Prints mismatch counts and writes
    ``numerics_report.json``, ``numerics_digests.npz`` and ``numerics_samples.npz`` (atomically)
    to OUTDIR; commit them under ``simulator/data/device/`` for CI.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time

import numpy as np

from ..device.runtime import device_info
from ..errors import OneLineParser
from ..numerics import FORMATS, convert_x2, to_float32
from ..replay import numerics as ev
from ..replay.numerics_cases import ARITY, BLOCK_SIZE, arith_block
from .common import kernel_provenance, start_gpu_run, write_recordings

GPU_CHUNK = 1 << 28
WORK_UNIT = 1 << 24
_SHARED: dict = {}  # arrays inherited by forked workers


def _examples(idx, inputs, device, emulated, limit=8):
    return [
        {"inputs": [f"0x{int(x[i]):08x}" for x in inputs],
         "device": f"0x{int(device[i]):x}", "emulator": f"0x{int(emulated[i]):x}"}
        for i in idx[:limit]
    ]


# ---- (a) conversions ------------------------------------------------------------------------
def _check_conversion_unit(unit: int):
    name, dev = _SHARED["name"], _SHARED["device"]
    start = unit * WORK_UNIT
    emu = ev.emulate_conversion(name, start, WORK_UNIT)
    d = dev[start:start + WORK_UNIT]
    if emu.dtype == np.uint8:  # fp8x2 probe wrote x into both halves
        hi, lo = (d >> 8).astype(np.uint8), (d & 0xFF).astype(np.uint8)
        bad = np.nonzero((hi != emu) | (lo != emu))[0]
        d = hi
    else:
        bad = np.nonzero(d != emu)[0]
    digests = [ev.digest(d[k:k + ev.CHUNK]) for k in range(0, WORK_UNIT, ev.CHUNK)]
    inputs = [np.arange(start, start + WORK_UNIT, dtype=np.uint64).astype(np.uint32)]
    return unit, len(bad), _examples(bad, inputs, d, emu), digests


def sweep_conversions(module, cupy, pool_size: int, progress) -> tuple[dict, dict]:
    report, digests = {}, {}
    for name, (fmt, sat, kernel_name) in ev.CONVERSIONS.items():
        t0 = time.time()
        kernel = module.get_function(kernel_name)
        host = np.empty(1 << 32, dtype=np.uint16)
        dout = cupy.empty(GPU_CHUNK, dtype=cupy.uint16)
        for base in range(0, 1 << 32, GPU_CHUNK):
            kernel((4096,), (256,), (np.uint32(base), dout, np.int64(GPU_CHUNK)))
            dout.get(out=host[base:base + GPU_CHUNK])
        cupy.cuda.runtime.deviceSynchronize()
        _SHARED.update(name=name, device=host)
        ctx = mp.get_context("fork")
        with ctx.Pool(pool_size) as pool:
            results = sorted(pool.imap_unordered(_check_conversion_unit, range((1 << 32) // WORK_UNIT)))
        mism = sum(r[1] for r in results)
        examples = [e for r in results for e in r[2]][:16]
        digests[f"conv_{name}"] = np.frombuffer(b"".join(d for r in results for d in r[3]),
                                                dtype=np.uint8).reshape(ev.N_CHUNKS, 16)
        report[name] = {"ptx": FORMATS[fmt].ptx.replace("{.satfinite}", ".satfinite" if sat else ""),
                        "inputs": 1 << 32, "mismatches": int(mism), "examples": examples,
                        "seconds": round(time.time() - t0, 1)}
        progress(f"conversion {name:16s} 2^32 inputs  mismatches {mism}  ({time.time() - t0:.0f} s)")
        del host
        _SHARED.clear()
    return report, digests


# ---- (b) arithmetic -------------------------------------------------------------------------
def _gen_block(args):
    op, block = args
    return block, arith_block(op, block)


def _check_arith_block(block: int):
    variant = _SHARED["variant"]
    dev = _SHARED["device"][block]
    emu = ev.emulate_variant(variant, block)
    bad = np.nonzero(dev != emu)[0]
    inputs = _SHARED["inputs"][block]
    return block, len(bad), _examples(bad, inputs, dev, emu), ev.digest(dev)


def sweep_arithmetic(module, cupy, blocks: int, pool_size: int, progress):
    report, digests, samples = {}, {}, {}
    ctx = mp.get_context("fork")
    for op in ARITY:
        with ctx.Pool(pool_size) as pool:
            inputs = dict(pool.map(_gen_block, [(op, b) for b in range(blocks)]))
        dev_in = None
        for variant, (vop, _ftz) in ev.VARIANTS.items():
            if vop != op:
                continue
            t0 = time.time()
            kernel = module.get_function(f"probe_{variant}")
            outs = {}
            for b in range(blocks):
                dev_in = [cupy.asarray(x) for x in inputs[b]]
                dout = cupy.empty(BLOCK_SIZE, dtype=cupy.uint32)
                kernel((1024,), (256,), (*dev_in, dout, np.int64(BLOCK_SIZE)))
                outs[b] = dout.get()
            _SHARED.update(variant=variant, device=outs, inputs=inputs)
            with ctx.Pool(pool_size) as pool:
                results = sorted(pool.map(_check_arith_block, range(blocks)))
            mism = sum(r[1] for r in results)
            report[variant] = {"ptx": _ptx_name(variant), "cases": blocks * BLOCK_SIZE,
                               "blocks": blocks, "mismatches": int(mism),
                               "examples": [e for r in results for e in r[2]][:16],
                               "seconds": round(time.time() - t0, 1)}
            digests[f"arith_{variant}"] = np.frombuffer(b"".join(r[3] for r in results),
                                                        dtype=np.uint8).reshape(blocks, 16)
            samples[f"arith_{variant}_head"] = outs[0][: ev.SAMPLE_HEAD].copy()
            progress(f"{variant:10s} {blocks * BLOCK_SIZE:,} cases  mismatches {mism}  "
                     f"({time.time() - t0:.0f} s)")
            _SHARED.clear()
    return report, digests, samples


def _ptx_name(variant: str) -> str:
    op, ftz = ev.VARIANTS[variant]
    base = {"fadd": "add.rn", "fsub": "sub.rn", "fmul": "mul.rn", "ffma": "fma.rn",
            "fmax": "max", "fmin": "min"}[op]
    return f"{base}{'.ftz' if ftz else ''}.f32"


# ---- (c) widening and packing -----------------------------------------------------------------
def sweep_widen_and_pack(module, cupy, progress):
    report, samples = {}, {}
    n = 1 << 16
    for fmt in ("bf16", "f16"):
        d = cupy.empty(n, dtype=cupy.uint32)
        module.get_function(f"widen_{fmt}")((256,), (256,), (d, np.int64(n)))
        dev = d.get()
        emu = to_float32(np.arange(n, dtype=np.uint16).view(FORMATS[fmt].dtype)).view(np.uint32)
        bad = np.nonzero(dev != emu)[0]
        samples[f"widen_{fmt}"] = dev
        report[f"widen_{fmt}"] = {"inputs": n, "mismatches": int(len(bad)),
                                  "examples": _examples(bad, [np.arange(n, dtype=np.uint32)], dev, emu)}
    for fmt in ("e4m3", "e5m2"):
        h2, hi, lo = (cupy.empty(n, dtype=cupy.uint32) for _ in range(3))
        module.get_function(f"widen_{fmt}")((256,), (256,), (h2, hi, lo, np.int64(n)))
        codes = np.arange(n, dtype=np.uint16)
        dev_hi, dev_lo = hi.get(), lo.get()
        emu_hi = to_float32((codes >> 8).astype(np.uint8).view(FORMATS[fmt].dtype)).view(np.uint32)
        emu_lo = to_float32((codes & 0xFF).astype(np.uint8).view(FORMATS[fmt].dtype)).view(np.uint32)
        bad = np.nonzero((dev_hi != emu_hi) | (dev_lo != emu_lo))[0]
        samples[f"widen_{fmt}_f16x2"] = h2.get()
        samples[f"widen_{fmt}_hi"], samples[f"widen_{fmt}_lo"] = dev_hi, dev_lo
        report[f"widen_{fmt}"] = {"inputs": n, "mismatches": int(len(bad)),
                                  "examples": _examples(bad, [codes.astype(np.uint32)], dev_hi, emu_hi)}
    rng = np.random.default_rng(7)
    a = rng.standard_normal(4096).astype(np.float32) * 100
    b = rng.standard_normal(4096).astype(np.float32) * 100
    samples["pack_a"], samples["pack_b"] = a, b
    for fmt in ("bf16", "f16", "e4m3", "e5m2"):
        d = cupy.empty(4096, dtype=cupy.uint32)
        module.get_function(f"pack_{fmt}x2")((16,), (256,), (cupy.asarray(a.view(np.uint32)),
                                                           cupy.asarray(b.view(np.uint32)), d,
                                                           np.int64(4096)))
        dev = d.get()
        emu = convert_x2(a, b, fmt).astype(np.uint32)
        samples[f"pack_{fmt}x2"] = dev
        report[f"pack_{fmt}x2"] = {"pairs": 4096, "mismatches": int((dev != emu).sum())}
    for key, r in report.items():
        progress(f"{key:16s} mismatches {r['mismatches']}")
    return report, samples


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m simulator measure numerics_sweep",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the report and recorded data")
    ap.add_argument("--blocks", type=int, default=96, help="arithmetic case blocks of 2^20 (default 96)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--skip-conversions", action="store_true", help="skip the 2^32 sweeps")
    args = ap.parse_args(argv)
    if args.blocks < 1:
        ap.error("--blocks must be >= 1")
    gpu = start_gpu_run(ev.KERNEL)
    cupy, module, progress = gpu.cupy, gpu.module, gpu.log
    report = {"device": device_info(), **kernel_provenance(ev.KERNEL),
              "host_numpy": np.__version__, "workers": args.workers}
    digests, samples = {}, {}
    r, s = sweep_widen_and_pack(module, cupy, progress)
    report["widen_and_pack"] = r
    samples.update(s)
    r, d, s = sweep_arithmetic(module, cupy, args.blocks, args.workers, progress)
    report["arithmetic"] = r
    digests.update(d)
    samples.update(s)
    if not args.skip_conversions:
        r, d = sweep_conversions(module, cupy, args.workers, progress)
        report["conversions"] = r
        digests.update(d)
    report["elapsed_s"] = gpu.elapsed()
    total = sum(v["mismatches"] for sec in ("widen_and_pack", "arithmetic", "conversions")
                for v in report.get(sec, {}).values())
    report["total_mismatches"] = int(total)
    write_recordings(args.out, "numerics_report.json", report,
                     {"numerics_digests.npz": digests, "numerics_samples.npz": samples})
    progress(f"total mismatches: {total}; wrote {args.out}")
    return 0 if total == 0 else 1


if __name__ == "__main__":
    from .common import run_script

    sys.exit(run_script(main))
