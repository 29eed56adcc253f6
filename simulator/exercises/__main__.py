"""``python -m simulator.exercises``: list the exercises, or check a function from a file.

    python -m simulator.exercises                       # the list
    python -m simulator.exercises check N FILE.py       # FILE.py defines the stub's function
    python -m simulator.exercises check N --solution    # the reference solution

Exit codes (simulator.errors): 0 PASS, 1 FAIL (the first divergence is printed), 2 usage
error (a missing file or function, an unknown exercise, missing recordings).
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

from ..errors import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, OneLineParser, RecordedDataError
from . import EXERCISES, check


def _load(path: str, name: str):
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"FILE: no such file {path!r}")
    spec = importlib.util.spec_from_file_location(f"exercise_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"FILE: {path} defines no function {name!r} (the stub's name)")
    return fn


# after the list: where a newcomer starts (each line under 100 columns)
HOW_TO_START = """
To solve one: copy its stub from simulator/exercises/puzzles.py (the docstring is the task:
shapes, the H200's sequence, hints) into FILE.py under the same name (reduce_max for 1), fill
it in, then run: python -m simulator.exercises check N FILE.py
In Python: simulator.exercises.check(N, your_function); notebook 11 walks through all five."""


def main(argv=None) -> int:
    parser = OneLineParser(prog="python -m simulator.exercises",
                           description="List the exercises, or check your function for one "
                                       "against the H200's recordings.")
    sub = parser.add_subparsers(dest="command")
    chk = sub.add_parser("check", help="run exercise N on a function, against H200 recordings")
    chk.add_argument("number", type=int, choices=sorted(EXERCISES),
                     help="the exercise, as numbered in the list")
    chk.add_argument("file", nargs="?",
                     help="a Python file defining the stub's function under its name "
                          "(reduce_max for 1, online_rescale for 2, ...)")
    chk.add_argument("--solution", action="store_true", help="check the reference solution")
    args = parser.parse_args(argv)
    if args.command is None:
        for ex in EXERCISES.values():
            print(textwrap.fill(f"{ex.number}. {ex.name}: checked on {ex.checked_on}", width=99,
                                subsequent_indent="   "))
        print(HOW_TO_START)
        return EXIT_OK
    name = EXERCISES[args.number].name
    try:
        if args.solution == bool(args.file):
            raise ValueError("check: give either FILE or --solution")
        if args.solution:
            from . import solutions  # noqa: PLC0415 - only on request

            fn = getattr(solutions, name)
        else:
            fn = _load(args.file, name)
        result = check(args.number, fn)
    except (ValueError, RecordedDataError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(result)
    return EXIT_OK if result.passed else EXIT_MISMATCH


if __name__ == "__main__":
    sys.exit(main())
