"""Record the H200's bits for the regression cases of :mod:`simulator.regressions`.

    python -m simulator measure regressions --out DIR

Runs every case through the device forward and writes ``regressions.npz`` (O and LSE bits per
case) and ``regressions.json`` (provenance: GPU, driver, toolkit, kernel sha256) to DIR; copy
them to ``simulator/data/device/``.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from ..device.forward import KERNEL, forward
from ..device.runtime import device_info, source_sha256
from ..errors import OneLineParser
from ..io import save_npz_atomic, write_json_atomic
from ..regressions import CASES


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m simulator measure regressions",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    arrays, meta = {}, {}
    for name, case in CASES.items():
        q, k, v, kw = case.build()
        out, lse = forward(q, k, v, **kw)
        arrays[f"{name}__out"] = np.ascontiguousarray(out).view(np.uint16)
        arrays[f"{name}__lse"] = np.ascontiguousarray(lse).view(np.uint32)
        meta[name] = {"about": case.about, "kwargs": {k2: (v2.tolist() if hasattr(v2, "tolist") else v2)
                                                      for k2, v2 in kw.items()}}
        print(f"{name}: recorded {out.size} outputs", flush=True)
    os.makedirs(args.out, exist_ok=True)
    save_npz_atomic(os.path.join(args.out, "regressions.npz"), **arrays)
    write_json_atomic(os.path.join(args.out, "regressions.json"),
                      {"device": device_info(), "kernel": f"kernels/{KERNEL}",
                       "kernel_sha256": source_sha256(KERNEL), "cases": meta})
    return 0


if __name__ == "__main__":
    from .common import run_script

    sys.exit(run_script(main))
