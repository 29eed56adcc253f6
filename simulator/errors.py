"""Exceptions that name what the user can fix."""

from __future__ import annotations


class RecordedDataError(RuntimeError):
    """A recorded device file is missing, unreadable or incomplete.

    The message names the file, what is wrong with it and the command that regenerates it.
    """
