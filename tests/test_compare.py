"""simulator.compare: bit diffs and the first divergence of two traces."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import compare, flash


def test_diff_counts_ulps_and_lists_worst():
    a = np.array([1.0, 2.0, -3.0, np.nan, 0.0], dtype=np.float32)
    b = a.copy()
    b[1] = np.nextafter(np.float32(2.0), np.float32(3.0))
    b[2] = np.float32(-3.0) - 4 * np.spacing(np.float32(3.0))
    b[3] = 1.0
    r = compare.diff(a, b, top=3)
    assert r.differing == 3 and r.nan_mismatch == 1 and r.max_ulp == 4
    assert r.histogram == {"1": 1, "3-4": 1, "NaN vs number": 1}
    assert r.worst[0]["index"] == (3,) and "0x7fc00000" in r.worst[0]["a"]
    assert "3 of 5 elements differ" in str(r)
    assert r.to_dict()["differing"] == 3


def test_diff_across_zero_and_bf16():
    a = np.array([0.0, -0.0], dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = np.array([-0.0, 0.0], dtype=np.float32).astype(ml_dtypes.bfloat16)
    r = compare.diff(a, b)
    assert r.differing == 2 and r.max_ulp == 0  # signed zeros differ in bits, not in value
    assert compare.diff(a, a).identical and "identical" in str(compare.diff(a, a))


def test_diff_against_a_float64_reference_says_how_to_compare():
    """``compare.diff(out, flash.reference(...)[0])`` is a newcomer's first try: the error
    names both dtypes and where float64 attention in the output's format comes from."""
    hint = r"run flash\.forward\(\.\.\., exact=flash\.Exactness\.all\(o_rounding=False\)\)$"
    with pytest.raises(ValueError, match=r"\(bfloat16 vs float64\); diff compares .*" + hint):
        compare.diff(np.zeros(2, ml_dtypes.bfloat16), np.zeros(2))
    with pytest.raises(ValueError, match=r"\(float64 vs float32\); .*" + hint):
        compare.diff(np.zeros(2), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"dtypes differ \(float32 vs float16\)$"):
        compare.diff(np.zeros(2, np.float32), np.zeros(2, np.float16))


def test_diff_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="dtypes differ"):
        compare.diff(np.zeros(2, np.float32), np.zeros(2, np.float16))
    with pytest.raises(ValueError, match="shapes differ"):
        compare.diff(np.zeros(2, np.float32), np.zeros(3, np.float32))


def test_first_divergence_finds_the_changed_setting(monkeypatch):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s).astype(ml_dtypes.bfloat16)
               for s in ((1, 64, 1, 32), (1, 128, 1, 32), (1, 128, 1, 32)))
    cta = [(0, 0, 0)]
    base = flash.forward(q, k, v, kblock_m=64, kblock_n=64, trace=cta).trace
    same = flash.forward(q, k, v, kblock_m=64, kblock_n=64, trace=cta).trace
    assert not compare.first_divergence(base, same).found
    # a deliberately altered emulator setting: exp2 without MUFU's approximation
    ideal = flash.forward(q, k, v, kblock_m=64, kblock_n=64, trace=cta, mufu="ideal").trace
    d = compare.first_divergence(base, ideal)
    assert d.found and d.step in ("max_get_scale", "online_softmax")
    assert d.cta == (0, 0, 0) and d.warpgroup == 0 and 0 <= d.thread < 128
    assert "first divergence" in str(d) and d.to_dict()["array"] == d.array


def test_equal_values_with_different_bits_are_explained():
    r = compare.diff(np.array([0.0], np.float32), np.array([-0.0], np.float32))
    assert "equal value" in str(r) and "ulp histogram" not in str(r)


def _traced(kblock_m=128):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(s).astype(ml_dtypes.bfloat16)
               for s in ((1, 128, 1, 32), (1, 128, 1, 32), (1, 128, 1, 32)))
    return flash.forward(q, k, v, kblock_m=kblock_m, kblock_n=64, trace=[(0, 0, 0)]).trace


def _altered(trace, step, array, index, delta=1):
    import copy

    other = copy.deepcopy(trace)
    event = next(e for e in other if e.step == step)
    values = event.data[array].copy()
    values.view(np.uint32)[index] += delta
    event.data[array] = values
    return other


def test_first_divergence_prints_its_numbering_and_sides():
    """One convention, printed with its meaning: which side is which, the thread as warpgroup /
    warp / lane with its number in the warpgroup and the CTA, the quad of the warpgroup, and the
    register by its fragment name and the tile element it holds."""
    emu = _traced()
    dev = _altered(emu, "epilogue", "acc_o", (1, 37, 5))
    d = compare.first_divergence(emu, dev, labels=("emulator", "H200"))
    text = str(d)
    assert (d.warpgroup, d.thread, d.position, d.warp, d.lane, d.quad) == (1, 37, (5,), 1, 5, 9)
    assert "thread: warpgroup 1, warp 1, lane 5 (thread 37 of the warpgroup, 0-127; 165 of the CTA)" in text
    assert "quad 9 of the warpgroup (0-31; 41 of the CTA), lane 1 of the quad" in text
    # register 5 of thread 37: row 16 * 1 + 1 = 17, column 8 * 1 + 2 * 1 + 1 = 11 (PTX wgmma C layout)
    assert d.register == ("acc_o[5], entry (mi 0, ni 3) of the row/column view: row 17 of the "
                          "warpgroup's 64 (row 81 of the CTA tile), column 11 of the head dim")
    lines = text.splitlines()
    assert f"  emulator = {d.a}" in lines and f"  H200     = {d.b}" in lines, text
    assert max(len(line) for line in lines) < 100, text  # a 100-column terminal or notebook
    assert d.a != d.b and "a =" not in text and "b =" not in text
    assert "(1 of 8,192 elements of acc_o differ in this event)" in text


def test_first_divergence_names_row_state_and_defaults():
    emu = _traced()
    d = compare.first_divergence(emu, _altered(emu, "finalize", "lse", (0, 6, 1)))
    assert d.labels == ("emulator", "reference") and d.step == "finalize" and d.n_block is None
    assert d.register == "lse[mi 1]: row 9 of the warpgroup's 64 (row 9 of the CTA tile)"
    text = str(d)
    assert "(finalize, after the last block)" in text and "  reference = " in text
    # the positional API and the fields callers read are unchanged
    assert (d.warpgroup, d.thread, d.position, d.array) == (0, 6, (1,), "lse")
    assert d.to_dict()["a"] == d.a and d.to_dict()["labels"] == ("emulator", "reference")
    same = compare.first_divergence(emu, emu, labels=("emulator", "twin"))
    assert not same.found and "of the emulator agrees bit for bit with the twin" in str(same)


def test_first_divergence_structure_notes_name_the_sides():
    emu = _traced()
    short = _traced()
    short.events.pop()
    d = compare.first_divergence(emu, short, labels=("emulator", "H200"))
    assert d.found and d.note == f"the emulator has {len(emu)} events, the H200 {len(short)}"
    assert str(d).startswith("traces differ in structure (emulator against H200): ")
    other = _traced(kblock_m=64)
    d = compare.first_divergence(emu, other, labels=("emulator", "H200"))
    assert "in the emulator" in d.note and "in the H200" in d.note, d.note


@pytest.mark.parametrize("labels", [("a",), ("x", "x"), ("x", ""), "ab", ("x", 3), None])
def test_first_divergence_refuses_bad_labels(labels):
    emu = _traced()
    with pytest.raises(ValueError, match="labels: expected two different non-empty strings"):
        compare.first_divergence(emu, emu, labels=labels)


def test_bits_and_ulp_distance():
    x = np.array([1.0, -0.0, 0.0, np.inf], np.float32)
    assert compare.bits(x).dtype == np.uint32 and compare.bits(x).tolist() == [
        0x3F800000, 0x80000000, 0, 0x7F800000]
    assert compare.bits(x.astype(ml_dtypes.bfloat16)).tolist() == [0x3F80, 0x8000, 0, 0x7F80]
    assert compare.bits(np.float32(2.0)) == 0x40000000
    up = np.nextafter(np.float32(1.0), np.float32(2.0))
    tiny = np.float32(-1e-45)                                 # the negative subnormal next to -0
    y = np.array([up, 0.0, tiny, np.finfo(np.float32).max], np.float32)
    assert compare.ulp_distance(x, y).tolist() == [-1, 0, 1, 1]
    assert compare.ulp_distance(np.float32(2.0), np.float32(1.0)) == 2**23
    b = np.array([1.0, 1.0078125], np.float32).astype(ml_dtypes.bfloat16)
    assert compare.ulp_distance(b[1:], b[:1]).tolist() == [1]
    with pytest.raises(ValueError, match="dtypes differ"):
        compare.ulp_distance(np.float32(1), np.float16(1))
    with pytest.raises(ValueError, match="x: expected a float32"):
        compare.bits(np.arange(3))
    with pytest.raises(ValueError, match="MaskedArray"):
        compare.bits(np.ma.masked_array(x))


def test_diff_names_its_sides():
    a = np.array([1.0, 2.0], np.float32)
    b = a.copy()
    b[1] = np.nextafter(np.float32(2.0), np.float32(3.0))
    text = str(compare.diff(a, b))
    assert "  at (1,): emulator 0x40000000 (2), reference 0x40000001 (2.00000024), 1 ulp" in text
    r = compare.diff(a, b, labels=("emulator", "FA3 library"))
    assert "FA3 library 0x40000001" in str(r) and r.worst[0]["b"].startswith("0x40000001")
    assert r.to_dict()["labels"] == ("emulator", "FA3 library")
    with pytest.raises(ValueError, match="labels"):
        compare.diff(a, b, labels=("same", "same"))
