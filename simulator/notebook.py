"""What the teaching notebooks (``notebooks/src/NN_name.py``) share: the setup of their first cell.

A notebook starts with ``NB = notebook.setup()`` and ends with ``print(NB.finish())``; in
between it reads ``NB.bf16`` (the bfloat16 dtype its inputs are rounded to), ``NB.static``
(true under CI: static figures, no widgets) and ``NB.widgets`` (``ipywidgets`` when a slider can
be shown, else None). ``tests/test_notebooks.py`` sets ``SIMULATOR_NOTEBOOK_STATIC=1``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from types import ModuleType

import ml_dtypes

#: set (to any non-empty value) by tests/test_notebooks.py: no widgets, static figures only
STATIC_ENV = "SIMULATOR_NOTEBOOK_STATIC"


@dataclass
class NotebookSetup:
    """The shared state of one notebook run (made by :func:`setup`)."""

    bf16: type
    static: bool
    widgets: ModuleType | None
    t0: float = field(default_factory=time.perf_counter)

    def finish(self) -> str:
        """The notebook's last line: its run time in seconds (wall clock, from :func:`setup`)."""
        return f"notebook ran in {time.perf_counter() - self.t0:.1f} s; every assertion above holds"


def setup(environ=None) -> NotebookSetup:
    """Start a notebook run: the clock, ``ml_dtypes.bfloat16``, static mode and ipywidgets.

    Args:
        environ: the environment to read ``SIMULATOR_NOTEBOOK_STATIC`` from (default
            ``os.environ``).
    Returns:
        a :class:`NotebookSetup`; ``widgets`` is None in static mode or when ipywidgets is not
        installed (the notebooks then draw a static grid of chosen steps instead of a slider).
    """
    env = os.environ if environ is None else environ
    static = bool(env.get(STATIC_ENV))
    widgets = None
    if not static:
        try:
            import ipywidgets as widgets  # noqa: PLC0415 - optional, only for the sliders
        except ImportError:
            widgets = None
    return NotebookSetup(bf16=ml_dtypes.bfloat16, static=static, widgets=widgets)
