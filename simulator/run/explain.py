"""``python -m simulator run --explain ROW``: the error budget of one output row of the run's
input (:func:`simulator.budget.budget`): the emulator's error against float64 and the part of
each hardware approximation, printed as a table under 100 columns."""

from __future__ import annotations

import argparse

from ..errors import UsageError
from .emulation import one_sequence
from .report import wrap_line
from .workload import Workload, is_varlen, varlen_lengths


def parse_row(text: str) -> tuple[int, ...]:
    """``--explain`` as an argparse type: ``B,H,M`` (batch, head, query index) or one flat row
    index (into the run's LSE, [batch, heads, seqlen_q] order)."""
    try:
        parts = tuple(int(p) for p in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) not in (1, 3) or min(parts) < 0:
        raise argparse.ArgumentTypeError(f"expected B,H,M (batch, head, query: three integers "
                                         f">= 0, e.g. 0,3,10) or a flat row index, got {text!r}")
    return parts


def _locate(work: Workload, row: tuple[int, ...]) -> tuple[int, int, int]:
    """(batch, head index in the run, query) of ``row``; UsageError when outside the input."""
    batch, seqlen, heads = work.q.shape[0], work.q.shape[1], len(work.heads)
    if len(row) == 1:
        n = batch * heads * seqlen
        if row[0] >= n:
            raise UsageError(f"--explain: flat row {row[0]} is outside the run's {n} rows "
                             f"([batch {batch}, heads {heads}, seqlen {seqlen}])")
        flat = row[0]
        b, i, m = flat // (heads * seqlen), flat // seqlen % heads, flat % seqlen
    else:
        b, h, m = row
        if b >= batch:
            raise UsageError(f"--explain: batch {b} is outside 0..{batch - 1}")
        if h not in work.heads:
            raise UsageError(f"--explain: head {h} is not among the run's heads {work.heads}")
        i = work.heads.index(h)
    rows = int(varlen_lengths(work)[0][b]) if is_varlen(work) else seqlen
    if m >= rows:
        raise UsageError(f"--explain: query {m} is outside 0..{rows - 1} (batch {b}: a "
                         f"padding row, not computed)")
    return b, i, m


def explain(work: Workload, kwargs: dict, row: tuple[int, ...]) -> str:
    """The text of ``--explain``: which row, then its :class:`simulator.budget.Budget`.

    A varlen input (the embedded sentences) runs the row's sequence as its own launch with
    the launch's max_seqlen, as ``run`` does. Raises UsageError for a row outside the input or
    arguments the forward rejects.
    """
    from ..budget import budget

    b, i, m = _locate(work, row)
    if is_varlen(work):
        a = one_sequence(work, kwargs, b)
        q, k, v, kw, where = a["q"], a["k"], a["v"], a["kw"], (0, i, m)
    else:
        q, k, v, kw, where = work.q, work.k, work.v, kwargs, (b, i, m)
    try:
        result = budget(q, k, v, row=where, **kw)
    except ValueError as exc:
        raise UsageError(f"--explain: {exc}") from None
    result.scope = f"row (batch {b}, head {work.heads[i]}, query {m})"
    lines = wrap_line(f"explain   {work.label}: where the emulator (the H200) differs from "
                      f"float64 on one row, each approximation alone and made exact")
    return "\n".join(lines + [""] + str(result).splitlines())
