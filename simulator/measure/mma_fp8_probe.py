"""Targeted probe of mma.sync m16n8k32 e4m3 arithmetic: dot products with 2 or 3 nonzero terms.

    python -m simulator measure mma_fp8_probe --out DIR

Every output ``D[i, j] = sum_k A[i, k] B[k, j] + C[i, j]`` of a tile is built to have only two
or three nonzero products at chosen K positions, with chosen exponent gaps (0 .. 34 binades),
signs and mantissas, and C zero or not: the device's answer then shows directly how the product
sum is aligned, truncated or rounded (Fasi et al.'s method), which random tiles could not
(docs/mma.md). Writes ``mma_fp8_probe.npz`` (A, B, C bits and D bits) and a provenance JSON.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from ..device.runtime import device_info, load_module, require_gpu, source_sha256
from ..errors import OneLineParser
from ..io import save_npz_atomic, write_json_atomic
from ..numerics import convert
from .mma_probe import KERNEL, launch

NAME = "mma_sync_m16n8k32_e4m3"


def make_tiles(tiles: int, seed: int = 11):
    """A [T,16,32], B [T,32,8] e4m3 bits and C [T,16,8] float32 bits with sparse products."""
    rng = np.random.default_rng(seed)
    a = np.zeros((tiles, 16, 32), np.float32)
    b = np.zeros((tiles, 32, 8), np.float32)
    c = np.zeros((tiles, 16, 8), np.float32)
    mant = np.array([1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875], np.float32)
    for t in range(tiles):  # setup of the probe inputs only (a few thousand tiles)
        nterms = 2 if t % 3 else 3
        ks = rng.choice(32, nterms, replace=False)
        # row i scales the big term, column j the small ones: each output its own gap
        for i in range(16):
            a[t, i, ks[0]] = mant[rng.integers(8)] * 2.0 ** rng.integers(4, 9) * rng.choice([-1, 1])
            for kk in ks[1:]:
                a[t, i, kk] = mant[rng.integers(8)] * 2.0 ** rng.integers(-6, 9) * rng.choice([-1, 1])
        for j in range(8):
            b[t, ks[0], j] = mant[rng.integers(8)] * 2.0 ** rng.integers(0, 9)
            for kk in ks[1:]:
                b[t, kk, j] = mant[rng.integers(8)] * 2.0 ** rng.integers(-9, 4) * rng.choice([-1, 1])
        if t % 2:
            c[t] = (rng.standard_normal((16, 8)) * 2.0 ** rng.integers(-10, 12)).astype(np.float32)
    A = convert(a, "e4m3").view(np.uint8)
    B = convert(b, "e4m3").view(np.uint8)
    return A, B, c.view(np.uint32)


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m simulator measure mma_fp8_probe",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiles", type=int, default=3000)
    args = ap.parse_args(argv)
    cupy = require_gpu()
    module = load_module(KERNEL)
    A, B, C = make_tiles(args.tiles)
    D = launch(module, cupy, NAME, A, B, C)
    os.makedirs(args.out, exist_ok=True)
    save_npz_atomic(os.path.join(args.out, "mma_fp8_probe.npz"), A=A, B=B, C=C, D=D)
    write_json_atomic(os.path.join(args.out, "mma_fp8_probe.json"),
                      {"device": device_info(), "kernel": f"kernels/{KERNEL}",
                       "kernel_sha256": source_sha256(KERNEL), "instruction": NAME,
                       "tiles": args.tiles, "outputs": int(D.size)})
    print(f"{D.size} outputs recorded")
    return 0


if __name__ == "__main__":
    from .common import run_script

    sys.exit(run_script(main))
