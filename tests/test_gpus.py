"""The GPU record (simulator/gpus.py): every chip-dependent number is read from it, an unknown GPU
is refused everywhere, and a GPU key changes exactly what its record changes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from simulator import flash, gpus, mma
from simulator.fa3 import flash_attn_func, flash_attn_with_kvcache, get_scheduler_metadata
from simulator.fa3.splits import get_num_splits
from simulator.numerics import mufu

PACKAGE = Path(__file__).resolve().parent.parent / "simulator"
# the folders that build and launch CUDA code for the chip they run on (compile flags naming its
# target, install hints): tooling for a real GPU, not rules of the emulator
TOOLING = ("measure", "device", "replay")
# a compute capability or the MUFU table set's name as a literal: sm90, sm_90, sm_90a, compute_90,
# "9.0" (FA3's own identifiers such as tile_size_fwd_sm90 are source references, not these)
_CHIP_LITERAL = re.compile(r"(?<![\w])(sm_?90a?|compute_90a?)(?![\w])|^9\.0$")
_SM_COUNTS = {g.sm_count for g in gpus.GPUS.values()}


def _rng_bf16(rng, shape):
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


def _docstrings(tree) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def chip_literals(path: Path) -> list[str]:
    """The SM counts and compute-capability / table-set strings written as literals in ``path``
    (docstrings aside: prose may name the chip)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in docs or isinstance(node.value, bool):
            continue
        v = node.value
        if (isinstance(v, int) and v in _SM_COUNTS) or (isinstance(v, str) and _CHIP_LITERAL.search(v)):
            found.append(f"{path.name}:{node.lineno}: {v!r}")
    return found


def test_no_sm_count_or_chip_name_outside_the_gpu_record():
    """Every rule reads the chip from simulator/gpus.py: no SM count, compute capability or
    MUFU table set name is written anywhere else in the emulator."""
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if path.name == "gpus.py" and rel.parent == Path(".") or rel.parts[0] in TOOLING:
            continue
        hits += chip_literals(path)
    assert not hits, "\n".join(hits)


def test_the_scan_finds_what_it_forbids(tmp_path):
    """The scan above is not vacuous: each kind of literal it forbids is found."""
    bad = tmp_path / "probe.py"
    src = ('"""On sm90, 132 SMs."""\n'
           'x = 132\ny = "sm90"\nz = "-arch=sm_90a"\nw = "9.0"\nok = "tile_size_fwd_sm90"\n')
    bad.write_text(src, encoding="utf-8")
    found = chip_literals(bad)
    assert [f.split(": ", 1)[1] for f in found] == ["132", "'sm90'", "'-arch=sm_90a'", "'9.0'"]


def test_the_records():
    assert gpus.DEFAULT_GPU == "h200" and gpus.get_gpu().key == "h200"
    assert {k: g.sm_count for k, g in gpus.GPUS.items()} == {"h200": 132, "h100": 132, "h100-pcie": 114}
    assert all(g.compute_capability == (9, 0) and g.sm_arch == "sm_90" for g in gpus.GPUS.values())
    record = gpus.get_gpu("h100")
    assert gpus.get_gpu(record) is record


@pytest.mark.parametrize("call", [
    lambda g: gpus.get_gpu(g),
    lambda g: mufu.ex2(np.float32([1.0]), g),
    lambda g: mma.wgmma("m64n8k16.f32.bf16.bf16", np.zeros((64, 16), ml_dtypes.bfloat16),
                        np.zeros((16, 8), ml_dtypes.bfloat16), gpu=g),
    lambda g: flash.forward(*(np.zeros((1, 8, 1, 64), ml_dtypes.bfloat16),) * 3, gpu=g),
    lambda g: flash_attn_func(*(np.zeros((1, 8, 1, 64), ml_dtypes.bfloat16),) * 3, gpu=g),
    lambda g: get_scheduler_metadata(1, 1, 64, 1, 1, 64, 64, np.dtype(ml_dtypes.bfloat16), gpu=g),
])
@pytest.mark.parametrize("gpu", ["a100", "H200", "sm90", 90, None])
def test_an_unknown_gpu_is_refused_by_name(call, gpu):
    with pytest.raises(ValueError, match=r"(gpu|model): .*(unknown|expected)"):
        call(gpu)


def test_a_gpu_without_tensor_core_parameters_is_refused():
    """A record whose tensor cores were never measured gets no Hopper bits by default."""
    ampere = gpus.GPU("a100", "NVIDIA A100-SXM4-80GB", (8, 0), 108, "sm90", "ampere", "none")
    with pytest.raises(ValueError, match="gpu: 'a100' has no measured tensor-core parameters"):
        mma.parse("mma_sync", "m16n8k16.f32.bf16.bf16.f32", ampere)


def test_mufu_must_be_calibrated_or_ideal():
    q = np.zeros((1, 8, 1, 64), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="^mufu: expected None, 'calibrated'"):
        flash.forward(q, q, q, mufu="sm90")


def test_h100_pcie_is_the_default_with_114_sms():
    """``gpu="h100-pcie"`` gives what ``num_sms=114`` gives on the default GPU, and differs from
    the H100 SXM (132 SMs) where FA3's split heuristic reads the SM count: a decode call over
    1,280 cached keys (7 key blocks) with 32 heads splits 4 ways on 132 SMs (2 blocks a split)
    and 3 ways on 114 (3 blocks a split)."""
    assert get_num_splits(1, 32, 32, 1, 1280, 64, num_sms=132) == 4
    assert get_num_splits(1, 32, 32, 1, 1280, 64, num_sms=114) == 3
    rng = np.random.default_rng(7)
    q = _rng_bf16(rng, (1, 1, 32, 64))
    kc, vc = _rng_bf16(rng, (1, 1280, 32, 64)), _rng_bf16(rng, (1, 1280, 32, 64))
    run = {name: flash_attn_with_kvcache(q, kc.copy(), vc.copy(), return_softmax_lse=True, **kw)
           for name, kw in (("pcie", dict(gpu="h100-pcie")), ("114", dict(num_sms=114)),
                            ("sxm", dict(gpu="h100")), ("h200", {}))}

    def bits(r):
        return np.ascontiguousarray(r[0]).view(np.uint16), np.ascontiguousarray(r[1]).view(np.uint32)

    for a, b in zip(bits(run["pcie"]), bits(run["114"]), strict=True):
        assert np.array_equal(a, b)
    for a, b in zip(bits(run["sxm"]), bits(run["h200"]), strict=True):
        assert np.array_equal(a, b)
    assert not np.array_equal(bits(run["pcie"])[0], bits(run["sxm"])[0])


def test_h100_reads_the_gh100_tables():
    """The H100 record names the same MUFU tables and tensor-core parameters as the H200's (the
    GH100 die; docs/h100.md holds the H100's own sweeps), so its forward gives the same bits."""
    h100, h200 = gpus.get_gpu("h100"), gpus.get_gpu("h200")
    assert (h100.mufu_tables, h100.tensor_cores) == (h200.mufu_tables, h200.tensor_cores)
    rng = np.random.default_rng(3)
    q, k, v = (_rng_bf16(rng, s) for s in ((1, 96, 2, 64), (1, 130, 2, 64), (1, 130, 2, 64)))
    a = flash.forward(q, k, v, causal=True, gpu="h100")
    b = flash.forward(q, k, v, causal=True)
    assert np.array_equal(a.out.view(np.uint16), b.out.view(np.uint16))
    assert np.array_equal(a.lse.view(np.uint32), b.lse.view(np.uint32))


H100_DIR = PACKAGE / "data" / "device" / "h100"


def _counts(node):
    """Every ``mismatches`` / ``differ`` / ``differing_elements`` count in a nested report."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("mismatches", "differ", "differing_elements") and isinstance(value, int):
                yield key, value
            else:
                yield from _counts(value)
    elif isinstance(node, list):
        for value in node:
            yield from _counts(value)


def test_the_h100_record_rests_on_its_own_sweeps():
    """The h100 record reads the GH100 tables because the H100's own sweeps
    (scripts/h100_sweeps.sh, simulator/data/device/h100/, docs/h100.md) gave the emulator's bits
    on every instruction family and the H200's recorded bits element for element: the GPU named
    in the recordings is the record's, with its SM count, and every count of a difference is 0;
    the MUFU tables measured there have the shipped table set's checksums."""
    import json

    from simulator.io import read_json as _read

    def read_json(path):
        return _read(path, "bash scripts/h100_sweeps.sh on an H100 (docs/h100.md)")

    record = gpus.get_gpu("h100")
    gpu = read_json(H100_DIR / "gpu.json")
    assert gpu["before"]["nvidia_smi"]["name"] == record.name
    assert gpu["before"]["cupy"]["compute_capability"] == "{}.{}".format(*record.compute_capability)
    compare = read_json(H100_DIR / "compare.json")
    assert set(compare) == {"numerics_sweep", "mufu_calibrate", "hw_probe", "mma_probe",
                            "mma_fp8_probe", "mma_fp8_sweep", "reduce_add_probe"}
    counts = list(_counts(compare))
    assert len(counts) > 100 and all(n == 0 for _, n in counts), [c for c in counts if c[1]]
    assert all(run["ran"] in (True, "true") for run in compare.values())
    for name in ("numerics_report.json", "mufu_report.json", "hw_report.json", "mma_report.json"):
        device = read_json(H100_DIR / name)["device"]
        assert (device["gpu"], device["multiprocessors"]) == (record.name, record.sm_count), name
    measured = read_json(H100_DIR / f"mufu_{record.mufu_tables}.json")
    shipped = json.loads((PACKAGE / "data" / "mufu" / f"{record.mufu_tables}.json").read_text())
    assert measured["table_blake2b"] == shipped["table_blake2b"]
    assert measured["device"]["gpu"] == record.name
