"""Command line: ``python -m simulator <command>`` (also installed as ``fa3sim``).

Exit codes: 0 success; 1 the emulator disagrees with recorded or live device bits; 2 usage or
input error, including missing or unreadable recorded data and a missing GPU (a one-line
message, no traceback); 3 internal error (a bug: the traceback is printed); 130 interrupted
(Ctrl-C at any point, imports included: one line, no traceback); 141 stdout closed before the
output was complete (a broken pipe, e.g. ``| head``: 128 + SIGPIPE, as shells report a process
that SIGPIPE ends; the result files are written before anything is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

from . import __version__
from .errors import EXIT_BROKEN_PIPE as EXIT_BROKEN_PIPE  # the public names stay here
from .errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_MISMATCH,
    EXIT_OK,
    EXIT_USAGE,
    OneLineParser,
    RecordedDataError,
    UsageError,
    output_failed,
)

VERIFY_DESCRIPTION = (
    "Replay the device outputs (H200; H100 for sdpa, fa2, dew, fa4) recorded in simulator/data/device/ (each "
    "file checked against its SHA-256 in MANIFEST.json) through the emulator and print one "
    "row per check: the device results replayed and the mismatches. No GPU needed.")
#: simulator.verify.TOPICS' names, written here so that --help does not import the replays
VERIFY_TOPICS = ("numerics", "mufu", "hw", "mma", "forward", "fa3", "ext", "paged", "backward",
                 "sdpa", "fa2", "dew", "fa4")
VERIFY_EPILOG = (
    "Exit codes: 0 every check matches; 1 the emulator and a recording differ; 2 usage error, "
    "or recorded data missing, unreadable or corrupt (a one-line message); 3 internal error; "
    "130 interrupted (Ctrl-C); 141 stdout closed early (a broken pipe).")


_Parser = OneLineParser  # usage errors: one line, exit code 2

def _cmd_verify(args) -> int:
    from .verify import TOPICS, format_table, run_checks

    unknown = sorted(set(args.topic or []) - set(TOPICS))
    if unknown:
        raise UsageError(f"--topic: unknown {unknown}; known: {', '.join(TOPICS)}")
    progress = _tty_progress()
    try:
        rows = run_checks(args.topic or None, quick=args.quick, workers=args.workers,
                          progress=progress)
    finally:
        if isinstance(progress, TopicBar):
            progress.close()
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(format_table(rows))
    return EXIT_OK if all(r["mismatches"] == 0 for r in rows) else EXIT_MISMATCH


def _tty_progress():
    """``verify``'s progress where stderr is a terminal: a :class:`TopicBar` with tqdm
    (``pip install -e '.[progress]'``), else a callable writing a line on stderr as each topic
    starts and ends; None off a terminal (a log file, a pipe: the table alone)."""
    try:
        if sys.stderr is None or not sys.stderr.isatty():
            return None
    except (AttributeError, OSError, ValueError):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        return TopicBar(tqdm, sys.stderr)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return say


class TopicBar:
    """``verify``'s bar on a terminal: the topics done of those asked, the running topic and
    the mismatches so far beside it, and its clock redrawn every ``tick`` seconds while a topic
    runs (one may take minutes); ``tick`` None: redrawn only at each topic's start and end.

    Args:
        tqdm: tqdm's bar class (or one taking the same arguments).
        stream: where the bar is drawn (stderr).
    """

    def __init__(self, tqdm, stream, tick: float | None = 1.0):
        import threading

        self._tqdm, self._stream, self.tick = tqdm, stream, tick
        self._bar = None
        self.mismatches = 0
        self._stop = threading.Event()
        self._ticker = None

    def topic_started(self, i: int, n: int, name: str) -> None:
        if self._bar is None:
            # no rate and no ETA: topics take from under a second to minutes
            self._bar = self._tqdm(total=n, desc="verify", file=self._stream, leave=True,
                                   bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} topics "
                                              "[{elapsed}{postfix}]")
            if self.tick is not None:
                import threading

                self._ticker = threading.Thread(target=self._redraw, daemon=True,
                                                name="verify-progress")
                self._ticker.start()
        self._bar.set_postfix_str(f"{name}, {self.mismatches:,} mismatches so far")

    def topic_done(self, i: int, n: int, name: str, seconds: float, mismatches: int) -> None:
        self.mismatches += mismatches
        self._bar.set_postfix_str(f"{name} done in {seconds:.1f} s, {self.mismatches:,} "
                                  f"mismatches so far", refresh=False)
        self._bar.update(1)

    def _redraw(self) -> None:
        while not self._stop.wait(self.tick):
            try:
                self._bar.refresh()
            except (OSError, ValueError):  # the terminal went away: the work goes on
                return

    def close(self) -> None:
        """Stop the clock and close the bar (left on the screen); safe to call twice."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if self._bar is not None:
            try:
                self._bar.close()
            except (OSError, ValueError):
                pass
            self._bar = None


def _verify_workers(text: str) -> int:
    """``verify --workers``: as ``run --workers`` takes it (an int from 1 to its cap)."""
    from .run.command import parse_workers  # noqa: PLC0415

    return parse_workers(text)


def _writable_dir(path: str) -> None:
    """Fail before hours of work if ``path`` cannot receive files."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise UsageError(f"--out: cannot write to {path!r} ({exc.strerror or exc})") from None


def _cmd_sweep(args) -> int:
    from .device.runtime import require_gpu
    from .measure import numerics_sweep

    if args.blocks < 1:
        raise UsageError(f"--blocks: expected an integer >= 1, got {args.blocks}")
    require_gpu()  # before creating anything: no GPU leaves no empty --out folder behind
    _writable_dir(args.out)
    argv = ["--out", args.out, "--blocks", str(args.blocks)]
    if args.skip_conversions:
        argv.append("--skip-conversions")
    return numerics_sweep.main(argv)


def _cmd_calibrate(args) -> int:
    from .measure import mufu_calibrate

    return mufu_calibrate.main(args.rest)


def _cmd_measure(args) -> int:
    from .measure import main

    return main(args.rest)


def _cmd_run(args) -> int:
    try:
        from . import run

        return run.main(args.rest)
    except KeyboardInterrupt:  # Ctrl-C: no traceback; the atomic writes leave no partial file
        return _interrupted()


def _interrupted() -> int:
    print("interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


class _InterruptWatch:
    """Notices a Ctrl-C that an import swallowed.

    A KeyboardInterrupt inside the import of a C extension (NumPy's ``import_array``) is printed
    through ``sys.excepthook`` and replaced by an ImportError. While installed, this hook prints
    no KeyboardInterrupt and remembers it, so the ImportError that follows is reported as an
    interruption (exit 130), not as an internal error.
    """

    def __init__(self):
        self.seen = False
        self.previous = sys.excepthook

    def __call__(self, kind, value, tb):
        if isinstance(kind, type) and issubclass(kind, KeyboardInterrupt):
            self.seen = True
            return
        self.previous(kind, value, tb)

    def caused(self, exc: BaseException) -> bool:
        """True when Ctrl-C was pressed during this command or ``exc`` comes from one."""
        seen, e = set(), exc
        while e is not None and id(e) not in seen:
            if isinstance(e, KeyboardInterrupt):
                return True
            seen.add(id(e))
            e = e.__cause__ or e.__context__
        return self.seen


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m simulator",
        description="Bit-exact emulator of what a Hopper GPU (H200, H100; --gpu) computes when it runs "
        "FlashAttention-3: the forward, the backward and FA3's Python API, with CUDA twins.",
        epilog="Exit codes: 0 ok, 1 emulator/device mismatch, 2 usage or input error (also "
        "missing/unreadable recorded data, no GPU), 3 internal error, 130 interrupted (Ctrl-C), "
        "141 stdout closed early (a broken pipe).",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser("run", help="the main job: emulate the FA3 forward on real attention "
                       "inputs (embedded by default), measure it, save O/LSE/trace "
                       "(see run --help)", add_help=False)
    r.add_argument("rest", nargs=argparse.REMAINDER, help="options of run (see run --help)")
    r.set_defaults(func=_cmd_run)

    v = sub.add_parser("verify", help="replay the recorded H200 outputs against the emulator "
                       "(no GPU needed)", description=VERIFY_DESCRIPTION, epilog=VERIFY_EPILOG)
    v.add_argument("--topic", action="append",
                   help="only this topic (repeatable): " + ", ".join(VERIFY_TOPICS))
    v.add_argument("--quick", action="store_true", help="fewer cases (1.5-6 minutes on 2 cores)")
    v.add_argument("--json", action="store_true", help="print rows as JSON")
    v.add_argument("--workers", type=_verify_workers, default=1,
                   help="processes replaying the backward's and the paged cache's recorded "
                        "calls (default 1)")
    v.set_defaults(func=_cmd_verify)

    s = sub.add_parser("sweep", help="on a GPU: measure the device against the emulator and "
                       "record the evidence")
    s.add_argument("what", choices=["numerics"], help="which sweep")
    s.add_argument("--out", required=True, help="output folder")
    s.add_argument("--blocks", type=int, default=96,
                   help="arithmetic case blocks of 2^20 (default: %(default)s)")
    s.add_argument("--skip-conversions", action="store_true")
    s.set_defaults(func=_cmd_sweep)

    c = sub.add_parser("calibrate", help="on a GPU: measure the MUFU models (ex2, rcp, lg2, tanh) "
                       "over all 2^32 inputs and write tables + provenance", add_help=False)
    c.add_argument("rest", nargs=argparse.REMAINDER,
                   help="options of simulator.measure.mufu_calibrate (see calibrate --help)")
    c.set_defaults(func=_cmd_calibrate)

    m = sub.add_parser("measure", help="on a GPU: one measurement run (numerics_sweep, hw_probe, "
                       "mma_probe, forward_goldens, ...; measure --help lists them)", add_help=False)
    m.add_argument("rest", nargs=argparse.REMAINDER, help="NAME and its options (see measure --help)")
    m.set_defaults(func=_cmd_measure)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code. Ctrl-C at any point (imports included) gives
    ``interrupted`` on stderr and 130."""
    watch = _InterruptWatch()
    sys.excepthook = watch
    try:
        return _main(argv, watch)
    except KeyboardInterrupt:
        return _interrupted()
    except Exception as exc:
        if watch.caused(exc):
            return _interrupted()
        raise
    finally:
        if sys.excepthook is watch:
            sys.excepthook = watch.previous


def _main(argv: list[str] | None, watch: _InterruptWatch) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if sys.stdout is None:  # started with stdout closed (`>&-`): every summary would vanish
        if sys.stderr is not None:
            print("error: standard output is closed: nothing could be printed (redirect it, "
                  "e.g. >/dev/null, to discard it)", file=sys.stderr)
        return EXIT_USAGE
    from . import engine

    try:
        engine.get_engine()  # a bad SIMULATOR_ENGINE is a usage error, named in one line
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if argv[:1] == ["calibrate"]:  # its own options and --help live in mufu_calibrate
        try:
            return _cmd_calibrate(argparse.Namespace(rest=argv[1:]))
        except RuntimeError as exc:  # DeviceUnavailable, NVRTC failures
            if watch.caused(exc):
                return _interrupted()
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if argv[:1] == ["run"]:  # its own options, --help and one-line errors live in simulator.run
        args = argparse.Namespace(func=_cmd_run, rest=argv[1:])
    elif argv[:1] == ["measure"]:  # each run parses its own options (and --help)
        args = argparse.Namespace(func=_cmd_measure, rest=argv[1:])
    else:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            print("error: a command is required", file=sys.stderr)
            return EXIT_USAGE
    from .device.runtime import DeviceUnavailable

    try:
        status = args.func(args)
        if sys.stdout is not None:
            sys.stdout.flush()  # buffered output meets a closed pipe here, not at exit
        return status
    except KeyboardInterrupt:
        return _interrupted()
    except (UsageError, RecordedDataError, DeviceUnavailable) as exc:
        if watch.caused(exc):
            return _interrupted()
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        code = output_failed(exc)
        if code is not None:
            return code
        if watch.caused(exc):
            return _interrupted()
        traceback.print_exc()  # a bug: show everything
        return EXIT_INTERNAL
    except Exception as exc:
        if watch.caused(exc):
            return _interrupted()
        traceback.print_exc()  # a bug: show everything
        return EXIT_INTERNAL
