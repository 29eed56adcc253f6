"""The emulator against the real FlashAttention-3 library's bits recorded on the H200.

Recorded by ``python -m simulator measure fa3_library_record --twin`` (the fa3-fwd 0.0.3 wheel,
Dao-AILab's hopper/ forward) and ``python -m simulator measure hypothesis_replay --target
library``; replayed here without a GPU through ``simulator.flash.forward`` with FA3's default
dispatch (no tile arguments).
"""

from __future__ import annotations

import ci_sample
import numpy as np
import pytest

from simulator import engine, flash
from simulator.device import fa3_library
from simulator.device.runtime import source_sha256
from simulator.io import read_json, read_npz
from simulator.replay import fa3_cases
from simulator.replay import fa3_library as replay
from simulator.replay import hypothesis as rr
from simulator.replay.common import DATA_DIR, digest

REPORT, SAMPLE = replay.load()
HYP = read_json(DATA_DIR / "fa3_library_hypothesis_report.json", replay.REGENERATE)
HYP_SAMPLE = rr.unpack_cases(read_npz(DATA_DIR / "fa3_library_hypothesis_sample.npz", replay.REGENERATE),
                             read_json(DATA_DIR / "fa3_library_hypothesis_sample.json", replay.REGENERATE))


def test_recorded_with_the_published_wheel_on_an_h200():
    prov = REPORT["provenance"]
    assert prov["gpu"] == "NVIDIA H200" and prov["version"] == "0.0.3"
    assert prov["extension_sha256"] == fa3_library.EXTENSION_SHA256
    assert prov["wheel_sha256"] == fa3_library.WHEEL_SHA256
    assert HYP["library"]["extension_sha256"] == fa3_library.EXTENSION_SHA256


def test_the_matrix_covers_head_dims_masks_gqa_and_edge_lengths():
    cases = [r["case"] for r in REPORT["cases"] if "embedded" not in r["case"]]
    assert len(cases) >= 300 and REPORT["counts"]["refused"] == 0
    assert cases == fa3_cases.matrix()  # the recording belongs to this generator
    for fmt, dims in fa3_cases.HEAD_DIMS.items():
        assert {c["head_dim"] for c in cases if c["dtype"] == fmt} == set(dims)
    def count(pred):
        return sum(1 for c in cases if pred(c))
    assert count(lambda c: c["causal"]) >= 100 and count(lambda c: c["softcap"] > 0) >= 20
    assert count(lambda c: c["heads_kv"] == 1 and c["heads"] > 1) >= 10           # MQA
    assert count(lambda c: 1 < c["heads_kv"] < c["heads"]) >= 10                  # GQA
    assert count(lambda c: c["seqused_k"] is not None and 0 in c["seqused_k"]) >= 5
    assert count(lambda c: c["seqlen_q"] == 1) >= 10
    assert count(lambda c: c["causal"] and c["seqlen_q"] > c["seqlen_k"]) >= 10
    assert count(lambda c: c["descales"]) >= 20
    for special in fa3_cases.SPECIALS[1:]:
        assert count(lambda c, s=special: c["special"] == s) >= 10, special
    embedded = [r["case"] for r in REPORT["cases"] if "embedded" in r["case"]]
    assert {(c["dtype"], c["causal"]) for c in embedded} == {
        ("bf16", False), ("bf16", True), ("e4m3", False), ("e4m3", True)}


def test_the_twin_kernel_equals_the_library_on_every_case():
    assert REPORT["provenance"]["twin"]["kernel_sha256"] == source_sha256("fa3_forward.cu")
    assert REPORT["counts"]["twin_equal_to_library"] == len(REPORT["cases"])
    for r in REPORT["cases"]:
        assert (r["twin_out"], r["twin_lse"]) == (r["out"], r["lse"])


@pytest.mark.parametrize("index", ci_sample.library_params(REPORT["cases"], SAMPLE))  # all: --full-replay
def test_emulator_reproduces_the_library(index):
    """Every recorded case, bit for bit (digests; every value of the sampled ones)."""
    res = replay.check_case(index, REPORT["cases"][index], SAMPLE, digest)
    assert res.ok, f"{res.label}: O values differing {res.out_diff}, LSE {res.lse_diff}"


def test_hypothesis_drawn_calls_agreed_on_the_device():
    assert HYP["target"] == "library" and HYP["device"]["gpu"] == "NVIDIA H200"
    assert HYP["cases"] >= 20_000 and HYP["disagreements"] == 0
    assert all(not r["shard_errors"] and not r["stopped"] for r in HYP["runs"])
    drawn = HYP["runs"][0]["drawn"]
    # (no non-finite inputs: bf16 edge values are finite and e4m3 is clipped to 448; the
    # matrix's inf_k / nan_k / huge_k cases cover non-finite scores)
    for label in ("dtype=bfloat16", "dtype=float8_e4m3fn", "mask=causal", "softcap=yes",
                  "seqlens_k=yes", "gqa=yes", "head_dim=16", "head_dim=256"):
        assert drawn[label] >= 1500, label


@pytest.mark.parametrize("j", range(0, len(HYP_SAMPLE)))
def test_emulator_reproduces_sampled_hypothesis_calls(j):
    c = HYP_SAMPLE[j]
    out, lse = rr.result_bits(*flash.forward(c["q"], c["k"], c["v"], **c["kwargs"]))
    assert np.array_equal(out, c["out_bits"]) and np.array_equal(lse, c["lse_bits"]), c["kwargs"]


def test_an_unfused_rescale_would_fail_the_recording(monkeypatch):
    """Without the fused rescale (row_sum *= scale as its own FMUL) the emulator misses bits of
    rows that visit two or more K/V blocks: the replay can fail. (On the NumPy engine, whose
    ``online_softmax`` is patched here; the compiled block step has its own fused rescale,
    checked by tests/test_engine_fused_softmax.py.)"""
    from simulator.flash import softmax as sm
    from simulator.numerics import fmul

    sampled = [i for i, r in enumerate(REPORT["cases"])  # sampled cases of 4+ K/V blocks
               if f"c{i}_lse" in SAMPLE and r["case"].get("seqlen_k", 0) >= 400
               and r["case"].get("seqlen_q", 0) > 1]
    orig = sm.Softmax.online_softmax

    def unfused(self, scores, is_first, check_inf=True):
        if not is_first:  # FMUL first; then ffma(1, x, p0) is the plain FADD x + p0
            self.row_sum = fmul(self.row_sum, self._row_sum_scale, ftz=True)
            self._row_sum_scale = np.ones_like(self._row_sum_scale)
        return orig(self, scores, is_first, check_inf)

    monkeypatch.setattr(sm.Softmax, "online_softmax", unfused)
    differ = 0
    for i in sampled:
        with engine.use_engine("numpy"):
            res = flash.forward(**replay.inputs_for(REPORT["cases"][i]["case"]))
        differ += int(np.count_nonzero(res.lse.view(np.uint32) != SAMPLE[f"c{i}_lse"]))
    assert differ >= 20  # 26 LSE values in 6 cases when measured
