"""Exceptions that name what the user can fix, and the command line's exit codes.

Exit codes of ``python -m simulator`` (and of each measurement run): 0 success; 1 the emulator
disagrees with recorded or live device bits; 2 usage or input error, including missing or
unreadable recorded data and a missing GPU; 3 internal error (a bug); 130 interrupted.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
#: stdout closed before the output was complete (128 + SIGPIPE)
EXIT_BROKEN_PIPE = 141
#: errors of a full or failing disk: the environment's, told in one line, not a bug's traceback
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG})


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's final flush would raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def output_failed(exc: OSError) -> int | None:
    """The exit code of a command whose output could not be written, after one line on stderr:
    141 for a pipe closed before the output was complete (the reader saw only part of it, so
    not a success), 2 for a full or failing disk (naming the file when known); None for any
    other error (a bug: let it show)."""
    if isinstance(exc, BrokenPipeError):
        _silence_stdout()
        _say("error: stdout was closed before the output was complete (broken pipe)")
        return EXIT_BROKEN_PIPE
    if exc.errno in DISK_ERRNOS:
        _silence_stdout()
        where = f" {exc.filename}" if exc.filename else " (standard output)"
        _say(f"error: cannot write{where}: {exc.strerror or exc}")
        return EXIT_USAGE
    return None


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
