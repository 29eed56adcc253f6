"""Step traces of the device forward: the kernel's dump -> :class:`simulator.trace.Trace`.

Built with ``-DFA_TRACE=1``, ``kernels/fa3_forward.cu`` stores, for the CTAs listed in a device
array, every thread's state after each step (docs/kernel.md, "Step traces"). The dump of one
traced CTA is ``slots`` records of :func:`record_words` uint32 each: a header ``{0xFA300000 |
step, n_block (-1: none), slot, 0}`` and then ``cols`` words per thread, ``[W, 128, cols]``, the
raw bits of the float32 state (NaN and -inf travel as bits). The kernel writes event ``k`` of a
CTA, in the emulator's order, into slot ``k``; :func:`decode` reads the records back, names the
columns as the emulator names its arrays (:data:`COLUMNS`) and merges the CTAs in the emulator's
order, so ``simulator.compare.first_divergence(emulator_trace, device_trace)`` applies directly.

Recording (on an sm_90 GPU, from the repository root)::

    PYTHONUNBUFFERED=1 python3 -m simulator.device.forward_trace --out OUTDIR

runs :data:`CONFIGS` (small shapes, 1-2 traced CTAs each), checks each device trace against the
emulator on the spot, and writes ``forward_traces.npz`` (per configuration ``c{i}_dump``: the raw
dump as uint8 byte planes ``[4, T, slots, words]``, plus ``meta`` JSON: configurations, seeds,
provenance with the kernel's SHA-256) and ``forward_traces.json`` (the same metadata); commit
both under ``simulator/data/device/``. tests/test_device_trace.py replays them on CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import numpy as np

from ..flash.forward import _cta_groups
from ..flash.masks import block_range
from ..io import read_npz, save_npz_atomic, write_json_atomic
from ..trace import STEPS, Event, Trace
from . import runtime

TRACES_FILE = "forward_traces.npz"
REPORT_FILE = "forward_traces.json"
MAX_FILE_BYTES = 1_500_000
HEADER_WORDS = 4
MAGIC = 0xFA300000
MAGIC_MASK = 0xFFF00000

#: per step: (array name, first column, width) in a record's per-thread words; width "S" is the
#: S fragment (kblock_n / 2 registers), "O" the O fragment (kernel head dim / 2 registers)
COLUMNS = {
    "qk_gemm": (("acc_s", 0, "S"),),
    "softcap": (("acc_s", 0, "S"),),
    "mask": (("acc_s", 0, "S"),),
    "max_get_scale": (("row_max", 0, 2), ("row_sum", 2, 2), ("scores_scale", 4, 2)),
    "online_softmax": (("acc_s", 0, "S"), ("row_sum", "S", 2)),
    "rescale_o": (("acc_o", 0, "O"),),
    "pv_gemm": (("acc_o", 0, "O"),),
    "finalize": (("row_sum", 0, 2), ("scores_scale", 2, 2), ("lse", 4, 2), ("row_max", 6, 2)),
    "epilogue": (("acc_o", 0, "O"),),
}


def trace_cols(cfg) -> int:
    """Words per thread in a record: max(kblock_n / 2 + 2, head_dim / 2, 8) (kTraceCols)."""
    return max(cfg.kblock_n // 2 + 2, cfg.kernel_head_dim // 2, 8)


def record_words(cfg) -> int:
    """uint32 words of one record: the header plus ``threads x`` :func:`trace_cols`."""
    return HEADER_WORDS + 128 * (cfg.kblock_m // 64) * trace_cols(cfg)


def events_per_block(cfg) -> int:
    """Events of one K/V block in a full iteration: qk_gemm, [softcap], mask, max_get_scale,
    online_softmax, rescale_o, pv_gemm."""
    return 6 + (cfg.softcap > 0)


def n_blocks(cfg, cta) -> int:
    """K/V blocks visited by CTA ``(b, h, m_block)`` (0 for an empty CTA or one off the grid)."""
    b, h, mb = (int(c) for c in cta)
    m_blocks = -(-cfg.seqlen_q // cfg.kblock_m)
    if not (0 <= b < cfg.batch and 0 <= h < cfg.heads and 0 <= mb < m_blocks):
        return 0
    lo, hi = block_range(mb, cfg.seqlen_q, int(cfg.seqlens_k[b]), cfg.kblock_m, cfg.kblock_n,
                         cfg.window)
    return max(0, hi - lo)


def expected_events(cfg, cta) -> int:
    """Events the emulator records for one CTA (and the kernel writes): ``n`` blocks of
    :func:`events_per_block`, less the two O events of the overlapped schedule's first block, plus
    its last P V and (RescaleOBeforeGemm, ``n > 1``) last rescale, plus finalize and epilogue."""
    n = n_blocks(cfg, cta)
    if n == 0:
        return 0
    total = n * events_per_block(cfg) + 2
    if cfg.schedule == "intra_wg_overlap":
        total += -2 + 1 + (1 if cfg.rescale_before_gemm and n > 1 else 0)
    return total


def slots_per_cta(cfg, ctas) -> int:
    """Records allocated per traced CTA: the largest :func:`expected_events`, at least 1."""
    return max([1] + [expected_events(cfg, c) for c in np.asarray(ctas).reshape(-1, 3)])


def trace_ctas(trace) -> np.ndarray:
    """The ``trace`` argument as int32 ``[T, 3]`` of distinct ``(b, h, m_block)``, in order.

    Raises:
        ValueError: an entry that is not three integers.
    """
    seen: dict[tuple[int, int, int], None] = {}
    try:
        for cta in trace:
            vals = tuple(cta)
            if len(vals) != 3 or not all(isinstance(v, (int, np.integer)) for v in vals):
                raise TypeError
            seen.setdefault(tuple(int(v) for v in vals), None)
    except TypeError:
        raise ValueError(f"trace: expected an iterable of (batch, head, m_block) integer triples, "
                         f"got {trace!r}") from None
    return np.array(list(seen), dtype=np.int32).reshape(-1, 3)


def _cta_events(cfg, cta, dump: np.ndarray) -> list[Event]:
    """The events of one CTA from its records ``[slots, words]`` (uint32), in slot order."""
    W = cfg.kblock_m // 64
    cols = trace_cols(cfg)
    width = {"S": cfg.kblock_n // 2, "O": cfg.kernel_head_dim // 2}
    n_expected = expected_events(cfg, cta)
    events = []
    for slot in range(dump.shape[0]):
        head = dump[slot, :HEADER_WORDS]
        written = (int(head[0]) & MAGIC_MASK) == MAGIC
        if slot >= n_expected:
            if written:
                raise RuntimeError(f"trace dump of CTA {tuple(cta)}: unexpected record in slot "
                                   f"{slot} (expected {n_expected} events)")
            continue
        if not written or int(head[2]) != slot:
            raise RuntimeError(f"trace dump of CTA {tuple(cta)}: slot {slot} of {n_expected} "
                               f"was not written")
        step = STEPS[int(head[0]) & 0xFF]
        n = int(head[1]) - (1 << 32 if int(head[1]) >= 1 << 31 else 0)
        body = dump[slot, HEADER_WORDS:].reshape(W, 128, cols).view(np.float32)
        data = {}
        for name, c0, w in COLUMNS[step]:
            c0 = width.get(c0, c0)
            w = width.get(w, w)
            data[name] = np.ascontiguousarray(body[:, :, c0:c0 + w])
        events.append(Event(step, tuple(int(c) for c in cta), None if n < 0 else n, data))
    return events


def decode(raw: np.ndarray, cfg, ctas) -> Trace:
    """The kernel's dump ``raw`` uint32 ``[T, slots, words]`` for ``ctas`` [T, 3] -> a Trace
    with the emulator's events in the emulator's order.

    Per CTA the kernel already writes the emulator's event order (slot = position). Across
    CTAs the emulator runs CTAs with the same K/V block range as one group, in the order of
    ``simulator.flash.forward._cta_groups`` (first appearance over batch, m_block; inside a
    group by batch, m_block, head), and records a step for every traced CTA of the group before
    the next step; the events are merged the same way.

    Raises:
        RuntimeError: a slot the kernel should have written is missing, or an extra one exists.
    """
    ctas = np.asarray(ctas).reshape(-1, 3)
    raw = np.asarray(raw, dtype=np.uint32).reshape(len(ctas), -1, record_words(cfg))
    per_cta = {tuple(int(c) for c in cta): _cta_events(cfg, cta, raw[i])
               for i, cta in enumerate(ctas)}
    trace = Trace()
    # traced launches run per-head tiles (flash.forward traces with pack_gqa=False), unsplit
    for group in _cta_groups(dataclasses.replace(cfg, pack_gqa=False, splits=None)).values():
        sel = [tuple(int(c) for c in cta[:3]) for cta in group
               if tuple(int(c) for c in cta[:3]) in per_cta]
        if not sel:
            continue
        lists = [per_cta[c] for c in sel]
        for k in range(max(len(x) for x in lists)):
            trace.events.extend(x[k] for x in lists if k < len(x))
    return trace


# ---- recorded traces --------------------------------------------------------------------------
def _tcfg(name, dtype, mask, schedule, softcap, d, trace, *, batch=1, sq=128, sk=128, heads=2,
          heads_kv=1, seqlens_k=None, kblock_m=64, kblock_n=64, descales=False, window=None):
    causal = mask == "causal"
    win = window if window is not None else [-1, -1]
    return {"name": name, "dtype": dtype, "mask": mask, "causal": causal, "window": list(win),
            "schedule": schedule, "softcap": float(softcap), "head_dim": d, "batch": batch,
            "seqlen_q": sq, "seqlen_k": sk, "heads": heads, "heads_kv": heads_kv,
            "seqlens_k": seqlens_k, "kblock_m": kblock_m, "kblock_n": kblock_n,
            "descales": descales, "seed": None, "trace": [list(c) for c in trace]}


def _matrix() -> list[dict]:
    """Small configurations, both schedules, d <= 128 and d > 128 (RescaleOBeforeGemm);
    seeds 20261300 + index."""
    P, O = "plain", "intra_wg_overlap"
    cfgs = [
        _tcfg("bf16_causal_plain", "bf16", "causal", P, 0, 64, [(0, 1, 1)]),
        # two CTAs of one group: the emulator interleaves their events step by step
        _tcfg("bf16_causal_overlap_2ctas", "bf16", "causal", O, 0, 64, [(0, 0, 1), (0, 1, 1)]),
        _tcfg("bf16_d192_causal_overlap_rbg", "bf16", "causal", O, 0, 192, [(0, 0, 0)], sq=64,
              sk=96, heads=1, kblock_n=32),
        # batch 1 has no keys: its CTA records nothing, on both sides
        _tcfg("e4m3_none_overlap_descales", "e4m3", "none", O, 0, 64, [(0, 1, 0), (1, 0, 0)],
              batch=2, sq=64, sk=150, seqlens_k=[150, 0], descales=True),
        _tcfg("e4m3_causal_plain_descales_m128", "e4m3", "causal", P, 0, 64, [(0, 1, 0)],
              kblock_m=128, descales=True),
        _tcfg("f16_local_overlap_softcap", "f16", "local", O, 30, 64, [(0, 0, 1)], sq=160, sk=200,
              window=[24, 16]),
        _tcfg("f16_local_plain_softcap", "f16", "local", P, 30, 64, [(0, 1, 1)], sq=160, sk=200,
              window=[24, 16]),
    ]
    for i, c in enumerate(cfgs):
        c["seed"] = 20261300 + i
    return cfgs


CONFIGS = _matrix()


def make_inputs(cfg: dict) -> dict:
    from .forward_goldens import make_inputs as _make  # noqa: PLC0415

    return _make(cfg)


def call_kwargs(cfg: dict, inputs: dict) -> dict:
    """Keyword arguments of ``forward`` (device or emulator), ``trace`` included."""
    from .forward_goldens import call_kwargs as _kw  # noqa: PLC0415

    return {**_kw(cfg, inputs), "trace": [tuple(c) for c in cfg["trace"]]}


def launch_config(cfg: dict, inputs: dict):
    from . import forward as dev  # noqa: PLC0415

    kw = call_kwargs(cfg, inputs)
    kw.pop("trace")
    return dev.make_launch_config(inputs["q"], inputs["k"], inputs["v"], **kw)


#: how a traces file is made again (named by the errors of :func:`load_traces`)
REGENERATE = "python -m simulator.device.forward_trace --out DIR` on a GPU"


def load_traces(path) -> tuple[dict, list[tuple[dict, np.ndarray]]]:
    """Read a traces file: ``(meta, [(config, raw dump uint32 [T, slots, words]), ...])``.

    Read through :func:`simulator.io.read_npz`: the committed recording
    (``simulator/data/device/forward_traces.npz``, listed in ``MANIFEST.json``) is checked
    against its SHA-256 before it is decoded; a fresh, unlisted file is read as is.

    Raises:
        RecordedDataError: missing, unreadable, or altered ("recording corrupt: ...").
    """
    from .forward_goldens import from_planes  # noqa: PLC0415

    z = read_npz(path, REGENERATE)
    meta = json.loads(str(z["meta"]))
    rows = [(rec, from_planes(z[f"c{rec['index']}_dump"])) for rec in meta["configs"]
            if f"c{rec['index']}_dump" in z]
    return meta, rows


def _precompile(progress, workers: int = 16) -> None:
    """Compile the trace and plain builds of :data:`CONFIGS` in parallel processes (fills
    CuPy's on-disk cache, as ``forward_goldens.precompile`` does)."""
    import multiprocessing as mp  # noqa: PLC0415
    from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415

    from .forward_goldens import _warm_compile, options_of  # noqa: PLC0415

    opts = sorted({options_of(c) + extra for c in CONFIGS for extra in ((), ("-DFA_TRACE=1",))})
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=min(workers, len(opts)),
                             mp_context=mp.get_context("spawn")) as ex:
        for options, _dt, err in ex.map(_warm_compile, opts):
            if err:
                progress(f"  compile {' '.join(o for o in options if o.startswith('-D'))}: {err}")
    progress(f"precompiled {len(opts)} modules in {time.time() - t0:.1f} s")


def record(out_dir: str, progress=print) -> int:
    """Run :data:`CONFIGS` on the GPU, compare with the emulator, write the files; returns the
    number of configurations whose trace diverges (or that failed)."""
    from ..compare import first_divergence  # noqa: PLC0415
    from ..flash import forward as emu_forward  # noqa: PLC0415
    from . import forward as dev  # noqa: PLC0415
    from .forward_goldens import to_planes  # noqa: PLC0415

    info = runtime.device_info()
    info["kernel"] = f"kernels/{dev.KERNEL}"
    info["kernel_sha256"] = runtime.source_sha256(dev.KERNEL)
    info["nvrtc_options"] = list(runtime.DEFAULT_OPTIONS) + ["-DFA_TRACE=1"]
    progress(f"device: {info['gpu']}; kernel sha256 {info['kernel_sha256'][:16]}")
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
    os.makedirs(out_dir, exist_ok=True)
    path = save_npz_atomic(os.path.join(out_dir, TRACES_FILE), meta=np.array(json.dumps(meta)),
                           **arrays)
    meta["file_bytes"] = os.path.getsize(path)
    write_json_atomic(os.path.join(out_dir, REPORT_FILE), meta)
    progress(f"wrote {path} ({meta['file_bytes'] / 1e6:.2f} MB); "
             f"{len(records) - failures}/{len(records)} configurations agree with the emulator")
    return failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Record device step traces of the forward.")
    ap.add_argument("--out", required=True, help="output folder")
    args = ap.parse_args(argv)
    return 1 if record(args.out) else 0


if __name__ == "__main__":
    from .runtime import run_script

    sys.exit(run_script(main))
