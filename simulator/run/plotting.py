"""``python -m simulator run --plot``: attention weights and the error of O per element, as a
picture (matplotlib)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from ..errors import UsageError
from .metrics import ulp
from .results import check_output_path
from .workload import Workload, varlen_lengths

PLOT_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg")


def check_plot_path(path, inputs: tuple[tuple[str, object], ...] = ()) -> None:
    """--plot: a format matplotlib writes (by the extension), a writable place, not an input
    (:func:`.results.check_output_path`)."""
    check = path
    path = Path(path)
    ext = path.suffix.lower().lstrip(".")
    if ext not in PLOT_FORMATS:
        got = f"extension {path.suffix!r}" if path.suffix else "no extension"
        raise UsageError(f"--plot {path}: {got}; expected one of "
                         f"{', '.join('.' + f for f in PLOT_FORMATS)}")
    check_output_path(check, "--plot", inputs)


#: the figure's fixed margins, in inches: matplotlib's constrained layout measured every tick
#: label of the 24 panels of the default job twice per save (most of the plot's time), while
#: these panels all have the same furniture (a title, 6-point ticks, one axis label each side)
_TOP, _BOTTOM_PANELS, _BARS, _LEFT, _RIGHT = 0.4, 0.45, 1.45, 0.45, 0.1
#: the title: inches per line, and characters per inch of its 9-point type (about)
_TITLE_LINE, _TITLE_CHARS = 0.18, 14
#: gaps: between a head's two panels, between heads (room for the next one's "query" label), rows
_PANEL_W, _PANEL_H, _GAP_PAIR, _GAP_HEAD, _GAP_H = 1.95, 1.5, 0.3, 0.6, 0.45


def _layout(plt, nrow: int, pairs: int, title: str):
    """A figure of ``nrow`` x ``2 * pairs`` panels at fixed positions, two horizontal colour
    bar axes under them (the error's, then P's), centred, and ``title`` above them, wrapped
    to the figure's width: (figure, axes array, bar axes)."""
    import textwrap

    width = _LEFT + _RIGHT + 2 * pairs * _PANEL_W + pairs * _GAP_PAIR + (pairs - 1) * _GAP_HEAD
    lines = [w for line in title.splitlines()
             for w in textwrap.wrap(line, int(width * _TITLE_CHARS))]
    top = _TOP + _TITLE_LINE * len(lines)
    height = top + nrow * _PANEL_H + (nrow - 1) * _GAP_H + _BOTTOM_PANELS + _BARS
    fig = plt.figure(figsize=(width, height))
    fig.suptitle("\n".join(lines), fontsize=9, y=1 - 0.12 / height)
    axes = np.empty((nrow, 2 * pairs), dtype=object)
    for r in range(nrow):
        bottom = height - top - (r + 1) * _PANEL_H - r * _GAP_H
        for c in range(2 * pairs):
            left = _LEFT + c * _PANEL_W + (c - c // 2) * _GAP_PAIR + (c // 2) * _GAP_HEAD
            axes[r, c] = fig.add_axes((left / width, bottom / height, _PANEL_W / width,
                                       _PANEL_H / height))
    bar_w = min(width - _LEFT - _RIGHT, max(0.35 * width, 3.0))
    bars = [fig.add_axes(((width - bar_w) / 2 / width, y / height, bar_w / width, 0.16 / height))
            for y in (_BARS - 0.35, _BARS - 1.05)]
    return fig, axes, bars


def plot(path: Path, work: Workload, kwargs: dict, cfg, out, ref_out, batch: int) -> None:
    """Per head: the reference attention pattern P [Sq, Sk] beside |O - ref| in output ulps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..flash.masks import allowed

    out_fmt = "bf16" if work.fmt == "e4m3" else work.fmt
    B, S, H, d = work.q.shape
    group = H // work.k.shape[2]
    kvh = np.arange(H) // group
    q = work.q[batch].astype(np.float64)
    k = work.k[batch].astype(np.float64)[:, kvh]
    s = np.einsum("qhd,khd->hqk", q, k) * float(cfg.consts["softmax_scale"])
    bc = 0 if work.query_rows is not None else batch  # a varlen sequence's own config: batch 0
    s *= (cfg.q_descale[bc].astype(np.float64) * cfg.k_descale[bc])[kvh][:, None, None]
    if cfg.softcap > 0:
        s = cfg.softcap * np.tanh(s / cfg.softcap)
    if work.query_rows is not None:  # a varlen sequence: its own rows and keys
        rows_b, keys_b = (int(x[batch]) for x in varlen_lengths(work))
        ok = np.zeros((S, k.shape[0]), dtype=bool)
        ok[:rows_b, :keys_b] = allowed(np.arange(rows_b)[:, None], np.arange(keys_b)[None, :],
                                       rows_b, keys_b, cfg.window)
    else:
        ok = allowed(np.arange(S)[:, None], np.arange(k.shape[0])[None, :], S,
                     int(cfg.seqlens_k[batch]), cfg.window)
    s = np.where(ok[None], s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    p = np.exp(s - mx)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(p.sum(-1, keepdims=True) > 0, p / p.sum(-1, keepdims=True), 0.0)
    o = out[batch].astype(np.float64)
    r = ref_out[batch]
    note = ""
    if work.query_rows is not None:  # an extracted input: hide the zero padding rows and keys
        n = int(work.query_rows[batch])
        p, o, r = p[:, :n, :n], o[:n], r[:n]
        note = f" ({n} tokens; padding hidden)"
    eu = np.where(np.isfinite(o) & np.isfinite(r), np.abs(o - r) / ulp(r, out_fmt), np.nan)
    from matplotlib.colors import LogNorm, PowerNorm

    pairs = min(H, 3)                      # heads per figure row, each as [P | error]
    nrow = math.ceil(H / pairs)
    title = (f"{work.source}\nbatch {batch}{note}: reference attention pattern beside the "
             f"emulated O's error (cyan: non-finite)")
    fig, axes, bars = _layout(plt, nrow, pairs, title)
    finite = eu[np.isfinite(eu)]
    top = max(1.0, float(finite.max()) if finite.size else 1.0)
    norm = LogNorm(vmin=0.01, vmax=top)
    # exact (under): a colour magma does not use (its low end is black); non-finite (bad): cyan
    cmap = plt.get_cmap("magma").with_extremes(under="limegreen", bad="cyan")
    im_p = im_e = None
    for h in range(H):
        r_, c = divmod(h, pairs)
        ax, ax2 = axes[r_, 2 * c], axes[r_, 2 * c + 1]
        im_p = ax.imshow(p[h], cmap="viridis", aspect="auto", interpolation="nearest",
                         norm=PowerNorm(0.4, vmin=0.0, vmax=1.0))
        # y given: matplotlib would otherwise measure the tick labels to place each title
        ax.set_title(f"head {work.heads[h]}: P (reference)", fontsize=8, y=1.0)
        im_e = ax2.imshow(np.where(eu[:, h, :] == 0, 1e-30, eu[:, h, :]), cmap=cmap, norm=norm,
                          aspect="auto", interpolation="nearest")
        ax2.set_title(f"|O - ref|, max {np.nanmax(eu[:, h]):.3g} ulp", fontsize=8, y=1.0)
        ax.set_ylabel("query", fontsize=7)
        if r_ == nrow - 1 or h + pairs >= H:
            ax.set_xlabel("key", fontsize=7)
            ax2.set_xlabel("head dim", fontsize=7)
        for a in (ax, ax2):
            a.tick_params(labelsize=6)
    for h in range(H, nrow * pairs):
        r_, c = divmod(h, pairs)
        axes[r_, 2 * c].axis("off")
        axes[r_, 2 * c + 1].axis("off")
    for cax, im, label in ((bars[0], im_e, f"|O - ref| in {out_fmt} ulp at the reference value "
                                             "(green: exact)"),
                           (bars[1], im_p, "reference attention probability P")):
        cb = fig.colorbar(im, cax=cax, orientation="horizontal", label=label)
        cb.ax.tick_params(labelsize=6)
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lower().lstrip(".") or "png", dpi=110)
    plt.close(fig)
    from ..io import write_bytes_atomic

    write_bytes_atomic(path, buf.getvalue())
