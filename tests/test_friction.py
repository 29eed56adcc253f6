"""What a newcomer meets first: ``run --plot``'s figure, the width of what ``run`` / ``verify``
/ ``--explain`` print, the summary's headline, and progress from the Python API."""

from __future__ import annotations

import pytest

from simulator import cli


def _figure_of_plot(monkeypatch, tmp_path, *args):
    """Run ``run --plot`` in this process and return the matplotlib figure it saved."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    saved = []
    real = Figure.savefig

    def keep(fig, *a, **kw):
        saved.append(fig)
        return real(fig, *a, **kw)

    monkeypatch.setattr(Figure, "savefig", keep)
    png = tmp_path / "p.png"
    assert cli.main(["run", "--no-progress", "--out", str(tmp_path / "o.npz"), "--plot", str(png),
                     *args]) == 0
    assert png.stat().st_size > 1000 and len(saved) == 1
    return saved[0]


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("heads", ["0-4", "0-11"])
def test_plot_has_every_panel_and_nothing_overlaps(monkeypatch, tmp_path, capsys, heads):
    """Per head an attention panel and an error panel, the two colour bars with their labels,
    the title; no panel's drawn extent (ticks, labels, title) runs into another's (the layout
    is fixed, not computed by matplotlib's constrained layout)."""
    fig = _figure_of_plot(monkeypatch, tmp_path, "--heads", heads)
    first, last = (int(x) for x in heads.split("-"))
    n = last - first + 1
    panels = [ax for ax in fig.axes if ax.images and ax.get_title()]
    titles = [ax.get_title() for ax in panels]
    assert len(panels) == 2 * n
    assert [t for t in titles if t.endswith("P (reference)")] == [
        f"head {h}: P (reference)" for h in range(first, last + 1)]
    assert sum(t.startswith("|O - ref|, max ") for t in titles) == n
    bars = [ax.get_xlabel() for ax in fig.axes if not ax.get_title() and ax.get_visible()
            and ax.get_xlabel()]
    assert sorted(bars) == ["reference attention probability P",
                            "|O - ref| in bf16 ulp at the reference value (green: exact)"]
    assert "reference attention pattern beside the emulated O's error" in fig._suptitle.get_text()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # the figure was closed after its save
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_visible() and ax.axison]
    page = fig.bbox
    for i, a in enumerate(boxes):
        assert page.x0 <= a.x0 and a.x1 <= page.x1 + 1 and page.y0 <= a.y0 and a.y1 <= page.y1 + 1
        for b in boxes[i + 1:]:
            assert not _overlap(a, b), (a, b)
