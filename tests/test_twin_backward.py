"""The twin backward (kernels/fa3_backward.cu) against the emulator, bit for bit.

CI: the committed recording (``simulator/data/device/twin_backward_*``) replayed through the
emulator, every case with 0 differing bits, and the recording covering every kernel head dim,
softcap, the masks, GQA and both dtypes. Live (``device``): the twin and the emulator on drawn
cases, skipped with the reason without CuPy or a GPU.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from simulator.replay import twin_backward as twin
from simulator.replay.common import digest


@pytest.fixture(scope="module")
def recording():
    return twin.load()


def test_recording_covers_head_dims_softcap_masks_gqa_and_dtypes(recording):
    report, _ = recording
    entries = [e for e in report["entries"] if "error" not in e]
    assert len(entries) == len(report["entries"]) == len(twin.cases())
    assert all(e["sanity_ok"] for e in entries)
    cases = [e["case"] for e in entries]
    assert {c["head_dim"] for c in cases} >= {64, 96, 128, 192, 256}
    assert any(c["softcap"] > 0 for c in cases)
    assert any(c["causal"] for c in cases)
    assert any(c["window"][0] >= 0 for c in cases)
    assert any(c["heads"] > c["heads_kv"] for c in cases)
    assert {c["dtype"] for c in cases} == {"bf16", "f16"}
    for hd in (64, 96, 192, 256):
        assert any(c["head_dim"] == hd and c["softcap"] > 0 for c in cases)


def test_recorded_cases_are_the_frozen_ones(recording):
    report, _ = recording
    assert [e["case"] for e in report["entries"]] == twin.cases()


@pytest.mark.parametrize("index", range(len(twin.cases())),
                         ids=[c["name"] for c in twin.cases()])
def test_twin_backward_recording_has_the_emulators_bits(recording, index):
    report, sample = recording
    entry = report["entries"][index]
    got = twin.emulate(entry["case"])
    r = twin.compare(entry, got, sample)
    assert r["mismatches"] == [], f"differing digests {r['mismatches']}: {r['differing']}"
    for name in twin.OUTPUTS:  # the full bits, where recorded, equal value for value
        key = f"{entry['key']}_{name}"
        if key in sample:
            np.testing.assert_array_equal(sample[key], got[name], err_msg=key)


def _drawn(seed: int, count: int) -> list[dict]:
    """Cases drawn apart from the recorded ones: head dims, masks, softcap, dtype, GQA."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        hd = rng.choice((48, 64, 96, 112, 128, 176, 192, 256))
        h, hk = rng.choice(((1, 1), (2, 1), (3, 3), (4, 2)))
        mask = rng.choice(("none", "causal", "local", "right"))
        sc = rng.choice((0.0, 0.0, 25.0))
        case = twin.make_case(f"drawn{i}_d{hd}_{mask}", 90_000 + seed * 100 + i, hd,
                          rng.choice(("bf16", "f16")), mask, rng.randint(1, 2),
                          rng.randint(1, 260), rng.randint(1, 260), h, hk, sc)
        out.append(case)
    return out


@pytest.mark.device
@pytest.mark.parametrize("case", _drawn(5, 8), ids=lambda c: c["name"])
def test_live_twin_backward_equals_emulator(case):
    from simulator.device import backward as dev
    from simulator.device.runtime import DeviceUnavailable, gpu_available

    ok, why = gpu_available()
    if not ok:
        pytest.skip(f"the twin backward needs CuPy and a CUDA GPU: {why}")
    x = twin.inputs(case)
    try:
        res = twin.run_backward(dev.backward, case, x)
    except DeviceUnavailable as exc:
        pytest.skip(str(exc))
    mine = twin.outputs(res)
    emu = twin.emulate(case, x)
    for name in twin.OUTPUTS:
        assert digest(mine[name]) == digest(emu[name]), (
            f"{name}: {int(np.sum(mine[name] != emu[name]))} values differ")


@pytest.mark.device
@pytest.mark.parametrize("name, cta", twin.TRACES[:3], ids=lambda x: str(x))
def test_live_twin_trace_equals_emulator(name, cta):
    from simulator.device import backward as dev
    from simulator.device.runtime import DeviceUnavailable, gpu_available

    ok, why = gpu_available()
    if not ok:
        pytest.skip(f"the twin backward needs CuPy and a CUDA GPU: {why}")
    case = twin.trace_case(name)
    x = twin.inputs(case)
    try:
        res = dev.backward(x["dout"], x["q"], x["k"], x["v"], x["out"], x["lse"], trace=cta,
                           **twin.backward_kwargs(case))
    except DeviceUnavailable as exc:
        pytest.skip(str(exc))
    mine, emu = twin.trace_bits(res.trace), twin.emulate_trace(case, cta, x)
    assert sorted(mine) == sorted(emu)
    for key in emu:
        assert np.array_equal(mine[key], emu[key]), f"{key}: {int(np.sum(mine[key] != emu[key]))} differ"


def test_recorded_twin_traces_have_the_emulators_bits():
    """The step traces of one CTA per entry of ``twin.TRACES`` recorded on the H200 (the
    kernel's trace hooks) against the emulator's ``trace=``, array by array; the full bits of
    the small ones value for value."""
    from simulator.io import read_json, read_npz

    report = read_json(twin.TRACE_REPORT, twin.REGENERATE)
    sample = read_npz(twin.TRACE_SAMPLE, twin.REGENERATE)
    assert [(e["case"]["name"], tuple(e["cta"])) for e in report["traces"]] == list(twin.TRACES)
    assert report["failures"] == 0
    (row,) = twin.replay_traces()
    assert row["mismatches"] == 0 and row["cases"] > 1_000_000, row
    sampled = {k.split("_")[0] for k in sample}
    assert len(sampled) >= 2
    for entry in report["traces"]:
        if entry["key"] not in sampled:
            continue
        got = twin.emulate_trace(entry["case"], entry["cta"])
        assert any(name == "dtanh" for name in got) == (entry["case"]["softcap"] > 0)
        for name, b in got.items():
            np.testing.assert_array_equal(sample[f"{entry['key']}_{name}"], b, err_msg=name)
