"""Measurement runs on a GPU: each records what the H200 does, for the replays to check.

``python -m simulator measure NAME [options]`` (or ``python -m simulator.measure.NAME``) runs
one of :data:`RUNS`; each module's ``main(argv)`` parses its own options (``--help``), launches
kernels through :mod:`simulator.device`, compares the device with the emulator on the spot and
writes its recordings atomically to ``--out``. The recordings' formats, the frozen case
generators they were made from and their CPU replay live in :mod:`simulator.replay`; copy a
run's files to ``simulator/data/device/`` and run ``python scripts/make_manifest.py``.
Without a usable GPU a run prints one line, ``error: ...`` with the install hint, and exits 2.
"""

from __future__ import annotations

import importlib

#: run name -> what it records (the module ``simulator.measure.<name>``)
RUNS = {
    "numerics_sweep": "float32 arithmetic and conversions (digests of every 2^32 input)",
    "mufu_calibrate": "the MUFU tables (ex2, rcp, lg2, tanh) over all 2^32 inputs",
    "hw_probe": "fragment layouts, shfl.sync, softmax.h row reductions",
    "mma_probe": "wgmma / mma.sync fused dot-add on random and targeted tiles",
    "mma_fp8_probe": "mma.sync m16n8k32 FP8 on tiles of two or three products",
    "mma_fp8_sweep": "mma.sync m16n8k32 FP8 step split: every K pair, zeros, subnormal C",
    "forward_goldens": "the twin forward's O and LSE on the configuration matrix",
    "forward_trace": "the twin forward's step traces (every register after every step)",
    "fa3_library_record": "the real FA3 library on its case matrix, the embedded input, API calls",
    "fa3_api_replay": "the real FA3 library's API against the emulator on hypothesis-drawn calls",
    "hypothesis_replay": "the twin or the library against the emulator on hypothesis-drawn cases",
    "fa3_ext_record": "the real FA3 library on qv, varlen KV-cache calls and scheduler_metadata",
    "fa3_chunk_record": "the real FA3 forward with attention_chunk (flash-attn3-jax's FFI)",
    "fa3_paged_record": "the real FA3 flash_attn_with_kvcache on paged KV caches (flash-attn3-jax)",
    "fa3_backward_record": "the real FA3 backward (flash-attn3-jax) on its case matrix and drawn cases",
    "softcap_sass": "the SASS nvcc makes of softcap's backward arithmetic, FA3's flags (no GPU)",
    "exp2_throughput": "exp2f, the scale folded into one FFMA, vs expf: SASS (--sass, no GPU), exp/s",
    "reduce_add_probe": "the backward's float32 reduce-adds (red, atom, TMA bulk) on subnormals",
    "regressions": "the twin forward on the public regression cases",
    "sdpa_record": "PyTorch SDPA's flash backend (FA2, sm_90): forward, dropout, backward bits",
    "fa2_jax_record": "flash-attn 2.x's kernels (flash-attn-jax): forward, varlen, backward",
    "dew_fa3_record": "FA3 as dew-flash-attn builds it: forward, backward at head dims 64-256",
    "fa4_record": "FlashAttention-4's sm90 kernels (flash_attn.cute): forward, backward bits",
    "twin_backward_record": "the twin backward's dq, dk, dv on its cases (digests; small ones in full)",
}


def main(argv: list[str]) -> int:
    """Run ``argv[0]`` (a name of :data:`RUNS`) with the options ``argv[1:]``; returns its exit
    code (2 with a one-line message for an unknown name or when no GPU is usable)."""
    import sys  # noqa: PLC0415

    from ..errors import EXIT_USAGE  # noqa: PLC0415
    from .common import run_script  # noqa: PLC0415

    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m simulator measure NAME [options]  (NAME --help for its options)\n\n"
              + "\n".join(f"  {name:20s} {what}" for name, what in RUNS.items()),
              file=sys.stdout if argv else sys.stderr)
        return 0 if argv else EXIT_USAGE
    name, rest = argv[0], list(argv[1:])
    if name not in RUNS:
        print(f"error: measure: unknown run {name!r}; known: {', '.join(RUNS)} "
              "(python -m simulator measure --help says what each records)", file=sys.stderr)
        return EXIT_USAGE
    module = importlib.import_module(f"{__name__}.{name}")
    return run_script(module.main, rest)
