"""The device twin of the forward (kernels/fa3_forward.cu, simulator/device/forward.py).

CPU: argument validation, the deterministic input generator, the recorded goldens
(simulator/data/device/forward_goldens.npz) against the kernel source hash and against the
emulator bit for bit (with a twin showing a wrong configuration is caught), and an nvcc compile
of the kernel where nvcc is on PATH. Device-marked: live runs compared with the goldens.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from simulator.device import forward as dev
from simulator.device import runtime
from simulator.flash.inputs import attention_inputs
from simulator.flash.reference import reference as flash_reference
from simulator.measure import forward_goldens as measure_goldens
from simulator.replay import forward_goldens as fg

GOLDENS = Path(__file__).resolve().parents[1] / "simulator" / "data" / "device" / fg.GOLDENS_FILE
BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def goldens():
    return fg.load_goldens(str(GOLDENS))


def _qkv(dtype=BF16, b=1, sq=8, sk=8, h=2, hkv=1, d=64):
    return (np.zeros((b, sq, h, d), dtype), np.zeros((b, sk, hkv, d), dtype),
            np.zeros((b, sk, hkv, d), dtype))


# ---- validation (no GPU needed: it happens before the launch) ----------------------------------
@pytest.mark.parametrize("kwargs, exc, text", [
    ({"kblock_m": 96}, ValueError, "kblock_m"),
    ({"kblock_n": 24}, ValueError, "kblock_n"),
    ({"kblock_n": 16.0}, ValueError, "kblock_n"),
    ({"schedule": "pingpong"}, ValueError, "schedule"),
    ({"window": (3,)}, ValueError, "window"),
    ({"causal": True, "window": (-2, 4)}, ValueError, "window"),
    ({"seqlens_k": [9]}, ValueError, "seqlens_k"),
    ({"seqlens_k": [1, 2]}, ValueError, "seqlens_k"),
    ({"softcap": -1.0}, ValueError, "softcap"),
    ({"softmax_scale": 0.0}, ValueError, "softmax_scale"),
    ({"q_descale": np.float32(2)}, ValueError, "q_descale"),
    ({"gpu": "a100"}, ValueError, "gpu"),
    ({"trace": [(0, 0)]}, ValueError, "trace"),
    ({"kblock_m": 192, "kblock_n": 256}, ValueError, "shared memory"),
])
def test_forward_rejects_bad_arguments(kwargs, exc, text):
    d = 256 if "kblock_m" in kwargs and "kblock_n" in kwargs else 64
    q, k, v = _qkv(d=d)
    with pytest.raises(exc, match=text):
        dev.forward(q, k, v, **kwargs)


def test_forward_rejects_bad_arrays():
    q, k, v = _qkv()
    # the same errors as the emulator (simulator.flash.make_config): ValueError naming the argument
    with pytest.raises(ValueError, match="^q: expected dtype"):
        dev.forward(q.astype(np.float32), k, v)
    with pytest.raises(ValueError, match="dtypes differ"):
        dev.forward(q, k.astype(np.float16), v)
    with pytest.raises(ValueError, match="^v: expected a 4-d array"):
        dev.forward(q, k, list(v))
    with pytest.raises(ValueError, match="head_dim"):  # FA3: a multiple of 8
        dev.forward(*_qkv(d=20))
    with pytest.raises(ValueError, match="heads_kv"):
        dev.forward(*_qkv(h=3, hkv=2))
    with pytest.raises(ValueError, match="4-d"):
        dev.forward(q[0], k, v)
    e4 = ml_dtypes.float8_e4m3fn
    with pytest.raises(ValueError, match="k_descale"):
        dev.forward(*_qkv(dtype=e4), kblock_n=64, k_descale=np.float64(1.0))
    with pytest.raises(ValueError, match="kblock_n"):  # e4m3 needs multiples of 32
        dev.forward(*_qkv(dtype=e4), kblock_n=48)


def test_kernel_options_name_the_configuration():
    opts = dev.kernel_options("e4m3", 128, 192, 160, True, "plain")
    assert opts[:3] == runtime.DEFAULT_OPTIONS
    assert set(opts[3:]) == {"-DFA_DTYPE=2", "-DFA_HEAD_DIM=128", "-DFA_KBLOCK_M=192",
                             "-DFA_KBLOCK_N=160", "-DFA_SOFTCAP=1", "-DFA_SCHEDULE=0",
                             "-DFA_MAX_OFFSET=8"}


# ---- the input generator -----------------------------------------------------------------------
def test_inputs_are_pinned():
    """PCG64's raw stream and the float64 recipe are frozen: the goldens depend on them."""
    d = attention_inputs(1, batch=1, seqlen_q=3, seqlen_k=5, heads=2, heads_kv=1, head_dim=32,
                         dtype="bf16", descales=True)
    digest = {k: hashlib.sha256(d[k].tobytes()).hexdigest()[:32] for k in ("q", "k", "v", "q_descale")}
    assert digest == {"q": "4de0836a399ee512b95e6f920438b741", "k": "ff425384465e514cfcdffde92cc3e05e",
                      "v": "975c20554de59225801d4dea3596b854",
                      "q_descale": "03a46ed040048f9304714ad24504fda4"}
    e = attention_inputs(2, batch=1, seqlen_q=3, seqlen_k=5, heads=2, heads_kv=1, head_dim=32,
                         dtype="e4m3")
    assert hashlib.sha256(e["q"].tobytes()).hexdigest()[:32] == "909cb3757a5333085c87e0dc1539a730"
    assert e["q_descale"] is None and e["q"].dtype == np.dtype(ml_dtypes.float8_e4m3fn)


def test_inputs_validate():
    with pytest.raises(ValueError, match="dtype"):
        attention_inputs(0, batch=1, seqlen_q=1, seqlen_k=1, heads=1, heads_kv=1, head_dim=32,
                         dtype="f32")
    with pytest.raises(ValueError, match="heads_kv"):
        attention_inputs(0, batch=1, seqlen_q=1, seqlen_k=1, heads=3, heads_kv=2, head_dim=32,
                         dtype="bf16")
    with pytest.raises(TypeError, match="seed"):
        attention_inputs(1.5, batch=1, seqlen_q=1, seqlen_k=1, heads=1, heads_kv=1, head_dim=32,
                         dtype="bf16")


# ---- the recorded goldens ----------------------------------------------------------------------
def test_goldens_provenance(goldens):
    meta, rows = goldens
    prov = meta["provenance"]
    assert prov["kernel_sha256"] == runtime.source_sha256(dev.KERNEL), \
        "kernels/fa3_forward.cu changed: re-run python -m simulator measure forward_goldens"
    assert prov["gpu"].startswith("NVIDIA H")
    assert meta["failures"] == 0 and len(rows) == len(fg.CONFIGS)
    assert GOLDENS.stat().st_size < fg.MAX_FILE_BYTES
    for rec, _, _ in rows:  # the recorded matrix is the script's matrix
        want = fg.CONFIGS[rec["index"]]
        assert {k: rec[k] for k in want} == json.loads(json.dumps(want))
        assert rec["sanity_ok"]


def test_goldens_shapes_and_empty_batches(goldens):
    _, rows = goldens
    for rec, out, lse in rows:
        assert out.shape == (rec["batch"], rec["seqlen_q"], rec["heads"], rec["head_dim"])
        assert lse.shape == (rec["batch"], rec["heads"], rec["seqlen_q"])
        assert np.all(np.isfinite(out.astype(np.float32)))
        for b, n in enumerate(rec["seqlens_k"] or []):
            if n == 0:  # no key: O = 0, LSE = -inf
                assert not np.any(out[b].view(np.uint16)) and np.all(np.isneginf(lse[b]))


def _emulator():
    try:
        return importlib.import_module("simulator.flash.forward")
    except ImportError as exc:  # the emulator is developed alongside
        pytest.skip(f"simulator.flash.forward not importable: {exc}")


@pytest.mark.parametrize("index", range(len(fg.CONFIGS)))
def test_goldens_match_emulator(goldens, index):
    emu = _emulator()
    _, rows = goldens
    rec, out, lse = rows[index]
    inputs = fg.make_inputs(rec)
    res = emu.forward(inputs["q"], inputs["k"], inputs["v"], **fg.call_kwargs(rec, inputs))
    o_mis = int(np.sum(out.view(np.uint16) != np.ascontiguousarray(res.out).view(np.uint16)))
    l_mis = int(np.sum(lse.view(np.uint32) != np.ascontiguousarray(res.lse).view(np.uint32)))
    assert (o_mis, l_mis) == (0, 0), f"{rec['name']}: {o_mis} O / {l_mis} LSE bits differ"


def test_goldens_catch_a_wrong_configuration(goldens):
    """Twin: the same inputs with other block sizes or the correctly rounded MUFU differ."""
    emu = _emulator()
    _, rows = goldens
    rec, out, lse = rows[12]  # e4m3_none_plain
    inputs = fg.make_inputs(rec)
    kw = fg.call_kwargs(rec, inputs)
    for change in ({"kblock_n": 64}, {"mufu": "ideal"}):
        res = emu.forward(inputs["q"], inputs["k"], inputs["v"], **{**kw, **change})
        assert np.any(out.view(np.uint16) != np.ascontiguousarray(res.out).view(np.uint16)), change


def test_planes_roundtrip():
    x = (np.arange(1000, dtype=np.uint64) * 4294967).astype(np.uint32).reshape(10, 100)
    assert np.array_equal(fg.from_planes(fg.to_planes(x)), x)
    y = x.astype(np.uint16)
    assert np.array_equal(fg.from_planes(fg.to_planes(y)), y)


# ---- the kernel compiles (CPU, where nvcc is installed) ---------------------------------------
NVCC_CONFIGS = [
    ("bf16", 64, 128, 128, False, "plain"),
    ("f16", 256, 64, 80, True, "intra_wg_overlap"),
    ("e4m3", 128, 192, 160, True, "intra_wg_overlap"),
]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("config", NVCC_CONFIGS, ids=lambda c: "_".join(map(str, c)))
def test_kernel_compiles_with_nvcc(tmp_path, config):
    opts = [o for o in dev.kernel_options(*config) if o.startswith("-D")]
    cmd = ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "--use_fast_math", "-std=c++17",
           "-c", str(runtime.KERNELS_DIR / dev.KERNEL), "-o", str(tmp_path / "k.o"), *opts]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]


# ---- live, on a GPU ------------------------------------------------------------------------------
@pytest.mark.device
@pytest.mark.parametrize("index", [0, 13, 20, 23])
def test_live_forward_reproduces_goldens(goldens, index):
    _, rows = goldens
    rec, out, lse = rows[index]
    inputs = fg.make_inputs(rec)
    o, lse_dev = dev.forward(inputs["q"], inputs["k"], inputs["v"], **fg.call_kwargs(rec, inputs))
    assert np.array_equal(o.view(np.uint16), out.view(np.uint16))
    assert np.array_equal(lse_dev.view(np.uint32), lse.view(np.uint32))


@pytest.mark.device
def test_live_forward_against_reference():
    inputs = attention_inputs(7, batch=1, seqlen_q=100, seqlen_k=150, heads=2, heads_kv=1,
                              head_dim=64, dtype="bf16")
    o, lse = dev.forward(inputs["q"], inputs["k"], inputs["v"], causal=True, kblock_n=64)
    o_ref, lse_ref = flash_reference(inputs["q"], inputs["k"], inputs["v"], causal=True)
    rel = np.linalg.norm(o.astype(np.float64) - o_ref) / np.linalg.norm(o_ref)
    assert rel < measure_goldens.REL_TOL["bf16"]
    assert np.max(np.abs(lse - lse_ref)) < measure_goldens.LSE_TOL


def test_resource_report_belongs_to_the_current_kernel():
    """kernels/fa3_forward.resources.json (registers, spills per configuration, from
    `python scripts/kernel_resources.py`) must be regenerated whenever the kernel changes."""
    import hashlib
    import json

    source = runtime.KERNELS_DIR / dev.KERNEL
    report = json.loads(source.with_suffix(".resources.json").read_text())
    assert report["kernel_sha256"] == hashlib.sha256(source.read_bytes()).hexdigest(), (
        "kernel changed: run `python scripts/kernel_resources.py`")
    assert all(row["registers"] for row in report["configs"])
