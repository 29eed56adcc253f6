"""The text ``python -m simulator run`` prints: the summary, the error lines per head, the
per-step table of one quad and which CTA the trace shows (and why another is idle)."""

from __future__ import annotations

import math
import re
import textwrap

import numpy as np

from ..errors import UsageError
from .metrics import SIGNIFICANT
from .workload import Workload, varlen_lengths


def f32_text(x) -> str:
    """``x`` rounded to float32, printed as NumPy prints a float32 (shortest round trip)."""
    return str(np.float32(x))


def _shape(x) -> str:
    return "[" + ", ".join(str(s) for s in x.shape) + "]"


def summary(work: Workload, cfg, m: dict, times: dict, n_calls: int, seq_cfgs=None) -> str:
    """The printed summary; ``seq_cfgs``: each sequence's config of a varlen workload."""
    out_fmt = "bf16" if work.fmt == "e4m3" else work.fmt
    B, S, H, d = work.q.shape
    heads = work.heads
    lines = [f"input     {work.source}"]
    lines += [f"          {n}" for n in work.notes]
    if len(heads) == work.heads_total:
        head_text = f"all {H} heads" if H > 1 else "1 head"
    else:
        head_text = f"head{'s' if len(heads) > 1 else ''} {ranges(heads)} of {work.heads_total}"
    if seq_cfgs is not None:
        rows, keys = varlen_lengths(work)
        cu = np.concatenate([[0], np.cumsum(rows)]).tolist()
        T, Tk, hkv = int(rows.sum()), int(keys.sum()), work.k.shape[2]
        lines.append(f"shapes    varlen: {len(rows)} sequences, cu_seqlens {cu}, max_seqlen "
                     f"{int(rows.max())}; q [{T}, {H}, {d}], k/v [{Tk}, {hkv}, {d}] {work.fmt} "
                     f"({head_text}) -> O {out_fmt} [{T}, {H}, {work.v.shape[-1]}], LSE float32 "
                     f"[{H}, {T}] (no padding rows)")
    else:
        lines.append(f"shapes    q {_shape(work.q)}, k/v {_shape(work.k)} {work.fmt} ({head_text}) -> "
                     f"O {out_fmt} {_shape(work.q)}, LSE float32 [{B}, {H}, {S}]")
    if work.seqlens_k is not None and seq_cfgs is None:
        lines.append(f"          seqlens_k {work.seqlens_k.tolist()} (later keys are absent)")
    scale = float(cfg.consts["softmax_scale"])
    default = math.isclose(scale, 1 / math.sqrt(d), rel_tol=1e-6)
    win = cfg.window
    mask = ("causal" if win == (-1, 0) else "no mask" if win == (-1, -1)
            else f"window ({win[0]}, {win[1]})")
    lines.append(f"params    softmax_scale {f32_text(scale)}{f' (1/sqrt({d}))' if default else ''}, "
                 f"{mask}, softcap {cfg.softcap:g}, kBlockM x kBlockN {cfg.kblock_m} x {cfg.kblock_n}, "
                 f"{cfg.schedule}")
    disp = cfg.dispatch
    own = (cfg.kblock_m, cfg.kblock_n, cfg.schedule) == (disp.kblock_m, disp.kblock_n, disp.schedule)
    lines.append(f"dispatch  {'FA3' if own else 'overridden; FA3 would run'}: {disp.describe()}")
    if work.descales:
        dq = work.descales["q_descale"]
        lines.append(f"          descales q [{f32_text(dq.min())} .. {f32_text(dq.max())}], k "
                     f"[{f32_text(work.descales['k_descale'].min())} .. "
                     f"{f32_text(work.descales['k_descale'].max())}], "
                     f"v [{f32_text(work.descales['v_descale'].min())} .. "
                     f"{f32_text(work.descales['v_descale'].max())}]")
    ctas, visits = work_counts(cfg if seq_cfgs is None else seq_cfgs)
    lines.append(f"work      {plural(ctas, 'CTA')}, {plural(visits, 'K/V block visit')}, "
                 f"{plural(n_calls, 'forward call')}")
    lines += _error_lines(m, out_fmt, heads)
    lines.append(f"time      emulation {times['emulate']:.1f} s (+ {times['setup']:.1f} s loading the "
                 f"MUFU tables), reference {times['reference']:.2f} s")
    return "\n".join(wrapped for line in lines for wrapped in wrap_line(line))


#: the summary's width: it reads in an 100-column terminal without a line breaking mid-word
WIDTH = 99


def wrap_line(line: str, width: int = WIDTH) -> list[str]:
    """``line`` broken at spaces into lines of at most ``width`` columns (a word longer than
    that stays whole), the continuations indented to where its text starts after the label
    (``"shapes    varlen: ..."`` continues under ``varlen``)."""
    if len(line) <= width:
        return [line]
    lead = len(line) - len(line.lstrip(" "))
    indent = lead + 2 if lead else len(re.match(r"\S*\s*", line).group(0))
    indent = indent if indent < width // 2 else 10
    return textwrap.wrap(line, width, subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False, drop_whitespace=True) or [line]


def _error_lines(m: dict, out_fmt: str, heads: list[int]) -> list[str]:
    """The error, masked and nonfinite lines of the summary (statistics over finite pairs)."""
    lines = [f"error     O vs float64 reference (a row: one query's {out_fmt} outputs of one head):"]
    if m["out_excluded"]:
        lines.append(f"            over the {m['out_pairs']:,} of {m['out_elements']:,} elements "
                     f"finite on both sides; excluded {m['out_excluded']:,}: emulator "
                     f"{m['out_nan']:,} NaN, {m['out_inf']:,} inf; reference {m['ref_out_nan']:,} "
                     f"NaN, {m['ref_out_inf']:,} inf")
    if m["out_pairs"]:
        rb, rr, rh, rc = m["out_worst_row_rel"]
        at, rel = f"batch {rb}, head {heads[rh]}, row {rr}, dim {rc}", m["out_max_row_rel"]
        if rel == 0:
            lines.append("            max |error| 0: every finite output equals the reference")
        elif math.isinf(rel):  # a row whose reference is all zero: no scale to divide by
            lines.append(f"            max |error| {m['out_worst_row_rel_error']:.3g} in a row whose "
                         f"reference is all zero ({at})")
        else:
            lines.append(f"            max |error| {_percent(rel)} of the row max |ref| ({at})")
        if rel != 0:  # the next step, spelt out: that row's error by approximation
            lines.append(f"            why: --explain {rb},{heads[rh]},{rr} (same options) splits "
                         "that row's error by approximation")
        lines.append(f"            relative Frobenius {m['out_rel_frobenius']:.3g}")
        lines.append(f"            in {out_fmt} ulps at the reference value: mean "
                     f"{m['out_mean_ulp']:.3g}, 99th percentile {m['out_p99_ulp']:.3g}")
        sig = m["out_max_ulp_significant"]
        lines.append(f"            {100 * m['out_within_half_ulp']:.1f}% within 0.5 ulp (correctly "
                     f"rounded)" + ("" if sig is None else f"; max {sig:.3g} ulp where |ref| >= "
                                    f"{SIGNIFICANT:.0%} of the row max"))
        # the raw maximum, last: at a reference value near zero an ulp is tiny
        wb, wr, wh, wc = m["out_worst"]
        got, want = m["out_worst_values"]
        row_max = m.get("out_worst_row_max") or 0.0
        near_zero = (f" at a near-zero output, |ref| under {SIGNIFICANT:.0%} of the row max "
                     f"{row_max:.2g}" if abs(want) < SIGNIFICANT * row_max else "")
        lines.append(f"            raw max {m['out_max_ulp']:.3g} ulp (every element){near_zero}: "
                     f"batch {wb}, head {heads[wh]}, row {wr}, dim {wc}, {got:.6g} for {want:.6g}, "
                     f"absolute error {abs(got - want):.2g}")
    else:
        lines.append("            n/a (no finite pairs)")
    if m["lse_pairs"]:
        lb, lh, lr = m["lse_worst"]
        text = (f"          LSE: max |error| {m['lse_max_abs']:.3g} (batch {lb}, head {heads[lh]}, "
                f"row {lr}), mean {m['lse_mean_abs']:.3g}")
    else:
        text = "          LSE: n/a (no finite pairs)"
    lines.append(text)
    if m["lse_pairs"] < m["lse_rows"]:
        lines.append(f"            over the {m['lse_pairs']:,} of {m['lse_rows']:,} rows finite on "
                     f"both sides; non-finite: {m['lse_nonfinite_emu_only']:,} rows in the "
                     f"emulator only, {m['lse_nonfinite_ref_only']:,} in the reference only, "
                     f"{m['lse_nonfinite_both']:,} in both")
    per = m.get("per_head_max_ulp_significant") or [None] * len(heads)
    lines.append(f"          max ulp per head (|ref| >= {SIGNIFICANT:.0%} of the row max): "
                 + " ".join(f"{heads[i]}:{'n/a' if x is None else format(x, '.2g')}"
                            for i, x in enumerate(per)))
    n = m["rows_no_key"]
    text = (f"masked    {n:,} of {plural(m['rows'], 'row')} {'sees' if n == 1 else 'see'} no "
            f"key")
    if n:
        bad_lse = n - m["rows_no_key_lse_neginf"]
        bad_out = n - m["rows_no_key_out_zero"]
        if not bad_lse and not bad_out:
            text += ": O = 0 and LSE = -inf on " + ("all of them" if n > 1 else "it")
        else:
            text += (f": but the emulator's LSE is not -inf on {bad_lse:,} and its O not zero on "
                     f"{bad_out:,} of them")
    if m["rows_with_keys_lse_neginf"]:
        text += (f"; the emulator's LSE is -inf on {plural(m['rows_with_keys_lse_neginf'], 'row')} that "
                 f"see keys")
    lines.append(text)
    lines.append(f"nonfinite O: {m['out_nan']} NaN, {m['out_inf']} inf; LSE: {m['lse_nan']} NaN, "
                 f"{m['lse_posinf']} +inf, {m['lse_neginf']} -inf")
    ref_bad = m["ref_out_nan"] + m["ref_out_inf"] + m["ref_lse_nan"] + m["ref_lse_posinf"]
    if ref_bad:
        lines.append(f"          reference O: {m['ref_out_nan']} NaN, {m['ref_out_inf']} inf; LSE: "
                     f"{m['ref_lse_nan']} NaN, {m['ref_lse_posinf']} +inf, "
                     f"{m['ref_lse_neginf']} -inf")
    return lines


def _percent(x: float) -> str:
    """A share as a percentage with three significant digits (``0.412%``, ``12.5%``)."""
    return f"{100 * x:.3g}%"


def plural(n: int, word: str) -> str:
    """``1 CTA``, ``2 CTAs``, ``1,024 events``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def ranges(xs: list[int]) -> str:
    """Ascending ints as runs: ``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"``."""
    parts, i = [], 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(parts)


def work_counts(cfg) -> tuple[int, int]:
    """(CTAs, K/V block visits) of a launch (a list: the sequences of a varlen launch)."""
    from ..flash.block_info import block_range

    if isinstance(cfg, list):
        counts = [work_counts(c) for c in cfg]
        return sum(c for c, _ in counts), sum(v for _, v in counts)
    m_blocks = -(-cfg.seqlen_q // cfg.kblock_m)
    visits = 0
    for b in range(cfg.batch):
        for mb in range(m_blocks):
            lo, hi = block_range(mb, cfg.seqlen_q, int(cfg.seqlens_k[b]), cfg.kblock_m,
                                 cfg.kblock_n, cfg.window)
            visits += max(0, hi - lo)
    return cfg.batch * cfg.heads * m_blocks, visits * cfg.heads


def step_table(trace, cta, quad: int, kblock_m: int, heads: list[int],
               rows: int | None = None) -> str:
    """Each step's state for one quad of one CTA (four threads, their two rows).

    ``rows``: the query rows of the CTA's sequence (its ``seqlen_q``; None: every row is real).
    A row of the quad at or past it is padding, not a row of the input: the kernel computes
    it and the epilogue writes nothing of it. The header says so and the table marks its row
    number and fragments with ``(pad)``. Raises UsageError for a ``quad`` outside the CTA's warpgroups.
    """
    from ..hw import rowcol_view

    events = trace.for_cta(cta)
    W = kblock_m // 64
    if not 0 <= quad < 32 * W:
        raise UsageError(f"--quad: expected 0..{32 * W - 1} for kBlockM = {kblock_m}, got {quad}")
    w, ql = divmod(quad, 32)
    threads = 4 * ql + np.arange(4)
    view = rowcol_view("m64n32k16")  # the thread -> row map is the same for every N
    row_of = [int(r) for r in view.row[threads[0]]]
    g0 = cta[2] * kblock_m + 64 * w
    rows_g = [g0 + r for r in row_of]
    pad = [rows is not None and r >= rows for r in rows_g]
    tag = [" (padding)" if p else "" for p in pad]
    head = (f"CTA (batch {cta[0]}, head {cta[1]}, m_block {cta[2]}), warpgroup {w}, quad {ql}: "
            f"threads {w * 128 + threads[0]}-{w * 128 + threads[-1]} hold rows {rows_g[0]}{tag[0]} "
            f"and {rows_g[1]}{tag[1]}\n(row state: one line per thread and row; row_sum is "
            f"thread-local until finalize; frag: the thread's first two elements of row "
            f"{rows_g[0]}, columns 2t, 2t+1 of the tile)")
    if any(pad):
        head += (f"\n(pad) marks a padding row: past the sequence's {plural(int(rows), 'query row')}, "
                 "not a row of the input; the kernel computes it and writes nothing of it")
    fields = ("row_max", "row_sum", "scores_scale", "lse")
    table = [("step", "n", "thread", "row", *fields)]
    for e in events:
        n = "" if e.n_block is None else str(e.n_block)
        first = True
        if any(f in e.data for f in fields):
            for t in threads:
                for j in range(2):
                    table.append((e.step if first else "", n if first else "",
                                  str(int(w * 128 + t)) if j == 0 else "",
                                  f"{rows_g[j]}{' (pad)' if pad[j] else ''}",
                                  *(f32_text(np.ravel(e.data[f][w, t])[j]) if f in e.data else "."
                                    for f in fields)))
                    first = False
        name = next((f for f in ("acc_s", "acc_o") if f in e.data), None)
        if name is not None:
            for t in threads:
                f = e.data[name][w, t]
                vr = rowcol_view(f"m64n{f.shape[-1] * 2}k16")
                table.append((e.step if first else "", n if first else "", str(int(w * 128 + t)),
                              "frag", f"{name} " + ", ".join(f32_text(f[r]) for r in vr.reg[0, :2])
                              + (" (pad)" if pad[0] else "")))
                first = False
    prose = [piece for line in head.splitlines()
             for piece in textwrap.wrap(line, WIDTH, break_on_hyphens=False) or [line]]
    return "\n".join(prose + _columns(table))


def _columns(table: list[tuple[str, ...]]) -> list[str]:
    """The rows of ``table`` as lines, each column as wide as its widest cell. A row shorter
    than the header (a ``frag`` line) lets its last cell run on across the columns left, so
    that cell does not set a column's width."""
    full = len(table[0])
    widths = [max(len(row[c]) for row in table if c < len(row) - (len(row) < full))
              for c in range(full)]
    return ["  ".join(x.ljust(wd) for x, wd in zip(row, widths, strict=False)).rstrip()
            for row in table]


def step_choice(traced, busy, default: bool = False) -> str:
    """The line before the ``--step`` table: which traced CTA it shows, and why. ``busy``: the
    traced CTAs that visit a K/V block (in ``traced`` order); ``default``: ``traced`` is
    ``--trace-cta``'s default."""
    def name(c):
        return f"CTA ({c[0]}, {c[1]}, {c[2]})"

    if not busy:
        which = ("the traced CTA visits no" if len(traced) == 1 else
                 "none of the traced CTAs visits a")
        return (f"step      nothing to show: {which} K/V block (it has no step); trace another "
                f"with --trace-cta B,H,M")
    traced = [tuple(c) for c in traced]
    shown = tuple(busy[0])
    if default:
        return f"step      {name(shown)}, the first CTA that visits a K/V block (the default trace)"
    if shown == traced[0]:
        return f"step      {name(shown)}" + (", the first traced CTA" if len(traced) > 1 else "")
    skipped = traced[: traced.index(shown)]
    return (f"step      {name(shown)}, the first traced CTA that visits a K/V block "
            f"({', '.join(map(name, skipped))} visit{'s' if len(skipped) == 1 else ''} none)")


def idle_cta_note(cfg, cta, name=None) -> str | None:
    """One line for a traced CTA that visits no K/V block (its trace is empty), else None.
    ``cta`` indexes ``cfg``'s launch; ``name``: the CTA as the user numbered it (default cta)."""
    from ..flash.block_info import block_range

    lo, hi = block_range(cta[2], cfg.seqlen_q, int(cfg.seqlens_k[cta[0]]), cfg.kblock_m,
                         cfg.kblock_n, cfg.window)
    if hi > lo:
        return None
    b, h, m = name or cta
    return f"CTA ({b}, {h}, {m}) visits no K/V block: it writes O = 0 and LSE = -inf without any step"


def first_busy_cta(cfg, ctas) -> tuple[int, int, int] | None:
    """The first of ``ctas`` that visits a K/V block (its trace has steps), or None."""
    from ..flash.block_info import block_range

    for c in ctas:
        lo, hi = block_range(c[2], cfg.seqlen_q, int(cfg.seqlens_k[c[0]]), cfg.kblock_m,
                             cfg.kblock_n, cfg.window)
        if hi > lo:
            return tuple(c)
    return None


def launch_of(cfg, seq_cfgs, cta):
    """(config, CTA) of the launch a CTA belongs to: a varlen sequence's own (batch index 0)."""
    if not seq_cfgs:
        return cfg, cta
    return seq_cfgs[cta[0]], (0, cta[1], cta[2])


def default_trace_cta(cfg, head: int, seq_cfgs=None) -> tuple[int, int, int]:
    """``--trace-cta``'s default: the first CTA of ``head`` (batch, then m_block order) that
    visits a K/V block; ``(0, head, 0)`` when none does."""
    if seq_cfgs:
        for b, c in enumerate(seq_cfgs):
            for m in range(-(-c.seqlen_q // c.kblock_m)):
                if first_busy_cta(c, [(0, head, m)]):
                    return (b, head, m)
        return (0, head, 0)
    m_blocks = -(-cfg.seqlen_q // cfg.kblock_m)
    order = ((b, head, m) for b in range(cfg.batch) for m in range(m_blocks))
    return first_busy_cta(cfg, order) or (0, head, 0)
