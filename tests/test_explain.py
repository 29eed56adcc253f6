"""``python -m simulator run --explain ROW``: the error budget of one row (simulator.budget)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simulator import budget, run
from simulator.run.explain import parse_row

REPO = Path(__file__).resolve().parents[1]


def _run(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "simulator", "run", "--no-progress", *args],
                          capture_output=True, text=True, cwd=REPO, env=env)


def _row_of(text: str, label: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(label))
    return line[len(label):].split()


def test_explain_prints_the_budget_of_the_runs_row(tmp_path):
    out = tmp_path / "run.npz"
    full = _run("--out", str(out))
    assert full.returncode == 0, full.stderr
    res = run.load_result(out)
    r = _run("--explain", "1,3,5", "--out", str(tmp_path / "unused.npz"))
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "unused.npz").exists()  # --explain prints and writes nothing
    lines = r.stdout.splitlines()
    assert all(len(line) < 100 for line in lines)
    assert "error budget of row (batch 1, head 3, query 5), bf16, 32 output elements" in lines
    for label in ("P rounded to bf16 before PV", "MUFU.EX2", "MUFU.RCP", "O rounded to bf16",
                  "tensor-core", "float32 FFMA"):
        assert any(line.startswith(label) for line in lines), label
    # the row's emulator error is the error of the full run's saved row (same bits)
    want = budget.relative_error(res["out"][1, 5, 3], res["ref_out"][1, 5, 3])
    assert _row_of(r.stdout, "emulator (all approximations)") == [f"{x:.2e}" for x in want]
    assert float(_row_of(r.stdout, "all exact (float64 round-off)")[0]) < 1e-12


def test_flat_row_is_the_same_row():
    a = _run("--explain", "2,7,11", "--heads", "6,7")
    b = _run("--explain", str((2 * 2 + 1) * 147 + 11), "--heads", "6,7")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout
    assert "row (batch 2, head 7, query 11)" in a.stdout


@pytest.mark.parametrize("args, message", [
    (("--explain", "1,x"), "argument --explain: expected B,H,M"),
    (("--explain", "1,3,9"), "--explain: query 9 is outside 0..7 (batch 1"),
    (("--explain", str((1 * 12 + 3) * 147 + 9)), "--explain: query 9 is outside 0..7 (batch 1"),
    (("--explain", "0,3,0", "--heads", "0,1"), "--explain: head 3 is not among the run's heads [0, 1]"),
    (("--explain", "4,0,0"), "--explain: batch 4 is outside 0..3"),
    (("--explain", str(4 * 12 * 147)), "--explain: flat row 7056 is outside the run's 7056 rows"),
])
def test_explain_errors(args, message):
    r = _run(*args)
    assert r.returncode == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, label", [
    (("--dtype", "e4m3"), "P' = 2^8 P rounded to e4m3 before PV"),
    (("--softcap", "30"), "MUFU.TANH (softcap)"),
])
def test_explain_fp8_and_softcap_fit_in_100_columns(args, label):
    r = _run("--explain", "0,3,100", *args)
    assert r.returncode == 0, r.stderr
    assert any(line.startswith(label) for line in r.stdout.splitlines())
    assert all(len(line) < 100 for line in r.stdout.splitlines())


def test_parse_row():
    assert parse_row("0,3,10") == (0, 3, 10)
    assert parse_row("17") == (17,)
    for bad in ("1,2", "-1", "a", "1,2,3,4", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(repr(bad))):
            parse_row(bad)


def test_budget_of_a_row_with_an_inf_query_says_there_is_nothing_to_compare():
    """A query row holding -inf gives NaN in the float64 reference: the budget compares no
    element. It said "64 output elements" with every error 0 (as if exact), and the exact
    tensor-core path printed numpy's "invalid value encountered in matmul"."""
    import warnings

    import ml_dtypes
    import numpy as np

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 16, 1, 32)).astype(ml_dtypes.bfloat16) for _ in range(3))
    q[0, 3] = -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nan_row = budget.budget(q, k, v, row=(0, 0, 3))
        assert budget.budget(q, k, v, row=(0, 0, 4)).elements == 32
    assert nan_row.elements == 0
    text = str(nan_row)
    assert "no output element to compare" in text and "0.00e+00" not in text
    assert max(map(len, text.splitlines())) < 100
