"""The command ``python -m simulator run``: its options, the checks made before any work, and
the job itself (load, emulate, measure, print, compare with the device, save, plot)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from ..errors import EXIT_MISMATCH, EXIT_OK, UsageError
from ..flash.config import INPUT_FORMATS as FORMATS
from ..gpus import DEFAULT_GPU, gpu_keys
from .backward import check_backward_args, report, run_backward
from .device import check_device, run_device, run_device_varlen
from .emulation import (
    emulate,
    forward_calls,
    forward_kwargs,
    reference_result,
    reference_seconds,
    sequence_configs,
    slow_run_warning,
)
from .explain import explain, parse_row
from .metrics import measure, measure_varlen, no_key_rows, no_key_rows_varlen
from .plotting import PLOT_FORMATS, check_plot_path, plot
from .report import (
    default_trace_cta,
    idle_cta_note,
    launch_of,
    plural,
    ranges,
    step_choice,
    step_table,
    summary,
    work_counts,
    wrap_line,
)
from .results import check_output_path, save_result
from .waiting import progress_of, ticking, write_line
from .workload import is_varlen, load_workload, select_heads, varlen_lengths

DEFAULT_OUT = "out/run.npz"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"run: {message} (see `python -m simulator run --help`)")


#: a float64 reference expected to take longer than this (seconds) shows its own progress (a
#: bar on a terminal with tqdm, else a line before it starts): the emulation's has read 100%
REFERENCE_NOTE_SECONDS = 5.0


def _note(text: str) -> None:
    """A line on stderr, above the progress bar if one is drawn; none where stderr was closed
    at start (print would use stdout) or by its reader (a broken pipe: the note is lost, not
    the run)."""
    write_line(text)


def _cta(text: str) -> tuple[int, int, int]:
    try:
        parts = tuple(int(p) for p in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 0:
        raise argparse.ArgumentTypeError(f"expected B,H,M (three integers >= 0, e.g. 0,1,0), "
                                         f"got {text!r}")
    return parts


def _worker_context():
    """The start method of ``--workers`` processes: forkserver where the platform has it. A
    fork of this process would copy its BLAS and MUFU-loading threads' state (Python 3.12+
    warns that this may deadlock the child); forkserver workers start from a clean process
    and read the MUFU tables from the cache this process wrote. None: the platform default."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver") if "forkserver" in methods else None


def _check_trace_cta_args(argv: list[str]) -> None:
    """``--trace-cta`` values, checked before argparse: a value that starts with '-' (such as
    ``-1,0,0``) would otherwise read as an unknown option. Raises UsageError (one line)."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return
        name, eq, value = arg.partition("=")
        if not (name.startswith("--tr") and "--trace-cta".startswith(name)):
            continue
        if not eq:
            if i + 1 >= len(argv):
                continue  # argparse: "expected one argument"
            value = argv[i + 1]
            if value.startswith("--"):
                continue
        try:
            _cta(value)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--trace-cta: {exc}") from None


_WINDOW_MAX = 2**31 - 1


def _window_side(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not -1 <= value <= _WINDOW_MAX:
        raise argparse.ArgumentTypeError(f"expected an integer in -1..{_WINDOW_MAX} (-1 = "
                                         f"unbounded), got {text!r}")
    return value


def causal_window_note(causal: bool, window: tuple[int, int]) -> str:
    """The line ``run`` prints on stderr when ``--causal`` changes the ``--window`` it was given:
    causal sets the right side to 0, as FA3's ``mha_fwd`` does (``hopper/flash_api.cpp``: ``if
    (is_causal) { window_size_right = 0; }``); "" when nothing changes (no ``--window``, the
    default ``-1 -1``, or a right side of 0 already)."""
    left, right = window
    if not causal or window == (-1, -1) or right == 0:
        return ""
    return (f"note: --causal sets the right window to 0, as FA3's mha_fwd does: --window {left} "
            f"{right} runs as --window {left} 0")


def _heads(text: str) -> list[int]:
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            first, last = int(lo), int(hi or lo)
            if last < first:
                raise argparse.ArgumentTypeError(f"expected ranges low-high like 5-7, got {part!r} "
                                                 f"(high below low) in {text!r}")
            out.extend(range(first, last + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a list like 0,3,5-7, got {text!r}") from None
    if not out or min(out) < 0 or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"expected distinct heads >= 0 like 0,3,5-7, got {text!r}")
    return out


#: flash.forward's arguments that run sets from an option of its own name
_OPTION_OF = {"kblock_n": "--kblock-n", "kblock_m": "--kblock-m", "softmax_scale": "--softmax-scale",
              "softcap": "--softcap", "window": "--window", "schedule": "--schedule"}


def _as_option(message: str) -> str:
    """A forward error about one of its arguments, naming the command-line option instead
    (``kblock_n: ...`` -> ``--kblock-n: ...``)."""
    name, sep, rest = message.partition(": ")
    return f"{_OPTION_OF[name]}: {rest}" if sep and name in _OPTION_OF else message


def max_workers() -> int:
    """The most ``--workers`` taken: twice the CPUs, at least 8. More run no faster (the CPUs
    are busy) and each worker process holds 150-190 MB (the MUFU tables and its chunk)."""
    return max(8, 2 * (os.cpu_count() or 1))


def parse_workers(text: str) -> int:
    """``--workers`` as an argparse type: an int from 1 to :func:`max_workers`."""
    # digits only: int() would also take " 2" and "2_0" (= 20)
    value = int(text) if text.isascii() and text.isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 (worker processes), got {text!r}")
    if value > max_workers():
        raise argparse.ArgumentTypeError(
            f"expected at most {max_workers()} worker processes (twice the {os.cpu_count() or 1} "
            f"CPUs, at least 8: more run no faster and each holds 150-190 MB), got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m simulator run",
        usage="python -m simulator run [options]",
        description="Emulate the FlashAttention-3 forward (H200, bit for bit) on real attention "
        "inputs, measure it against the float64 reference and save O, LSE and the trace. "
        "Default: the embedded all-MiniLM-L6-v2 input (4 sentences), every head of one layer, bf16.",
        epilog="Exit codes: 0 ok; 1 the emulator and the device differ (--device); 2 usage or "
        "input error (a one-line message); 3 internal error; 130 interrupted (Ctrl-C). "
        "Output: docs/run.md.",
    )
    g = p.add_argument_group("input")
    g.add_argument("--input", metavar="FILE.npz",
                   help="q, k, v arrays [batch, seqlen, heads, head_dim] (float16/32/64, or bf16 "
                   "as saved from ml_dtypes), optional seqlens_k [batch] and e4m3 descales; or a "
                   "file written by scripts/extract_minilm.py (default: the embedded input)")
    g.add_argument("--layer", type=int, metavar="N", help="layer of an extracted input (default: its default "
                   "layer; the embedded input has 0, 2 and 5, default 2)")
    g.add_argument("--dtype", choices=FORMATS, help="input format (default: bf16, or the file's "
                   "float16)")
    g.add_argument("--heads", type=_heads, metavar="LIST",
                   help="only these query heads, e.g. 0,3,5-7 (default: all). With grouped KV "
                   "heads (GQA / MQA) the KV heads of their groups are kept (the summary names "
                   "them); when the chosen heads do not take the same number from each group, "
                   "every chosen head gets its own copy of its group's KV head. The bits are "
                   "those of the full run: CTAs are independent")
    g = p.add_argument_group("forward parameters (as simulator.flash.forward)")
    g.add_argument("--causal", action="store_true", help="bottom-right aligned causal mask")
    g.add_argument("--window", type=_window_side, nargs=2, metavar=("L", "R"), default=(-1, -1),
                   help=f"local window, keys left and right of the diagonal, each -1..{_WINDOW_MAX} "
                   "(-1 = unbounded; default: -1 -1)")
    g.add_argument("--kernel", choices=("fa3", "fa2", "sdpa", "fa4"), default="fa3",
                   help="whose kernels run the forward: fa3 (default), fa2 (flash-attn 2.x's "
                   "build, simulator.fa2), sdpa (PyTorch's SDPA flash backend, simulator.sdpa) "
                   "or fa4 (FlashAttention-4's Hopper kernels, simulator.fa4); the others also "
                   "say where their bits part from FA3's (docs/fa2.md, docs/fa4.md)")
    g.add_argument("--gpu", choices=gpu_keys(), default=DEFAULT_GPU,
                   help=f"the GPU whose arithmetic and SM count run (default: {DEFAULT_GPU}; "
                   "simulator.gpus)")
    g.add_argument("--softcap", type=float, default=0.0, metavar="X", help="softcap (default: 0 = off)")
    g.add_argument("--softmax-scale", type=float, metavar="X", help="default 1/sqrt(head_dim)")
    g.add_argument("--kblock-m", type=int, choices=(64, 128, 192),
                   help="rows per CTA (default: FA3's choice for the input, printed as 'dispatch')")
    g.add_argument("--kblock-n", type=int, metavar="N",
                   help="keys per K/V block (default: FA3's choice)")
    g.add_argument("--schedule", choices=("intra_wg_overlap", "plain"),
                   help="mainloop (default: FA3's choice)")
    g.add_argument("--workers", type=parse_workers, default=1, metavar="N",
                   help="worker processes for the forward's CTA chunks (default: 1, in this "
                   "process; at most twice the CPUs, at least 8); the bits are the same for every N")
    g = p.add_argument_group("backward")
    g.add_argument("--backward", action="store_true",
                   help="also FA3's backward at the forward's out and LSE (dO from --dout-seed): "
                        "gradients against float64, and how many values FA3's default mode "
                        "could change from run to run")
    g.add_argument("--dout-seed", type=int, default=0, metavar="N",
                   help="seed of dO for --backward (default 0)")
    g = p.add_argument_group("what to show and write")
    g.add_argument("--trace-cta", type=_cta, action="append", metavar="B,H,M",
                   help="record the trace of this CTA (batch, head, m_block); repeatable "
                   "(default: the first CTA that visits a K/V block)")
    g.add_argument("--step", action="store_true",
                   help="print each step's state for one quad of the first traced CTA that "
                   "visits a K/V block (a fully masked CTA has no step; the output says which "
                   "CTA is shown)")
    g.add_argument("--explain", type=parse_row, metavar="B,H,M", help="print the error budget "
                   "of one output row (batch, head, query; or a flat row) and exit")
    g.add_argument("--quad", type=int, default=0, metavar="Q",
                   help="which quad for --step: 0..31 in warpgroup 0, 32..63 in warpgroup 1, ... "
                   "(default: 0, threads 0-3)")
    g.add_argument("--device", action="store_true",
                   help="also run the real FA3 library (when torch and fa3-fwd are installed) and "
                   "the twin kernel (CuPy) on the GPU and print the bit diffs and first divergence")
    g.add_argument("--out", default=DEFAULT_OUT, metavar="PATH",
                   help="result .npz, written atomically (default: %(default)s)")
    g.add_argument("--plot", metavar="PATH.png",
                   help="per-head error heat map beside the attention pattern (needs matplotlib; "
                   f"the extension picks the format: {', '.join(PLOT_FORMATS)})")
    g.add_argument("--plot-batch", type=int, default=0, metavar="B",
                   help="batch element to plot (default: 0)")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress on stderr (default: K/V block visits with an ETA, as a bar on "
                   "a terminal, else a line every few seconds)")
    return p


def main(argv: list[str]) -> int:
    _check_trace_cta_args(argv)
    args = build_parser().parse_args(argv)
    from concurrent.futures import ProcessPoolExecutor

    from ..flash import make_config
    from ..flash.chunks import Progress

    # the outputs first: a bad path fails here, before any work
    inputs = (("--input", args.input),)
    check_output_path(args.out, "--out", inputs)
    out_path = Path(args.out)
    plot_path = Path(args.plot) if args.plot else None
    if plot_path is not None:
        check_plot_path(args.plot, inputs)
        if os.path.realpath(plot_path) == os.path.realpath(out_path):
            raise UsageError(f"--plot {plot_path}: the same file as --out")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install matplotlib (or the project's "
                             "'notebooks' extra: pip install -e '.[notebooks]')") from None

    work = load_workload(args)
    select_heads(work, args.heads)
    kwargs = forward_kwargs(args, work)
    if args.kernel != "fa3":
        from .kernels import run as run_kernel

        return run_kernel(args, work, kwargs, out_path)
    if args.explain is not None:
        print(explain(work, kwargs, args.explain))
        return EXIT_OK
    try:
        seq_cfgs = sequence_configs(work, kwargs) if is_varlen(work) else None
        cfg = seq_cfgs[0] if seq_cfgs else make_config(work.q, work.k, work.v, **kwargs)
    except ValueError as exc:
        raise UsageError(f"{work.label}: {_as_option(str(exc))}") from None
    note = causal_window_note(args.causal, tuple(args.window))
    if note:
        _note(note)
    batch = work.q.shape[0]
    trace_ctas = args.trace_cta or [default_trace_cta(cfg, work.heads[0], seq_cfgs)]
    for c in trace_ctas:
        m_blocks = -(-(seq_cfgs[c[0]] if seq_cfgs and c[0] < batch else cfg).seqlen_q // cfg.kblock_m)
        if c[0] >= batch or c[1] not in work.heads or c[2] >= m_blocks:
            raise UsageError(f"--trace-cta {','.join(map(str, c))}: out of range; batch 0..{batch - 1}"
                             f", heads {ranges(work.heads).replace('-', '..')}, m_block 0..{m_blocks - 1}"
                             + (f" (sequence {c[0]})" if seq_cfgs and c[0] < batch else ""))
    if not 0 <= args.plot_batch < batch:
        raise UsageError(f"--plot-batch: expected 0..{batch - 1}, got {args.plot_batch}")
    if args.step and not 0 <= args.quad < 32 * (cfg.kblock_m // 64):
        raise UsageError(f"--quad: expected 0..{32 * (cfg.kblock_m // 64) - 1} for kBlockM = "
                         f"{cfg.kblock_m}, got {args.quad}")
    if args.device:
        check_device()
    if args.backward:
        check_backward_args(work)
        if work.seqlens_k is not None and not is_varlen(work):
            raise UsageError("--backward: keys absent past seqlens_k are not emulated in the "
                             "backward; cut k and v to each batch's keys (one input per length), "
                             "or run the forward alone")
        if args.dout_seed < 0:
            raise UsageError(f"--dout-seed: expected an int >= 0, got {args.dout_seed}")

    t0 = time.perf_counter()
    from ..flash.evaluator import set_compile_note
    from ..numerics import mufu

    # the first compiled launch of a fresh install compiles the engine's kernels: say so
    set_compile_note(None if args.no_progress else _note)

    # the GPU's MUFU tables the forward reads (a few seconds on a cold cache, once per process):
    # ex2 (softmax), rcp (finalize), lg2 (LSE), tanh with a softcap
    mufu.model(args.gpu).resolve(("ex2", "rcp", "lg2") + (("tanh",) if args.softcap else ()))
    t1 = time.perf_counter()
    visits = work_counts(seq_cfgs or cfg)[1]
    warning = slow_run_warning(seq_cfgs or cfg, visits, args.workers)
    if warning:
        _note(warning)
    bar = Progress(not args.no_progress, visits, "emulating")
    executor = ProcessPoolExecutor(args.workers, mp_context=_worker_context()) if args.workers > 1 else None
    try:
        # the bar's clock runs while no block is done yet (a first compile: 20-60 s)
        with ticking(getattr(bar, "_bar", None)):
            out, lse, trace = emulate(work, kwargs, trace_ctas, bar.callback(), executor)
        bar.update(max(0, bar.total - bar.done))  # an estimate of the total may be a little high
    finally:
        bar.close()
        if executor is not None:
            executor.shutdown(cancel_futures=True)
    t2 = time.perf_counter()
    ref_seconds = reference_seconds(work)
    with progress_of("run: the float64 reference for the error report", ref_seconds,
                     not args.no_progress and ref_seconds > REFERENCE_NOTE_SECONDS, _note,
                     label="float64 reference"):
        ref_out, ref_lse = reference_result(work, kwargs, args.causal)
    t3 = time.perf_counter()
    out_fmt = "bf16" if work.fmt == "e4m3" else work.fmt
    if seq_cfgs:
        m = measure_varlen(out, lse, ref_out, ref_lse, out_fmt, varlen_lengths(work)[0],
                           no_key=no_key_rows_varlen(seq_cfgs, work.q.shape[1]))
    else:
        m = measure(out, lse, ref_out, ref_lse, out_fmt, no_key=no_key_rows(cfg))
    times = {"setup": t1 - t0, "emulate": t2 - t1, "reference": t3 - t2}
    # the text is printed after the result file is written: a closed stdout must not cost it
    lines = [summary(work, cfg, m, times, forward_calls(work, kwargs), seq_cfgs)]
    idle = {c: idle_cta_note(*launch_of(cfg, seq_cfgs, c), name=c) for c in trace_ctas
            if not trace.for_cta(c)}
    lines += [w for note in idle.values() if note for w in wrap_line(f"trace     {note}")]
    if args.step:
        lines += ["", step_choice(trace_ctas, [c for c in trace_ctas if trace.for_cta(c)],
                                  default=not args.trace_cta)]
        shown = next((c for c in trace_ctas if trace.for_cta(c)), None)
        if shown is not None:
            rows = (seq_cfgs[shown[0]] if seq_cfgs else cfg).seqlen_q
            lines.append(step_table(trace, shown, args.quad, cfg.kblock_m, work.heads, rows=rows))
        lines.append("")
    grads = None
    if args.backward:
        grads = run_backward(work, kwargs, out, lse, args.dout_seed)
        lines += [w for line in report(grads, args.dout_seed).splitlines() for w in wrap_line(line)]
    status = EXIT_OK
    if args.device:
        same, text = (run_device_varlen(work, kwargs, out, lse) if seq_cfgs else
                      run_device(work, kwargs, out, lse, trace, trace_ctas, cfg.kblock_m))
        lines += [w for line in text.splitlines() for w in wrap_line(line)]
        status = EXIT_OK if same else EXIT_MISMATCH
    params = {"source": work.source, "dtype": work.fmt, "notes": work.notes,
              "heads": work.heads, "seqlens_k": None if work.seqlens_k is None else
              work.seqlens_k.tolist(), "softmax_scale": float(cfg.consts["softmax_scale"]),
              "varlen": None if not seq_cfgs else {
                  "cu_seqlens": np.concatenate([[0], np.cumsum(varlen_lengths(work)[0])]).tolist(),
                  "note": "out/lse are padded to [batch, seqlen]: rows past a sequence hold 0 / -inf"},
              "causal": bool(args.causal), "window": list(cfg.window), "softcap": cfg.softcap,
              "kblock_m": cfg.kblock_m, "kblock_n": cfg.kblock_n, "schedule": cfg.schedule,
              "gpu": cfg.gpu.key, "mufu": cfg.mufu, "trace_ctas": [list(c) for c in trace_ctas],
              "descales": {k: v.tolist() for k, v in work.descales.items()},
              "metrics": {k: v for k, v in m.items()}, "times_s": times,
              "provenance": work.provenance}
    extra = {}
    if grads is not None:
        params["backward"] = {"dout_seed": args.dout_seed, "errors": grads["errors"],
                              "spread_values": grads["spread"], "times_s": grads["times"],
                              "tiles": grads["tiles"].describe()}
        extra = {"dout": grads["dout"], "dq": grads["dq"], "dk": grads["dk"], "dv": grads["dv"]}
    save_result(out_path, out, lse, ref_out, ref_lse, trace, params, extra)
    if plot_path is not None:  # also before the text: a closed stdout must not cost the plot
        plot(plot_path, work, kwargs, seq_cfgs[args.plot_batch] if seq_cfgs else cfg, out, ref_out,
             args.plot_batch)
    print("\n".join(lines))
    print("\n".join(wrap_line(
        f"wrote     {out_path}: out, lse, ref_out, ref_lse, "
        f"{'dout, dq, dk, dv, ' if grads is not None else ''}params, trace of "
        f"{plural(len(trace.ctas()), 'CTA')} ({plural(len(trace), 'event')}); read it with "
        f"simulator.run.load_result")))
    if plot_path is not None:
        print(f"wrote     {plot_path}")
    return status
