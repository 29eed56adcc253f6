"""``python -m simulator run --kernel fa2 / sdpa``: the main job through FlashAttention-2's
kernels (flash-attn 2.x's build, PyTorch's SDPA build), end to end as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator import fa2, run

REPO = Path(__file__).resolve().parents[1]


def _run(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "simulator", "run", "--no-progress", *args],
                          capture_output=True, text=True, cwd=REPO, env=env)


def test_fa2_kernel_on_the_embedded_input(tmp_path):
    out = tmp_path / "fa2.npz"
    r = _run("--kernel", "fa2", "--heads", "0-1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "flash-attn 2.x builds it" in r.stdout and "vs FA3" in r.stdout
    assert "one flash_attn_varlen_func launch" in r.stdout
    res = run.load_result(out)
    assert res["params"]["kernel"] == "fa2"
    # the file's bits are simulator.fa2's on the same sequences
    from simulator.run.workload import load_workload

    class A:  # the options load_workload reads
        input = None
        layer = None
        dtype = None

    work = load_workload(A)
    b = 1  # the second sentence, heads 0-1
    rows = int(np.asarray(work.query_rows)[b])
    q = work.q[b, :rows, :2]
    k, v = work.k[b, :rows, :2], work.v[b, :rows, :2]
    cu = np.array([0, rows], np.int32)
    want = fa2.flash_attn_varlen_func(q, k, v, cu, cu, rows, rows)
    got = res["out_bits"][b, :rows] if "out_bits" in res else res["out"][b, :rows]
    assert np.array_equal(np.asarray(got).view(np.uint16) if got.dtype.itemsize == 2
                          else got.astype(want.dtype).view(np.uint16),
                          want.view(np.uint16))


def test_sdpa_kernel_causal(tmp_path):
    r = _run("--kernel", "sdpa", "--causal", "--heads", "3", "--out", str(tmp_path / "s.npz"))
    assert r.returncode == 0, r.stderr
    assert "SDPA flash backend" in r.stdout and "one SDPA call each" in r.stdout


def test_fa4_kernel_on_the_embedded_input(tmp_path):
    """FA4's forward on the embedded sentences: the file holds simulator.fa4's bits."""
    from simulator import fa4
    from simulator.run.workload import load_workload

    out = tmp_path / "fa4.npz"
    r = _run("--kernel", "fa4", "--heads", "0-1", "--causal", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "FlashAttention-4's Hopper kernels" in r.stdout and "docs/fa4.md" in r.stdout
    res = run.load_result(out)
    assert res["params"]["kernel"] == "fa4"

    class A:  # the options load_workload reads
        input = None
        layer = None
        dtype = None

    work = load_workload(A)
    b = 2
    rows = int(np.asarray(work.query_rows)[b])
    q, k, v = (x[b:b + 1, :rows, :2] for x in (work.q, work.k, work.v))
    want, _ = fa4.flash_attn_func(q, k, v, causal=True)
    got = res["out_bits"][b, :rows] if "out_bits" in res else res["out"][b, :rows]
    assert np.array_equal(np.asarray(got).view(np.uint16), want[0].view(np.uint16))


@pytest.mark.parametrize("args, needle", [
    (("--kernel", "sdpa", "--window", "4", "4"), "--window"),
    (("--kernel", "fa2", "--step"), "--step: FA3 only"),
    (("--kernel", "fa2", "--softcap", "30"), "--softcap"),
    (("--kernel", "fa2", "--dtype", "e4m3"), "--dtype e4m3"),
    (("--kernel", "fa2", "--backward"), "--backward: FA3 only"),
    (("--kernel", "fa4", "--dtype", "e4m3"), "--dtype e4m3"),
    (("--kernel", "fa4", "--step"), "--step: FA3 only"),
    (("--kernel", "fa5"), "--kernel")])
def test_fa3_only_options_are_refused_naming_them(tmp_path, args, needle):
    r = _run(*args, "--out", str(tmp_path / "x.npz"))
    assert r.returncode == 2 and needle in r.stderr, (r.returncode, r.stderr)
    assert not (tmp_path / "x.npz").exists()
