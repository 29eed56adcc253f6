"""Progress through waits that report none of their own: the float64 reference after the
emulation's bar has read 100% (on a terminal with tqdm, a bar of the seconds elapsed against
the estimate, redrawn from a thread while the work runs in the caller's thread, so Ctrl-C
reaches the work as before; otherwise one line that says what runs and for about how long),
and the engine's first compile under the emulation's bar (its clock kept running, the note
written above it)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr is not None and bool(sys.stderr.isatty())
    except (AttributeError, OSError, ValueError):  # replaced or closed
        return False


def _tqdm():
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


class TimedBar:
    """A bar of ``estimate`` seconds: ``advance()`` sets it to the seconds elapsed (held below
    100% until :meth:`finish`; past the estimate the total grows with it, so the bar never
    reads done before the work is). ``clock``: the time source (``time.monotonic``)."""

    def __init__(self, tqdm, stream, what: str, estimate: float, clock=time.monotonic):
        self.total = max(1, round(estimate))
        self._clock, self._start = clock, clock()
        self._bar = tqdm(total=self.total, desc=what, file=stream, leave=True,
                         bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s "
                                    "(the total an estimate)")
        self._lock = threading.Lock()

    def advance(self) -> None:
        elapsed = self._clock() - self._start
        with self._lock:
            if self._bar is None:
                return
            if elapsed >= self.total:  # a low estimate: the bar keeps some way to go
                self.total = int(elapsed * 1.25) + 1
                self._bar.total = self.total
            self._bar.n = min(elapsed, self.total)
            self._bar.refresh()

    def finish(self) -> None:
        """The work ended: the bar at its elapsed time, read as 100%, closed."""
        elapsed = self._clock() - self._start
        with self._lock:
            if self._bar is None:
                return
            self._bar.total = max(1, round(elapsed))
            self._bar.n = self._bar.total
            self._bar.refresh()
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        """The work stopped early (an error, Ctrl-C): the bar closed where it is."""
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None


@contextlib.contextmanager
def progress_of(what: str, estimate: float, show: bool, note=None, label: str | None = None,
                tick: float | None = 0.5):
    """Around a wait of about ``estimate`` seconds: where ``show``, a :class:`TimedBar` named
    ``label`` (default ``what``) on a terminal with tqdm (redrawn every ``tick`` seconds; None:
    only at the start and end), else ``note(line)`` told once before the wait (``run``'s stderr
    notes). Nothing where not ``show``. A bar or line that cannot be drawn (stderr closed)
    costs nothing of the work."""
    tqdm = _tqdm() if show and _stderr_is_tty() else None
    if tqdm is None:
        if show and note is not None:
            note(f"{what}, about {estimate:.0f} s (an estimate)")
        yield
        return
    try:
        bar = TimedBar(tqdm, sys.stderr, label or what, estimate)
    except (OSError, ValueError):
        yield
        return
    stop = threading.Event()

    def redraw():
        while not stop.wait(tick):
            try:
                bar.advance()
            except (OSError, ValueError):
                return

    ticker = threading.Thread(target=redraw, daemon=True, name="run-progress")
    if tick is not None:
        ticker.start()
    done = False
    try:
        yield
        done = True
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join()
        with contextlib.suppress(OSError, ValueError):
            if done:
                bar.finish()
            else:
                bar.close()


def _stop_event() -> threading.Event:
    """The event that ends a ticker (its ``wait(tick)`` paces the redraws)."""
    return threading.Event()


@contextlib.contextmanager
def ticking(bar, tick: float | None = 0.5):
    """Redraw tqdm's ``bar`` every ``tick`` seconds while the block runs, so that its clock
    moves through a stretch without progress (the engine compiling its kernels before the
    first block); None (no bar: lines, or no progress) or ``tick`` None: nothing."""
    if bar is None or tick is None:
        yield
        return
    stop = _stop_event()

    def redraw():
        while not stop.wait(tick):
            try:
                bar.refresh()
            except (AttributeError, OSError, ValueError):  # closed, or the terminal went away
                return

    ticker = threading.Thread(target=redraw, daemon=True, name="run-progress")
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()


def write_line(text: str) -> None:
    """``text`` as a line on stderr, above any tqdm bar being drawn there (tqdm.write clears
    the bar, writes, and draws it again); a plain print where tqdm is not imported. A stderr
    closed at start, or by its reader, loses the line, not the run."""
    if sys.stderr is None:
        return
    tqdm = getattr(sys.modules.get("tqdm"), "tqdm", None)
    try:
        if tqdm is not None and hasattr(tqdm, "write"):
            tqdm.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
