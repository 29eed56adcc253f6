"""The hypothesis-drawn recording of the real FA3 backward (``fa3_backward_record --hyp``):
2,200 calls drawn by :func:`simulator.strategies.backward_cases`, recorded on the H200 with
flash-attn3-jax 0.2.3; a few replayed here (``verify --topic backward`` replays them all)."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import strategies as sst
from simulator.io import read_json, read_npz
from simulator.replay import bwd_cases
from simulator.replay import fa3_backward as replay

HYP = read_json(replay.HYP_REPORT, replay.REGENERATE)
PLAN = read_json(replay.HYP_CASES, "python -m simulator measure fa3_backward_record --draw 2200")
DIFFS = bwd_cases.unpack_diffs(read_npz(replay.HYP_DIFFS, replay.REGENERATE))


def test_the_recording_is_the_drawn_plan_every_call_answered():
    prov = HYP["provenance"]
    assert prov["wheel"] == "flash-attn3-jax" and prov["gpu"] == "NVIDIA H200"
    assert prov["drawn"] == PLAN["provenance"]
    assert prov["drawn"]["strategy"] == "simulator.strategies.backward_cases()"
    assert [e["case"] for e in HYP["hyp"]] == PLAN["cases"]
    assert len(HYP["hyp"]) >= 2000 and "stopped" not in HYP
    assert len({json.dumps(c, sort_keys=True) for c in PLAN["cases"]}) == len(PLAN["cases"])
    assert all("error" not in e and e["det_identical"] for e in HYP["hyp"])
    assert [e["key"] for e in HYP["hyp"]] == [f"h{i}" for i in range(len(HYP["hyp"]))]
    # what was drawn: varlen with empty sequences and seqused, every mask, GQA, both dtypes
    cases = PLAN["cases"]
    assert any(c["seqlens_q"] and 0 in c["seqlens_q"] for c in cases)
    assert any(c["seqused_q"] is not None for c in cases)
    assert any(c["seqused_k"] is not None for c in cases)
    assert {c["causal"] for c in cases} == {False, True}
    assert any(c["window"] != [-1, -1] for c in cases)
    assert {c["dtype"] for c in cases} == {"bf16", "f16"}
    assert max(c["heads"] // c["heads_kv"] for c in cases) == 8
    assert any(replay.differed(e) for e in HYP["hyp"])  # the default mode did vary


def test_cheap_and_varying_calls_bit_exact_and_inside_the_spread():
    todo = replay.entries(HYP, "hyp")
    cheap = sorted(todo, key=lambda ke: replay.cost(ke[1]["case"]))[:6]
    varying = sorted((ke for ke in todo if replay.differed(ke[1])),
                     key=lambda ke: replay.cost(ke[1]["case"]))[:3]
    default_values = 0
    for key, e in cheap + varying:
        r = replay.check(key, e, DIFFS)
        assert r["mismatches"] == [] and r["outside"] == 0 and r["values"] > 0, key
        default_values += r["default_values"]
    assert default_values > 0


def test_sample_full_bits():
    sample = read_npz(replay.HYP_SAMPLE, replay.REGENERATE)
    by_key = {e["key"]: e for e in HYP["hyp"]}
    keys = sorted({k.split("_")[0] for k in sample}, key=lambda k: replay.cost(by_key[k]["case"]))
    assert len(keys) > 10
    for key in keys[:3]:
        got = replay.emulate(by_key[key]["case"])
        for name in ("dq", "dk", "dv"):
            assert np.array_equal(replay.bits(getattr(got["res"], name)),
                                  sample[f"{key}_{name}"]), f"{key} {name}"


@settings(max_examples=60, deadline=None)
@given(sst.backward_cases(), st.data())
def test_drawn_cases_are_valid_calls(case, data):
    """Every drawn case is a call FA3's backward takes, within the strategy's work bound, and
    its inputs build."""
    assert case["heads"] % case["heads_kv"] == 0 and case["heads"] >= 1
    if case["seqlens_q"] is None:
        work = case["batch"] * case["seqlen_q"] * case["seqlen_k"]
        assert case["seqused_q"] is None and case["seqused_k"] is None
    else:
        assert len(case["seqlens_q"]) == len(case["seqlens_k"]) == case["batch"]
        assert max(case["seqlens_q"]) == case["seqlen_q"] >= 1
        work = sum(a * b for a, b in zip(case["seqlens_q"], case["seqlens_k"], strict=True))
        for used, lens in ((case["seqused_q"], case["seqlens_q"]),
                           (case["seqused_k"], case["seqlens_k"])):
            assert used is None or all(0 <= u <= n for u, n in zip(used, lens, strict=True))
    assert case["heads"] == 1 or case["heads"] * work <= 3_000_000
    if data.draw(st.integers(0, 9)) == 0:  # building inputs costs; a tenth of the draws
        x = bwd_cases.case_inputs(case)
        assert x["q"].shape[-2:] == (case["heads"], case["head_dim"])


def test_reduce_adds_as_measured_and_the_call_that_showed_them():
    """The reduce-adds measured on the H200 (``reduce_add_probe``): the TMA bulk reduce keeps
    subnormals, red / atom flush them; the emulator adds GQA's dK / dV (and dQ below head dim
    256) the bulk way. hyp823 (varlen GQA, one query row whose P is near 2^-126) is the drawn
    call that showed it: with flushing adds its dv had 10 values +0 where the library has -0."""
    from simulator.flash import spread
    from simulator.numerics import fadd

    rec = read_npz(replay.DATA_DIR / "reduce_add_probe.npz", "python -m simulator measure "
                   "reduce_add_probe --out OUT")
    init, x = rec["init"].view(np.float32), rec["x"].view(np.float32)
    assert init.size % 4 == 0 and init.size > 65_000
    assert np.array_equal(fadd(init, x, ftz=False).view(np.uint32), rec["bulk_add"])
    for name in ("red_add", "atom_add"):
        assert np.array_equal(fadd(init, x, ftz=True).view(np.uint32), rec[name])
    sass = (replay.DATA_DIR / "reduce_add_sass.txt").read_text()
    assert "UBLKRED.G.S.ADD.F32.RN" in sass and "REDG.E.ADD.F32.FTZ.RN" in sass
    parts = np.array([[np.float32(-5e-39)], [np.float32(0.0)]], np.float32)
    assert spread.ordered_sum(parts, ftz=False)[0] < 0 and spread.ordered_sum(parts)[0] == 0
    key, e = next(ke for ke in replay.entries(HYP, "hyp") if ke[0] == "h823")
    r = replay.check(key, e, DIFFS)
    assert r["mismatches"] == [] and r["outside"] == 0
