"""Replay the recorded device outputs (H200, H100) against the emulator: ``python -m simulator verify``.

Each topic contributes rows ``{"check", "cases", "mismatches", "detail"}``; the command prints
them as a table and exits 1 if any check has a mismatch. The recorded data and its provenance
(GPU, driver, toolkit, date, kernel source hash) live in ``simulator/data/device/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .errors import RecordedDataError
from .replay import (
    dew_fa3,
    fa2_jax,
    fa3_api,
    fa3_backward,
    fa3_chunk,
    fa3_ext,
    fa3_library,
    fa3_paged,
    fa3_rotary,
    fa4,
    forward_goldens,
    hw,
    hypothesis,
    mma,
    mufu,
    numerics,
    sdpa,
    sdpa_backward,
    sdpa_drawn,
    twin_backward,
)

#: topic name -> function(quick: bool) -> list of result rows; the topics of ``PARALLEL`` also
#: take ``workers`` (processes replaying their cases)
TOPICS: dict[str, Callable[[bool], list[dict]]] = {
    "numerics": lambda quick: numerics.check_all(quick=quick),
    "mufu": lambda quick: mufu.check_all(quick=quick),
    "hw": lambda quick: hw.check_all(quick=quick),
    "mma": lambda quick: mma.check_all(quick=quick),
    "forward": lambda quick: forward_goldens.check_all(quick=quick) + hypothesis.check_sample(quick),
    "fa3": lambda quick: fa3_library.check_all(quick=quick) + fa3_api.check_all(quick=quick),
    "ext": lambda quick: fa3_ext.check_all(quick=quick) + fa3_chunk.check_all(quick=quick),
    "paged": lambda quick, workers=1: (fa3_paged.replay(quick=quick, workers=workers)
                                       + fa3_rotary.replay(quick=quick)),
    "backward": lambda quick, workers=1: (fa3_backward.replay(quick=quick, workers=workers)
                                          + twin_backward.replay(quick=quick)
                                          + twin_backward.replay_traces()),
    "sdpa": lambda quick: (sdpa.check_all(quick=quick) + sdpa_backward.check_all(quick=quick)
                           + sdpa_drawn.check_all(quick=quick)),
    "fa2": lambda quick: fa2_jax.check_all(quick=quick),
    "dew": lambda quick: dew_fa3.check_all(quick=quick),
    "fa4": lambda quick: fa4.check_all(quick=quick),
}
PARALLEL = ("backward", "paged")


def run_checks(topics: list[str] | None = None, quick: bool = False,
               workers: int = 1, progress=None) -> list[dict]:
    """Run the checks of ``topics`` (all when None) and return their rows, each tagged with
    its topic and elapsed seconds; the topics of :data:`PARALLEL` replay their cases in
    ``workers`` processes. ``progress``: None; a callable ``progress(line)`` told when each
    topic starts and ends; or an object with ``topic_started(i, n, name)`` and
    ``topic_done(i, n, name, seconds, mismatches)`` (the command line's bar on a terminal,
    :class:`simulator.cli.TopicBar`).

    Raises:
        ValueError: an unknown topic, listing the known ones.
        RecordedDataError: recorded data missing, unreadable or incomplete.
    """
    names = list(TOPICS) if topics is None else list(dict.fromkeys(topics))
    unknown = [t for t in names if t not in TOPICS]
    if unknown:
        raise ValueError(f"unknown topic(s) {unknown}; known: {', '.join(TOPICS)}")
    rows = []
    for i, name in enumerate(names, 1):
        t0 = time.perf_counter()
        if hasattr(progress, "topic_started"):
            progress.topic_started(i, len(names), name)
        elif progress is not None:
            progress(f"verify: topic {i}/{len(names)} {name} ...")
        try:
            topic_rows = (TOPICS[name](quick, workers) if name in PARALLEL and workers > 1
                          else TOPICS[name](quick))
        except KeyError as exc:  # a recorded file without an expected array
            raise RecordedDataError(f"recorded data of topic {name!r} lacks the entry {exc}; "
                                    "regenerate it (see docs/architecture.md)") from None
        elapsed = time.perf_counter() - t0
        bad = sum(r["mismatches"] for r in topic_rows)
        if hasattr(progress, "topic_done"):
            progress.topic_done(i, len(names), name, elapsed, bad)
        elif progress is not None:
            progress(f"verify: topic {i}/{len(names)} {name} done in {elapsed:.1f} s, "
                     f"{bad:,} mismatches")
        for r in topic_rows:
            rows.append({"topic": name, **r})
        rows.append({"topic": name, "check": "(elapsed)", "cases": 0, "mismatches": 0,
                     "detail": f"{elapsed:.1f} s"})
    return rows


#: the check column's width: a row then reads in 99 columns (topic 9, cases 13, mismatches
#: 10, three spaces); a longer check name continues on the next lines of its column
CHECK_WIDTH = 64


def format_table(rows: list[dict]) -> str:
    """Human-readable table of check rows, under 100 columns: a check name longer than
    :data:`CHECK_WIDTH` wraps within its column, a mismatch's detail follows on its own
    lines."""
    import textwrap

    shown = [r for r in rows if r["check"] != "(elapsed)"]
    width = CHECK_WIDTH
    lines = [f"{'topic':9s} {'check':{width}s} {'cases':>13s} {'mismatches':>10s}"]
    for r in shown:
        name = textwrap.wrap(r["check"], width, break_on_hyphens=False) or [""]
        lines.append(f"{r['topic']:9s} {name[0]:{width}s} {r['cases']:13,d} {r['mismatches']:10,d}")
        lines += [f"{'':9s}   {part}" for part in name[1:]]
        if r["mismatches"]:
            lines += textwrap.wrap("<-- " + (r["detail"] or "MISMATCH"), 99,
                                   initial_indent=" " * 10, subsequent_indent=" " * 14)
    total = sum(r["cases"] for r in rows)
    bad = sum(r["mismatches"] for r in rows)
    lines.append(f"total: {total:,} device results replayed, {bad:,} mismatch{'' if bad == 1 else 'es'}")
    return "\n".join(lines)
