"""Rotary embeddings in ``flash_attn_with_kvcache``: the real library's rotary appends
(flash-attn3-jax 0.2.3 on the H200, ``fa3_rotary_*``) replay bit for bit, a wrong rule is
caught, and FA3's argument rules. The full replay: ``python -m simulator verify --topic paged``."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import fa3
from simulator.fa3 import rotary
from simulator.io import read_json, read_npz
from simulator.replay import fa3_rotary

REPORT = read_json(fa3_rotary.REPORT, fa3_rotary.REGENERATE)
SAMPLE = read_npz(fa3_rotary.SAMPLE, fa3_rotary.REGENERATE)
BF16 = ml_dtypes.bfloat16


def _entries(pred, n=1):
    return [e for e in REPORT["cases"] if pred(e["case"]) and not fa3_rotary.past_tables(e["case"])][:n]


SELECTED = (_entries(lambda c: c["interleaved"] and c["page_size"] == 0 and c["causal"])
            + _entries(lambda c: not c["interleaved"] and c["page_size"] > 0)
            + _entries(lambda c: c["rotary_seqlens"] is not None)
            + _entries(lambda c: c["window"][0] >= 0 and c["seqlen_q"] > 1)
            + _entries(lambda c: c["rotary_dim"] < 32 and c["dtype"] == "f16"))


def test_the_recording_covers_what_it_claims():
    cases = [e["case"] for e in REPORT["cases"]]
    assert len(cases) >= 60 and all(e["identical"] and e["cache_written"] for e in REPORT["cases"])
    assert {c["rotary_dim"] for c in cases} == {16, 32, 64, 128}
    assert {c["interleaved"] for c in cases} == {True, False}
    assert len(SELECTED) == 5


@pytest.mark.parametrize("entry", SELECTED, ids=[e["case"]["name"] for e in SELECTED])
def test_recorded_rotary_calls_replay_bit_for_bit(entry):
    assert fa3_rotary.check(entry, SAMPLE) == []


def test_a_wrong_pairing_is_caught(monkeypatch):
    entry = SELECTED[0]
    real = rotary.rotate
    monkeypatch.setattr(rotary, "rotate", lambda x, c, s, p, inter: real(x, c, s, p, not inter))
    assert "k_cache" in fa3_rotary.check(entry, SAMPLE)


def test_a_fixed_query_position_under_causal_is_caught(monkeypatch):
    entry = _entries(lambda c: c["causal"] and c["seqlen_q"] > 1)[0]
    real = rotary.rotate
    monkeypatch.setattr(rotary, "rotate", lambda x, c, s, p, inter: real(x, c, s, p[:, :1] + 0 * p,
                                                                         inter))
    assert "out" in fa3_rotary.check(entry, SAMPLE)


def _call(**kw):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 2, 64)).astype(BF16)
    kc, vc = (rng.standard_normal((1, 32, 1, 64)).astype(BF16) for _ in range(2))
    kn, vn = (rng.standard_normal((1, 2, 1, 64)).astype(BF16) for _ in range(2))
    tab = np.zeros((32, 16), BF16)
    args = dict(k=kn, v=vn, rotary_cos=tab, rotary_sin=tab, cache_seqlens=np.array([5], np.int32))
    args.update(kw)
    return fa3.flash_attn_with_kvcache(q, kc, vc, **args)


@pytest.mark.parametrize("kw, message", [
    (dict(k=None, v=None), "rotary_cos: FA3 requires new k, v"),
    (dict(rotary_sin=None), "rotary_cos, rotary_sin: give both"),
    (dict(rotary_cos=np.zeros((32, 12), BF16), rotary_sin=np.zeros((32, 12), BF16)),
     "multiple of 16"),
    (dict(rotary_cos=np.zeros((32, 16), np.float32)), "rotary_cos: expected q's dtype"),
    (dict(rotary_sin=np.zeros((30, 16), BF16)), "rotary_sin: expected rotary_cos's shape"),
    (dict(rotary_seqlens=np.array([31], np.int32)), "k: rotary positions 31..32"),
    (dict(rotary_seqlens=np.array([3], np.int64)), "rotary_seqlens: FA3 requires dtype int32"),
])
def test_bad_rotary_arguments_are_refused_naming_them(kw, message):
    with pytest.raises(ValueError, match=message):
        _call(**kw)


def test_cos_one_sin_zero_changes_nothing():
    one = np.ones((32, 16), BF16)
    a = _call(rotary_cos=one, rotary_sin=np.zeros((32, 16), BF16))
    b = _call(rotary_cos=None, rotary_sin=None)
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
