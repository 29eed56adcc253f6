"""Inputs a caller can get wrong, each refused with one line naming the caller's argument, and
inputs read no further than a run needs (an unused array of an .npz is never decompressed, a
FIFO is not opened)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from simulator.fa3 import flash_attn_func, flash_attn_with_kvcache

ROOT = Path(__file__).resolve().parents[1]


def _bf16(*shape):
    return np.zeros(shape, ml_dtypes.bfloat16)


def _cli(*argv, shell_suffix=""):
    cmd = " ".join([sys.executable, "-m", "simulator", *argv]) + shell_suffix
    return subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize("call, needle", [
    (lambda: flash_attn_func(_bf16(1, 8, 2, 64), _bf16(1, 8, 2, 64), _bf16(1, 8, 2, 64),
                             window_size=(0,)), "window_size: expected (left, right) ints"),
    (lambda: flash_attn_func(_bf16(1, 8, 2, 64), _bf16(1, 8, 2, 64), _bf16(1, 8, 2, 64),
                             memory_budget=1e9), "memory_budget: expected a positive int"),
    (lambda: flash_attn_with_kvcache(_bf16(2, 1, 2, 64), _bf16(2, 64, 64), _bf16(2, 64, 1, 64)),
     "k_cache: expected [batch, seqlen, heads, head_dim]"),
    (lambda: flash_attn_with_kvcache(_bf16(2, 1, 2, 64), _bf16(2, 64, 1, 64), _bf16(2, 64, 1, 64),
                                     k=1.0, v=1.0), "k: expected the new keys / values as an array"),
])
def test_api_errors_name_the_callers_argument(call, needle):
    with pytest.raises(ValueError) as info:
        call()
    assert needle in str(info.value), str(info.value)


def test_a_numpy_q_beside_torch_k_v_that_require_grad_is_a_value_error():
    torch = pytest.importorskip("torch", reason="the autograd path needs torch")
    k = torch.zeros((1, 8, 2, 64), dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(ValueError, match="q: expected a torch tensor like the others"):
        flash_attn_func(_bf16(1, 8, 2, 64), k, k.detach().clone().requires_grad_())


def test_window_size_as_a_two_element_integer_tensor_is_read_as_ints():
    """FA3's interface reads window_size[0] and window_size[1] as ints: a tensor works."""
    torch = pytest.importorskip("torch", reason="a torch tensor window_size")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 40, 2, 64)).astype(ml_dtypes.bfloat16)
    want = flash_attn_func(q, q, q, window_size=(8, 0))
    got = flash_attn_func(q, q, q, window_size=torch.tensor([8, 0]))
    assert np.array_equal(want.view(np.uint16), got.view(np.uint16))


def test_run_reads_only_the_arrays_it_uses(tmp_path):
    """An .npz with q, k, v and an unused member that is not a readable array: the run never
    decompresses it (it used to inflate every member, a zip bomb's size unbounded)."""
    x = np.random.default_rng(0).standard_normal((1, 16, 2, 32)).astype(np.float32)
    path = tmp_path / "inp.npz"
    np.savez(path, q=x, k=x, v=x)
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("unused.npy", b"not an array at all")
    r = _cli("run", "--no-progress", "--input", str(path), "--out", str(tmp_path / "o.npz"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o.npz").exists()


def test_run_input_that_is_a_fifo_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "in.npz"
    os.mkfifo(fifo)
    r = _cli("run", "--input", str(fifo), "--out", str(tmp_path / "o.npz"))
    assert r.returncode == 2
    assert "not a regular file" in r.stderr and "Traceback" not in r.stderr


def test_a_closed_stdout_is_an_error_not_a_silent_success():
    r = _cli("run", "--explain", "0,1,5", shell_suffix=" >&-")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: standard output is closed: nothing could be printed (redirect it, e.g. "
        ">/dev/null, to discard it)"]


def test_a_qv_that_requires_grad_is_refused_rather_than_detached():
    torch = pytest.importorskip("torch", reason="qv as a torch tensor")
    z = np.random.default_rng(0)
    t = lambda *s: torch.from_numpy(z.standard_normal(s).astype(np.float32)).to(torch.bfloat16)  # noqa: E731
    qv = t(1, 4, 8, 512).requires_grad_(True)
    with pytest.raises(ValueError, match="^qv: FA3 has no backward with qv"):
        flash_attn_func(t(1, 4, 8, 64), t(1, 100, 1, 64), t(1, 100, 1, 512), qv=qv)


@pytest.mark.parametrize("call, needle", [
    (lambda: __import__("simulator.fa3", fromlist=["x"]).get_scheduler_metadata(
        2, 1, 100, 4, 1, 7, np.ones(2, np.int32)), "headdim: "),
    (lambda: __import__("simulator.fa3", fromlist=["x"]).flash_attn_combine(
        np.zeros((3, 1, 1, 1, 0), np.float32), np.zeros((3, 1, 1, 1), np.float32)), "out_partial: "),
])
def test_errors_name_only_arguments_the_caller_passed(call, needle):
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value).startswith(needle), str(info.value)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
def test_a_full_disk_is_one_line_and_exit_2_not_an_internal_error():
    r = _cli("run", "--explain", "0,1,5", shell_suffix=" >/dev/full")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: cannot write (standard output): No space left on device"]


def _exercise(tmp_path, name, source, *extra, stdout=subprocess.PIPE):
    path = tmp_path / name
    path.write_text(source, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "simulator.exercises", "check", "reduce_max", str(path),
                           *extra], cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True)


def test_an_exercise_file_not_named_py_is_read_as_python(tmp_path):
    r = _exercise(tmp_path, "answer.txt", "from simulator.exercises.solutions import reduce_max\n")
    assert r.returncode == 0, r.stderr
    assert "PASS" in r.stdout


def test_an_exercise_file_with_a_dataclass_under_postponed_annotations_imports(tmp_path):
    source = (
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n"
        "from simulator.exercises.solutions import reduce_max as _solution\n\n"
        "@dataclass\nclass Options:\n    ftz: bool = True\n\n"
        "def reduce_max(scores, row_max):\n    return _solution(scores, row_max)\n")
    r = _exercise(tmp_path, "dc_answer.py", source)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
def test_a_passing_exercise_on_a_full_stdout_is_not_a_fail(tmp_path):
    with open("/dev/full", "w") as full:
        r = _exercise(tmp_path, "a.py", "from simulator.exercises.solutions import reduce_max\n",
                      stdout=full)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == \
        "error: cannot write (standard output): No space left on device"


def test_a_killed_cache_writer_leaves_no_temporary_file_behind(tmp_path):
    """A process killed while writing the MUFU cache leaves its temporary file; the next
    process's first table load removes it at once (its writer, of this host, is dead), not
    only after STALE_TMP_SECONDS."""
    cache = tmp_path / "cache"
    env = {**os.environ, "FA3SIM_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    load = ("from simulator import gpus; from simulator.numerics import mufu_data; "
            "mufu_data.tables(gpus.get_gpu().mufu_tables, ('rcp',))")
    killed = ("import os, signal\n"
              "os.replace = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n" + load)
    subprocess.run([sys.executable, "-c", killed], env=env, cwd=tmp_path, capture_output=True)
    assert [p.name for p in cache.iterdir() if p.name.endswith(".tmp")], "the kill left nothing"
    r = subprocess.run([sys.executable, "-c", load], env=env, cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert not [p.name for p in cache.iterdir() if p.name.endswith(".tmp")]


def test_combine_of_one_split_returns_the_partial():
    """FA3's combine kernel writes nothing for one split; flash_attn_combine returns the single
    partial (converted to out_dtype) and its LSE, what FA3's own tests expect."""
    from simulator.fa3 import flash_attn_combine

    rng = np.random.default_rng(0)
    op = rng.standard_normal((1, 3, 5, 4, 64)).astype(np.float32)
    lp = rng.standard_normal((1, 3, 5, 4)).astype(np.float32)
    out, lse = flash_attn_combine(op, lp)
    assert np.array_equal(out.view(np.uint32), op[0].view(np.uint32))
    assert np.array_equal(lse.view(np.uint32), lp[0].view(np.uint32))
    out16, _ = flash_attn_combine(op, lp, out_dtype=np.dtype(ml_dtypes.bfloat16))
    assert np.array_equal(out16.view(np.uint16), op[0].astype(ml_dtypes.bfloat16).view(np.uint16))


def test_rotary_seqlens_without_rotary_tables_is_ignored():
    """flash_api.cpp reads rotary_seqlens only when rotary_cos is given: the call runs as
    without it."""
    rng = np.random.default_rng(1)
    bf = lambda *s: rng.standard_normal(s).astype(ml_dtypes.bfloat16)  # noqa: E731
    q, kc, vc = bf(2, 1, 2, 64), bf(2, 64, 1, 64), bf(2, 64, 1, 64)
    seq = np.array([10, 20], np.int32)
    want = flash_attn_with_kvcache(q, kc.copy(), vc.copy(), cache_seqlens=seq)
    got = flash_attn_with_kvcache(q, kc.copy(), vc.copy(), cache_seqlens=seq,
                                  rotary_seqlens=np.array([3, 4], np.int32))
    assert np.array_equal(np.asarray(want).view(np.uint16), np.asarray(got).view(np.uint16))
