"""The recordings of PyTorch SDPA's flash backend (FA2 on sm_90,
``simulator/data/device/sdpa/``, made by ``python3 -m simulator measure sdpa_record``): they
exist, name their GPU, every stored array hashes to the digest its report gives, and the
frozen case generator regenerates the recorded inputs. CPU only; no torch."""

from __future__ import annotations

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
