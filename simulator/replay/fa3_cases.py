"""The configuration matrix on which the real FlashAttention-3 library is recorded (frozen).

Each case is a JSON-able dict of ``flash_attn_func`` arguments plus how to make its inputs:
a seed for :func:`simulator.flash.inputs.attention_inputs`, standard deviations, and an
optional ``special`` that plants non-finite or huge values (``inf_k``: +inf at some key
positions of K, which makes whole score columns inf or NaN; ``nan_k``: NaN in K; ``huge_k``:
K scaled so that scores overflow float32; ``huge_v``: V near its format's largest finite value,
so that P V overflows). The matrix covers bf16 and e4m3, every head dim FA3 accepts in each
kernel head-dim class (odd ones inside each class), causal and not, softcap, GQA and MQA,
``seqused_k`` including 0, seqlen_q 1, partial tiles, seqlen_q > seqlen_k with causal, FP8
descales and the specials. Changing anything here changes what recorded bits belong to: the
recordings store a digest of every case's inputs (:func:`input_digest`).
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import ml_dtypes
import numpy as np

from ..flash.inputs import attention_inputs

#: head dims per format: every class (<= 64, 96, 128, 192, 256), odd ones inside each class
HEAD_DIMS = {
    "bf16": (8, 24, 40, 56, 64, 72, 88, 96, 104, 120, 128, 136, 160, 184, 192, 200, 232, 256),
    "e4m3": (16, 48, 64, 80, 96, 112, 128, 144, 176, 192, 208, 240, 256),
}
SPECIALS = ("none", "inf_k", "nan_k", "huge_k", "huge_v")
CASES_PER_CELL = 5
MATRIX_SEED = 20261201
_SEQ_Q = (1, 1, 7, 64, 127, 128, 129, 191, 192, 193, 255, 300)
_SEQ_K = (1, 17, 80, 128, 161, 176, 200, 255, 256, 257, 400, 513, 700)
_FORMAT_MAX = {"bf16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), "e4m3": 448.0}


def matrix() -> list[dict]:
    """All cases, in a fixed order (``CASES_PER_CELL`` per format, head dim and causal)."""
    cases = []
    for fmt, dims in HEAD_DIMS.items():
        for d in dims:
            for causal in (False, True):
                rng = random.Random(f"{MATRIX_SEED}-{fmt}-{d}-{causal}")
                for j in range(CASES_PER_CELL):
                    cases.append(_draw(rng, fmt, d, causal, seed=MATRIX_SEED + len(cases),
                                       plain=j == 0))
    return cases


def _draw(rng: random.Random, fmt: str, d: int, causal: bool, seed: int, plain: bool) -> dict:
    heads_kv = rng.choice((1, 1, 2, 3))
    ratio = rng.choice((1, 1, 2, 4, 8))
    batch = rng.choice((1, 1, 2, 3))
    sq, sk = rng.choice(_SEQ_Q), rng.choice(_SEQ_K)
    if batch * sq * heads_kv * ratio * d > 400_000:  # keep the CI replay small
        batch, ratio = 1, 1
    case = {"seed": seed, "dtype": fmt, "batch": batch, "seqlen_q": sq, "seqlen_k": sk,
            "heads": heads_kv * ratio, "heads_kv": heads_kv, "head_dim": d, "causal": causal,
            "softcap": 0.0, "softmax_scale": None, "seqused_k": None, "descales": False,
            "q_std": 1.5, "k_std": 1.5, "v_std": 1.0, "special": "none"}
    if plain:
        return case
    case["softcap"] = rng.choice((0.0, 0.0, 0.0, 30.0, 5.0))
    if rng.random() < 0.3:
        case["softmax_scale"] = round(rng.uniform(0.02, 0.6), 6)
    if rng.random() < 0.35:
        case["seqused_k"] = [rng.choice((0, sk, rng.randint(0, sk))) for _ in range(batch)]
    case["descales"] = fmt == "e4m3" and rng.random() < 0.5
    case["q_std"] = rng.choice((1.5, 1.5, 0.25, 4.0))
    case["special"] = rng.choice(SPECIALS + ("none",) * 5)
    return case


def case_inputs(case: dict) -> dict:
    """Keyword arguments of ``flash.forward`` / the library launcher for one case.

    Returns:
        dict with q, k, v (NumPy arrays of the case's dtype), causal, softcap, softmax_scale,
        seqlens_k (int32 array or None) and the three descales (float32 [batch, heads_kv] or
        None).
    """
    x = attention_inputs(case["seed"], batch=case["batch"], seqlen_q=case["seqlen_q"],
                         seqlen_k=case["seqlen_k"], heads=case["heads"], heads_kv=case["heads_kv"],
                         head_dim=case["head_dim"], dtype=case["dtype"], q_std=case["q_std"],
                         k_std=case["k_std"], v_std=case["v_std"], descales=case["descales"])
    _plant(case, x)
    used = case["seqused_k"]
    return {"q": x["q"], "k": x["k"], "v": x["v"], "causal": case["causal"],
            "softcap": case["softcap"], "softmax_scale": case["softmax_scale"],
            "seqlens_k": None if used is None else np.asarray(used, dtype=np.int32),
            "q_descale": x["q_descale"], "k_descale": x["k_descale"], "v_descale": x["v_descale"]}


def _plant(case: dict, x: dict) -> None:
    """Write the case's special values into k / v (in place), at seeded positions."""
    special = case["special"]
    if special == "none":
        return
    rng = np.random.default_rng(case["seed"])
    k, v = x["k"], x["v"]
    sk = k.shape[1]
    pos = rng.integers(0, sk, size=max(1, sk // 16))
    big = _FORMAT_MAX[case["dtype"]]
    dtype = k.dtype
    if special == "inf_k":  # e4m3fn has no inf: its cast of inf is NaN, as FA3's inputs would be
        k[:, pos] = np.array(np.inf, dtype=np.float32).astype(dtype)
    elif special == "nan_k":
        k[:, pos, :, : max(1, k.shape[-1] // 4)] = np.array(np.nan, dtype=np.float32).astype(dtype)
    elif special == "huge_k":
        k[:] = (k.astype(np.float32) * np.float32(min(big, 2.0**100) / 8)).astype(dtype)
    elif special == "huge_v":
        sign = np.where(rng.random(v.shape) < 0.5, -1.0, 1.0).astype(np.float32)
        v[:] = (sign * np.float32(big)).astype(dtype)
    else:
        raise ValueError(f"special: expected one of {SPECIALS}, got {special!r}")


def input_digest(kwargs: dict) -> str:
    """BLAKE2b-128 (hex) of a case's input bits and arguments: detects a changed generator."""
    h = hashlib.blake2b(digest_size=16)
    for name in ("q", "k", "v", "seqlens_k", "q_descale", "k_descale", "v_descale"):
        arr = kwargs[name]
        h.update(name.encode())
        if arr is not None:
            h.update(np.ascontiguousarray(arr).view(np.uint8).tobytes())
    h.update(json.dumps([kwargs["causal"], kwargs["softcap"], kwargs["softmax_scale"]]).encode())
    return h.hexdigest()


EMBEDDED = Path(__file__).resolve().parents[1] / "data" / "inputs" / "minilm.npz"


def embedded_cases() -> list[dict]:
    """The main job's input (default layer) as library cases: bf16 / e4m3 x causal or not."""
    return [{"embedded": "minilm", "dtype": fmt, "causal": causal}
            for fmt in ("bf16", "e4m3") for causal in (False, True)]


def embedded_inputs(case: dict) -> dict:
    """Keyword arguments for an :func:`embedded_cases` entry (from ``minilm.npz``)."""
    import ml_dtypes  # noqa: PLC0415

    with np.load(EMBEDDED, allow_pickle=False) as z:
        li = [int(x) for x in np.ravel(z["layers"])].index(int(z["default_layer"]))
        fmt = case["dtype"]
        dt = ml_dtypes.bfloat16 if fmt == "bf16" else ml_dtypes.float8_e4m3fn
        q, k, v = (np.ascontiguousarray(z[f"{t}_{fmt}"][li]).view(dt) for t in "qkv")
        desc = ({f"{t}_descale": np.ascontiguousarray(z[f"{t}_descale"][li], np.float32) for t in "qkv"}
                if fmt == "e4m3" else {f"{t}_descale": None for t in "qkv"})
        seqlens = z["seqlens"].astype(np.int32)
    return {"q": q, "k": k, "v": v, "causal": case["causal"], "softcap": 0.0, "softmax_scale": None,
            "seqlens_k": seqlens, **desc}
