"""What a newcomer meets first: ``run --plot``'s figure, the width of what ``run`` / ``verify``
/ ``--explain`` print, the summary's headline, and progress from the Python API."""

from __future__ import annotations

import io
import sys

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


def test_plot_raises_no_deprecation_warning(monkeypatch, tmp_path):
    """run --plot through matplotlib's current colormap API: no (Pending)DeprecationWarning
    in a user's log or test run."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        warnings.simplefilter("error", PendingDeprecationWarning)
        _figure_of_plot(monkeypatch, tmp_path, "--heads", "0-1")


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("heads", ["0-0", "0-4", "0-11"])
def test_plot_has_every_panel_and_nothing_overlaps(monkeypatch, tmp_path, capsys, heads):
    """Per head an attention panel and an error panel, the two colour bars with their labels,
    the title; no panel's drawn extent (ticks, labels, title) runs into another's or past the
    figure's edge, the figure's title included (the layout is fixed, not computed by
    matplotlib's constrained layout)."""
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
    assert "reference attention pattern beside the emulated O's error" in " ".join(
        fig._suptitle.get_text().split())
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # the figure was closed after its save
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_visible() and ax.axison]
    boxes.append(fig._suptitle.get_window_extent(renderer))  # wrapped to the figure's width
    page = fig.bbox
    for i, a in enumerate(boxes):
        assert page.x0 <= a.x0 and a.x1 <= page.x1 + 1 and page.y0 <= a.y0 and a.y1 <= page.y1 + 1
        for b in boxes[i + 1:]:
            assert not _overlap(a, b), (a, b)


def _lines(capsys, argv) -> list[str]:
    capsys.readouterr()
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    return out.splitlines() + err.splitlines()


@pytest.mark.parametrize("argv", [
    ["run", "--no-progress"],
    ["run", "--no-progress", "--explain", "0,0,102"],
    ["verify", "--quick", "--topic", "hw"],
    ["run", "--no-progress", "--step", "--kblock-n", "64"],
], ids=["run", "explain", "verify", "step"])
def test_what_the_commands_print_fits_100_columns(capsys, tmp_path, argv):
    """run, run --explain, verify and run --step's table on the default input: no line
    reaches 100 columns (a terminal of 100 wraps a longer one mid-word)."""
    if argv[0] == "run":
        argv = [*argv, "--out", str(tmp_path / "o.npz")]
    lines = _lines(capsys, argv)
    assert len(lines) > 5
    assert max(len(line) for line in lines) < 100, max(lines, key=len)


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["verify", "--help"],
                                  ["measure", "--help"]], ids=["top", "run", "verify", "measure"])
def test_help_fits_100_columns(capsys, monkeypatch, argv):
    """Each command's --help on a 100-column terminal: argparse wraps its own text; the
    measurement list of measure --help is laid out by hand and must fit too."""
    monkeypatch.setenv("COLUMNS", "100")
    capsys.readouterr()
    try:  # argparse's --help exits; measure's hand-made list returns
        code = cli.main(argv)
    except SystemExit as done:
        code = done.code
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 5
    assert max(len(line) for line in lines) < 100, max(lines, key=len)


def test_verify_table_wraps_long_check_names_and_details_within_its_columns():
    """The longest check names of the full replay (up to 98 characters) and a mismatch's
    detail continue on lines of their own; the numbers stay in their columns."""
    from simulator.verify import format_table

    name = ("FA3 qv / varlen KV-cache / metadata hypothesis-drawn calls (sampled) vs the real "
            "library, 50 calls")
    rows = [{"topic": "fa3", "check": name, "cases": 1_234_567, "mismatches": 0, "detail": ""},
            {"topic": "numerics", "check": "cvt.f32.bf16 (all 2^16)", "cases": 65_536,
             "mismatches": 3, "detail": "first differing input " + "0x7f800001 " * 20},
            {"topic": "numerics", "check": "(elapsed)", "cases": 0, "mismatches": 0,
             "detail": "1.0 s"}]
    lines = format_table(rows).splitlines()
    assert max(len(line) for line in lines) < 100
    assert lines[1].startswith("fa3       FA3 qv / varlen") and lines[1].endswith("1,234,567          0")
    assert " ".join(lines[1].split()[1:-2] + lines[2].split()) == name  # whole, in order
    assert lines[3].endswith("65,536          3") and lines[4].startswith("          <-- first")
    assert lines[-1] == "total: 1,300,103 device results replayed, 3 mismatches"


def test_the_error_headline_is_relative_to_the_row_and_the_raw_ulp_max_comes_last(capsys, tmp_path):
    """The default input's largest ulp count (about 1.5e3) is at an output near zero: the
    summary leads with the error relative to its row's largest |ref| and the ulp maximum
    where |ref| is not tiny; the raw ulp maximum follows, labelled, with where it is."""
    from simulator import run

    out = tmp_path / "o.npz"
    text = "\n".join(_lines(capsys, ["run", "--no-progress", "--out", str(out)]))
    m = run.load_result(out)["params"]["metrics"]
    error = text[text.index("error     "):text.index("          LSE:")]
    first = error.splitlines()[1].split()
    assert first[:2] == ["max", "|error|"] and first[2] == f"{100 * m['out_max_row_rel']:.3g}%"
    assert 0 < m["out_max_row_rel"] < 0.02          # bf16: P rounded, a few 2^-8 of the row
    assert m["out_max_ulp_significant"] < 100 < m["out_max_ulp"]
    assert error.index("max |error|") < error.index("ulps at the") < error.index("raw max")
    raw = " ".join(error[error.index("raw max"):].split())
    assert raw.startswith(f"raw max {m['out_max_ulp']:.3g} ulp (every element) at a near-zero "
                          "output, |ref| under 1% of the row max")
    per_head = text[text.index("max ulp per head"):].split(":", 1)[1].split("\n")[0]
    assert "e+03" not in per_head


def test_the_headline_row_reads_in_explains_order(capsys, tmp_path):
    """The summary names its worst row as batch, head, row (the LSE line's order and that of
    ``--explain B,H,M``) and gives the ``--explain`` that splits its error; that row's budget
    has the headline's error."""
    import re

    from simulator import run

    out = tmp_path / "o.npz"
    text = "\n".join(_lines(capsys, ["run", "--no-progress", "--out", str(out)]))
    m = run.load_result(out)["params"]["metrics"]
    where = re.search(r"of the row max \|ref\| \(batch (\d+), head (\d+), row (\d+), dim \d+\)",
                      text)
    assert where is not None, text
    b, h, r = (int(g) for g in where.groups())
    rb, rr, rh, _ = m["out_worst_row_rel"]
    assert (b, h, r) == (rb, rh, rr)
    assert f"why: --explain {b},{h},{r} (same options)" in text  # the next step, spelt out
    explained = "\n".join(_lines(capsys, ["run", "--no-progress", "--explain", f"{b},{h},{r}"]))
    assert f"error budget of row (batch {b}, head {h}, query {r})" in explained
    emulator = next(line for line in explained.splitlines() if line.startswith("emulator"))
    assert float(emulator.split()[-2]) == pytest.approx(m["out_max_row_rel"], rel=1e-2)


def test_row_scaled_metrics_on_a_small_case():
    """measure's row-relative error and the ulp maximum over significant elements, by hand:
    a row [1, 2^-10] with errors of 1 ulp at 1 (2^-7) and 8 ulp at 2^-10."""
    import ml_dtypes
    import numpy as np

    from simulator import run

    ref = np.array([1.0, 2.0**-10])[None, None, None, :]            # [B, S, H, d]
    out = np.array([1.0 + 2.0**-7, 2.0**-10 + 8 * 2.0**-17], ml_dtypes.bfloat16)[None, None, None]
    lse = np.zeros((1, 1, 1), np.float32)
    m = run.measure(out, lse, ref, lse.astype(np.float64), "bf16")
    assert m["out_max_ulp"] == 8.0 and m["out_worst"] == (0, 0, 0, 1)   # the tiny value
    assert m["out_max_ulp_significant"] == 1.0                            # 2^-10 < 1% of 1
    assert m["out_max_row_rel"] == 2.0**-7 and m["out_worst_row_rel"] == (0, 0, 0, 0)
    assert m["out_worst_row_max"] == 1.0 and m["per_head_max_ulp_significant"] == [1.0]


def test_error_headline_on_zero_rows_prints_no_inf_and_no_spurious_place():
    """A row whose reference is all zero (the emulator's not) has no scale: its headline gives
    the absolute error there, not "inf%"; an output equal to the reference names no place."""
    import warnings

    import ml_dtypes
    import numpy as np

    from simulator import run
    from simulator.run.report import _error_lines

    ref = np.array([[1.0, 0.5], [0.0, 0.0]])[None, :, None, :]          # [B, S, H, d]
    out = np.array([[1.0, 0.5], [2.0**-9, 0.0]], ml_dtypes.bfloat16)[None, :, None, :]
    lse = np.zeros((1, 1, 2), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for o, says in ((out, "max |error| 0.00195 in a row whose reference is all zero "
                                "(batch 0, head 0, row 1, dim 0)"),
                        (ref.astype(ml_dtypes.bfloat16), "max |error| 0: every finite output "
                                                         "equals the reference")):
            lines = _error_lines(run.measure(o, lse, ref, lse.astype(np.float64), "bf16"),
                                 "bf16", [0])
            assert lines[1].strip() == says
            assert not any("inf" in line or "nan" in line for line in lines[:2])


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _small_inputs():
    import ml_dtypes
    import numpy as np

    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(ml_dtypes.bfloat16)
            for s in ((1, 64, 2, 64), (1, 96, 1, 64), (1, 96, 1, 64))]


@pytest.mark.parametrize("api", ["flash.forward", "fa3.flash_attn_func", "flash.backward"])
def test_a_long_call_shows_progress_on_a_terminal_by_default(monkeypatch, api):
    """progress=None (the default): a call expected to take over LONG_CALL_SECONDS prints its
    progress on a terminal; (the threshold is set to 0 here, so that a small call counts as
    long); not off a terminal, not with progress=False, not for a short call. The plain lines,
    as without tqdm: with it installed (the progress extra) the bar is drawn instead."""
    from simulator import fa3, flash
    from simulator.flash import chunks

    monkeypatch.setitem(sys.modules, "tqdm", None)
    q, k, v = _small_inputs()

    def call(**kw):
        if api == "flash.forward":
            return flash.forward(q, k, v, **kw)
        if api == "fa3.flash_attn_func":
            return fa3.flash_attn_func(q, k, v, **kw)
        res = flash.forward(q, k, v, progress=False)
        return flash.backward(q, q, k, v, res.out, res.lse, **kw)

    name = "flash.backward" if api == "flash.backward" else "flash.forward"
    shown = {}
    for threshold in (0.0, chunks.LONG_CALL_SECONDS):
        monkeypatch.setattr(chunks, "LONG_CALL_SECONDS", threshold)
        for stream, kw in ((_Terminal(), {}), (_Terminal(), {"progress": False}),
                           (io.StringIO(), {})):
            monkeypatch.setattr(sys, "stderr", stream)
            call(**kw)
            monkeypatch.setattr(sys, "stderr", sys.__stderr__)
            shown[threshold, type(stream).__name__, bool(kw)] = stream.getvalue()
    long_on_terminal = shown[0.0, "_Terminal", False]
    assert long_on_terminal.startswith(f"{name}: ") and "(100%), in " in long_on_terminal
    assert "K/V block visits" in long_on_terminal
    assert shown[0.0, "_Terminal", True] == ""           # progress=False
    assert shown[0.0, "StringIO", False] == ""           # stderr not a terminal
    assert not any(text for (threshold, _, _), text in shown.items()
                   if threshold > 0)                     # a short call: 10 s is far


def test_the_long_call_rule():
    """auto_progress: None follows the terminal and the estimate; True / False / a callable
    are kept; the estimate of a 2,048-token call (the one that ran 46 s silently) is long."""
    from simulator.flash import chunks

    def rule(progress, seconds, tty):
        stream = _Terminal() if tty else io.StringIO()
        old, sys.stderr = sys.stderr, stream
        try:
            return chunks.auto_progress(progress, seconds)
        finally:
            sys.stderr = old

    assert rule(None, 11.0, True) is True and rule(None, 9.0, True) is False
    assert rule(None, 1e6, False) is False
    assert rule(False, 1e6, True) is False and rule(True, 0.0, False) is True
    assert rule(print, 0.0, False) is print
    # bf16 1 x 2048 x 4 heads x 128: FA3's 128 x 176 tiles, 16 x 12 blocks per head
    assert chunks.estimate_seconds(16 * 12 * 4, 128, 176, 256) > chunks.LONG_CALL_SECONDS
