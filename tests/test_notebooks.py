"""The teaching notebooks: sources, pairing, lint, and execution top to bottom, as CI does.

Each notebook is a jupytext percent-format source ``notebooks/src/NN_name.py`` (what is edited,
reviewed and linted) paired with ``notebooks/NN_name.ipynb`` (what Jupyter opens, committed
executed with its outputs and figures so that it renders on a code host); only the ``.ipynb``
sits in ``notebooks/``, so JupyterLab lists each notebook once. The tests check that every
notebook has both files, that the ``.ipynb`` holds the same cells as its source (so an edit
saved in Jupyter with jupytext passes, and an edit of one file alone does not) and was executed
(``python scripts/execute_notebooks.py NN`` regenerates it), that ruff reads the sources, and
they execute every source. Each notebook asserts its own key claims in its cells, so "executes
without error" is the check.

Needs the ``notebooks`` extra (ipykernel, nbclient, nbformat, matplotlib, jupytext); skipped,
with the reason, where any of them is missing. ``SIMULATOR_NOTEBOOK_STATIC=1`` is set for the
kernel so that interactive widgets fall back to static figures.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
SOURCES = sorted((NOTEBOOK_DIR / "src").glob("[0-9][0-9]_*.py"))
PAIRED = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
PAIRING = "ipynb,src//py:percent"
NEEDED = ("nbclient", "nbformat", "ipykernel", "matplotlib", "jupytext")
MISSING = [m for m in NEEDED if importlib.util.find_spec(m) is None]
needs_jupyter = pytest.mark.skipif(
    bool(MISSING), reason=f"notebook execution needs {', '.join(MISSING)} "
    "(pip install -e '.[notebooks]')")
needs_jupytext = pytest.mark.skipif(importlib.util.find_spec("jupytext") is None,
                                    reason="needs jupytext (pip install -e '.[test]')")
SYNC_HINT = "run `.venv/bin/python scripts/execute_notebooks.py {}` (executes the source, writes the .ipynb)"


def test_every_notebook_has_a_source_and_a_paired_ipynb():
    sources = {p.stem for p in SOURCES}
    paired = {p.stem for p in PAIRED}
    assert len(sources) >= 8, f"expected notebook sources 01..08 in {NOTEBOOK_DIR}, found {sorted(sources)}"
    assert not paired - sources, f"notebooks without a jupytext source: {sorted(paired - sources)}"
    assert not sources - paired, (f"sources without their .ipynb: {sorted(sources - paired)}; "
                                  "run `.venv/bin/python scripts/execute_notebooks.py NN`")


def test_jupyterlab_lists_each_notebook_once():
    """Only the .ipynb sit in notebooks/ (the sources in notebooks/src/), and jupytext.toml pairs
    them, so that Jupyter saves an edit into both files."""
    import tomllib

    stray = sorted(p.name for p in NOTEBOOK_DIR.glob("*.py"))
    assert not stray, (f"notebook sources belong in notebooks/src/, found in notebooks/: {stray}; "
                       "`git mv` them there, set their header's formats to " + PAIRING)
    config = tomllib.loads((NOTEBOOK_DIR / "jupytext.toml").read_text(encoding="utf-8"))
    assert config.get("formats") == PAIRING, config


@needs_jupytext
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_ipynb_is_in_sync_with_its_source(source):
    import jupytext
    import nbformat

    text = source.read_text(encoding="utf-8")
    assert text.startswith("# ---\n# jupyter:\n"), f"{source.name}: no jupytext header"
    nb_src = jupytext.reads(text, fmt="py:percent")
    assert nb_src.metadata.get("jupytext", {}).get("formats") == PAIRING, (
        f"{source.name}: jupytext formats should be {PAIRING!r} (pairs it with the .ipynb)")
    paired = NOTEBOOK_DIR / f"{source.stem}.ipynb"
    nb = nbformat.read(paired, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("jupytext", {}).get("formats") == PAIRING, (
        f"{paired.name}: not paired with its source; " + SYNC_HINT.format(source.stem[:2]))
    want = [(c.cell_type, c.source) for c in nb_src.cells]
    got = [(c.cell_type, c.source) for c in nb.cells]
    if got != want:
        first = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w),
                     min(len(got), len(want)))
        pytest.fail(f"{paired.name} and {source.name} differ (first at cell {first}; "
                    f"{len(got)} vs {len(want)} cells): " + SYNC_HINT.format(source.stem[:2]),
                    pytrace=False)
    code = [c for c in nb.cells if c.cell_type == "code"]
    unrun = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count is None]
    assert code and not unrun, (f"{paired.name} was not executed (code cell {unrun[:1]} has no "
                                "execution count): " + SYNC_HINT.format(source.stem[:2]))
    assert any(c.outputs for c in code), f"{paired.name} has no outputs: " + SYNC_HINT.format(source.stem[:2])
    errors = [o for c in code for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, f"{paired.name} holds an error output: " + SYNC_HINT.format(source.stem[:2])


@pytest.mark.skipif(shutil.which("ruff") is None and importlib.util.find_spec("ruff") is None,
                    reason="needs ruff (pip install -e '.[test]')")
def test_sources_pass_ruff():
    """``ruff check .`` (CI's lint) reads the sources: they are not excluded, and they are clean."""
    cmd = [sys.executable, "-m", "ruff"] if importlib.util.find_spec("ruff") else ["ruff"]
    listed = subprocess.run([*cmd, "check", "--show-files", "."], cwd=ROOT, capture_output=True,
                            text=True)
    assert listed.returncode == 0, listed.stderr
    shown = {Path(line.strip()).resolve() for line in listed.stdout.splitlines() if line.strip()}
    assert {p.resolve() for p in SOURCES} <= shown, "ruff does not read every notebooks/src/NN_name.py"
    r = subprocess.run([*cmd, "check", *map(str, SOURCES)], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@needs_jupyter
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_executes(source, monkeypatch):
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("SIMULATOR_NOTEBOOK_STATIC", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = jupytext.read(source)
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3",
                                          "language": "python"})
    client = NotebookClient(nb, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as exc:  # the message holds the cell source and the traceback
        pytest.fail(f"{source.name} failed:\n{exc}", pytrace=False)
    elapsed = time.perf_counter() - start
    print(f"{source.name}: executed in {elapsed:.1f} s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, f"{source.name}: error outputs {errors}"
    assert os.environ.get("SIMULATOR_NOTEBOOK_STATIC") == "1"
    if source.stem.startswith("08_"):  # counts of values, blocks and keys with thousands separators
        text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                       for o in c.get("outputs", []) if o.get("output_type") == "stream")
        counts = [line for line in text.splitlines()
                  if " values differ" in line or "K/V blocks" in line or "(keys " in line]
        assert counts and not [x for x in counts if re.search(r"\d{4}", x)], counts
        assert re.search(r"O 0 of \d{1,3}(,\d{3})+ values differ", text), text


def test_notebook_setup_reads_the_static_switch():
    """simulator.notebook.setup(): the shared first cell of the notebooks."""
    import ml_dtypes

    from simulator import notebook

    ci = notebook.setup({"SIMULATOR_NOTEBOOK_STATIC": "1"})
    assert ci.static and ci.widgets is None and ci.bf16 is ml_dtypes.bfloat16
    assert notebook.setup({}).static is False
    assert re.fullmatch(r"notebook ran in \d+\.\d s; every assertion above holds", ci.finish())


def test_every_notebook_starts_and_ends_through_simulator_notebook():
    """One setup for all: each source calls notebook.setup() in its first code cell and prints
    NB.finish() last (no notebook keeps its own clock or static switch)."""
    assert len(SOURCES) >= 11, [p.name for p in SOURCES]
    for source in SOURCES:
        text = source.read_text(encoding="utf-8")
        assert "NB = notebook.setup()" in text and text.rstrip().endswith("print(NB.finish())"), source.name
        assert "T0 = time.perf_counter()" not in text, source.name


@needs_jupytext
def test_execute_notebooks_script_sees_every_source_and_finds_them_current(capsys, tmp_path,
                                                                           monkeypatch):
    """scripts/execute_notebooks.py (which writes the committed .ipynb) covers every source,
    picks one by number, refuses an unknown name, and its --check agrees with the tests above."""
    import importlib.util as iu

    spec = iu.spec_from_file_location("execute_notebooks", ROOT / "scripts" / "execute_notebooks.py")
    script = iu.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.sources([]) == SOURCES and script.PAIRING == PAIRING
    assert [p.stem[:2] for p in script.sources(["04"])] == ["04"]
    with pytest.raises(ValueError, match="no notebook source matches 'nope'"):
        script.sources(["nope"])
    assert script.main(["--check"]) == 0, capsys.readouterr().out
    for bad in (["--check", "99"], ["--timeout", "0", "04"]):  # usage errors, not "stale" (1)
        with pytest.raises(SystemExit) as exit_:
            script.main(bad)
        assert exit_.value.code == 2, bad
    broken = tmp_path / SOURCES[0].with_suffix(".ipynb").name  # conflict markers of a merge
    broken.write_text("<<<<<<< HEAD\n{}\n=======\n{}\n>>>>>>> other\n")
    monkeypatch.setattr(script, "NOTEBOOK_DIR", tmp_path)
    assert script.stale_reason(SOURCES[0]).startswith(f"{broken.name} is not a readable notebook")
