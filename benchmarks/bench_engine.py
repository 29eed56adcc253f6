"""Benchmark: the compiled engine (numba) against the NumPy engine and NumPy float32
attention, side by side in one process, in turns, 1 thread on every side (BLAS and numba).

Rows: one GEMM 1024 x 1024 x 128 bf16 (numba vs the NumPy engine, bits checked equal), one
wgmma m64n128k16 bf16 against mmasim's Hopper model (where mmasim is installed; one per call,
and 64 per call), MUFU.EX2 against np.exp2 on 10M values, and the exact forward on the numba
engine (GEMMs and softmax steps compiled) vs NumPy float32 attention
(``bench_flash.numpy_attention``), bits of O and LSE checked equal to the NumPy
engine's forward: 1 x 1024 x 4 x 128 bf16 non-causal and causal, e4m3 non-causal and causal;
with ``--long`` also 1 x 4096 x 8 x 128 bf16 non-causal and causal, their bits checked on the
first ``--check-heads`` heads (default 1: heads are independent CTAs, and the NumPy engine's
whole forward would take many minutes).
Every row records the 1-minute load average before and after it (a shared machine's load moves
the ratios). ``--out PATH`` writes every row and the run's facts (machine, BLAS, numba, threads,
repeats, commit, UTC time) as one JSON file, atomically.
Run: ``python benchmarks/bench_engine.py [--threads 1] [--repeats 3] [--long] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np
from bench_flash import numpy_attention
from timing import (
    add_common_args,
    blas_info,
    blas_threads,
    code_identity,
    emit,
    interleaved_medians,
    machine,
    ratio_row,
)

from simulator import engine, flash, mma


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap)
    ap.add_argument("--long", action="store_true", help="add the 1 x 4096 x 8 x 128 rows")
    ap.add_argument("--check-heads", type=int, default=1,
                    help="heads whose bits the --long rows check against the NumPy engine")
    ap.add_argument("--out", type=Path, default=None,
                    help="write all rows and the run's facts to this JSON file (atomically)")
    args = ap.parse_args()
    if args.check_heads < 1:
        ap.error(f"--check-heads: expected a positive int, got {args.check_heads}")
    repeats = args.repeats or 3
    engine.set_threads(args.threads)
    rng = np.random.default_rng(0)
    rows = []
    with blas_threads(args.threads):
        print(machine(), "|", blas_info())
        facts = _facts(args, repeats)

        def record(row):  # printed and written as measured: a cut run keeps its rows
            rows.append(row)
            print(_line(row), flush=True)
            if args.out is not None:
                _write_atomic(args.out, {"run": facts, "rows": rows})
        a = rng.standard_normal((1024, 128)).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((128, 1024)).astype(ml_dtypes.bfloat16)

        def gemm(name):
            with engine.use_engine(name):
                return mma.gemm(a, b)

        assert np.array_equal(gemm("numpy").view(np.uint32), gemm("numba").view(np.uint32))
        load = os.getloadavg()[0]
        t_nb, t_np = interleaved_medians([lambda: gemm("numba"), lambda: gemm("numpy")], repeats)
        record(_loaded(ratio_row("bench_engine", "GEMM 1024x1024x128 bf16, numba vs numpy engine",
                                 t_nb, t_np, "numpy engine", faster=True), load))
        for row in _instruction_rows(rng, args.threads, repeats):
            record(row)
        record(_ex2_row(rng, repeats))
        cases = [((1, 1024, 4, 128), ml_dtypes.bfloat16, "bf16", "<= 10x"),
                 ((1, 1024, 4, 128), ml_dtypes.float8_e4m3fn, "e4m3", "<= 10x")]
        if args.long:
            cases.append(((1, 4096, 8, 128), ml_dtypes.bfloat16, "bf16", "<= 6x"))
        for shape, dtype, fmt, goal in cases:
            q, k, v = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
            heads = args.check_heads if shape[1] > 1024 else None
            for causal in (False, True):
                record(_forward_row(q, k, v, causal, fmt, goal, repeats, heads))
    print("| measures | ours (s) | anchor (s) | ratio | load average (before, after) |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(_line(r))
    emit(rows, args.json)
    if args.out is not None:
        print(f"wrote {args.out}")


def _line(r: dict) -> str:
    return (f"| {r['measures']} | {r['ours_s']:.3f} | {r['anchor_s']:.3f} | "
            f"{r['ratio']:.1f}{'x faster' if r['faster'] else 'x'} | "
            f"{r['load_before']:.2f}, {r['load_after']:.2f} |")


def _loaded(row: dict, before: float) -> dict:
    """``row`` with the 1-minute load averages before and after it."""
    row.update(load_before=before, load_after=os.getloadavg()[0])
    return row


def _facts(args, repeats: int) -> dict:
    """What the rows were measured on and with."""
    import numba

    return {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
            "blas": blas_info(), "numba": numba.__version__, "numpy": np.__version__,
            "threads": args.threads, "repeats": repeats, "long": args.long,
            "check_heads": args.check_heads, **code_identity(), "argv": sys.argv[1:]}


def _write_atomic(path: Path, data: dict) -> None:
    """``data`` as JSON at ``path``: written to a temporary file beside it, then renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _instruction_rows(rng, threads: int, repeats: int) -> list[dict]:
    """One wgmma m64n128k16 bf16 on the numba engine against mmasim's Hopper model (bits
    checked equal first, ``bench_mma.mmasim_instruction``): one instruction per call through
    ``mma.wgmma`` (its Python checks and hand-over included), and 64 independent instructions
    per call (a leading batch axis: the per-instruction cost of emulating many). No rows where
    mmasim is not installed (``pip install mmasim``; it needs torch)."""
    from bench_mma import mmasim_instruction

    a = rng.standard_normal((64, 64, 16)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 16, 128)).astype(ml_dtypes.bfloat16)
    c = rng.standard_normal((64, 64, 128)).astype(np.float32)
    ref = mmasim_instruction(a[0], b[0], c[0], threads)
    if ref is None:
        print("no mmasim: the wgmma rows are skipped (pip install mmasim)")
        return []
    shape = "m64n128k16.f32.bf16.bf16"

    def ours(n):
        with engine.use_engine("numba"):
            return mma.wgmma(shape, a[:n], b[:n], c[:n])

    with engine.use_engine("numpy"):
        assert np.array_equal(mma.wgmma(shape, a, b, c).view(np.uint32), ours(64).view(np.uint32))
    rows = []
    for n, inner, what in ((1, 50, "one per call"), (64, 2, "64 per call, per instruction")):
        load = os.getloadavg()[0]
        t_one, t_ref = interleaved_medians([lambda n=n: ours(n), ref], repeats, inner=[inner, 1])
        rows.append(_loaded(ratio_row(
            "bench_engine", f"one wgmma m64n128k16 bf16, numba engine vs mmasim (same bits), {what}",
            t_one / n, t_ref, "mmasim", ">= 150x faster", faster=True), load))
    return rows


def _ex2_row(rng, repeats: int) -> dict:
    """MUFU.EX2 compiled (``engine.ex2``: the packed table) against ``np.exp2`` on the 10M
    float32 of ``bench_mufu.py`` (uniform over the softmax range [-30, 8]), bits checked
    against the NumPy model's ``ex2`` first."""
    from simulator.numerics.mufu import ex2

    x = rng.uniform(-30, 8, 10_000_000).astype(np.float32)
    assert np.array_equal(engine.ex2(x).view(np.uint32), ex2(x).view(np.uint32)), "ex2 differs"
    load = os.getloadavg()[0]
    t_ex2, t_np = interleaved_medians([lambda: engine.ex2(x), lambda: np.exp2(x)], repeats)
    return _loaded(ratio_row("bench_engine", "ex2 (MUFU.EX2, numba engine) vs np.exp2, 10M float32",
                             t_ex2, t_np, "np.exp2", "<= 3x"), load)


def _forward_row(q, k, v, causal, fmt, goal, repeats, heads=None):
    """One forward row: numba engine vs NumPy float32 attention, bits checked against the
    NumPy engine's forward first (on the first ``heads`` heads only when given: each head's
    CTAs are independent, so its bits are those of a forward on that head alone)."""
    def fwd(name, h=None):
        with engine.use_engine(name):
            if h is None:
                return flash.forward(q, k, v, causal=causal)
            return flash.forward(q[:, :, :h], k[:, :, :h], v[:, :, :h], causal=causal)

    got = fwd("numba")
    h = None if heads is None else min(heads, q.shape[2])
    ref = fwd("numpy", h)
    out, lse = (got.out, got.lse) if h is None else (got.out[:, :, :h], got.lse[:, :h])
    assert np.array_equal(ref.out.view(np.uint8), out.view(np.uint8)), "O bits differ"
    assert np.array_equal(ref.lse.view(np.uint32), lse.view(np.uint32)), "LSE bits differ"
    load = os.getloadavg()[0]
    t_fwd, t_att = interleaved_medians(
        [lambda: fwd("numba"), lambda: numpy_attention(q, k, v, causal)], repeats)
    shape = "x".join(str(n) for n in q.shape)
    checked = "" if h is None else f" (bits checked on {h} of {q.shape[2]} heads)"
    row = ratio_row("bench_engine", f"forward {fmt} {shape} causal={causal}, numba engine"
                    f"{checked}", t_fwd, t_att, "NumPy float32 attention", goal)
    return _loaded(row, load)


if __name__ == "__main__":
    main()
