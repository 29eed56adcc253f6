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
    ideal = flash.forward(q, k, v, kblock_m=64, kblock_n=64, trace=cta, arch="ideal").trace
    d = compare.first_divergence(base, ideal)
    assert d.found and d.step in ("max_get_scale", "online_softmax")
    assert d.cta == (0, 0, 0) and d.warpgroup == 0 and 0 <= d.thread < 128
    assert "first divergence" in str(d) and d.to_dict()["array"] == d.array


def test_equal_values_with_different_bits_are_explained():
    r = compare.diff(np.array([0.0], np.float32), np.array([-0.0], np.float32))
    assert "equal value" in str(r) and "ulp histogram" not in str(r)
