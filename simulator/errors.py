"""Exceptions that name what the user can fix, and the command line's exit codes.

Exit codes of ``python -m simulator`` (and of each measurement run): 0 success; 1 the emulator
disagrees with recorded or live device bits; 2 usage or input error, including missing or
unreadable recorded data and a missing GPU; 3 internal error (a bug); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)


class UsageError(Exception):
    """A user mistake found by the command line itself (a bad option, path or input file); the
    message is one line, printed as ``error: ...`` with exit code 2."""


class RecordedDataError(RuntimeError):
    """A recorded device file is missing, unreadable or incomplete.

    The message names the file, what is wrong with it and the command that regenerates it.
    """


class OneLineParser(argparse.ArgumentParser):
    """An options parser whose usage errors are one line on stderr, ``error: COMMAND: what
    (see `PROG --help`)``, with exit code 2 (argparse prints its usage block first)."""

    def error(self, message):
        prog, main = self.prog, "python -m simulator"
        # "python -m simulator run" -> "run"; another module's prog keeps its name
        command = (prog[len(main):].strip() if prog == main or prog.startswith(main + " ")
                   else prog.removeprefix("python -m "))
        print(f"error: {command + ': ' if command else ''}{message} (see `{self.prog} --help`)",
              file=sys.stderr, flush=True)
        raise SystemExit(EXIT_USAGE)
