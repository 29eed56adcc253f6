"""Structure probes for the MUFU ops on a CUDA GPU (exploration that guided the models).

    python -m simulator.device.mufu_explore --out OUTDIR

Runs every 2^32 input of the four sm_90 MUFU instructions (ftz forms), and writes:
``explore.json`` (per input binade: dependence of the result on the k low input bits, ulp error
ranges against a float64 reference, tanh symmetry/identity counts) and compressed samples of
device outputs (ex2 on the 2^-23 grid of (-1, 1), rcp on [1, 2), lg2 on [0.25, 4), tanh on a
stride of its non-trivial range), encoded as small residuals against float32(float64 reference)
with exceptions stored raw, plus a BLAKE2b digest of every raw array for the decoder to check.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np

from .runtime import device_info, load_module, require_gpu

KERNEL = "probes/mufu.cu"
N = 1 << 32


def _digest(a: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).hexdigest()


def encode(out_bits: np.ndarray, ref64: np.ndarray, dtype=np.int8) -> dict:
    """Residual (device bits - float32(ref64) bits) with exceptions stored raw."""
    ref32 = ref64.astype(np.float32).view(np.uint32).astype(np.int64)
    res = out_bits.astype(np.int64) - ref32
    info = np.iinfo(dtype)
    low29 = (ref64.view(np.uint64) & np.uint64((1 << 29) - 1)).astype(np.int64)
    ambiguous = np.abs(low29 - (1 << 28)) <= 64
    exc = (res <= info.min) | (res >= info.max) | ambiguous | ~np.isfinite(ref64)
    exc |= (out_bits & 0x7F800000) == 0x7F800000
    small = np.where(exc, 0, res).astype(dtype)
    idx = np.nonzero(exc)[0].astype(np.uint32)
    return {"res": small, "exc_idx": idx, "exc_bits": out_bits[idx].astype(np.uint32),
            "digest": _digest(out_bits.astype(np.uint32))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    cp = require_gpu()
    mod = load_module(KERNEL)
    t0 = time.time()
    stats: dict = {"device": device_info()}

    def log(msg):
        print(f"[{time.time() - t0:6.1f}] {msg}", flush=True)

    def dump():
        with open(os.path.join(args.out, "explore.json"), "w") as fh:
            json.dump(stats, fh, indent=1)

    dev_out = cp.empty(N, dtype=cp.uint32)

    def run_all(name):
        k = mod.get_function(f"{name}_range")
        step = 1 << 30
        for base in range(0, N, step):
            k((8192,), (256,), (np.uint32(base), dev_out[base:base + step], np.int64(step)))
        cp.cuda.runtime.deviceSynchronize()

    dep = mod.get_function("low_bit_dependence")
    refs = {"ex2_ftz": cp.exp2, "rcp_ftz": lambda v: 1.0 / v, "lg2_ftz": cp.log2, "tanh_": cp.tanh}
    saved = {}
    for name in ("ex2_ftz", "rcp_ftz", "lg2_ftz", "tanh_"):
        try:
            run_all(name)
            s = stats[name] = {}
            for half, off in (("pos", 0), ("neg", 1 << 31)):
                counts = cp.zeros(256 * 24, dtype=cp.uint32)
                dep((4096,), (256,), (dev_out[off:off + (1 << 31)], np.int64(1 << 31), counts))
                c = counts.get().reshape(256, 24)
                # smallest k where the result starts to depend on the low k bits, per exponent
                s[f"dep_{half}"] = {int(e): [int(v) for v in c[e, 1:]] for e in range(256)
                                    if c[e, 1:].any()}
            # symmetry f(-x) vs f(x)
            pos, neg = dev_out[: 1 << 31], dev_out[1 << 31:]
            s["odd_mismatch"] = int(cp.count_nonzero(neg != (pos ^ np.uint32(0x80000000))))
            # ulp error vs float64 reference, per biased exponent of x (positive x)
            err_min, err_max, tz = [], [], []
            for e in range(256):
                xb = cp.arange(e << 23, (e + 1) << 23, dtype=cp.uint32)
                x = xb.view(cp.float32).astype(cp.float64)
                ref = refs[name](x).astype(cp.float32).view(cp.uint32).astype(cp.int64)
                o = pos[e << 23:(e + 1) << 23]
                fin = ((o & 0x7F800000) != 0x7F800000) & ((ref & 0x7F800000) != 0x7F800000)
                d = o.astype(cp.int64) - ref
                d = cp.where(fin, d, 0)
                err_min.append(int(d.min()))
                err_max.append(int(d.max()))
                m = (o & 0x7FFFFF) | 0x800000
                tzc = cp.zeros(25, dtype=cp.int64)
                for t in range(25):
                    tzc[t] = cp.count_nonzero((m & ((1 << t) - 1)) == 0)
                tz.append([int(v) for v in tzc.get()])
                if name == "tanh_":
                    s.setdefault("eq_x", []).append(int(cp.count_nonzero(o == xb)))
                    s.setdefault("eq_one", []).append(int(cp.count_nonzero(o == 0x3F800000)))
            s["ulp_min"], s["ulp_max"], s["trailing_zero_counts"] = err_min, err_max, tz
            dump()
            log(f"{name}: stats done")

            # samples
            def grab(xs_f64):
                xs = xs_f64.astype(cp.float32).view(cp.uint32)
                return xs.get(), dev_out[xs].get(), xs.view(cp.float32).astype(cp.float64)

            if name == "ex2_ftz":
                k = cp.arange(1 << 23, dtype=cp.float64) * 2.0**-23
                for tag, xs in (("pos", k), ("neg", -k)):
                    xb, ob, x64 = grab(xs)
                    saved[f"ex2_{tag}"] = (ob, cp.exp2(x64).get())
            elif name == "rcp_ftz":
                xs = 1.0 + cp.arange(1 << 23, dtype=cp.float64) * 2.0**-23
                xb, ob, x64 = grab(xs)
                saved["rcp"] = (ob, (1.0 / x64).get())
            elif name == "lg2_ftz":
                for e in (125, 126, 127, 128):
                    xb = cp.arange(e << 23, (e + 1) << 23, dtype=cp.uint32)
                    x64 = xb.view(cp.float32).astype(cp.float64)
                    saved[f"lg2_e{e}"] = (dev_out[e << 23:(e + 1) << 23].get(), cp.log2(x64).get())
            else:
                # stride sample of positive x over binades 100..140 + a dense window at 1.0
                parts = []
                for e in range(100, 141):
                    parts.append(cp.arange(e << 23, (e + 1) << 23, 64, dtype=cp.uint32))
                parts.append(cp.arange(127 << 23, (127 << 23) + (1 << 20), dtype=cp.uint32))
                parts.append(cp.arange(126 << 23, (126 << 23) + (1 << 20), dtype=cp.uint32))
                xb = cp.concatenate(parts)
                saved["tanh_x"] = xb.get()
                saved["tanh_out"] = dev_out[xb].get()
            log(f"{name}: samples done")
        except Exception as exc:  # keep going: partial data is still worth taking home
            stats.setdefault("errors", []).append(f"{name}: {exc!r}")
            log(f"{name}: ERROR {exc!r}")
        dump()
    del dev_out
    files = {"ex2": ["ex2_pos", "ex2_neg"], "rcp": ["rcp"], "lg2a": ["lg2_e127", "lg2_e128"],
             "lg2b": ["lg2_e125", "lg2_e126"]}
    for fname, keys in files.items():
        arrs = {}
        for key in keys:
            if key not in saved:
                continue
            ob, r64 = saved[key]
            enc = encode(ob, r64)
            stats.setdefault("digests", {})[key] = enc.pop("digest")
            stats.setdefault("exceptions", {})[key] = int(len(enc["exc_idx"]))
            arrs.update({f"{key}__{k}": v for k, v in enc.items()})
        np.savez_compressed(os.path.join(args.out, f"{fname}.npz"), **arrs)
    if "tanh_x" in saved:
        np.savez_compressed(os.path.join(args.out, "tanh.npz"), x=saved["tanh_x"],
                            out=saved["tanh_out"])
    stats["elapsed_s"] = round(time.time() - t0, 1)
    dump()
    for f in sorted(os.listdir(args.out)):
        log(f"{f}: {os.path.getsize(os.path.join(args.out, f)) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
