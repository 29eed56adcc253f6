"""Device probes of tensor-core arithmetic on the H200 (mma.sync and wgmma).

    python -m simulator measure mma_probe collect --out DIR [--tiles 2048]
    python -m simulator measure mma_probe validate --out DIR [--blocks 40]

``collect`` checks the fragment layouts and the shared-memory descriptor with exact integer
data, then runs one block of :func:`simulator.replay.mma_cases.mma_block` tiles through each probe
instruction and saves the raw result bits (``mma_collect.npz``) for fitting the model.
``validate`` runs ``--blocks`` blocks per instruction, compares every output with the
emulator on the host CPUs, and writes ``mma_report.json`` and ``mma_digests.npz``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time

import numpy as np

from ..device.runtime import device_info, load_module, require_gpu, source_sha256
from ..errors import OneLineParser
from ..io import save_npz_atomic, write_json_atomic
from ..replay.common import digest
from ..replay.mma_cases import mma_block
from ..replay.mma_probes import PROBES, emulate_probe

KERNEL = "probes/mma.cu"
DESCRIPTOR_CHOICES = [(128, 256)]  # K-adjacent core matrices 128 B apart, N-adjacent 256 B
_SHARED: dict = {}


def launch(module, cupy, name, A, B, C, lbo=128, sbo=256):
    kind, m, n, k, fmt = PROBES[name]
    tiles = A.shape[0]
    dA, dB, dC = cupy.asarray(A), cupy.asarray(B), cupy.asarray(C)
    dD = cupy.full(C.shape, 0xFFFFFFFF, dtype=cupy.uint32)  # poison
    fn = module.get_function(name)
    if kind == "mma_sync":
        fn(((tiles + 3) // 4,), (128,), (dA, dB, dC, dD, np.int32(tiles)))
    else:
        fn((tiles,), (128,), (dA, dB, dC, dD, np.int32(tiles), np.uint32(lbo), np.uint32(sbo)))
    cupy.cuda.runtime.deviceSynchronize()
    return dD.get()


def integer_tiles(name, tiles=64, seed=1):
    """Small integers: every arithmetic model gives the exact integer product."""
    kind, m, n, k, fmt = PROBES[name]
    from ..numerics import FORMATS, convert

    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, (tiles, m, k)).astype(np.float32)
    b = rng.integers(-3, 4, (tiles, k, n)).astype(np.float32)
    c = rng.integers(-8, 9, (tiles, m, n)).astype(np.float32)
    exact = (a.astype(np.float64) @ b.astype(np.float64) + c).astype(np.float32)
    uint = FORMATS[fmt].uint
    return (convert(a, fmt, satfinite=True).view(uint), convert(b, fmt, satfinite=True).view(uint),
            c.view(np.uint32), exact.view(np.uint32))


def check_layouts(module, cupy, progress):
    report = {}
    for name, (kind, *_rest) in PROBES.items():
        A, B, C, exact = integer_tiles(name)
        choices = DESCRIPTOR_CHOICES if kind == "wgmma" else [(0, 0)]
        for lbo, sbo in choices:
            D = launch(module, cupy, name, A, B, C, lbo, sbo)
            bad = int(np.count_nonzero(D != exact))
            report.setdefault(name, []).append({"lbo": lbo, "sbo": sbo, "mismatches": bad,
                                                "outputs": int(D.size)})
            progress(f"layout {name:26s} lbo={lbo:3d} sbo={sbo:3d} exact-integer mismatches {bad}")
    return report


def cmd_collect(args, module, cupy, progress):
    report = {"layouts": check_layouts(module, cupy, progress)}
    raw = {}
    for name, (kind, m, n, k, fmt) in PROBES.items():
        tiles = args.tiles if kind == "mma_sync" else args.tiles // 4
        A, B, C = mma_block(fmt, m, n, k, 0, tiles)
        raw[f"{name}_D"] = launch(module, cupy, name, A, B, C)
        progress(f"collected {name}: {raw[f'{name}_D'].size} outputs")
    save_npz_atomic(os.path.join(args.out, "mma_collect.npz"), **raw)
    return report


def _check_block(job):
    name, block = job
    kind, m, n, k, fmt = PROBES[name]
    from ..mma.instructions import params_for

    A, B, C = _SHARED["inputs"][block]
    D = _SHARED["outputs"][block]
    emu = emulate_probe(name, A, B, C, params_for(kind, fmt))
    bad = np.nonzero(emu.ravel() != D.ravel())[0]
    ex = [{"flat_index": int(i), "device": f"0x{int(D.ravel()[i]):08x}",
           "emulator": f"0x{int(emu.ravel()[i]):08x}"} for i in bad[:5]]
    return block, int(bad.size), ex, digest(D)


def cmd_validate(args, module, cupy, progress):
    report, digests = {"layouts": check_layouts(module, cupy, progress)}, {}
    ctx = mp.get_context("fork")
    for name, (kind, m, n, k, fmt) in PROBES.items():
        t0 = time.time()
        tiles = args.tiles if kind == "mma_sync" else args.tiles // 4
        inputs, outputs = {}, {}
        for blk in range(args.blocks):
            A, B, C = mma_block(fmt, m, n, k, blk, tiles)
            inputs[blk] = (A, B, C)
            outputs[blk] = launch(module, cupy, name, A, B, C)
        _SHARED.update(inputs=inputs, outputs=outputs)
        with ctx.Pool(args.workers) as pool:
            res = sorted(pool.map(_check_block, [(name, b) for b in range(args.blocks)]))
        mism = sum(r[1] for r in res)
        outs = args.blocks * tiles * m * n
        report[name] = {"outputs": outs, "blocks": args.blocks, "tiles_per_block": tiles,
                        "mismatches": mism, "examples": [e for r in res for e in r[2]][:10],
                        "seconds": round(time.time() - t0, 1)}
        digests[name] = np.frombuffer(b"".join(r[3] for r in res), dtype=np.uint8).reshape(-1, 16)
        digests[f"{name}_head"] = outputs[0].reshape(-1)[:8192].copy()
        progress(f"{name:26s} {outs:,} outputs  mismatches {mism}  ({time.time() - t0:.0f} s)")
        _SHARED.clear()
    save_npz_atomic(os.path.join(args.out, "mma_digests.npz"), **digests)
    return report


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m simulator measure mma_probe",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["collect", "validate"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiles", type=int, default=2048, help="mma.sync tiles per block (wgmma: /4)")
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 4)
    args = ap.parse_args(argv)
    cupy = require_gpu()
    module = load_module(KERNEL)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()

    def progress(msg):
        print(f"[{time.time() - t0:7.1f} s] {msg}", flush=True)

    head = {"device": device_info(), "kernel": f"kernels/{KERNEL}", "kernel_sha256": source_sha256(KERNEL)}
    body = cmd_collect(args, module, cupy, progress) if args.stage == "collect" else \
        cmd_validate(args, module, cupy, progress)
    report = {**head, **body, "elapsed_s": round(time.time() - t0, 1)}
    write_json_atomic(os.path.join(args.out, f"mma_{args.stage}_report.json"), report)
    bad = sum(v["mismatches"] for key, v in body.items() if key != "layouts")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    from .common import run_script

    sys.exit(run_script(main))
