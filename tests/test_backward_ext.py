"""The extension recording of the real FA3 backward (``fa3_backward_record --ext``): more drawn
calls, the library's answer to softcap, and ``seqused_q`` / ``seqused_k``; and the SASS of the
softcap backward's arithmetic."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from simulator.io import read_json, read_npz
from simulator.measure import softcap_sass
from simulator.replay import bwd_cases
from simulator.replay import fa3_backward as replay

EXT = read_json(replay.EXT_REPORT, replay.REGENERATE)
MAIN = read_json(replay.REPORT, replay.REGENERATE)
DIFFS = bwd_cases.unpack_diffs(read_npz(replay.EXT_DIFFS, replay.REGENERATE))
SASS = read_json(replay.DATA_DIR / "softcap_sass.json", "python -m simulator measure softcap_sass")


def test_provenance_and_counts():
    prov = EXT["provenance"]
    assert prov["wheel"] == "flash-attn3-jax" and prov["gpu"] == "NVIDIA H200"
    assert EXT["drawn_start"] == len(MAIN["drawn"])  # the drawn cases continue the main ones
    keys = [e["key"] for e in EXT["drawn"]]
    assert keys[0] == f"d{len(MAIN['drawn'])}" and len(set(keys)) == len(keys)
    used = [e for e in EXT["extra"] if "seqused" in e["case"]["name"]]
    # drawn calls recorded: bwd_cases.drawn's and the drawn seqused ones (the time limit of the
    # visit stopped the drawn part at 733 of 900)
    assert len(MAIN["drawn"]) + len(EXT["drawn"]) + len(used) >= 2000
    ok = [e for e in EXT["drawn"] if "error" not in e]
    assert len(ok) == len(EXT["drawn"]) and all(e["det_identical"] for e in ok)
    # the extras are what bwd_cases.extras() draws, in order
    assert [e["case"] for e in EXT["extra"]] == bwd_cases.extras()


def test_the_library_refuses_a_softcap_backward():
    """flash-attn3-jax 0.2.3 was built without a softcap backward: every softcap case is its
    refusal, so the emulator's softcap backward is checked by SASS and float64 instead."""
    soft = [e for e in EXT["extra"] if e["case"].get("softcap")]
    assert len(soft) == 40
    assert all("does not support tanh softcapping" in e.get("error", "") for e in soft)


def _cheapest(entries, n):
    return sorted(entries, key=lambda ke: replay.cost(ke[1]["case"]))[:n]


def test_seqused_cases_bit_exact():
    used = [(k, e) for k, e in replay.entries(EXT, "extra") if "seqused" in e["case"]["name"]]
    assert len(used) == 40
    assert {(e["case"]["seqused_q"] is None, e["case"]["seqused_k"] is None)
            for _, e in used} == {(False, True), (True, False), (False, False)}
    for key, e in _cheapest(used, 6):
        r = replay.check(key, e, DIFFS)
        assert r["mismatches"] == [] and r["outside"] == 0 and r["values"] > 0, key


def test_drawn_ext_cases_bit_exact():
    for key, e in _cheapest(replay.entries(EXT, "drawn"), 4):
        r = replay.check(key, e, DIFFS)
        assert r["mismatches"] == [] and r["outside"] == 0, key


def test_sample_full_bits():
    sample = read_npz(replay.EXT_SAMPLE, replay.REGENERATE)
    by_key = {e["key"]: e for part in ("drawn", "extra") for e in EXT[part]}
    keys = sorted({k.split("_")[0] for k in sample})
    assert keys
    for key in sorted(keys, key=lambda k: replay.cost(by_key[k]["case"]))[:3]:
        got = replay.emulate(by_key[key]["case"])
        for name in ("dq", "dk", "dv"):
            mine = replay.bits(getattr(got["res"], name))
            assert np.array_equal(mine, sample[f"{key}_{name}"]), f"{key} {name}"


def test_softcap_sass_is_the_emulated_order():
    """nvcc -O3 --use_fast_math for sm_90a on the probe: tanh.approx, dtanh as one FFMA
    (-t * t + 1), the FFMA of the exp2 argument, MUFU.EX2."""
    probe = softcap_sass.PROBE.read_bytes()
    assert SASS["probe_sha256"] == hashlib.sha256(probe).hexdigest()
    ins = SASS["instructions"]
    ops = [i.split()[0] for i in ins]
    assert "MUFU.TANH" in ops and "MUFU.EX2" in ops
    dtanh = [i for i in ins if re.fullmatch(r"FFMA\.FTZ (R\d+), -(R\d+), (R\d+), 1 ;", i)]
    assert len(dtanh) == 1 and SASS["dtanh_is_one_ffma"], ins
    reg = re.fullmatch(r"FFMA\.FTZ (R\d+), -(R\d+), (R\d+), 1 ;", dtanh[0]).groups()
    assert reg[1] == reg[2] == ins[ops.index("MUFU.TANH")].split()[1].rstrip(",")  # -t * t + 1
    assert ops.index("MUFU.TANH") < ops.index("MUFU.EX2")


@pytest.mark.parametrize("part", ["drawn", "extra"])
def test_entries_leave_out_refusals(part):
    keys = [k for k, _ in replay.entries(EXT, part)]
    assert all(k[0] == part[0] for k in keys)
