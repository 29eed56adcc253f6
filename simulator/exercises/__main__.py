"""``python -m simulator.exercises``: list the puzzle ladder, or check a function from a file.

    python -m simulator.exercises list                  # one numbered line per puzzle
    python -m simulator.exercises check N FILE.py       # FILE.py defines the stub's function
    python -m simulator.exercises check N FILE.py --hint [K]   # and show the first K hints
    python -m simulator.exercises check N --hint [K]    # only the hints
    python -m simulator.exercises check N --solution    # the reference solution
    python -m simulator.exercises check N FILE.py --picture OUT.png   # on FAIL, a picture

N is the puzzle's number on the ladder or its name (``reduce_max``).

Exit codes (simulator.errors): 0 PASS, 1 FAIL (the first divergence, or the traceback of an
exception the function raised, is printed), 2 usage error (a missing file or function, a FILE
that fails to import, an unknown exercise, missing recordings), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import sys
import textwrap
import traceback
from pathlib import Path

from ..errors import (
    EXIT_INTERRUPTED,
    EXIT_MISMATCH,
    EXIT_OK,
    EXIT_USAGE,
    OneLineParser,
    RecordedDataError,
    output_failed,
)
from . import PUZZLES, check, hints, puzzle


class _Raised(Exception):
    """The reader's function raised (its exception is the ``__cause__``)."""


def _guarded(fn):
    """``fn``, its exceptions told apart from the checker's own usage errors (a ValueError the
    reader's code raises is a failing function, not a bad command line); NotImplementedError
    passes through: it is the stub's own "fill me in"."""
    def call(*args):
        try:
            return fn(*args)
        except NotImplementedError:
            raise
        except (Exception, SystemExit) as exc:  # sys.exit(0) in the function is no PASS
            raise _Raised from exc
    return call


def _load(path: str, name: str):
    """The function ``name`` of the Python source at ``path`` (any file name: its source loader
    is named, not guessed from the suffix), imported as a module registered in ``sys.modules``
    while it runs (``@dataclass`` under ``from __future__ import annotations`` looks it up)."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"FILE: no such file {path!r}")
    modname = f"exercise_{file.stem}"
    loader = importlib.machinery.SourceFileLoader(modname, str(file))
    spec = importlib.util.spec_from_loader(modname, loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # a FILE that does not import is the reader's input
        sys.modules.pop(modname, None)
        where = next((f" line {f.lineno}" for f in reversed(traceback.extract_tb(exc.__traceback__))
                      if Path(f.filename).resolve() == file.resolve()), "")
        text = str(exc)
        if isinstance(exc, SyntaxError):  # no frame of FILE: the line is the exception's
            where, text = f" line {exc.lineno}", exc.msg
        raise ValueError(f"FILE: {path}{where} does not import: {type(exc).__name__}: {text}") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"FILE: {path} defines no function {name!r} (the stub's name)")
    return fn


# after the list: where a newcomer starts (each line under 100 columns)
HOW_TO_START = """
To solve one: copy its stub from simulator/exercises/stubs.py (or, for the expert rungs,
simulator/exercises/puzzles.py) into FILE.py under the same name (fma for 1), fill it in, then
run: python -m simulator.exercises check N FILE.py   (add --hint, --hint 2, ... for hints)
In Python: simulator.exercises.check(N, your_function); notebook 11 walks through the ladder."""


def _print_list() -> None:
    for p in PUZZLES.values():
        where = "stubs" if p.stub.__module__.endswith("stubs") else "puzzles"
        print(textwrap.fill(f"{p.number}. {p.name} (~{p.lines} line{'s' if p.lines > 1 else ''}, "
                            f"{where}.py): checked on {p.checked_on}", width=99,
                            subsequent_indent="   "))
    print(HOW_TO_START)


def _hint_text(number, count: int) -> str:
    p = puzzle(number)
    shown = hints(p.number, count)
    lines = [f"hint {i} of {len(p.hints)}: {h}" for i, h in enumerate(shown, start=1)]
    if len(shown) < len(p.hints):
        lines.append(f"(--hint {len(shown) + 1} shows the next one)")
    return "\n".join(textwrap.fill(line, width=99, subsequent_indent="   ") for line in lines)


def main(argv=None) -> int:
    parser = OneLineParser(prog="python -m simulator.exercises",
                           description="List the puzzle ladder, or check your function for one "
                                       "against the H200's recordings.")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("list", help="one numbered line per puzzle")
    chk = sub.add_parser("check", help="run puzzle N on a function, against H200 recordings")
    chk.add_argument("number", type=_number, help="the puzzle, as numbered in the list, or its name")
    chk.add_argument("file", nargs="?",
                     help="a Python file defining the stub's function under its name "
                          "(fma for 1, to_bf16 for 2, ...)")
    chk.add_argument("--solution", action="store_true", help="check the reference solution")
    chk.add_argument("--picture", metavar="PNG",
                     help="on FAIL, draw the differing elements (ulps, first circled) into PNG")
    chk.add_argument("--hint", nargs="?", type=int, const=1, default=0, metavar="K",
                     help="show the puzzle's first K hints (default 1), one more each time")
    args = parser.parse_args(argv)
    if args.command in (None, "list"):
        _print_list()
        return EXIT_OK
    name = puzzle(args.number).name
    number = puzzle(args.number).number
    try:
        if args.hint < 0:
            raise ValueError("--hint: expected a positive count")
        if args.hint:
            print(_hint_text(number, args.hint), flush=True)
            if not args.file and not args.solution:
                return EXIT_OK
        if args.solution == bool(args.file):
            raise ValueError("check: give either FILE or --solution")
        if args.solution:
            from . import solutions  # noqa: PLC0415 - only on request

            fn = getattr(solutions, name)
        else:
            fn = _load(args.file, name)
        result = check(number, _guarded(fn))
    except _Raised as exc:
        user = exc.__cause__
        traceback.print_exception(type(user), user, user.__traceback__.tb_next, file=sys.stderr)
        print(f"puzzle {number} ({name}): FAIL, your function raised "
              f"{type(user).__name__}: {user}")
        return EXIT_MISMATCH
    except (ValueError, RecordedDataError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        print(result, flush=True)
    except OSError as exc:  # a full disk or a closed pipe is not the reader's FAIL
        code = output_failed(exc)
        if code is None:
            raise
        return code
    if not result.passed and args.picture and result.tile is not None:
        import matplotlib  # noqa: PLC0415 - only for a picture

        matplotlib.use("Agg")
        from .picture import draw  # noqa: PLC0415

        pic = draw(result, args.picture)
        print(f"picture: {args.picture} ({len(pic.marked):,} elements marked, first circled at "
              f"{pic.first})")
    return EXIT_OK if result.passed else EXIT_MISMATCH


def _number(text: str):
    """argparse type of N: a puzzle's number or name (argparse reports the ValueError)."""
    try:
        return puzzle(text).number
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid choice: {text} (choose from 1-{len(PUZZLES)} "
                                         "or a puzzle's name)") from None


if __name__ == "__main__":
    sys.exit(main())
