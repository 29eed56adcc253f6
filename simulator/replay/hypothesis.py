"""Recorded drawn cases of the hypothesis replay: (de)serialisation, digests, and the check
of the recorded sample against the emulator (``python -m simulator verify --topic forward``).

No hypothesis import here: ``verify`` runs with the package's runtime dependencies only. The
recordings are written by :mod:`simulator.measure.hypothesis_replay` on a GPU and merged into
``simulator/data/device/hypothesis_replay_*`` by ``scripts/merge_hypothesis_runs.py``.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from ..flash.config import DTYPES


def _bits(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[x.itemsize])


def result_bits(out, lse) -> tuple[np.ndarray, np.ndarray]:
    """(O bits, LSE bits) of one forward result, for exact comparison."""
    return _bits(out), _bits(lse)


def case_digest(q, k, v, kwargs: dict) -> str:
    """BLAKE2b-128 hex digest of a case's input bits and keyword arguments."""
    h = hashlib.blake2b(digest_size=16)
    for x in (q, k, v):
        h.update(str(x.dtype).encode() + str(x.shape).encode() + _bits(x).tobytes())
    h.update(json.dumps(kwargs_to_json(kwargs), sort_keys=True).encode())
    return h.hexdigest()


def kwargs_to_json(kwargs: dict) -> dict:
    """Forward keyword arguments as JSON values: arrays as lists, tuples as lists, NumPy
    scalars as Python numbers (a float32 is exactly a float64). :func:`kwargs_from_json`
    restores the types :func:`simulator.flash.forward` takes for each argument (seqlens_k an
    int64 array, window a tuple, descales float32); the digest therefore identifies argument
    values, not their Python types."""
    out = {}
    for key, val in kwargs.items():
        if isinstance(val, np.ndarray):
            out[key] = val.tolist()
        elif isinstance(val, np.generic):
            out[key] = val.item()
        elif isinstance(val, tuple):
            out[key] = list(val)
        else:
            out[key] = val
    return out


def kwargs_from_json(obj: dict) -> dict:
    """Inverse of :func:`kwargs_to_json`: the exact keyword arguments the case was run with."""
    kw = dict(obj)
    if "seqlens_k" in kw:
        kw["seqlens_k"] = np.array(kw["seqlens_k"], dtype=np.int64)
    if "window" in kw:
        kw["window"] = tuple(kw["window"])
    for name in ("q_descale", "k_descale", "v_descale"):
        if name in kw:
            kw[name] = np.float32(kw[name])
    return kw


def pack_cases(cases: list[dict]) -> tuple[dict[str, np.ndarray], list[dict]]:
    """Arrays (``c{j}__q`` ... bits) and JSON metadata for recorded cases, each a dict with
    q, k, v, kwargs, out, lse (device results) and optional extra JSON fields."""
    arrays, meta = {}, []
    for j, c in enumerate(cases):
        for name in ("q", "k", "v"):
            arrays[f"c{j}__{name}"] = _bits(c[name])
        arrays[f"c{j}__out"], arrays[f"c{j}__lse"] = result_bits(c["out"], c["lse"])
        meta.append({"dtype": str(c["q"].dtype), "kwargs": kwargs_to_json(c["kwargs"]),
                     **{k: v for k, v in c.items()
                        if k not in ("q", "k", "v", "kwargs", "out", "lse")}})
    return arrays, meta


def unpack_cases(arrays, meta: list[dict]) -> list[dict]:
    """Inverse of :func:`pack_cases`: q, k, v in their dtypes, kwargs, device O / LSE bits
    (``out_bits``, ``lse_bits``) and the extra JSON fields (``input_digest``, ``shard`` ...)."""
    dtypes = {str(dt): dt for dt in DTYPES.values()}
    cases = []
    for j, m in enumerate(meta):
        dt = dtypes[m["dtype"]]
        case = {name: arrays[f"c{j}__{name}"].view(dt) for name in ("q", "k", "v")}
        case.update({k: v for k, v in m.items() if k not in ("dtype", "kwargs")})
        case.update(kwargs=kwargs_from_json(m["kwargs"]), out_bits=arrays[f"c{j}__out"],
                    lse_bits=arrays[f"c{j}__lse"])
        cases.append(case)
    return cases


SAMPLE = "hypothesis_replay_sample"
REGENERATE = ("python -m simulator measure hypothesis_replay --out DIR` on a GPU, then "
              "`python scripts/merge_hypothesis_runs.py DIR ...")


def load_sample() -> list[dict]:
    """The recorded sample of drawn cases with their H200 bits (see :func:`unpack_cases`).

    Raises:
        RecordedDataError: a recorded file is missing or unreadable.
    """
    from ..io import read_json, read_npz
    from .common import DATA_DIR  # noqa: PLC0415

    meta = read_json(DATA_DIR / f"{SAMPLE}.json", REGENERATE)
    return unpack_cases(read_npz(DATA_DIR / f"{SAMPLE}.npz", REGENERATE), meta)


def check_sample(quick: bool = False) -> list[dict]:
    """One ``verify`` row: the emulator on every recorded sampled case (the first 10 when
    ``quick``), O and LSE bits against the H200's."""
    from ..flash import forward
    from .common import row  # noqa: PLC0415

    cases = load_sample()
    cases = cases[:10] if quick else cases
    total = bad = 0
    for c in cases:
        out, lse = result_bits(*forward(c["q"], c["k"], c["v"], **c["kwargs"]))
        total += out.size + lse.size
        bad += int(np.count_nonzero(out != c["out_bits"]) + np.count_nonzero(lse != c["lse_bits"]))
    return [row(f"forward, {len(cases)} hypothesis-drawn cases (replay sample)", total, bad)]
