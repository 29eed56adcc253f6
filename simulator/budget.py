"""The error budget of a forward: which hardware approximation makes the emulator (the H200)
differ from float64 on a row, a head or a whole call, and by how much.

:func:`budget` runs :func:`simulator.flash.forward` as the H200 computes it and against the
float64 reference (:func:`simulator.flash.reference`), then once per approximation of
:class:`simulator.flash.Exactness` with **only that one** left approximate (every other step
exact, in float64: the error it makes on its own) and once with **only that one** made exact
(the error the emulator keeps without it). Errors are relative to the row: for each output
element ``|o - ref| / max_j |ref[row, j]|`` (a row whose reference is all zero: absolute), as
the maximum and the mean over the elements chosen. Every number is computed; nothing here is
a measured constant. docs/budget.md shows the table of the embedded MiniLM input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .flash import forward, make_config, reference
from .flash.exact import Exactness

#: what each switch of :class:`Exactness` stands for, as the table prints it
LABELS = {
    "p_rounding": "P rounded to {fmt} before PV",
    "ex2": "MUFU.EX2 (exp2 of the softmax)",
    "rcp_lg2": "MUFU.RCP / MUFU.LG2 (finalize)",
    "ffma": "float32 FFMA/FMUL/FADD, constants",
    "tanh": "MUFU.TANH (softcap)",
    "mma": "tensor-core alignment, truncation",
    "o_rounding": "O rounded to {out}",
}
_NOT_FORWARDED = ("trace", "num_splits", "exact")


@dataclass
class Part:
    """One approximation's share of the error.

    Attributes:
        name: the :class:`Exactness` switch; label: what it is.
        alone_max, alone_mean: relative error with only this approximation (all else exact).
        without_max, without_mean: relative error of the emulator with this one made exact.
        share: ``alone_mean`` over the sum of every part's ``alone_mean`` (0..1).
    """

    name: str
    label: str
    alone_max: float
    alone_mean: float
    without_max: float
    without_mean: float
    share: float = 0.0


@dataclass
class Budget:
    """The error budget of :func:`budget`: ``str()`` is a table under 100 columns.

    Attributes:
        scope: what was measured (``"row (batch b, head h, query m)"``, ``"head (batch b,
            head h)"`` or ``"call"``).
        fmt: the input format; elements: how many output elements the errors cover.
        total_max, total_mean: the emulator's relative error (every approximation on).
        exact_max: the error with every approximation exact (float64 round-off, ~1e-15).
        parts: one :class:`Part` per approximation that applies, largest ``alone_mean`` first.
    """

    scope: str
    fmt: str
    elements: int
    total_max: float
    total_mean: float
    exact_max: float
    parts: list[Part] = field(default_factory=list)

    def part(self, name: str) -> Part:
        """The :class:`Part` of switch ``name``; KeyError when it does not apply."""
        for p in self.parts:
            if p.name == name:
                return p
        raise KeyError(f"{name}: not a part of this budget ({[p.name for p in self.parts]})")

    def __str__(self) -> str:
        if not self.elements:
            return (f"error budget of {self.scope}, {self.fmt}: no output element to compare\n"
                    "(the float64 reference is NaN on every row: NaN or inf inputs)")
        lines = [f"error budget of {self.scope}, {self.fmt}, {self.elements} output elements",
                 "errors |O - O_float64| relative to the row's max |O_float64|; alone: only this "
                 "approximation,", "the rest exact; share: of the summed alone means; without: the "
                 "emulator with this one exact",
                 f"{'approximation':<36} {'alone max':>10} {'alone mean':>10} "
                 f"{'share':>6} {'without max':>11} {'without mean':>12}"]
        for p in self.parts:
            lines.append(f"{p.label:<36} {p.alone_max:>10.2e} {p.alone_mean:>10.2e} "
                         f"{_percent(p.share):>6} {p.without_max:>11.2e} {p.without_mean:>12.2e}")
        lines.append(f"{'emulator (all approximations)':<36} {self.total_max:>10.2e} "
                     f"{self.total_mean:>10.2e}")
        lines.append(f"{'all exact (float64 round-off)':<36} {self.exact_max:>10.2e}")
        return "\n".join(lines)


def _percent(share: float) -> str:
    return "<0.1%" if 0 < share < 0.001 else f"{share:.1%}"


def budget(q, k, v, *, row=None, head=None, **kwargs) -> Budget:
    """The error budget of one output row, one head or a whole call of
    :func:`simulator.flash.forward`.

    Args:
        q, k, v: as :func:`simulator.flash.forward` (bf16, f16 or e4m3 [batch, seqlen, heads,
            head_dim]).
        row: None, ``(batch, head, query)``, or a flat index into ``lse``'s
            [batch, heads, seqlen_q] order (``(b * heads + h) * seqlen_q + m``).
        head: None or ``(batch, head)`` (not with ``row``). Neither: the whole call.
        kwargs: the rest of :func:`simulator.flash.forward`'s arguments (not ``trace``,
            ``num_splits`` or ``exact``).
    Returns:
        :class:`Budget`. A row or head runs only its batch element and the query heads of its
        KV head (the CTAs that compute it, with the call's PackGQA choice: the same bits).
    Raises:
        ValueError: ``row`` / ``head`` malformed or outside the call, both given, an argument
            forward does not take here, or any error of :func:`simulator.flash.forward`.
    """
    for name in _NOT_FORWARDED:
        if name in kwargs:
            raise ValueError(f"{name}: not taken by budget (it runs the forward itself)")
    cfg = make_config(q, k, v, **{n: x for n, x in kwargs.items()
                                  if n not in ("executor", "memory_budget", "progress")})
    where = _where(row, head, cfg)
    if where is None:
        args, sel, scope = (q, k, v, kwargs), (slice(None),) * 3, "the call"
    else:
        args, sel, scope = _slice(q, k, v, kwargs, cfg, *where)
    fmt = cfg.fmt
    ref = reference(*args[:3], **_ref_kwargs(args[3]))[0][sel]
    emu = forward(*args[:3], **args[3]).out[sel]
    total_max, total_mean = relative_error(emu, ref)
    names = [n for n in Exactness.names() if n != "tanh" or cfg.softcap > 0]
    exact_max = relative_error(_run(args, Exactness.all())[sel], ref)[0]
    parts = []
    for name in names:
        alone = relative_error(_run(args, Exactness.all(**{name: False}))[sel], ref)
        without = relative_error(_run(args, Exactness(**{name: True}))[sel], ref)
        label = LABELS[name].format(fmt=fmt, out="bf16" if fmt == "e4m3" else fmt)
        if name == "p_rounding" and fmt == "e4m3":
            label = "P' = 2^8 P rounded to e4m3 before PV"  # Max_offset 8
        parts.append(Part(name, label, *alone, *without))
    total = sum(p.alone_mean for p in parts)
    for p in parts:
        p.share = p.alone_mean / total if total > 0 else 0.0
    parts.sort(key=lambda p: -p.alone_mean)
    compared = int(np.count_nonzero(~np.isnan(ref).any(axis=-1))) * ref.shape[-1]  # as measured
    return Budget(scope, fmt, compared, total_max, total_mean, exact_max, parts)


def relative_error(out, ref) -> tuple[float, float]:
    """(max, mean) over the elements of ``|out - ref| / max_j |ref[..., j]|`` (the last axis
    is the row; a row whose reference is all zero counts the absolute error; rows whose
    reference is NaN are left out). ``out`` any float dtype, ``ref`` float64."""
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    keep = ~np.isnan(r).any(axis=-1)
    o, r = o[keep], r[keep]
    if r.size == 0:
        return 0.0, 0.0
    scale = np.abs(r).max(axis=-1, keepdims=True)
    err = np.abs(o - r) / np.where(scale > 0, scale, 1.0)
    return float(err.max()), float(err.mean())


def plot_budget(b: Budget, ax=None):
    """A horizontal bar chart of ``b``: each approximation's error alone (max and mean, log
    scale), with the emulator's total as vertical lines. Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.45 * len(b.parts) + 1.2))
    y = np.arange(len(b.parts))[::-1]
    floor = max(b.exact_max, 1e-17)
    ax.barh(y + 0.2, [max(p.alone_max, floor) for p in b.parts], height=0.4, label="max (alone)")
    ax.barh(y - 0.2, [max(p.alone_mean, floor) for p in b.parts], height=0.4,
            label="mean (alone)")
    ax.axvline(b.total_max, color="k", ls="--", lw=1, label="emulator max")
    ax.axvline(b.total_mean, color="k", ls=":", lw=1, label="emulator mean")
    ax.set_yticks(y, [p.label for p in b.parts])
    ax.set_xscale("log")
    ax.set_xlabel("relative error against float64 (of the row's max |O|)")
    ax.set_title(f"error budget of {b.scope} ({b.fmt})")
    ax.legend(fontsize="small", loc="lower right")
    return ax


def _run(args, exact: Exactness) -> np.ndarray:
    q, k, v, kw = args
    return forward(q, k, v, **kw, exact=exact).out


def _ref_kwargs(kw: dict) -> dict:
    drop = ("executor", "memory_budget", "progress", "max_seqlen_q", "max_seqlen_k", "pack_gqa")
    return {n: x for n, x in kw.items() if n not in drop}


def _index(name: str, value, n: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < n:
        raise ValueError(f"{name}: expected the {what} in 0..{n - 1}, got {value!r}")
    return int(value)


def _where(row, head, cfg):
    """(b, h, m or None) of ``row`` / ``head``, checked against the call; None: the call."""
    if row is not None and head is not None:
        raise ValueError("row, head: give one of them, not both")
    if row is not None:
        if isinstance(row, (int, np.integer)) and not isinstance(row, bool):
            n = cfg.batch * cfg.heads * cfg.seqlen_q
            flat = _index("row", row, n, "flat row index (batch, head, query)")
            return flat // (cfg.heads * cfg.seqlen_q), flat // cfg.seqlen_q % cfg.heads, \
                flat % cfg.seqlen_q
        if not isinstance(row, (tuple, list)) or len(row) != 3:
            raise ValueError(f"row: expected (batch, head, query) or a flat index, got {row!r}")
        return (_index("row", row[0], cfg.batch, "batch"), _index("row", row[1], cfg.heads, "head"),
                _index("row", row[2], cfg.seqlen_q, "query index"))
    if head is not None:
        if not isinstance(head, (tuple, list)) or len(head) != 2:
            raise ValueError(f"head: expected (batch, head), got {head!r}")
        return _index("head", head[0], cfg.batch, "batch"), \
            _index("head", head[1], cfg.heads, "head"), None
    return None


def _slice(q, k, v, kwargs, cfg, b, h, m):
    """The forward of batch ``b`` and the query heads of ``h``'s KV head, and the selection of
    the row (or head) in its output."""
    g = cfg.qhead_per_khead
    hkv = h // g
    kw = dict(kwargs)
    kw["pack_gqa"] = cfg.pack_gqa
    kw.setdefault("max_seqlen_q", cfg.max_seqlen_q)
    kw.setdefault("max_seqlen_k", cfg.max_seqlen_k)
    if kw.get("seqlens_k") is not None:
        kw["seqlens_k"] = np.asarray(kw["seqlens_k"])[b: b + 1]
    for n in ("q_descale", "k_descale", "v_descale"):
        if kw.get(n) is not None:
            d = np.broadcast_to(np.asarray(kw[n]), (cfg.batch, cfg.heads_kv))
            kw[n] = np.ascontiguousarray(d[b: b + 1, hkv: hkv + 1])
    if kw.get("qv") is not None:  # MLA: qv has q's rows and heads
        kw["qv"] = kw["qv"][b: b + 1, :, hkv * g: (hkv + 1) * g]
    args = (q[b: b + 1, :, hkv * g: (hkv + 1) * g], k[b: b + 1, :, hkv: hkv + 1],
            v[b: b + 1, :, hkv: hkv + 1], kw)
    if m is None:
        return args, (0, slice(None), h - hkv * g), f"head (batch {b}, head {h})"
    return args, (0, m, h - hkv * g), f"row (batch {b}, head {h}, query {m})"
