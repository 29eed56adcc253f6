"""``attention_chunk``: keys cut into chunks of C, a query row seeing only its own chunk within
a window capped at C - 1 (hopper/flash_api.cpp, hopper/mask.h, hopper/block.h). The real FA3
forward's recorded calls (flash-attn3-jax 0.2.3's FFI on the H200, ``fa3_chunk_*``; fa3-fwd
refuses local attention) replay bit for bit; the full replay: ``verify --topic ext``."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import fa3, flash
from simulator.flash.masks import chunk_window
from simulator.io import read_json, read_npz
from simulator.replay import chunk_cases, fa3_chunk
from simulator.replay.common import digest

REPORT = read_json(fa3_chunk.REPORT, fa3_chunk.REGENERATE)
SAMPLE = read_npz(fa3_chunk.SAMPLE, fa3_chunk.REGENERATE)
ENTRIES = REPORT["cases"]


def _cost(c):
    if c["varlen"]:
        return sum(c["seqlens_q"]) * sum(c["seqlens_k"])
    return c["batch"] * c["seqlen_q"] * c["seqlen_k"]


def _cheapest(pred, n=1):
    found = [i for i, e in enumerate(ENTRIES) if pred(e["case"])]
    return sorted(found, key=lambda i: _cost(ENTRIES[i]["case"]))[:n]


SELECTED = sorted(set(
    _cheapest(lambda c: not c["varlen"] and c["chunk"] < 128 and c["seqlen_q"] > 100, 2)
    + _cheapest(lambda c: not c["varlen"] and c["chunk"] > 128 and c["seqlen_k"] > 300, 2)
    + _cheapest(lambda c: not c["varlen"] and c["causal"] and c["seqlen_q"] > 1, 1)
    + _cheapest(lambda c: not c["varlen"] and c["window"][0] >= 0 and c["seqlen_q"] > 1, 1)
    + _cheapest(lambda c: not c["varlen"] and c["seqlen_q"] > c["seqlen_k"] > 1, 1)
    + _cheapest(lambda c: not c["varlen"] and c["group"] > 1 and c["seqlen_q"] > 1, 1)
    + _cheapest(lambda c: c["varlen"] and len(c["seqlens_q"]) > 1, 2)))


def test_the_recording_covers_what_it_claims():
    cases = [e["case"] for e in ENTRIES]
    assert len(cases) >= 60 and not any("error" in e for e in ENTRIES)
    assert {c["chunk"] for c in cases} >= {16, 64, 100, 128, 256, 1024}
    assert any(c["causal"] for c in cases) and any(c["window"][0] >= 0 for c in cases)
    assert any(c["varlen"] for c in cases) and {c["dtype"] for c in cases} == {"bf16", "f16"}
    assert len(SELECTED) >= 8


@pytest.mark.parametrize("index", SELECTED, ids=[str(i) for i in SELECTED])
def test_recorded_calls_replay_bit_for_bit(index):
    res = fa3_chunk.check_case(index, ENTRIES[index], SAMPLE)
    assert res["ok"], {k: v for k, v in res["differ"].items() if v}


def test_the_chunk_is_what_changes_the_bits(monkeypatch):
    """Mutation: the same call with the capped window but without the chunk boundaries (in
    the masks and block ranges) differs from the library."""
    i = _cheapest(lambda c: not c["varlen"] and c["chunk"] < 128 and c["seqlen_q"] > 100)[0]
    case = ENTRIES[i]["case"]
    a = chunk_cases.call_args(case)
    win = chunk_window(a["causal"], a["window"], a["q"].shape[1], a["k"].shape[1], case["chunk"])
    out, _ = fa3.flash_attn_func(a["q"], a["k"], a["v"], window_size=win, return_attn_probs=True)
    assert digest(np.ascontiguousarray(out).view(np.uint16)).hex() != ENTRIES[i]["out"]


def test_masks_follow_the_chunks():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 200, 1, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out, lse = flash.reference(q, k, v, attention_chunk=50)
    alone, _ = flash.reference(q[:, 50:100], k[:, 50:100], v[:, 50:100])
    np.testing.assert_allclose(out[:, 50:100], alone, rtol=1e-12, atol=1e-12)  # keys 50..99 only
    assert chunk_window(True, (-1, -1), 200, 200, 50) == (49, 0)
    assert chunk_window(False, (10, -1), 200, 300, 50) == (10, 49)


def test_bad_chunks_and_what_has_no_chunk_are_refused():
    q = np.ones((1, 4, 2, 64), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="attention_chunk: expected an int >= 0"):
        fa3.flash_attn_func(q, q, q, attention_chunk=-3)
    with pytest.raises(ValueError, match="attention_chunk: expected an int >= 0"):
        fa3.flash_attn_func(q, q, q, attention_chunk=16.0)
    pool = np.ones((4, 16, 2, 64), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="attention_chunk: with page_table not emulated"):
        fa3.flash_attn_with_kvcache(q, pool, pool, page_table=np.zeros((1, 2), np.int32),
                                    attention_chunk=8)
    torch = pytest.importorskip("torch", reason="autograd needs torch (CPU build)")
    t = torch.ones((1, 4, 2, 64), dtype=torch.bfloat16, requires_grad=True)
    out = fa3.flash_attn_func(t, t.detach(), t.detach(), attention_chunk=8)  # FA3 runs it
    assert out.requires_grad
    with pytest.raises(ValueError, match="attention_chunk: FA3 has no backward with it"):
        out.float().sum().backward()  # as FA3's backward asserts
