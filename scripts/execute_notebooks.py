"""Regenerate the committed notebooks: execute each jupytext source ``notebooks/src/NN_name.py``
top to bottom and write ``notebooks/NN_name.ipynb`` with its outputs and figures.

    python scripts/execute_notebooks.py                  # every notebooks/src/NN_*.py
    python scripts/execute_notebooks.py 04 12_exp2_vs_expf   # some (by number or stem)
    python scripts/execute_notebooks.py --check          # only say which .ipynb are stale

Run as the tests do: ``SIMULATOR_NOTEBOOK_STATIC=1`` (static figures instead of sliders), the
inline matplotlib backend with figures as PNG at ``--dpi`` (72 by default, which keeps all the
notebooks together at a few MB), no execution timings in the cell metadata. Each ``.ipynb`` is
written atomically and only after its whole source ran without error; a failing notebook is
named with the cell's traceback, the others are still written, and the exit code is 1.
Needs the ``notebooks`` extra (nbclient, nbformat, ipykernel, jupytext, matplotlib).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.io import write_bytes_atomic  # noqa: E402

NOTEBOOK_DIR = ROOT / "notebooks"
SOURCE_DIR = NOTEBOOK_DIR / "src"
PAIRING = "ipynb,src//py:percent"
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def sources(names: list[str]) -> list[Path]:
    """The sources to run: every ``notebooks/src/NN_*.py``, or those whose stem equals or starts
    with one of ``names`` (``"04"``, ``"12_exp2_vs_expf"``, a path to the source or its .ipynb).

    Raises:
        ValueError: a name matches no source (the message lists the sources).
    """
    every = sorted(SOURCE_DIR.glob("[0-9][0-9]_*.py"))
    if not names:
        return every
    chosen = []
    for name in names:
        stem = Path(name).stem
        hits = [p for p in every if p.stem == stem or p.stem.startswith(stem + "_")]
        if not hits:
            raise ValueError(f"no notebook source matches {name!r}; sources: "
                             + ", ".join(p.stem for p in every))
        chosen += [p for p in hits if p not in chosen]
    return chosen


def ipynb_of(source: Path) -> Path:
    """``notebooks/NN_name.ipynb`` of the source ``notebooks/src/NN_name.py``."""
    return NOTEBOOK_DIR / f"{source.stem}.ipynb"


def stale_reason(source: Path) -> str | None:
    """Why the committed ``.ipynb`` of ``source`` is stale (missing, unreadable, other cells
    than the source, a code cell never executed), or None when it is current."""
    import jupytext  # noqa: PLC0415
    import nbformat  # noqa: PLC0415

    path = ipynb_of(source)
    if not path.is_file():
        return f"{path.name} is missing"
    try:
        nb = nbformat.read(path, as_version=4)
        got = [(c.cell_type, c.source) for c in nb.cells]
    except (ValueError, TypeError, AttributeError, KeyError) as exc:  # a merge's conflict markers
        return f"{path.name} is not a readable notebook ({type(exc).__name__}: {str(exc)[:80]})"
    want = [(c.cell_type, c.source) for c in jupytext.read(source).cells]
    if got != want:
        first = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w),
                     min(len(got), len(want)))
        return f"{path.name} holds other cells than {source.name} (first at cell {first})"
    unrun = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count is None]
    if unrun:
        return f"{path.name} was not executed (code cell {unrun[0]} has no execution count)"
    return None


def execute(source: Path, dpi: int, timeout: int) -> float:
    """Execute ``source`` in a fresh python3 kernel (cwd ``notebooks/``) and write its
    ``.ipynb`` atomically; returns the seconds it took.

    Raises:
        nbclient.exceptions.CellExecutionError: a cell failed (nothing is written).
    """
    import jupytext  # noqa: PLC0415
    import nbformat  # noqa: PLC0415
    from nbclient import NotebookClient  # noqa: PLC0415

    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata.setdefault("jupytext", {})["formats"] = PAIRING
    for i, cell in enumerate(nb.cells):  # stable ids: a re-run changes only what the cells print
        cell.id = f"cell-{i:02d}"
    with tempfile.TemporaryDirectory() as rc_dir:
        Path(rc_dir, "matplotlibrc").write_text(f"figure.dpi: {dpi}\nsavefig.dpi: {dpi}\n")
        # the kernel imports this checkout's simulator, whatever the environment has installed
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = {"SIMULATOR_NOTEBOOK_STATIC": "1", "MATPLOTLIBRC": rc_dir, "PYTHONPATH": path}
        saved = {k: os.environ.get(k) for k in (*env, "MPLBACKEND")}
        os.environ.update(env)
        os.environ.pop("MPLBACKEND", None)  # the inline backend, so the figures are kept
        try:
            client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                                    resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
            start = time.perf_counter()
            client.execute()
            elapsed = time.perf_counter() - start
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    nb.metadata.pop("widgets", None)
    write_bytes_atomic(ipynb_of(source), (nbformat.writes(nb) + "\n").encode())
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="notebook numbers or stems (default: all)")
    ap.add_argument("--check", action="store_true", help="only list stale .ipynb; exit 1 if any")
    ap.add_argument("--dpi", type=int, default=72, help="figure resolution (default 72)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = ap.parse_args(argv)
    if not 30 <= args.dpi <= 300:
        ap.error(f"--dpi must lie in 30..300, got {args.dpi}")
    if args.timeout < 1:
        ap.error(f"--timeout must be at least 1 second, got {args.timeout}")
    try:  # a usage error (2), not the exit code 1 of a stale or failing notebook
        chosen = sources(args.names)
    except ValueError as exc:
        ap.error(str(exc))
    if args.check:
        reasons = [r for r in map(stale_reason, chosen) if r]
        print("\n".join(reasons) if reasons else f"{len(chosen)} notebooks current")
        return 1 if reasons else 0
    from nbclient.exceptions import CellExecutionError  # noqa: PLC0415

    failed = []
    for source in chosen:
        try:
            dt = execute(source, args.dpi, args.timeout)
        except CellExecutionError as exc:
            failed.append(source.name)
            print(f"{source.name}: FAILED\n{exc}", file=sys.stderr)
            continue
        size = ipynb_of(source).stat().st_size
        print(f"{source.name}: executed in {dt:.1f} s, {ipynb_of(source).name} {size / 1024:.0f} kB",
              flush=True)
    total = sum(p.stat().st_size for p in NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    print(f"all notebooks/NN_*.ipynb together: {total / 1e6:.2f} MB")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
