"""``measure sdpa_record`` end to end on the CPU, its flash ops replaced by float32 stand-ins
(CPU torch has no ``_scaled_dot_product_flash_attention``): the phases run, the files the
recordings test reads are written with digests that match, and ``--dry-run`` needs no torch.
What the GPU computes is checked by tests/test_sdpa_recordings.py, not here."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from simulator.measure import sdpa_record as rec
from simulator.replay import sdpa_cases as sc
from simulator.replay.common import digest


def _math(torch, q, k, v, p, causal, scale):
    hq, hk = q.shape[1], k.shape[1]
    if hk != hq:
        k, v = k.repeat_interleave(hq // hk, 1), v.repeat_interleave(hq // hk, 1)
    s = (q.float() @ k.float().transpose(-1, -2)) * (scale or 1 / math.sqrt(q.shape[-1]))
    sq, sk = q.shape[2], k.shape[2]
    if causal:  # bottom-right, as FA2
        s = s.masked_fill(torch.arange(sk)[None] > torch.arange(sq)[:, None] + sk - sq,
                          float("-inf"))
    prob = torch.softmax(s, -1).nan_to_num()
    mask = prob.clone()
    if p:
        keep = torch.rand(prob.shape) >= p
        prob, mask = prob * keep / (1 - p), torch.where(keep, mask, -mask)
    return prob @ v.float(), torch.logsumexp(s, -1), mask


def _stand_ins(torch):
    def forward(q, k, v, p, causal, debug, scale=None):
        if q.shape[-1] % 8 or q.shape[-1] > 256:
            raise RuntimeError("stand-in: head dim must be a multiple of 8, at most 256")
        o, lse, mask = _math(torch, q, k, v, p, causal, scale)
        rounded = [(n + 127) // 128 * 128 for n in (q.shape[2], k.shape[2])]
        dbg = torch.zeros(*q.shape[:2], *rounded, dtype=q.dtype)
        dbg[..., :q.shape[2], :k.shape[2]] = mask.to(q.dtype)
        return (o.to(q.dtype), lse, torch.empty(0), torch.empty(0), q.shape[2], k.shape[2],
                torch.tensor([7, 8], dtype=torch.uint64), torch.empty(0, dtype=torch.uint64),
                dbg if debug else torch.empty(0, dtype=q.dtype))

    def backward(g, q, k, v, out, lse, cq, ck, mq, mk, p, causal, ps, po, scale=None):
        leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
        _math(torch, *leaves, 0.0, causal, scale)[0].backward(g.float())
        return tuple(x.grad.to(q.dtype) for x in leaves)

    return {"forward": forward, "backward": backward, "choice": torch._fused_sdp_choice}


def test_dry_run_writes_the_skeleton(tmp_path):
    assert rec.main(["--out", str(tmp_path), "--dry-run", "--limit", "3"]) == 0
    report = json.loads((tmp_path / rec.REPORT_FILE).read_text())
    assert report["dry_run"] and [r["case"] for r in report["forward"]] == sc.forward_cases()[:3]
    assert report["backward"][0]["inputs"] == sc.case_digest(sc.backward_cases()[0], True)


def test_the_phases_write_matching_digests(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(rec, "_ops", _stand_ins)
    assert rec.main(["--out", str(tmp_path), "--device", "cpu", "--limit", "4"]) == 0
    report = json.loads((tmp_path / rec.REPORT_FILE).read_text())
    fwd = np.load(tmp_path / rec.FORWARD_NPZ)
    for r in report["forward"]:
        assert r["inputs"] == sc.case_digest(r["case"])
        assert digest(fwd[f"c{r['index']}_out"]).hex() == r["out"]
        assert r["repeat_identical"] is True
    drop = np.load(tmp_path / rec.DROPOUT_NPZ)
    for r in report["dropout"]:
        assert r["philox"] == [7, 8] and digest(drop[f"d{r['index']}_mask"]).hex() == r["mask"]
        assert drop[f"d{r['index']}_mask"].shape[-2:] == (r["case"]["seqlen_q"],
                                                          r["case"]["seqlen_k"])
    bwd = np.load(tmp_path / rec.BACKWARD_NPZ)
    for r in report["backward"]:
        runs = bwd[f"b{r['index']}_dq_runs"]
        assert runs.shape[0] == 6 and not runs[1:].any()  # the stand-in is deterministic
        assert r["dq_det_agree"] and r["dq_default_equals_det"]


def test_drawn_mode_writes_digests_of_the_drawn_cases(tmp_path, monkeypatch):
    """``--drawn N``: the drawn cases in order, digests of each output, the default runs' dq
    differences (none from the deterministic stand-in); ``--time-limit`` stops between calls."""
    pytest.importorskip("torch")
    monkeypatch.setattr(rec, "_ops", _stand_ins)
    original = sc.drawn_cases  # its cases, shrunk for the CPU stand-ins
    monkeypatch.setattr(sc, "drawn_cases", lambda n, backward=False, seed=0: [
        dict(c, seqlen_q=min(c["seqlen_q"], 9), seqlen_k=min(c["seqlen_k"], 11), batch=1)
        for c in original(n, backward=backward)])
    assert rec.main(["--out", str(tmp_path), "--device", "cpu", "--no-profile", "--drawn", "8"]) == 0
    report = json.loads((tmp_path / "sdpa_drawn_report.json").read_text())
    assert len(report["forward"]) == 6 and len(report["backward"]) == 2 and report["drawn_asked"] == 8
    arrays = np.load(tmp_path / "sdpa_drawn.npz")
    for r in report["backward"]:
        assert len(r["dq"]) == 6 and len(set(r["dq"])) == 1
        assert arrays[f"b{r['index']}_dq_r0_idx"].size == 0
    assert all("out" in r and "lse" in r for r in report["forward"])
