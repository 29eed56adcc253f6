"""Exercises in the style of GPU-Puzzles: write one step of FA3's forward, checked on H200 bits.

A reader copies a stub of :mod:`simulator.exercises.puzzles`, fills it in with
:mod:`simulator.numerics` and :mod:`simulator.hw`, and calls :func:`check`; the checker runs the
function in place of the emulator's step on recorded H200 cases (the forward's step traces, the
reduction probe, the real library's split-KV calls) and reports PASS or the first divergence.
The reference solutions live in :mod:`simulator.exercises.solutions`, which nothing here imports.

Public API:
    EXERCISES, Exercise, check, CheckResult, split_allreduce
"""

from __future__ import annotations

from dataclasses import dataclass

from ..numerics.bits import is_int
from . import puzzles
from .checker import CheckResult, split_allreduce
from .checker import run as _run


@dataclass(frozen=True)
class Exercise:
    """One exercise: its number, name, stub (in :mod:`.puzzles`) and what it is checked on."""

    number: int
    name: str
    stub: object
    checked_on: str


EXERCISES = {e.number: e for e in (
    Exercise(1, "reduce_max", puzzles.reduce_max,
             "max_get_scale's row_max in the 7 recorded step traces; the reduction probe"),
    Exercise(2, "online_rescale", puzzles.online_rescale,
             "every later block of the 5 bf16 / f16 step traces"),
    Exercise(3, "fp8_exp2", puzzles.fp8_exp2, "every block of the 2 e4m3 step traces"),
    Exercise(4, "combine", puzzles.combine, "29 split-KV combines of the real FA3 library"),
    Exercise(5, "finalize", puzzles.finalize, "the finalize step of the 7 step traces"),
)}


def check(number: int, fn) -> CheckResult:
    """Run exercise ``number`` with ``fn`` in place of the emulator's step, on H200 recordings.

    Args:
        number: 1-5 (:data:`EXERCISES`).
        fn: a function with the signature of the exercise's stub in :mod:`.puzzles`.
    Returns:
        :class:`CheckResult`: ``passed``, the counts, and ``message`` (``str()``): PASS, or the
        first divergence (case, step, thread / row, column, both values in hex and decimal).
        A function that returns the wrong type or shape gives a failed result saying so.
    Raises:
        ValueError: unknown ``number``.
        TypeError: ``fn`` not callable.
        NotImplementedError: ``fn`` is still a stub (its message says what to do).
        RecordedDataError: a recording is missing or altered.
    """
    if not is_int(number) or int(number) not in EXERCISES:
        raise ValueError(f"number: expected an exercise number in {sorted(EXERCISES)}, got {number!r}")
    if not callable(fn):
        raise TypeError(f"fn: expected a function (the exercise's step), got {type(fn).__name__}")
    ex = EXERCISES[int(number)]
    return _run(ex.number, ex.name, fn)


__all__ = ["EXERCISES", "CheckResult", "Exercise", "check", "split_allreduce"]
