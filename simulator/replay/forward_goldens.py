"""The recorded goldens of the device forward: their configurations, file format and replay.

``python -m simulator measure forward_goldens`` ran ``kernels/fa3_forward.cu`` on the H200 for
every configuration of :data:`CONFIGS` (dtype bf16 / f16 / e4m3 x no mask / causal / local(64,
32) x both schedules x softcap 0 / 30, head dims 32..256, GQA, seqlens that are and are not block
multiples, a batch with ``seqlens_k = 0``, FP8 descales) and wrote, under
``simulator/data/device/``:

* ``forward_goldens.npz``: per configuration ``c{i}_out`` (the bits of O as byte planes, uint8
  ``[2, batch, seqlen_q, heads, head_dim]``, low byte first) and ``c{i}_lse`` (the bits of LSE,
  uint8 ``[4, batch, heads, seqlen_q]``), and ``meta`` (JSON text: configurations, seeds,
  reference errors, provenance: GPU, driver, toolkit, SHA-256 of the kernel source). Byte planes
  compress about 10% better than whole words; :func:`load_goldens` undoes them;
* ``forward_report.json``: the same metadata, readable.

The inputs are not stored: :func:`make_inputs` regenerates them from the recorded configuration
and seed (:func:`simulator.flash.inputs.attention_inputs`), so this module is frozen with the
recording.
"""

from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np

from ..flash.inputs import attention_inputs
from ..io import read_npz
from .common import DATA_DIR, row

GOLDENS_FILE = "forward_goldens.npz"


REPORT_FILE = "forward_report.json"


MAX_FILE_BYTES = 4_000_000


_MASKS = {"none": (False, (-1, -1)), "causal": (True, (-1, -1)), "local": (False, (64, 32))}


def _cfg(name, dtype, mask, schedule, softcap, d, *, sq=160, sk=200, heads_kv=4,
         seqlens_k=None, kblock_m=128, kblock_n=128, descales=False, seed=None):
    causal, window = _MASKS[mask]
    return {"name": name, "dtype": dtype, "mask": mask, "causal": causal, "window": list(window),
            "schedule": schedule, "softcap": float(softcap), "head_dim": d, "batch": 2,
            "seqlen_q": sq, "seqlen_k": sk, "heads": 4, "heads_kv": heads_kv,
            "seqlens_k": seqlens_k, "kblock_m": kblock_m, "kblock_n": kblock_n,
            "descales": descales, "seed": seed}


def _matrix() -> list[dict]:
    """The configurations; seeds are 20261200 + index."""
    cfgs = []
    P, O = "plain", "intra_wg_overlap"
    for dt in ("bf16", "f16", "e4m3"):
        fp8 = dt == "e4m3"
        cfgs += [
            # every (mask, schedule) once per dtype; each mask and each schedule with both
            # softcaps; head dims 64 and 128; seqlens (and seqlens_k) that are and are not block
            # multiples, batches with seqlens_k = 0; GQA; FP8 descales
            _cfg(f"{dt}_none_plain", dt, "none", P, 0, 64, sq=160, sk=200),
            _cfg(f"{dt}_none_overlap_softcap", dt, "none", O, 30, 128, sq=160, sk=256,
                 seqlens_k=[256, 0], descales=fp8),
            _cfg(f"{dt}_causal_plain_softcap", dt, "causal", P, 30, 64, sq=256 if dt == "bf16" else 176,
                 sk=256, heads_kv=2),
            _cfg(f"{dt}_causal_overlap", dt, "causal", O, 0, 128, sq=160, sk=300,
                 seqlens_k=[300, 137], descales=fp8),
            _cfg(f"{dt}_local_plain", dt, "local", P, 0, 64, sq=160, sk=256, heads_kv=2,
                 seqlens_k=[0, 229]),
            _cfg(f"{dt}_local_overlap_softcap", dt, "local", O, 30, 64, sq=176, sk=280,
                 kblock_n=96 if fp8 else 64),
        ]
    cfgs += [
        # other head dims (RescaleOBeforeGemm: d > 128 with bf16/f16), block shapes, descales
        _cfg("bf16_d32_causal_overlap_m64_n80", "bf16", "causal", O, 0, 32, sq=200, sk=272,
             kblock_m=64, kblock_n=80),
        _cfg("f16_d96_local_overlap_softcap_n96", "f16", "local", O, 30, 96, sq=160, sk=240,
             heads_kv=2, kblock_n=96),
        _cfg("bf16_d256_none_overlap_m64_n80", "bf16", "none", O, 0, 256, sq=160, sk=200,
             heads_kv=2, kblock_m=64, kblock_n=80, seqlens_k=[200, 0]),
        _cfg("e4m3_d256_causal_plain_softcap_m64_n64", "e4m3", "causal", P, 30, 256, sq=160,
             sk=224, kblock_m=64, kblock_n=64, seqlens_k=[0, 224], descales=True),
        _cfg("bf16_none_overlap_m192_n176", "bf16", "none", O, 0, 64, sq=200, sk=300,
             kblock_m=192, kblock_n=176, seqlens_k=[300, 181]),
        _cfg("e4m3_local_plain_softcap_m192_n160", "e4m3", "local", P, 30, 64, sq=192, sk=288,
             kblock_m=192, kblock_n=160, descales=True),
    ]
    for i, c in enumerate(cfgs):
        c["seed"] = 20261200 + i
    return cfgs


CONFIGS = _matrix()


def to_planes(bits: np.ndarray) -> np.ndarray:
    """uint16 / uint32 array -> uint8 byte planes ``[itemsize, ...]``, least significant first."""
    b = np.ascontiguousarray(bits)
    return np.stack([((b >> (8 * i)) & 0xFF).astype(np.uint8) for i in range(b.dtype.itemsize)])


def from_planes(planes: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_planes`: 2 planes -> uint16, 4 planes -> uint32."""
    dt = {2: np.uint16, 4: np.uint32}[planes.shape[0]]
    out = np.zeros(planes.shape[1:], dtype=dt)
    for i in range(planes.shape[0]):
        out |= planes[i].astype(dt) << dt(8 * i)
    return out


#: how a goldens file is made again (named by the errors of :func:`load_goldens`)
REGENERATE = "python -m simulator measure forward_goldens --out DIR` on a GPU"


def load_goldens(path: str | os.PathLike) -> tuple[dict, list[tuple[dict, np.ndarray, np.ndarray]]]:
    """Read a goldens file: ``(meta, [(config, out, lse), ...])`` with ``out`` in the output
    dtype (bf16 for bf16/e4m3 inputs, float16 for f16) and ``lse`` float32; configurations
    that failed on the device (an ``error`` entry) are skipped.

    The file is read through :func:`simulator.io.read_npz`, so a recording listed in its
    folder's ``MANIFEST.json`` (the committed ``simulator/data/device/forward_goldens.npz``)
    is checked against its SHA-256 first; a fresh file of a GPU run (not listed) is read as is.

    Raises:
        RecordedDataError: missing, unreadable, or altered ("recording corrupt: ...").
    """
    z = read_npz(path, REGENERATE)
    meta = json.loads(str(z["meta"]))
    rows = []
    for rec in meta["configs"]:
        key = f"c{rec['index']}"
        if f"{key}_out" not in z:
            continue
        out_dtype = np.float16 if rec["dtype"] == "f16" else ml_dtypes.bfloat16  # e4m3 -> bf16
        out = from_planes(z[f"{key}_out"]).view(out_dtype)
        lse = from_planes(z[f"{key}_lse"]).view(np.float32)
        rows.append((rec, out, lse))
    return meta, rows


def make_inputs(cfg: dict) -> dict:
    """The inputs of one configuration (regenerated identically by CI)."""
    return attention_inputs(cfg["seed"], batch=cfg["batch"], seqlen_q=cfg["seqlen_q"],
                            seqlen_k=cfg["seqlen_k"], heads=cfg["heads"], heads_kv=cfg["heads_kv"],
                            head_dim=cfg["head_dim"], dtype=cfg["dtype"], descales=cfg["descales"])


def call_kwargs(cfg: dict, inputs: dict) -> dict:
    """Keyword arguments of ``forward`` (device or emulator) for one configuration."""
    return {"causal": cfg["causal"], "window": tuple(cfg["window"]), "softcap": cfg["softcap"],
            "seqlens_k": None if cfg["seqlens_k"] is None else np.array(cfg["seqlens_k"]),
            "kblock_m": cfg["kblock_m"], "kblock_n": cfg["kblock_n"], "schedule": cfg["schedule"],
            "q_descale": inputs["q_descale"], "k_descale": inputs["k_descale"],
            "v_descale": inputs["v_descale"]}


def check_all(quick: bool = False) -> list[dict]:
    """Rows for ``python -m simulator verify --topic forward``: every recorded golden (the first
    four when ``quick``), emulated and compared bit for bit with the H200's O and LSE."""
    from ..flash import forward as emulate  # noqa: PLC0415 - the emulator only when replaying

    _, rows = load_goldens(DATA_DIR / GOLDENS_FILE)  # missing or altered: RecordedDataError
    out_rows = []
    for rec, out, lse in rows[:4] if quick else rows:
        inputs = make_inputs(rec)
        res = emulate(inputs["q"], inputs["k"], inputs["v"], **call_kwargs(rec, inputs))
        bad = int(np.count_nonzero(res.out.view(np.uint16) != out.view(np.uint16))
                  + np.count_nonzero(res.lse.view(np.uint32) != lse.view(np.uint32)))
        out_rows.append(row(f"forward {rec['name']}", out.size + lse.size, bad))
    return out_rows
