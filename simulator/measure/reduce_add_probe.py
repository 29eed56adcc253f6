"""Measure the float32 reduce-adds of the backward (``kernels/probes/reduce_add.cu``) on
subnormals and signed zeros: ``red.global.add.f32``, ``atom.global.add.f32`` and the TMA bulk
reduce ``cp.reduce.async.bulk...add.f32`` (cute's ``SM90_BULK_REDUCE_ADD``, with which FA3's
backward adds dQ partials into dQaccum and, with GQA, dK / dV into their accumulators).

Run on an sm_90 GPU::

    python -m simulator measure reduce_add_probe --out OUTDIR

Each kernel adds x into a global float32 holding ``init``, for the targeted pairs of
:func:`pairs` (signed zeros, subnormal operands, subnormal results, cancellations) and 65,536
random pairs whose exponents lie around 2^-126. Written atomically: ``reduce_add_probe.json``
(provenance, per kernel which model of :data:`MODELS` gives every result bit for bit, and the
targeted pairs' result bits) and ``reduce_add_probe.npz`` (the bits of every pair and result).
"""

from __future__ import annotations

import sys

import numpy as np

from ..io import save_npz_atomic, write_json_atomic
from ..numerics import fadd
from .common import out_parser, run_script

PROBE = "probes/reduce_add.cu"
KERNELS = ("red_add", "atom_add", "bulk_add")
_MIN_NORMAL = np.float32(2.0**-126)


def _flush(x: np.ndarray) -> np.ndarray:
    """Subnormals to zero of the same sign."""
    return np.where(np.abs(x) < _MIN_NORMAL, np.copysign(np.float32(0), x), x).astype(np.float32)


#: candidate models of one reduce-add (init, x) -> result, float32
MODELS = {
    "add.rn (subnormals kept)": lambda a, b: fadd(a, b, ftz=False),
    "add.rn.ftz (inputs and result flushed)": lambda a, b: fadd(a, b, ftz=True),
    "inputs flushed, result kept": lambda a, b: fadd(_flush(a), _flush(b), ftz=False),
    "result flushed, inputs kept": lambda a, b: _flush(fadd(a, b, ftz=False)),
}


def _f(bits) -> np.ndarray:
    return np.asarray(bits, np.uint32).view(np.float32)


#: targeted pairs first; with the 65,536 random ones the count is a multiple of 4 (the bulk
#: reduce moves a multiple of 16 bytes: a shorter tail would not be added)
TARGETED = 20


def pairs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(init, x) float32 arrays: :data:`TARGETED` targeted pairs, then random ones near the
    subnormal range."""
    sub, tiny = 0x00400000, 0x00000001            # 2^-127, the smallest subnormal
    zero, nzero, one, mn = 0x00000000, 0x80000000, 0x3F800000, 0x00800000
    neg = 0x80000000
    targeted = [
        (zero, sub | neg), (zero, sub), (nzero, sub | neg), (nzero, sub), (zero, tiny | neg),
        (zero, nzero), (nzero, nzero), (nzero, zero), (sub, sub), (sub, 0x00300000),
        (mn, sub | neg), (mn | neg, sub), (one, sub | neg), (sub | neg, zero), (sub, zero),
        (sub | neg, nzero), (0x00FFFFFF, 0x80800001), (mn, mn | neg), (sub, sub | neg), (mn, sub),
    ]
    rng = np.random.default_rng(seed)
    n = 65_536
    exps = rng.integers(0, 4, size=(2, n), dtype=np.uint32)          # exponent field 0-3
    mant = rng.integers(0, 1 << 23, size=(2, n), dtype=np.uint32)
    sign = rng.integers(0, 2, size=(2, n), dtype=np.uint32) << 31
    rand = sign | (exps << 23) | mant
    assert len(targeted) == TARGETED
    init = np.concatenate([_f([p[0] for p in targeted]), _f(rand[0])])
    x = np.concatenate([_f([p[1] for p in targeted]), _f(rand[1])])
    return init, x


def run_kernels(init: np.ndarray, x: np.ndarray) -> dict[str, np.ndarray]:
    """``{kernel: result float32}`` of each reduce-add on the GPU."""
    from ..device import runtime  # noqa: PLC0415

    cupy = runtime.require_gpu()
    mod = runtime.load_module(PROBE)
    n = init.size
    gx = cupy.asarray(x)
    out = {}
    for name in KERNELS:
        acc = cupy.asarray(init)
        args = (acc, gx, cupy.empty_like(acc), np.int32(n)) if name == "atom_add" else \
            (acc, gx, np.int32(n))
        mod.get_function(name)((-(-n // 256),), (256,), args)
        cupy.cuda.get_current_stream().synchronize()
        out[name] = acc.get()
    return out


def fits(init, x, result) -> dict[str, int]:
    """Per model of :data:`MODELS`, how many results differ from it (bits)."""
    got = result.view(np.uint32)
    return {m: int(np.sum(fn(init, x).view(np.uint32) != got)) for m, fn in MODELS.items()}


def main(argv=None) -> int:
    from ..device import runtime  # noqa: PLC0415
    from .common import kernel_provenance  # noqa: PLC0415

    args = out_parser("reduce_add_probe", __doc__.splitlines()[0]).parse_args(argv)
    init, x = pairs()
    results = run_kernels(init, x)
    report = {"provenance": {**runtime.device_info(), **kernel_provenance(PROBE)},
              "pairs": int(init.size), "targeted": TARGETED, "kernels": {}}
    for name, res in results.items():
        report["kernels"][name] = {
            "mismatches_per_model": fits(init, x, res),
            "targeted": [[f"{a:08x}", f"{b:08x}", f"{r:08x}"] for a, b, r in
                         zip(*(a[:TARGETED].view(np.uint32).tolist() for a in (init, x, res)),
                             strict=True)]}
        print(name, report["kernels"][name]["mismatches_per_model"])
    write_json_atomic(f"{args.out}/reduce_add_probe.json", report)
    save_npz_atomic(f"{args.out}/reduce_add_probe.npz", init=init.view(np.uint32),
                    x=x.view(np.uint32), **{k: v.view(np.uint32) for k, v in results.items()})
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
