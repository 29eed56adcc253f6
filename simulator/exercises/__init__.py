"""A puzzle ladder in the style of GPU-Puzzles: from one FFMA to the backward's dS, on H200 bits.

A learner copies a stub (:mod:`simulator.exercises.stubs` for the first rungs,
:mod:`simulator.exercises.puzzles` for the expert ones), fills it in with
:mod:`simulator.numerics` and :mod:`simulator.hw`, and calls :func:`check`; the checker runs the
function on recorded device results (the numerics sweep, the MUFU calibration, the forward's
and the backward's step traces, the reduction probe, the real library's split-KV calls) and
reports PASS or the first divergence; :func:`hints` reveals a rung's hints one at a time and
:func:`simulator.exercises.picture.draw` draws where a failed attempt's bits part from the
device's. The reference solutions live in :mod:`simulator.exercises.solutions`, which nothing
here imports.

Public API:
    PUZZLES (alias EXERCISES), Puzzle, check, hints, CheckResult, split_allreduce
"""

from __future__ import annotations

from ..numerics.bits import is_int
from . import puzzles, stubs
from .checker import CheckResult, split_allreduce
from .ladder import BY_NAME, LADDER, Puzzle
from .ladder_checks import run_rung

PUZZLES = LADDER
EXERCISES = LADDER
Exercise = Puzzle


def puzzle(which) -> Puzzle:
    """The rung ``which``: its number on the ladder (1 = the first) or its name.

    Raises:
        ValueError: no such rung (the message lists them).
    """
    if isinstance(which, str) and which in BY_NAME:
        return BY_NAME[which]
    if isinstance(which, str) and which.isdigit():
        which = int(which)
    if is_int(which) and int(which) in LADDER:
        return LADDER[int(which)]
    raise ValueError(f"number: expected a puzzle number in {sorted(LADDER)} or a name in "
                     f"{sorted(BY_NAME)}, got {which!r}")


def hints(which, count: int | None = None) -> tuple[str, ...]:
    """The first ``count`` hints of rung ``which`` (all of them for None), in order.

    Raises:
        ValueError: unknown rung, or ``count`` not a positive integer.
    """
    p = puzzle(which)
    if count is None:
        return p.hints
    if not is_int(count) or int(count) < 1:
        raise ValueError(f"count: expected a positive integer, got {count!r}")
    return p.hints[:int(count)]


def check(number, fn) -> CheckResult:
    """Run rung ``number`` with ``fn`` in place of the device's step, on recorded device bits.

    Args:
        number: the rung's number on the ladder (:data:`PUZZLES`) or its name.
        fn: a function with the signature of the rung's stub.
    Returns:
        :class:`CheckResult`: ``passed``, the counts, and ``message`` (``str()``): PASS, or the
        first divergence (case, step, thread / row, column, both values in hex and decimal);
        ``tile`` holds both arrays' bits for a picture where the rung records them.
        A function that returns the wrong type or shape gives a failed result saying so.
    Raises:
        ValueError: unknown ``number``.
        TypeError: ``fn`` not callable.
        NotImplementedError: ``fn`` is still a stub (its message says what to do).
        RecordedDataError: a recording is missing or altered.
    """
    p = puzzle(number)
    if not callable(fn):
        raise TypeError(f"fn: expected a function (the puzzle's step), got {type(fn).__name__}")
    return run_rung(p, fn)


__all__ = ["EXERCISES", "PUZZLES", "CheckResult", "Exercise", "Puzzle", "check", "hints", "puzzle",
           "puzzles", "split_allreduce", "stubs"]
