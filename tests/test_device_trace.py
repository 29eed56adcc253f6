"""Device step traces (kernels/fa3_forward.cu built with -DFA_TRACE=1) against the emulator.

CPU: the recorded dumps (simulator/data/device/forward_traces.npz) belong to the current kernel
source, decode into the emulator's event sequence, and agree with the emulator's trace bit for
bit (``first_divergence(...).found is False``) for every recorded configuration; twins show that
a wrong emulator setting (the correctly rounded MUFU models, or the FFMA of online_softmax
split into FMUL + FADD) is caught at the expected step. The decoder is also checked on dumps
built from emulator traces (every schedule, d above and below 128). Device-marked: live traces.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from simulator.compare import first_divergence
from simulator.device import forward as dev
from simulator.device import forward_trace as ft
from simulator.device import runtime
from simulator.flash import forward as emu_forward
from simulator.flash import softmax as emu_softmax
from simulator.numerics import fadd, fmul
from simulator.replay import forward_traces as traces
from simulator.trace import STEPS

TRACES = Path(__file__).resolve().parents[1] / "simulator" / "data" / "device" / traces.TRACES_FILE


@pytest.fixture(scope="module")
def recorded():
    return traces.load_traces(TRACES)


def _emulate(cfg, inputs, **change):
    return emu_forward(inputs["q"], inputs["k"], inputs["v"],
                       **{**traces.call_kwargs(cfg, inputs), **change})


def _device_trace(rec, raw):
    inputs = traces.make_inputs(rec)
    lcfg = traces.launch_config(rec, inputs)
    ctas = ft.trace_ctas([tuple(c) for c in rec["trace"]])
    return inputs, ft.decode(raw, lcfg, ctas)


def _encode(trace, lcfg, ctas) -> np.ndarray:
    """A dump as the kernel writes it, built from a trace (decoder check without a GPU)."""
    W, cols = lcfg.kblock_m // 64, ft.trace_cols(lcfg)
    width = {"S": lcfg.kblock_n // 2, "O": lcfg.head_dim // 2}
    raw = np.full((len(ctas), ft.slots_per_cta(lcfg, ctas), ft.record_words(lcfg)), 0xFFFFFFFF,
                  dtype=np.uint32)
    for t, cta in enumerate(ctas):
        events = trace.for_cta(tuple(int(c) for c in cta))
        assert len(events) == ft.expected_events(lcfg, cta)
        for slot, e in enumerate(events):
            n = -1 if e.n_block is None else e.n_block
            raw[t, slot, :4] = [ft.MAGIC | STEPS.index(e.step), n & 0xFFFFFFFF, slot, 0]
            body = raw[t, slot, 4:].reshape(W, 128, cols)
            for name, c0, w in ft.COLUMNS[e.step]:
                c0, w = width.get(c0, c0), width.get(w, w)
                body[:, :, c0:c0 + w] = e.data[name].view(np.uint32)
    return raw


# ---- the recorded traces ---------------------------------------------------------------------
def test_traces_provenance(recorded):
    meta, rows = recorded
    assert meta["provenance"]["kernel_sha256"] == runtime.source_sha256(dev.KERNEL), \
        "kernels/fa3_forward.cu changed: re-run python -m simulator measure forward_trace"
    assert meta["provenance"]["gpu"].startswith("NVIDIA H")
    assert meta["failures"] == 0 and len(rows) == len(traces.CONFIGS)
    assert TRACES.stat().st_size <= traces.MAX_FILE_BYTES
    for rec, raw in rows:
        want = traces.CONFIGS[rec["index"]]
        assert {k: rec[k] for k in want} == want
        assert rec["ok"] and rec["trace_build_same_output"] and rec["emulator_same_output"]
        assert raw.dtype == np.uint32 and raw.shape[0] == len(rec["trace"])


def test_recorded_configs_cover_the_schedules(recorded):
    _, rows = recorded
    seen = {(r["schedule"], r["head_dim"] > 128 and r["dtype"] != "e4m3") for r, _ in rows}
    assert seen >= {("plain", False), ("intra_wg_overlap", False), ("intra_wg_overlap", True)}
    assert {r["dtype"] for r, _ in rows} == {"bf16", "f16", "e4m3"}
    assert any(r["softcap"] > 0 for r, _ in rows) and any(r["descales"] for r, _ in rows)


@pytest.mark.parametrize("index", range(len(traces.CONFIGS)), ids=[c["name"] for c in traces.CONFIGS])
def test_emulator_reproduces_recorded_trace(recorded, index):
    _, rows = recorded
    rec, raw = rows[index]
    inputs, device = _device_trace(rec, raw)
    emulated = _emulate(rec, inputs).trace
    assert len(device) == len(emulated) == rec["events"]
    div = first_divergence(emulated, device)
    assert div.found is False, str(div)


def test_twin_ideal_mufu_diverges(recorded):
    """The correctly rounded MUFU models part at the first ex2 (max_get_scale of the second
    block, or online_softmax of the first), not before."""
    _, rows = recorded
    rec, raw = rows[0]  # bf16_causal_plain
    inputs, device = _device_trace(rec, raw)
    div = first_divergence(_emulate(rec, inputs, mufu="ideal").trace, device)
    assert div.found and div.step in ("online_softmax", "max_get_scale"), str(div)
    first_n = device.events[0].n_block
    assert div.step != "max_get_scale" or div.n_block != first_n
    assert [e.step for e in device.events[:div.event_index]] == ["qk_gemm", "mask", "max_get_scale"]


def test_twin_unfused_exp_argument_diverges(recorded, monkeypatch):
    """online_softmax with ffma(s, scale, -max) computed as fmul + fadd is caught at the first
    online_softmax event, in acc_s (P)."""
    _, rows = recorded
    rec, raw = rows[6]  # f16_local_plain_softcap
    inputs, device = _device_trace(rec, raw)
    real_ffma = emu_softmax.ffma

    def unfused(a, b, c, ftz=True):
        if np.ndim(a) == 5:  # the [..., 128, nrow, ncol] scores of scale_apply_exp2
            return fadd(fmul(a, b, ftz=ftz), c, ftz=ftz)
        return real_ffma(a, b, c, ftz=ftz)

    monkeypatch.setattr(emu_softmax, "ffma", unfused)
    div = first_divergence(_emulate(rec, inputs).trace, device)
    assert div.found and div.step == "online_softmax" and div.array == "acc_s", str(div)
    assert div.n_block == device.events[0].n_block


def test_twin_other_schedule_is_a_structural_divergence(recorded):
    _, rows = recorded
    rec, raw = rows[0]
    inputs, device = _device_trace(rec, raw)
    div = first_divergence(_emulate(rec, inputs, schedule="intra_wg_overlap").trace, device)
    assert div.found and div.note and div.event_index == 4


# ---- the decoder on dumps built from emulator traces (no GPU) -----------------------------------
DECODE_CASES = [  # (dtype, d, kblock_m, kblock_n, schedule, softcap, causal, window, trace)
    ("bf16", 64, 128, 64, "plain", 0.0, True, (-1, -1), [(0, 0, 1), (0, 1, 1), (0, 1, 0)]),
    ("bf16", 256, 64, 32, "intra_wg_overlap", 0.0, False, (-1, -1), [(0, 0, 0), (0, 1, 1)]),
    ("f16", 192, 64, 48, "intra_wg_overlap", 5.0, False, (40, 8), [(0, 1, 2), (0, 0, 0)]),
    ("e4m3", 256, 64, 64, "intra_wg_overlap", 0.0, True, (-1, -1), [(0, 1, 1), (0, 0, 2)]),
    ("bf16", 128, 64, 64, "intra_wg_overlap", 0.0, True, (-1, -1), [(0, 0, 0)]),  # one block
]


@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: f"{c[0]}_d{c[1]}_{c[4]}")
def test_decode_roundtrip(case):
    from simulator.flash.inputs import attention_inputs

    fmt, d, bm, bn, schedule, softcap, causal, window, trace = case
    inputs = attention_inputs(5, batch=1, seqlen_q=150, seqlen_k=150, heads=2, heads_kv=1,
                              head_dim=d, dtype=fmt)
    kw = {"causal": causal, "window": window, "softcap": softcap, "kblock_m": bm, "kblock_n": bn,
          "schedule": schedule}
    res = emu_forward(inputs["q"], inputs["k"], inputs["v"], trace=trace, **kw)
    lcfg = dev.make_launch_config(inputs["q"], inputs["k"], inputs["v"], **kw)
    ctas = ft.trace_ctas(trace)
    decoded = ft.decode(_encode(res.trace, lcfg, ctas), lcfg, ctas)
    div = first_divergence(res.trace, decoded)
    assert div.found is False, str(div)
    assert len(decoded) == sum(ft.expected_events(lcfg, c) for c in ctas) > 0


def test_decode_reports_missing_records():
    rec = traces.CONFIGS[0]
    inputs = traces.make_inputs(rec)
    lcfg = traces.launch_config(rec, inputs)
    ctas = ft.trace_ctas([tuple(c) for c in rec["trace"]])
    raw = _encode(_emulate(rec, inputs).trace, lcfg, ctas)
    raw[0, 3, :4] = 0xFFFFFFFF
    with pytest.raises(RuntimeError, match="slot 3"):
        ft.decode(raw, lcfg, ctas)


def test_trace_argument_validation():
    assert ft.trace_ctas([(0, 1, 2), (0, 1, 2), [1, 0, 0]]).tolist() == [[0, 1, 2], [1, 0, 0]]
    for bad in ([(0, 1)], [(0, 1, 2.5)], 5):
        with pytest.raises(ValueError, match="trace"):
            ft.trace_ctas(bad)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_trace_build_compiles_with_nvcc(tmp_path):
    opts = [o for o in dev.kernel_options("bf16", 192, 64, 32, True, "intra_wg_overlap", trace=True)
            if o.startswith("-D")]
    assert "-DFA_TRACE=1" in opts
    cmd = ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "--use_fast_math", "-std=c++17",
           "-c", str(runtime.KERNELS_DIR / dev.KERNEL), "-o", str(tmp_path / "k.o"), *opts]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]


# ---- live, on a GPU ------------------------------------------------------------------------------
@pytest.mark.device
@pytest.mark.parametrize("index", [1, 2, 3])
def test_live_trace_matches_recording_and_emulator(recorded, index):
    _, rows = recorded
    rec, raw = rows[index]
    inputs = traces.make_inputs(rec)
    res = dev.forward(inputs["q"], inputs["k"], inputs["v"], **traces.call_kwargs(rec, inputs))
    _, device = _device_trace(rec, raw)
    assert first_divergence(device, res.trace).found is False
    emulated = _emulate(rec, inputs)
    assert first_divergence(emulated.trace, res.trace).found is False
    out, lse = res
    assert np.array_equal(out.view(np.uint16), np.ascontiguousarray(emulated.out).view(np.uint16))
    assert np.array_equal(lse.view(np.uint32), emulated.lse.view(np.uint32))


@pytest.mark.device
def test_live_trace_build_gives_the_same_output():
    from simulator.flash.inputs import attention_inputs

    inputs = attention_inputs(11, batch=1, seqlen_q=100, seqlen_k=130, heads=2, heads_kv=1,
                              head_dim=64, dtype="bf16")
    kw = {"causal": True, "kblock_n": 64}
    plain = dev.forward(inputs["q"], inputs["k"], inputs["v"], **kw)
    traced = dev.forward(inputs["q"], inputs["k"], inputs["v"], trace=[(0, 1, 0)], **kw)
    assert plain.trace is None and len(traced.trace) > 0
    assert hashlib.sha256(plain.out.tobytes()).digest() == hashlib.sha256(traced.out.tobytes()).digest()
    assert np.array_equal(plain.lse.view(np.uint32), traced.lse.view(np.uint32))
