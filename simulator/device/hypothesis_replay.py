"""Emulator against device on hypothesis-drawn attention inputs (issue "property tests").

    python -m simulator.device.hypothesis_replay --out DIR [--generate N]

Cases come from :func:`simulator.strategies.attention_inputs` (block parameters restricted to
:data:`CONFIGS` so that a few NVRTC modules serve every case): ``--generate N`` draws N of them,
derandomised, so the same N cases come every run. Each case runs on the GPU and, in parallel on
the host's CPUs, through the emulator; every case whose bits differ is written, inputs and
device bits, to ``DIR/replay_disagreements.npz`` as a new golden, and
``DIR/replay_report.json`` gets the counts and provenance.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from .. import flash
from .. import strategies as sst
from ..io import save_npz_atomic, write_json_atomic
from .forward import KERNEL, forward, make_launch_config
from .forward_goldens import precompile_options
from .runtime import device_info, source_sha256

#: (kblock_m, kblock_n, schedule) the replay draws from
CONFIGS = [(128, 128, "intra_wg_overlap"), (64, 64, "plain"), (192, 96, "intra_wg_overlap")]


@st.composite
def replay_cases(draw):
    dtype = draw(st.sampled_from(["bf16", "f16", "e4m3"]))
    case = draw(sst.attention_inputs(dtype=dtype, max_seqlen=200, head_dims=(64, 128)))
    km, kn, sched = draw(st.sampled_from(CONFIGS))
    case.kwargs.update(kblock_m=km, kblock_n=kn, schedule=sched)
    return case


def collect(n: int):
    """``n`` drawn cases as (q, k, v, kwargs) tuples (derandomised: the same every run)."""
    cases = []

    def record(case):
        cases.append((case.q, case.k, case.v, dict(case.kwargs)))

    if n:
        settings(database=None, derandomize=True, max_examples=n, phases=[Phase.generate],
                 deadline=None, suppress_health_check=list(HealthCheck))(given(replay_cases())(record))()
    return cases


_SHARED: dict = {}


def _emulate(i: int):
    q, k, v, kw = _SHARED["cases"][i]
    out, lse = flash.forward(q, k, v, **kw)
    return i, np.ascontiguousarray(out).view(np.uint16), np.ascontiguousarray(lse).view(np.uint32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulator.device.hypothesis_replay",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--generate", type=int, default=1000, help="cases to draw (default 1000)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 4)
    args = ap.parse_args(argv)
    t0 = time.time()
    cases = collect(args.generate)
    print(f"{len(cases)} cases collected ({time.time() - t0:.0f} s)", flush=True)
    opts = sorted({make_launch_config(q, k, v, **kw).options for q, k, v, kw in cases})
    precompile_options(opts, args.workers, lambda msg: print(msg, flush=True))
    device_bits = []
    for q, k, v, kw in cases:
        out, lse = forward(q, k, v, **kw)
        device_bits.append((np.ascontiguousarray(out).view(np.uint16),
                            np.ascontiguousarray(lse).view(np.uint32)))
    print(f"device done ({time.time() - t0:.0f} s)", flush=True)
    _SHARED["cases"] = cases
    with mp.get_context("fork").Pool(args.workers) as pool:
        emulated = dict((i, (o, lse)) for i, o, lse in pool.imap_unordered(_emulate, range(len(cases))))
    bad = [i for i in range(len(cases))
           if not (np.array_equal(emulated[i][0], device_bits[i][0])
                   and np.array_equal(emulated[i][1], device_bits[i][1]))]
    arrays = {}
    for j, i in enumerate(bad):
        q, k, v, kw = cases[i]
        arrays.update({f"c{j}__q": q.view(np.uint8 if q.itemsize == 1 else np.uint16),
                       f"c{j}__k": k.view(np.uint8 if k.itemsize == 1 else np.uint16),
                       f"c{j}__v": v.view(np.uint8 if v.itemsize == 1 else np.uint16),
                       f"c{j}__out": device_bits[i][0], f"c{j}__lse": device_bits[i][1]})
    os.makedirs(args.out, exist_ok=True)
    if arrays:
        save_npz_atomic(os.path.join(args.out, "replay_disagreements.npz"), **arrays)
    write_json_atomic(os.path.join(args.out, "replay_report.json"), {
        "device": device_info(), "kernel_sha256": source_sha256(KERNEL), "cases": len(cases),
        "disagreements": len(bad),
        "disagreeing_kwargs": [{k: str(v) for k, v in cases[i][3].items()} for i in bad[:50]],
        "dtypes": {str(d): sum(1 for c in cases if str(c[0].dtype) == str(d))
                   for d in {c[0].dtype for c in cases}},
        "elapsed_s": round(time.time() - t0, 1)})
    print(f"{len(cases)} cases, {len(bad)} emulator/device disagreements "
          f"({time.time() - t0:.0f} s)", flush=True)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
