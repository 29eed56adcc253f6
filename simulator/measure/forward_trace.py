"""Record step traces of the device forward on a GPU.

Run on a machine with an sm_90 GPU, from the repository root::

    PYTHONUNBUFFERED=1 python3 -m simulator measure forward_trace --out OUTDIR

runs :data:`simulator.replay.forward_traces.CONFIGS` (small shapes, 1-2 traced CTAs each) with
``kernels/fa3_forward.cu`` built with ``-DFA_TRACE=1``, checks each device trace against the
emulator on the spot (decoded by :func:`simulator.device.forward_trace.decode`), and writes
``forward_traces.npz`` and ``forward_traces.json`` (format:
:mod:`simulator.replay.forward_traces`); commit both under ``simulator/data/device/``.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from ..compare import first_divergence
from ..device import forward as dev
from ..device.forward_trace import decode, trace_ctas
from ..flash import forward as emu_forward
from ..replay.forward_goldens import to_planes
from ..replay.forward_traces import (
    CONFIGS,
    REPORT_FILE,
    TRACES_FILE,
    call_kwargs,
    launch_config,
    make_inputs,
)
from .common import (
    forward_provenance,
    out_parser,
    precompile_options,
    run_script,
    write_forward_recording,
)
from .forward_goldens import options_of


def _precompile(progress, workers: int = 16) -> None:
    """Compile the trace and plain builds of :data:`CONFIGS` in parallel processes (fills
    CuPy's on-disk cache, as :func:`simulator.measure.forward_goldens.precompile` does)."""
    opts = sorted({options_of(c) + extra for c in CONFIGS for extra in ((), ("-DFA_TRACE=1",))})
    precompile_options(opts, workers, progress, each=False)


def record(out_dir: str, progress=print) -> int:
    """Run :data:`CONFIGS` on the GPU, compare with the emulator, write the files; returns the
    number of configurations whose trace diverges (or that failed)."""
    info = forward_provenance(("-DFA_TRACE=1",), progress)
    _precompile(progress)
    arrays, records, failures = {}, [], 0
    for i, cfg in enumerate(CONFIGS):
        rec = {"index": i, **cfg}
        t0 = time.time()
        try:
            inputs = make_inputs(cfg)
            lcfg = launch_config(cfg, inputs)
            ctas = trace_ctas([tuple(c) for c in cfg["trace"]])
            out, lse, raw = dev.launch(lcfg, inputs["q"], inputs["k"], inputs["v"], trace_ctas=ctas)
            plain_out, plain_lse = dev.launch(lcfg, inputs["q"], inputs["k"], inputs["v"])
            dev_trace = decode(raw, lcfg, ctas)
            emu = emu_forward(inputs["q"], inputs["k"], inputs["v"], **call_kwargs(cfg, inputs))
            div = first_divergence(emu.trace, dev_trace)
            rec["events"] = len(dev_trace)
            rec["emulator_events"] = len(emu.trace)
            rec["trace_build_same_output"] = bool(
                np.array_equal(out.view(np.uint16), plain_out.view(np.uint16))
                and np.array_equal(lse.view(np.uint32), plain_lse.view(np.uint32)))
            rec["emulator_same_output"] = bool(
                np.array_equal(out.view(np.uint16), np.ascontiguousarray(emu.out).view(np.uint16))
                and np.array_equal(lse.view(np.uint32), emu.lse.view(np.uint32)))
            rec["divergence"] = str(div)
            rec["ok"] = bool(not div.found and rec["trace_build_same_output"]
                             and rec["emulator_same_output"])
            arrays[f"c{i}_dump"] = to_planes(raw)
            progress(f"[{i}] {cfg['name']:36s} {len(dev_trace):3d} events "
                     f"({len(emu.trace)} emulated)  {'ok' if rec['ok'] else 'DIVERGES'}  "
                     f"({time.time() - t0:.2f} s)" + ("" if rec["ok"] else f"\n{div}"))
        except Exception as exc:
            rec["error"] = f"{type(exc).__name__}: {exc}"[:4000]
            rec["ok"] = False
            progress(f"[{i}] {cfg['name']:36s} ERROR {rec['error'][:2000]}")
        failures += not rec["ok"]
        records.append(rec)
    meta = {"provenance": info, "configs": records, "failures": failures,
            "generator": "simulator.flash.inputs.attention_inputs(seed, ...)",
            "layout": "c{i}_dump: byte planes uint8 [4, T, slots, words] of the uint32 trace dump "
                      "of kernels/fa3_forward.cu built with -DFA_TRACE=1 (records: header "
                      "{0xFA300000 | step, n_block, slot, 0}, then [W, 128, cols] words); "
                      "decode with simulator.device.forward_trace.decode"}
    path = write_forward_recording(out_dir, TRACES_FILE, REPORT_FILE, meta, arrays)
    progress(f"wrote {path} ({meta['file_bytes'] / 1e6:.2f} MB); "
             f"{len(records) - failures}/{len(records)} configurations agree with the emulator")
    return failures


def main(argv=None) -> int:
    args = out_parser("forward_trace", "Record device step traces of the forward.").parse_args(argv)
    return 1 if record(args.out) else 0


if __name__ == "__main__":
    sys.exit(run_script(main))
