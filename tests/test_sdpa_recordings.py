"""The recordings of PyTorch SDPA's flash backend (FA2 on sm_90,
``simulator/data/device/sdpa/``, made by ``python3 -m simulator measure sdpa_record``): they
exist, name their GPU, every stored array hashes to the digest its report gives, and the
frozen case generator regenerates the recorded inputs. CPU only; no torch."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from simulator.io import DEVICE_DATA_DIR, read_json, read_manifest, read_npz
from simulator.measure import sdpa_record as rec
from simulator.replay import sdpa_cases as sc
from simulator.replay.common import digest

DATA = DEVICE_DATA_DIR / "sdpa"
REGEN = rec.REGEN

if not (DATA / rec.REPORT_FILE).exists():  # recorded on a GPU, not yet committed
    pytest.skip(f"no SDPA recordings in {DATA} yet: {REGEN}", allow_module_level=True)


@pytest.fixture(scope="module")
def report():
    return read_json(DATA / rec.REPORT_FILE, REGEN)  # checked against sdpa/MANIFEST.json


def _hex(a: np.ndarray) -> str:
    return digest(a).hex()


def test_recordings_are_listed_in_their_manifest():
    listed = read_manifest(DATA)
    assert listed, f"{DATA}/MANIFEST.json is missing: python scripts/make_manifest.py --folder {DATA}"
    for name in (rec.REPORT_FILE, rec.FORWARD_NPZ, rec.DROPOUT_NPZ, rec.BACKWARD_NPZ):
        assert name in listed, name


def test_provenance_names_the_gpu(report):
    prov = report["provenance"]
    assert prov["gpu"].startswith("NVIDIA H")
    assert isinstance(prov["sm_count"], int) and prov["sm_count"] > 100
    assert prov["compute_capability"] == "9.0"
    for key in ("driver", "torch", "cuda", "flash_version", "date"):
        assert prov[key], key
    assert "_scaled_dot_product_flash_attention(" in prov["schemas"][
        "_scaled_dot_product_flash_attention"]


def test_every_case_was_recorded(report):
    for name, cases in (("forward", sc.forward_cases()), ("dropout", sc.dropout_cases()),
                        ("backward", sc.backward_cases())):
        assert [r["case"] for r in report[name]] == cases, f"{name}: case list changed"


def test_forward_sample_bits_hash_to_the_report(report):
    sample = read_npz(DATA / rec.FORWARD_NPZ, REGEN)
    accepted = 0
    for r in report["forward"]:
        i = r["index"]
        if "error" in r:
            assert f"c{i}_out" not in sample
        else:
            accepted += 1
            c = r["case"]
            out, lse = sample[f"c{i}_out"], sample[f"c{i}_lse"]
            assert out.dtype == np.uint16 and lse.dtype == np.float32
            assert out.shape == (c["batch"], c["heads"], c["seqlen_q"], c["head_dim"])
            assert _hex(out) == r["out"] and _hex(lse.view(np.uint32)) == r["lse"], i
        if f"c{i}_fsdpa_out" in sample:
            assert _hex(sample[f"c{i}_fsdpa_out"]) == r["fsdpa_out"], i
    assert accepted >= 0.9 * len(report["forward"])


def test_dropout_bits_hash_to_the_report(report):
    arrays = read_npz(DATA / rec.DROPOUT_NPZ, REGEN)
    for r in report["dropout"]:
        i = r["index"]
        if "error" in r:
            continue
        assert _hex(arrays[f"d{i}_out"]) == r["out"]
        assert _hex(arrays[f"d{i}_lse"].view(np.uint32)) == r["lse"]
        assert [int(x) for x in arrays[f"d{i}_philox"]] == r["philox"]
        if "mask" in r:
            assert _hex(arrays[f"d{i}_mask"]) == r["mask"]


def test_backward_runs_hash_to_the_report(report):
    arrays = read_npz(DATA / rec.BACKWARD_NPZ, REGEN)
    for r in report["backward"]:
        i = r["index"]
        if "error" in r:
            continue
        assert _hex(arrays[f"b{i}_out"]) == r["out"]
        assert _hex(arrays[f"b{i}_lse"].view(np.uint32)) == r["lse"]
        for name in ("dq", "dk", "dv"):
            runs = arrays[f"b{i}_{name}_runs"]
            bits = [runs[0]] + [runs[0] ^ x for x in runs[1:]]
            assert [_hex(b) for b in bits] == r[name], (i, name)


def _small(case: dict) -> bool:
    kv = case["batch"] * case["heads_kv"] * case["seqlen_k"] * case["head_dim"]
    return kv <= 1 << 20


@pytest.mark.parametrize("phase", ["forward", "dropout", "backward"])
def test_make_inputs_regenerates_the_recorded_inputs(report, phase):
    """Every case's inputs (all but the few with over 2^20 key elements, of which the first
    is checked) regenerate to the recorded digest, through ml_dtypes' formats."""
    big_checked = False
    for r in report[phase]:
        case = r["case"]
        if not _small(case):
            if big_checked:
                continue
            big_checked = True
        arrays = [x.view(np.uint16) for x in sc.make_inputs(case)]
        if phase == "backward":
            arrays.append(sc.make_grad(case).view(np.uint16))
        assert sc.input_digest(case, *arrays) == r["inputs"], (phase, r["index"])


def test_bf16_rounding_matches_ml_dtypes():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(100000, dtype=np.float32) * 30,
                        # exact ties: low half 0x8000, odd and even kept halves
                        (np.arange(1000, dtype=np.uint32) << 16 | 0x8000).view(np.float32),
                        np.float32([0.0, -0.0, 1e-40, -1e-40, 3.0e38])])
    assert np.array_equal(sc._bf16_bits(x), x.astype(ml_dtypes.bfloat16).view(np.uint16))


# ---- the emulator against the recordings ---------------------------------------------------

def _sample_indices(records: list[dict], n: int) -> list[int]:
    """Every ``len // n``-th accepted case (a fixed CI sample; ``verify --topic sdpa`` replays
    them all)."""
    ok = [r["index"] for r in records if "error" not in r]
    return ok[:: max(1, len(ok) // n)]


@pytest.fixture(scope="module")
def forward_sample():
    return read_npz(DATA / rec.FORWARD_NPZ, REGEN)


def test_forward_replays_bit_exact(report, forward_sample):
    """A fixed sample of the recorded forward calls (unsplit and split-KV, every head dim):
    out and logsumexp bits equal, and the op's refusals refused."""
    from simulator.replay import sdpa as replay

    gpu = replay.gpu_of(report)
    values = 0
    for i in _sample_indices(report["forward"], 24):
        res = replay.check_case(report["forward"][i], forward_sample, gpu)
        assert res["differ"] == 0, (i, report["forward"][i]["case"])
        values += res["values"]
    assert values > 10_000
    for r in report["forward"]:
        if "error" in r:
            assert replay.check_case(r, forward_sample, gpu)["refused"], r["case"]


def test_dropout_replays_bit_exact(report):
    """Every recorded dropout call: out, LSE and the Philox keep mask (the debug mask's sign
    bits), from the Philox state the op returned."""
    from simulator.replay import sdpa as replay

    npz = read_npz(DATA / rec.DROPOUT_NPZ, REGEN)
    gpu = replay.gpu_of(report)
    for r in report["dropout"][::3]:
        res = replay.check_dropout_case(r, npz, gpu)
        assert res["differ"] == 0 and res["values"] > 0, r["case"]


def test_backward_replays(report):
    """A sample of the recorded backward calls: deterministic=True bits equal, the default
    runs inside the spread."""
    from simulator.replay import sdpa as replay
    from simulator.replay import sdpa_backward as bwd

    npz = read_npz(DATA / rec.BACKWARD_NPZ, REGEN)
    gpu = replay.gpu_of(report)
    for i in _sample_indices(report["backward"], 5):
        res = bwd.check_backward_case(report["backward"][i], npz, gpu)
        assert res["det_differ"] == 0 and res["default_outside"] == 0, report["backward"][i]["case"]


_TRAITS = re.compile(r"(flash_fwd(?:_splitkv)?_kernel)<Flash_fwd_kernel_traits<(\d+), (\d+), (\d+), (\d+)")


def test_recorded_kernels_are_the_planned_ones(report):
    """The profiled kernel of every recorded forward call (sdpa_kernels.json) is the one the
    emulator plans: the unsplit or split-KV kernel, its kHeadDim, kBlockM, kBlockN and warps
    (a head dim of 160 runs the 192 kernel, 224 the 256 one)."""
    from simulator.fa2 import plan_forward
    from simulator.flash.mainloop_fwd_fa2 import splitkv_tile

    kernels = read_json(DATA / "sdpa_kernels.json", REGEN)
    names = kernels["kernel_names"]
    checked = 0
    for r, k in zip(report["forward"], kernels["forward"], strict=True):
        assert r["index"] == k["index"] and ("error" in r or r["out"] == k["out"])
        if "error" in r or not k.get("kernels"):
            continue
        c = r["case"]
        plan = plan_forward(c["batch"], c["seqlen_q"], c["seqlen_k"], c["heads"], c["heads_kv"],
                            c["head_dim"], causal=c["causal"], gpu="h100")
        split = plan.num_splits > 1
        want = ("flash_fwd_splitkv_kernel" if split else "flash_fwd_kernel", plan.kernel_head_dim,
                *(splitkv_tile(c["head_dim"]) if split else plan.tile))
        got = {(m[1], *map(int, m.groups()[1:])) for j in k["kernels"]
               if (m := _TRAITS.search(names[j]))}
        assert got == {want}, (r["index"], c, got, want)
        checked += 1
    assert checked > 150


@pytest.mark.parametrize("rule", ["fused_exp2", "rcp_approx", "fast_math_combine"])
def test_each_measured_rule_is_needed(report, forward_sample, rule, monkeypatch):
    """Flip one rule the recordings decided: some recorded call then differs. (The kernel
    head dims show in the kernel names only: every recorded 160 / 224 call is split-KV, whose
    tile does not depend on them, and zero padding adds nothing.)"""
    import importlib
    from dataclasses import replace

    import simulator.flash.forward_fa2 as fwd
    from simulator.flash.mainloop_fwd_fa2 import PYTORCH
    from simulator.replay import sdpa as replay

    fa2_combine = importlib.import_module("simulator.fa2.combine")
    cases = {"fused_exp2": [1, 158], "rcp_approx": [76, 158, 163], "fast_math_combine": [9, 15]}[rule]
    if rule == "fused_exp2":  # the build forward_fa2 runs when the caller names none
        monkeypatch.setitem(fwd.forward_fa2.__kwdefaults__, "build",
                            replace(PYTORCH, unfuse_fma=False))
    elif rule == "rcp_approx":
        monkeypatch.setitem(fwd.forward_fa2.__kwdefaults__, "build",
                            replace(PYTORCH, rcp_approx=True))
    else:
        original = fa2_combine.combine
        monkeypatch.setattr(fa2_combine, "combine",
                            lambda *a, **kw: original(*a[:5], fast_math=True))
    gpu = replay.gpu_of(report)
    differ = sum(replay.check_case(report["forward"][i], forward_sample, gpu)["differ"]
                 for i in cases)
    assert differ > 0, rule


def test_philox_rounds_are_needed(report):
    """Ten Philox rounds (the textbook Philox4x32-10) instead of FlashAttention-2's seven:
    the recorded keep masks no longer match."""
    from simulator.numerics import philox

    npz = read_npz(DATA / rec.DROPOUT_NPZ, REGEN)
    r = report["dropout"][0]
    seed, offset = r["philox"][:2]
    dropped = (npz["d0_mask"] & np.uint16(0x8000)) != 0
    b, h, sq, sk = dropped.shape
    assert np.array_equal(philox.dropout_keep(seed, offset, b, h, sq, sk, r["case"]["dropout_p"]),
                          ~dropped)
    words = philox.philox4x32(seed, offset, 0, rounds=10)
    assert not np.array_equal(words, philox.philox4x32(seed, offset, 0))
