"""The FA3 backward against the real library's recorded H200 bits, its spread, autograd, and
the arguments it refuses."""

from __future__ import annotations

import importlib
import itertools
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import fa3, flash
from simulator.flash import spread
from simulator.flash.reference import reference_backward
from simulator.io import read_json, read_npz
from simulator.numerics import convert, ffma, fmul, fsub
from simulator.numerics.mufu import tanh
from simulator.replay import bwd_cases
from simulator.replay import fa3_backward as replay

bwd = importlib.import_module("simulator.flash.backward")  # the module (flash.backward is its function)
REPORT = read_json(replay.REPORT, replay.REGENERATE)
DIFFS = bwd_cases.unpack_diffs(read_npz(replay.DIFFS, replay.REGENERATE))

# recorded cases (matrix index): GQA with default-mode dk/dv differences, a causal GQA case
# whose dq differed (descending n_block order), a local window whose dq differed over three
# n_blocks (ascending order), and a varlen launch
CASES = {17: "b1_q64_k64_h4/1_w100,50_f16", 143: "gqa_h2/1_c(-1, -1)_f16",
         303: "window0,200_f16", 241: "varlen47_b1_h2/2_w-1,-1_f16"}


def _entry(i: int) -> dict:
    e = REPORT["matrix"][i]
    assert e["case"]["name"] == CASES[i]
    return e


@pytest.mark.parametrize("i", sorted(CASES))
def test_recorded_case_bit_exact_and_default_runs_inside_spread(i):
    e = _entry(i)
    r = replay.check(f"m{i}", e, DIFFS)
    assert r["mismatches"] == [] and r["outside"] == 0
    assert r["values"] > 0
    differed = sum(row[n]["differ"] for row in e["default"] for n in ("dq", "dk", "dv"))
    assert r["default_values"] == differed > 0  # these cases really did vary on the device


def test_stress_runs_inside_spread():
    """12 more default-mode runs of the varying cases (``--stress 12``), with the emulation of
    the main entry reused."""
    stress = dict(replay.stress_entries(REPORT))
    sdiffs = bwd_cases.unpack_diffs(read_npz(replay.STRESS_DIFFS, replay.REGENERATE))
    assert len(stress) == sum(replay.differed(e) for p in ("matrix", "drawn") for e in REPORT[p])
    for i in (17, 143):
        key = f"m{i}"
        e = stress[key]
        assert len(e["default"]) == 12 and e["det"] == _entry(i)["det"]
        r = replay.check(key, e, sdiffs)
        assert r["mismatches"] == [] and r["outside"] == 0 and r["default_values"] > 0


def test_recording_provenance_and_determinism():
    prov = REPORT["provenance"]
    assert prov["wheel"] == "flash-attn3-jax" and prov["version"] == "0.2.3"
    assert prov["gpu"] == "NVIDIA H200" and "defect 1 fixed" in prov["glue"]
    entries = [e for part in ("matrix", "drawn") for e in REPORT[part]]
    assert len(REPORT["matrix"]) >= 300 and len(entries) >= 1500
    assert not any("error" in e for e in entries)
    assert all(e["det_identical"] for e in entries)  # deterministic=True: 3 runs, same bits
    assert sum(replay.differed(e) for e in entries) > 100  # the default mode is not


def test_sample_full_bits():
    sample = read_npz(replay.SAMPLE, replay.REGENERATE)
    keys = sorted({k.split("_")[0] for k in sample}, key=lambda k: int(k[1:]))
    assert len(keys) >= 10
    for key in keys[:6]:
        e = REPORT["matrix"][int(key[1:])]
        got = replay.emulate(e["case"])
        for name in ("dq", "dk", "dv"):
            mine = replay.bits(getattr(got["res"], name))
            np.testing.assert_array_equal(mine, sample[f"{key}_{name}"], err_msg=f"{key} {name}")


def test_a_wrong_reduce_order_is_caught(monkeypatch):
    """FA3's deterministic dQ order is descending n_block with a causal mask: the ascending
    order gives other bits on the recorded causal case."""
    monkeypatch.setattr(importlib.import_module("simulator.flash.mainloop_bwd_sm90"), "dq_order",
                        lambda cfg, n: n)
    r = replay.check("m143", _entry(143), DIFFS)
    assert "deterministic dq" in r["mismatches"]


def test_a_wrong_gqa_head_order_is_caught(monkeypatch):
    real = spread.ordered_sum
    monkeypatch.setattr(bwd, "ordered_sum", lambda parts, ftz=True: real(parts[::-1], ftz))
    r = replay.check("m17", _entry(17), DIFFS)
    assert {"deterministic dk", "deterministic dv"} & set(r["mismatches"])


# ---- the spread -------------------------------------------------------------------------------
def _all_orders(parts: np.ndarray) -> np.ndarray:
    return np.stack([spread.ordered_sum(parts[list(p)])
                     for p in itertools.permutations(range(parts.shape[0]))])


def _partials(rng, n, size=4000):
    base = rng.standard_normal((n, size)).astype(np.float32)
    scale = np.float32(2.0) ** rng.integers(-30, 30, size=(n, size)).astype(np.float32)
    x = base * scale
    x[:, :500] = -x[::-1, :500]                     # cancellations
    x[:, 500:700] *= np.float32(2.0**-100)          # subnormal-range sums
    x[:, 700:800] = 0
    return x


@pytest.mark.parametrize("n", [3, 4, 5])
def test_spread_is_exact_up_to_five_partials(n):
    x = _partials(np.random.default_rng(n), n)
    lo, hi = spread.sum_bounds(x)
    every = _all_orders(x)
    np.testing.assert_array_equal(lo.view(np.uint32), every.min(axis=0).view(np.uint32))
    np.testing.assert_array_equal(hi.view(np.uint32), every.max(axis=0).view(np.uint32))


@pytest.mark.parametrize("n", [6, 7])
def test_spread_encloses_every_order_beyond(n):
    x = _partials(np.random.default_rng(10 + n), n, 600)
    lo, hi = spread.sum_bounds(x)
    every = _all_orders(x)
    assert np.all(lo <= every.min(axis=0)) and np.all(every.max(axis=0) <= hi)
    assert np.all(lo[700:800] == 0) and np.all(hi[700:800] == 0)  # all-zero partials: +0


@pytest.mark.parametrize("parts, lo, hi", [
    ([3e38, 3e38, -3e38, -3e38, 1, 1], -np.inf, np.inf),   # some orders overflow, some do not
    ([3e38, 3e38, -np.inf], -np.inf, np.inf),              # NaN in one order, -inf in another
    ([np.inf, 1, 2, 3, 4, 5], np.inf, np.inf),             # +inf in every order
    ([np.nan, 1, 2, 3, 4, 5], np.nan, np.nan),             # NaN in every order
    ([np.inf, -np.inf, 1], np.nan, np.nan),
])
def test_spread_of_non_finite_sums(parts, lo, hi):
    x = np.array(parts, np.float32)[:, None]
    got = spread.sum_bounds(x)
    np.testing.assert_array_equal(np.array([got[0][0], got[1][0]]), np.array([lo, hi], np.float32))
    every = _all_orders(x) if len(parts) <= 6 else None
    assert spread.contains(*got, every).all()


def test_two_partials_commute():
    x = _partials(np.random.default_rng(2), 2)
    lo, hi = spread.sum_bounds(x)
    np.testing.assert_array_equal(lo.view(np.uint32), spread.ordered_sum(x[::-1]).view(np.uint32))
    np.testing.assert_array_equal(hi, lo)


@settings(max_examples=25)  # each example is a forward and two backwards
@given(st.integers(0, 2**31), st.integers(1, 3), st.sampled_from([(False, (-1, -1)),
                                                                    (True, (-1, -1)),
                                                                    (False, (20, 5))]))
def test_spread_contains_the_emulated_result(seed, g, mask):
    causal, window = mask
    x = flash.inputs.attention_inputs(seed, batch=1, seqlen_q=70, seqlen_k=300, heads=2 * g,
                                      heads_kv=2, head_dim=64, dtype="bf16")
    dout = flash.inputs.attention_inputs(seed + 1, batch=1, seqlen_q=70, seqlen_k=1, heads=2 * g,
                                         heads_kv=1, head_dim=64, dtype="bf16")["q"]
    out, lse = fa3.flash_attn_func(x["q"], x["k"], x["v"], causal=causal, window_size=window,
                                   return_attn_probs=True)
    sp = fa3.backward_spread(dout, x["q"], x["k"], x["v"], out, lse, causal=causal,
                             window_size=window)
    dq, dk, dv = fa3.flash_attn_backward(dout, x["q"], x["k"], x["v"], out, lse, causal=causal,
                                         window_size=window)
    for name, val in (("dq", dq), ("dk", dk), ("dv", dv)):
        assert spread.contains(*sp[name], val).all(), name


# ---- autograd and the API ---------------------------------------------------------------------
def test_autograd_gives_the_recorded_bits():
    torch = pytest.importorskip("torch", reason="autograd through flash_attn_func needs torch")
    from simulator.fa3.arrays import to_torch
    from simulator.replay.common import digest

    e = _entry(143)
    x = bwd_cases.case_inputs(e["case"])
    q, k, v = (to_torch(x[n]).requires_grad_() for n in ("q", "k", "v"))
    out = fa3.flash_attn_func(q, k, v, causal=x["causal"], window_size=x["window"],
                              deterministic=True)
    assert out.requires_grad and out.dtype == torch.float16
    (out.float() * to_torch(x["dout"]).float()).sum().backward()
    for name, t in (("dq", q), ("dk", k), ("dv", v)):
        assert digest(t.grad.view(torch.int16).numpy().view(np.uint16)).hex() == e["det"][name]


def test_autograd_varlen():
    torch = pytest.importorskip("torch", reason="autograd through flash_attn_varlen_func needs torch")
    from simulator.fa3.arrays import to_torch
    from simulator.replay.common import digest

    e = _entry(241)
    x = bwd_cases.case_inputs(e["case"])
    q, k, v = (to_torch(x[n]).requires_grad_() for n in ("q", "k", "v"))
    out = fa3.flash_attn_varlen_func(q, k, v, torch.from_numpy(x["cu_seqlens_q"]),
                                     torch.from_numpy(x["cu_seqlens_k"]), x["max_seqlen_q"],
                                     x["max_seqlen_k"], causal=x["causal"],
                                     window_size=x["window"])
    out.backward(to_torch(x["dout"]))
    for name, t in (("dq", q), ("dk", k), ("dv", v)):
        assert digest(t.grad.view(torch.int16).numpy().view(np.uint16)).hex() == e["det"][name]


def test_autograd_with_seqused_and_a_wider_v():
    """seqused_q / seqused_k and V's head dim unlike Q's run under autograd (docs/fa3_api.md):
    the gradients are flash_attn_backward's bits with the forward's arguments."""
    torch = pytest.importorskip("torch", reason="autograd through flash_attn_varlen_func needs torch")

    g = torch.Generator().manual_seed(5)
    q, k = (torch.randn(50, 2, 64, generator=g).bfloat16() for _ in range(2))
    v = torch.randn(50, 2, 128, generator=g).bfloat16()
    cu = torch.tensor([0, 20, 50], dtype=torch.int32)
    used_q, used_k = torch.tensor([12, 30], dtype=torch.int32), torch.tensor([20, 17], dtype=torch.int32)
    kw = dict(seqused_q=used_q, seqused_k=used_k, causal=True)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = fa3.flash_attn_varlen_func(*leaves, cu, cu, 30, 30, **kw)
    dout = torch.randn(out.shape, generator=g).bfloat16()
    out.backward(dout)
    o, lse = fa3.flash_attn_varlen_func(q, k, v, cu, cu, 30, 30, return_attn_probs=True, **kw)
    want = fa3.flash_attn_backward(dout, q, k, v, o, lse, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                   max_seqlen_q=30, max_seqlen_k=30, **kw)
    for leaf, w in zip(leaves, want, strict=True):
        assert torch.equal(leaf.grad.view(torch.int16), torch.as_tensor(w).view(torch.int16))


def _small(dtype=ml_dtypes.bfloat16, d=64, h=2, hk=2):
    x = flash.inputs.attention_inputs(3, batch=1, seqlen_q=20, seqlen_k=30, heads=h, heads_kv=hk,
                                      head_dim=d, dtype={ml_dtypes.bfloat16: "bf16",
                                                         np.float16: "f16"}[dtype])
    out, lse = flash.forward(x["q"], x["k"], x["v"])
    return dict(dout=out.copy(), q=x["q"], k=x["k"], v=x["v"], out=out, softmax_lse=lse)


def _same_bits(a, b):
    for name in ("dq", "dk", "dv"):
        np.testing.assert_array_equal(getattr(a, name).view(np.uint16),
                                      getattr(b, name).view(np.uint16))


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_executor_gives_the_serial_bits_and_spread(pool):
    """A recorded GQA causal case (its dq and dk / dv varied on the device) through an
    executor, whole and in budgeted chunks: the serial bits and the serial spread."""
    x = bwd_cases.case_inputs(_entry(143)["case"])
    out, lse = fa3.flash_attn_func(x["q"], x["k"], x["v"], causal=True, return_attn_probs=True)
    args = (x["dout"], x["q"], x["k"], x["v"], out, lse)
    whole = flash.backward(*args, causal=True, spread=True)
    make = ThreadPoolExecutor if pool == "threads" else ProcessPoolExecutor
    seen = []
    with make(2) as ex:
        for budget in (None, 36_000_000):  # one (batch, head) row per chunk: four chunks
            got = flash.backward(*args, causal=True, spread=True, executor=ex,
                                 memory_budget=budget, progress=lambda d, t: seen.append((d, t)))
            _same_bits(whole, got)
            for name in ("dq", "dk", "dv"):
                for w, g in zip(whole.spread[name], got.spread[name], strict=True):
                    np.testing.assert_array_equal(w.view(np.uint16), g.view(np.uint16))
    assert seen[-1][0] == seen[-1][1] > 0


def test_executor_through_the_api_and_its_refusals():
    x = bwd_cases.case_inputs(_entry(241)["case"])  # varlen: one kernel-level call per sequence
    kw = dict(cu_seqlens_q=x["cu_seqlens_q"], cu_seqlens_k=x["cu_seqlens_k"],
              max_seqlen_q=x["max_seqlen_q"], max_seqlen_k=x["max_seqlen_k"],
              causal=x["causal"], window_size=x["window"], softmax_scale=x["softmax_scale"])
    out, lse = fa3.flash_attn_varlen_func(x["q"], x["k"], x["v"], **kw, return_attn_probs=True)
    args = (x["dout"], x["q"], x["k"], x["v"], out, lse)
    serial = fa3.flash_attn_backward(*args, **kw)
    with ThreadPoolExecutor(2) as ex:
        pooled = fa3.flash_attn_backward(*args, **kw, executor=ex)
        d = bwd_cases.case_inputs(_entry(143)["case"])
        o, l_ = fa3.flash_attn_func(d["q"], d["k"], d["v"], return_attn_probs=True)
        with pytest.raises(ValueError, match="trace: not recorded with an executor"):
            flash.backward(d["dout"], d["q"], d["k"], d["v"], o, l_, trace=(0, 0, 0), executor=ex)
    for a, b in zip(serial, pooled, strict=True):
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
    with pytest.raises(ValueError, match="executor: it takes no more tasks"):
        fa3.flash_attn_backward(*args, **kw, executor=ex)  # shut down by the with block
    with pytest.raises(TypeError, match="executor: expected a concurrent.futures.Executor"):
        fa3.backward_spread(*args, **kw, executor=ThreadPoolExecutor)


@pytest.mark.parametrize("change, match", [
    (lambda a: a.update(softmax_lse=a["softmax_lse"][:, :, :-1]), "softmax_lse: expected float32"),
    (lambda a: a.update(softmax_lse=a["softmax_lse"].astype(np.float64)), "softmax_lse"),
    (lambda a: a.update(dout=a["dout"][:, :-1]), "dout: expected shape"),
    (lambda a: a.update(out=a["out"].astype(np.float16)), "out: expected dtype"),
    (lambda a: a.update(v=a["v"][..., :32]), "v: expected shape"),
    (lambda a: a.update(seqused_k=np.array([3], np.int64)), "seqused_k: FA3 requires dtype int32"),
    (lambda a: a.update(seqused_k=np.array([31], np.int32)), "seqused_k: expected values in 0"),
    (lambda a: a.update(seqused_q=np.array([3, 4], np.int32)), r"seqused_q: expected shape \[1\]"),
    (lambda a: a.update(deterministic=1), "deterministic: expected True or False"),
])
def test_bad_arguments_are_refused_naming_them(change, match):
    args = _small()
    change(args)
    with pytest.raises(ValueError, match=match):
        fa3.flash_attn_backward(**args)


def test_deterministic_hdim256_is_refused_as_fa3_does():
    args = _small(d=256)
    with pytest.raises(ValueError, match="deterministic: .*256"):
        fa3.flash_attn_backward(**args, deterministic=True)
    dq, dk, dv = fa3.flash_attn_backward(**args)  # the default kernel exists
    assert dq.shape == args["q"].shape and dk.dtype == args["k"].dtype


def test_tiles_follow_fa3():
    assert (bwd.bwd_tiles(128, False, False).kblock_m, bwd.bwd_tiles(128, True, False).kblock_m) == (80, 64)
    widths = [bwd.bwd_tiles(d, False, False).kblock_n for d in (64, 96, 128, 192, 256)]
    assert widths == [128, 128, 128, 96, 80]
    assert bwd.bwd_tiles(64, True, False, softcap=True).kblock_m == 96


def test_memory_budget_chunks_give_the_same_bits_and_progress_counts_steps(monkeypatch):
    """At a budget of the fixed arrays plus one (batch, head) row, the serial backward runs one
    chunk per row (four here) with the whole call's bits; progress counts every m_block step."""
    from simulator import engine

    bm = importlib.import_module("simulator.flash.mainloop_bwd_sm90")
    x = bwd_cases.case_inputs(_entry(143)["case"])
    out, lse = fa3.flash_attn_func(x["q"], x["k"], x["v"], causal=True, return_attn_probs=True)
    args = (x["dout"], x["q"], x["k"], x["v"], out, lse)
    seen, chunks = [], []
    real = bm._run_chunk
    with engine.use_engine("numpy"):  # serial: progress after every m_block step
        whole = flash.backward(*args, causal=True)
        fixed, per_row = bm.memory_needed(bwd.make_backward_config(*args, causal=True), False)
        monkeypatch.setattr(bm, "_run_chunk", lambda *a, **kw: (chunks.append(a[1]), real(*a, **kw))[1])
        parts = flash.backward(*args, causal=True, memory_budget=fixed + per_row,
                               progress=lambda d, t: seen.append((d, t)))
    assert chunks == [(0, 1), (1, 2), (2, 3), (3, 4)]
    for name in ("dq", "dk", "dv"):
        np.testing.assert_array_equal(getattr(whole, name).view(np.uint16),
                                      getattr(parts, name).view(np.uint16))
    assert len(seen) > 4 and seen[-1][0] == seen[-1][1]
    with pytest.raises(MemoryError, match="memory_budget"):
        flash.backward(x["dout"], x["q"], x["k"], x["v"], out, lse, memory_budget=1000)


@pytest.mark.parametrize("name, threads", [("numpy", 1), ("numba", 1), ("numba", 2)])
def test_the_backward_stays_within_its_memory_budget(name, threads):
    """A GQA backward with its spread at a budget of its fixed arrays plus two (batch, head)
    rows (``mainloop_bwd_sm90.memory_needed`` on the engine that runs it; fixed plus one is
    the least it takes): the traced peak of the whole call (preprocess, chunks, postprocess)
    stays under it, on one thread of either engine and on two task threads of the compiled
    one, with the unchunked call's bits."""
    import sys
    from pathlib import Path

    from simulator import engine

    sys.path.insert(0, str(Path(__file__).parent))
    from memory_peak import traced_peak

    if name == "numba" and not engine.available():
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(3)
    q, do = (rng.standard_normal((2, 300, 4, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    k, v = (rng.standard_normal((2, 300, 2, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    f = flash.forward(q, k, v)
    cfg = bwd.make_backward_config(do, q, k, v, f.out, f.lse)

    def call(budget=None):
        return flash.backward(do, q, k, v, f.out, f.lse, spread=True, memory_budget=budget)

    before = None
    if engine.available():
        import numba

        if numba.config.NUMBA_NUM_THREADS < threads:
            pytest.skip("numba sees one core: no second task thread")
        before = numba.get_num_threads()
        engine.set_threads(threads)
    try:
        with engine.use_engine(name):
            fixed, per_row = importlib.import_module(
                "simulator.flash.mainloop_bwd_sm90").memory_needed(cfg, True)
            budget = fixed + 2 * per_row
            with pytest.raises(MemoryError, match=r"per \(batch, head\) row of CTAs"):
                call(fixed + per_row - 1)
            whole = call()  # also compiles what the call needs: not the arrays' memory
            got, peak = traced_peak(lambda: call(budget))
    finally:
        if before is not None:
            engine.set_threads(before)
    _same_bits(whole, got)
    for name in ("dq", "dk", "dv"):
        for w, g in zip(whole.spread[name], got.spread[name], strict=True):
            np.testing.assert_array_equal(w.view(np.uint16), g.view(np.uint16))
    assert peak <= budget, f"peak {peak / budget:.2f} x the budget"


@pytest.mark.parametrize("change, match", [
    (lambda a: a.update(k=a["k"][:, :, :0], v=a["v"][:, :, :0]), "at least one head"),
    (lambda a: a.update(q=a["q"][..., :0], dout=a["dout"][..., :0], out=a["out"][..., :0],
                        k=a["k"][..., :0], v=a["v"][..., :0]), "head_dim must be a multiple of 8 from 8"),
    (lambda a: a.update(window_size=3), "window_size: expected"),
    (lambda a: a.update(softcap=-1.0), "softcap: expected a finite number"),
    (lambda a: a.update(softcap=None), "softcap: expected a finite number"),
    (lambda a: a.update(sm_margin="x"), "sm_margin"),
])
def test_more_bad_arguments(change, match):
    args = _small()
    change(args)
    with pytest.raises(ValueError, match=match):
        fa3.flash_attn_backward(**args)


def _packed():
    a = _small()
    pack = {n: a[n][0] for n in ("dout", "q", "k", "v", "out")}
    cu = dict(cu_seqlens_q=np.array([0, 20], np.int32), cu_seqlens_k=np.array([0, 30], np.int32))
    return {**pack, "softmax_lse": a["softmax_lse"][0]}, cu


def test_varlen_checks_the_whole_launch():
    a, cu = _packed()
    with pytest.raises(ValueError, match=r"v: expected shape \(30, 2, 64\)"):
        fa3.flash_attn_backward(**{**a, "v": np.concatenate([a["v"], a["v"][:3]])}, **cu)
    with pytest.raises(ValueError, match=r"out: expected shape \(20, 2, 64\)"):
        fa3.flash_attn_backward(**{**a, "out": a["out"][:-1]}, **cu)
    f32 = {n: (x.astype(np.float32) if n != "softmax_lse" else x) for n, x in a.items()}
    empty = dict(cu_seqlens_q=np.array([0, 20], np.int32), cu_seqlens_k=np.array([0, 0], np.int32))
    with pytest.raises(ValueError, match="q: expected dtype bfloat16 or float16"):
        fa3.flash_attn_backward(**f32, **empty)  # checked even with no key in any sequence
    dq, dk, dv = fa3.flash_attn_backward(**a, **cu)
    whole = fa3.flash_attn_backward(**{n: x[None] for n, x in a.items()})
    assert np.array_equal(dq.view(np.uint16), whole[0][0].view(np.uint16))


def test_autograd_refuses_up_front():
    torch = pytest.importorskip("torch", reason="autograd through flash_attn_func needs torch")
    from simulator.fa3.arrays import to_torch

    a = _small()
    q = to_torch(a["q"]).requires_grad_()
    with pytest.raises(ValueError, match="k: expected a torch tensor like the others"):
        fa3.flash_attn_func(q, a["k"], a["v"])
    k, v = to_torch(a["k"]), to_torch(a["v"])
    with pytest.raises(ValueError, match="softcap: expected a finite number"):
        fa3.flash_attn_func(q, k, v, softcap=-5.0)
    # softcap through autograd: the bits of flash_attn_backward with the forward's softcap
    out = fa3.flash_attn_func(q, k, v, softcap=5.0)
    out.backward(torch.ones_like(out))
    o, lse = fa3.flash_attn_func(a["q"], a["k"], a["v"], softcap=5.0, return_attn_probs=True)
    dq = fa3.flash_attn_backward(np.ones_like(o), a["q"], a["k"], a["v"], o, lse, softcap=5.0)[0]
    assert np.array_equal(q.grad.view(torch.int16).numpy().view(np.uint16), dq.view(np.uint16))


# ---- softcap, seqused, trace --------------------------------------------------------------------
def _softcap_case(d=64, causal=False, softcap=3.0, sq=150, sk=170, h=2, hk=1):
    x = flash.inputs.attention_inputs(11, batch=1, seqlen_q=sq, seqlen_k=sk, heads=h, heads_kv=hk,
                                      head_dim=d, dtype="bf16", q_std=1.0, k_std=1.0)
    r = flash.forward(x["q"], x["k"], x["v"], softcap=softcap, causal=causal)
    dout = flash.inputs.InputStream(12).normalish(x["q"].shape).astype(np.float32)
    return dict(dout=dout.astype(x["q"].dtype), q=x["q"], k=x["k"], v=x["v"], out=r.out,
                lse=r.lse), dict(softcap=softcap, causal=causal)


@pytest.mark.parametrize("causal", [False, True])
def test_softcap_backward_is_near_the_float64_gradient(causal):
    a, kw = _softcap_case(causal=causal)
    res = flash.backward(**a, **kw)
    ref = reference_backward(a["dout"], a["q"], a["k"], a["v"], **kw)
    plain = reference_backward(a["dout"], a["q"], a["k"], a["v"], causal=causal)
    for got, want, other in zip(res, ref, plain, strict=True):
        err = np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want)
        assert err < 6e-3  # bf16 inputs, bf16 P and dS: the level of the softcap-free backward
        # the softcap changes the gradient by much more than the emulator's error
        assert np.linalg.norm(other - want) / np.linalg.norm(want) > 20 * err
    assert res.tiles.kblock_m == (96 if causal else 128)  # hdim 64: 96 x 128 causal + softcap


def test_softcap_dtanh_is_one_ffma_before_the_mask():
    a, kw = _softcap_case(causal=True, sq=40, sk=40, h=1)
    res = flash.backward(**a, **kw, trace=(0, 0, 0))
    t = res.trace
    cfg = bwd.make_backward_config(a["dout"], a["q"], a["k"], a["v"], a["out"], a["lse"], **kw)
    th = tanh(fmul(t["s"], cfg.softcap_val, ftz=True))
    want = ffma(-th, th, np.float32(1), ftz=True)
    assert np.array_equal(t["dtanh"].view(np.uint32), want.view(np.uint32))
    two_step = (np.float32(1) - (th * th).astype(np.float32)).astype(np.float32)
    assert not np.array_equal(t["dtanh"].view(np.uint32), two_step.view(np.uint32))
    masked = np.isneginf(t["scores"])
    assert masked.any() and np.isfinite(t["dtanh"][masked]).all()  # taken before the mask
    dpsum = res.dpsum[0, 0, : cfg.tiles.kblock_m][None, :, None]
    ds = fmul(fmul(t["p"], fsub(t["dp"], dpsum, ftz=True), ftz=True), t["dtanh"], ftz=True)
    assert np.array_equal(t["ds"].view(np.uint32), ds.view(np.uint32))


def test_trace_of_one_cta_matches_the_result():
    a, _ = _softcap_case(softcap=0.0, sq=200, sk=150, h=2, hk=2)
    res = flash.backward(**a, trace=(0, 1, 1))
    t = res.trace
    assert t["m_blocks"].tolist() == [0, 1] and "dtanh" not in t
    assert t["s"].shape == (2, 128, 128) and t["dq_partial"].shape == (2, 128, 64)
    # CTA (batch 0, head 1, n_block 1) owns keys 128..149 of head 1 (no GQA): its accumulators,
    # rounded (dK scaled first), are those rows of dv and dk
    dv = convert(t["dv_accum"][: 150 - 128, :64], "bf16")
    assert np.array_equal(dv.view(np.uint16), res.dv[0, 128:, 1].view(np.uint16))
    scale = np.float32(64 ** -0.5)
    dk = convert(fmul(t["dk_accum"][: 150 - 128, :64], scale, ftz=True), "bf16")
    assert np.array_equal(dk.view(np.uint16), res.dk[0, 128:, 1].view(np.uint16))
    for bad in ((0, 2, 0), (0, 0, 2), (1, 0, 0), [0, 0, 0], (0, 0, True)):
        with pytest.raises(ValueError, match="trace"):
            flash.backward(**a, trace=bad)


def test_seqused_uses_the_prefixes_and_leaves_the_rest_zero():
    a, cu = _packed()
    lq, lk = 13, 21
    used = dict(seqused_q=np.array([lq], np.int32), seqused_k=np.array([lk], np.int32))
    dq, dk, dv = fa3.flash_attn_backward(**a, **cu, **used, max_seqlen_q=20, max_seqlen_k=30)
    out, lse = fa3.flash_attn_varlen_func(a["q"][:lq], a["k"][:lk], a["v"][:lk],
                                          np.array([0, lq], np.int32), np.array([0, lk], np.int32),
                                          lq, lk, return_attn_probs=True)
    pre = {**{n: a[n][:lq] for n in ("dout", "q")}, "k": a["k"][:lk], "v": a["v"][:lk],
           "out": a["out"][:lq], "softmax_lse": np.ascontiguousarray(a["softmax_lse"][:, :lq])}
    want = fa3.flash_attn_backward(**pre, cu_seqlens_q=np.array([0, lq], np.int32),
                                   cu_seqlens_k=np.array([0, lk], np.int32), max_seqlen_q=20,
                                   max_seqlen_k=30)
    for got, w, n in zip((dq, dk, dv), want, (lq, lk, lk), strict=True):
        assert np.array_equal(got[:n].view(np.uint16), w.view(np.uint16))
        assert not got[n:].view(np.uint16).any()
    # 4-d inputs with seqused: each batch entry a sequence, the same bits
    four = {n: x[None] for n, x in a.items()}
    dq4, dk4, dv4 = fa3.flash_attn_backward(**four, **used)
    assert np.array_equal(dq4[0].view(np.uint16), dq.view(np.uint16))
    assert np.array_equal(dk4[0].view(np.uint16), dk.view(np.uint16))
