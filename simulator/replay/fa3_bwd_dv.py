"""The backward with V's head dim unlike Q's (``dv != d``): the frozen cases, their inputs, and
the replay of their recording (``fa3_bwd_dv_*`` in ``simulator/data/device``, written by
:mod:`simulator.measure.fa3_bwd_dv_record`).

FA3's ``mha_bwd`` runs such a call on one kernel of head dim ``round_up_headdim(max(d, dv))``
(hopper/flash_api.cpp, since Dao-AILab/flash-attention#1604); the emulation zero-pads the
narrower tensors to the wider head dim (:func:`simulator.fa3.backward.common_head_dim`). The
recorded build, flash-attn3-jax 0.2.3, has the backward kernel of head dim 128 only: the cases
of :func:`cases` with ``kernel`` 128 are those it can run (d <= 64, dv in (96, 128]); the
others (kernel 192 / 256: d 64 with dv 256, d 160 / 192 with dv 128) are recorded as its
refusal until a build with those kernels is recorded.

Editing :func:`cases` or :func:`case_inputs` changes what the recorded bits belong to.

A case: ``name``, ``seed``, ``dtype`` (``"bf16"`` / ``"f16"``), ``batch``, ``seqlen_q``,
``seqlen_k`` (maxima for varlen), ``heads``, ``heads_kv``, ``head_dim`` (d), ``head_dim_v``
(dv), ``causal``, ``window``, ``seqlens_q`` / ``seqlens_k`` (None or per-sequence lengths).
Inputs: q, k, v from :func:`simulator.flash.inputs.attention_inputs` (``head_dim_v``), dO
from ``InputStream(seed + 2**32)``; out and softmax_lse from the emulated forward
(:func:`simulator.fa3.flash_attn_func` / ``flash_attn_varlen_func``, whose bits the forward
recordings back; the backward only reads them), digests recorded beside the gradients.
"""

from __future__ import annotations

import numpy as np

from .. import fa3
from ..fa3.backward import BackwardCall, launch
from ..flash.inputs import InputStream, attention_inputs
from ..io import read_json
from ..numerics.cvt import FORMATS
from .common import DATA_DIR, digest, row

REPORT = DATA_DIR / "fa3_bwd_dv_report.json"
REGENERATE = ("python -m simulator.measure.fa3_bwd_dv_record --out OUTDIR on an sm_90 GPU with "
              "flash-attn3-jax 0.2.3 (docs/fa3-upstream-tests.md)")
_DOUT_SEED_OFFSET = 2**32
GRADS = ("dq", "dk", "dv")


def _round_up_headdim(d: int) -> int:
    for k in (64, 96, 128, 192, 256):
        if d <= k:
            return k
    return d


def cases() -> list[dict]:
    """The frozen cases (46): kernel head dim 128 (d in {8, 32, 40, 64} with dv in {104, 112,
    120, 128}) over MHA / GQA / MQA, no mask / causal / local, bf16 / fp16, ragged lengths and
    varlen; then kernel 192 and 256 (d 64 with dv 256, d 160 / 192 with dv 128)."""
    out = []
    seed = 7000
    dims = [(64, 128), (32, 128), (40, 112), (8, 104), (64, 120), (56, 128)]
    shapes = [(1, 1, 1), (1, 64, 128), (2, 113, 203), (1, 239, 1), (1, 128, 217),
              (2, 256, 256), (1, 1, 300), (1, 300, 333)]
    heads = [(2, 2), (4, 1), (6, 2), (4, 4)]
    masks = [(False, (-1, -1)), (True, (-1, -1)), (False, (40, 0)), (False, (30, 60))]
    for i, (b, sq, sk) in enumerate(shapes):
        for j in range(4):
            d, dv = dims[(i + 2 * j) % len(dims)]
            h, hk = heads[(i + j) % len(heads)]
            causal, window = masks[(i * 3 + j) % len(masks)]
            dtype = "bf16" if (i + j) % 2 == 0 else "f16"
            out.append(_case(f"k128_{len(out)}", seed, dtype, b, sq, sk, h, hk, d, dv, causal,
                             window))
            seed += 1
    for lens_q, lens_k, causal in (([1, 70, 128], [90, 1, 200], False),
                                   ([33, 200], [200, 64], True),
                                   ([5, 0, 81], [64, 17, 81], False)):
        for d, dv in ((64, 128), (40, 112)):
            out.append(_case(f"k128_{len(out)}", seed, "bf16", len(lens_q), max(lens_q),
                             max(lens_k), 4, 2, d, dv, causal, (-1, -1), lens_q, lens_k))
            seed += 1
    for d, dv in ((64, 256), (192, 128), (160, 128), (64, 192)):
        for causal in (False, True):
            out.append(_case(f"k{_round_up_headdim(max(d, dv))}_{len(out)}", seed, "bf16", 1,
                             100, 150, 4, 2, d, dv, causal, (-1, -1)))
            seed += 1
    return out


def _case(name, seed, dtype, b, sq, sk, h, hk, d, dv, causal, window, lens_q=None,
          lens_k=None) -> dict:
    return {"name": name, "seed": seed, "dtype": dtype, "batch": b, "seqlen_q": sq,
            "seqlen_k": sk, "heads": h, "heads_kv": hk, "head_dim": d, "head_dim_v": dv,
            "kernel": _round_up_headdim(max(d, dv)), "causal": bool(causal),
            "window": [int(window[0]), int(window[1])],
            "seqlens_q": None if lens_q is None else [int(x) for x in lens_q],
            "seqlens_k": None if lens_k is None else [int(x) for x in lens_k]}


def case_inputs(case: dict) -> dict:
    """q, k, v, dout (the case's dtype), out and softmax_lse (the emulated forward), the
    cu_seqlens (int32 or None) and maxima, causal and window of one case."""
    varlen = case["seqlens_q"] is not None
    h, hk, d, dv = case["heads"], case["heads_kv"], case["head_dim"], case["head_dim_v"]
    if varlen:
        tq, tk = sum(case["seqlens_q"]), sum(case["seqlens_k"])
        x = attention_inputs(case["seed"], batch=1, seqlen_q=tq, seqlen_k=tk, heads=h,
                             heads_kv=hk, head_dim=d, head_dim_v=dv, dtype=case["dtype"],
                             q_std=1.0, k_std=1.0)
        q, k, v = x["q"][0], x["k"][0], x["v"][0]
        shape_o = (tq, h, dv)
    else:
        x = attention_inputs(case["seed"], batch=case["batch"], seqlen_q=case["seqlen_q"],
                             seqlen_k=case["seqlen_k"], heads=h, heads_kv=hk, head_dim=d,
                             head_dim_v=dv, dtype=case["dtype"], q_std=1.0, k_std=1.0)
        q, k, v = x["q"], x["k"], x["v"]
        shape_o = q.shape[:-1] + (dv,)
    st = InputStream(case["seed"] + _DOUT_SEED_OFFSET)
    dout = st.normalish(shape_o).astype(np.float32).astype(FORMATS[case["dtype"]].dtype)
    cu_q = None if not varlen else np.concatenate([[0], np.cumsum(case["seqlens_q"])]).astype(np.int32)
    cu_k = None if not varlen else np.concatenate([[0], np.cumsum(case["seqlens_k"])]).astype(np.int32)
    window = tuple(case["window"])
    if varlen:
        out, lse = fa3.flash_attn_varlen_func(q, k, v, cu_q, cu_k, case["seqlen_q"],
                                              case["seqlen_k"], causal=case["causal"],
                                              window_size=window, return_attn_probs=True)
    else:
        out, lse = fa3.flash_attn_func(q, k, v, causal=case["causal"], window_size=window,
                                       return_attn_probs=True)
    return {"q": q, "k": k, "v": v, "dout": dout, "out": out, "lse": lse, "cu_seqlens_q": cu_q,
            "cu_seqlens_k": cu_k, "max_seqlen_q": case["seqlen_q"],
            "max_seqlen_k": case["seqlen_k"], "causal": case["causal"], "window": window}


def bits(x: np.ndarray) -> np.ndarray:
    """The array's bits as unsigned ints of its width."""
    return np.ascontiguousarray(x).view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def emulated(case: dict, x: dict | None = None):
    """The emulated backward of one case (deterministic order), as
    :func:`simulator.fa3.backward.launch` runs it: a result with dq, dk, dv (and dpsum,
    lse_log2 [batch, heads, seqlen_q_rounded] float32 without varlen)."""
    x = case_inputs(case) if x is None else x
    args = {"dout": x["dout"], "q": x["q"], "k": x["k"], "v": x["v"], "out": x["out"],
            "softmax_lse": x["lse"], "softmax_scale": None, "causal": x["causal"],
            "window_size": x["window"], "softcap": 0.0, "cu_seqlens_q": x["cu_seqlens_q"],
            "cu_seqlens_k": x["cu_seqlens_k"], "max_seqlen_q": x["max_seqlen_q"],
            "max_seqlen_k": x["max_seqlen_k"], "seqused_q": None, "seqused_k": None}
    return launch(BackwardCall(**args), True, spread=False)[0]


def replay(report_path=REPORT) -> list[dict]:
    """Every recorded case replayed: the inputs' out / LSE digests, then the deterministic
    runs' dq, dk, dv digests (and dPsum / LSE_log2 without varlen). A case the library
    refused must be one the recorded build lacks the kernel for (``kernel`` != 128); it is
    counted apart. The default-mode runs are recorded as how many values moved (information;
    :mod:`simulator.replay.fa3_backward` checks the spread on the main recordings).

    Returns: one :func:`simulator.replay.common.row` (checks, mismatches, detail).
    Raises: RecordedDataError (simulator.io) when the report is missing or altered."""
    report = read_json(report_path, REGENERATE)
    checked = mismatched = refused = 0
    details = []
    for entry in report["cases"]:
        case = entry["case"]
        if "error" in entry:
            refused += 1
            if case["kernel"] == 128:
                mismatched += 1
                details.append(f"{case['name']}: refused by the library: {entry['error'][:120]}")
            continue
        x = case_inputs(case)
        if digest(bits(x["out"])).hex() != entry["out"] or digest(bits(x["lse"])).hex() != entry["lse"]:
            mismatched += 1
            details.append(f"{case['name']}: inputs differ from the recording's (out / lse)")
            continue
        res = emulated(case, x)
        names = GRADS + (("dpsum", "lse_log2") if case["seqlens_q"] is None else ())
        for n in names:
            checked += 1
            got = getattr(res, n)
            if n in ("dpsum", "lse_log2"):
                got = np.ascontiguousarray(got)
            if digest(bits(got)).hex() != entry["det"][n]:
                mismatched += 1
                details.append(f"{case['name']}: {n}")
    return [row("fa3_bwd_dv", checked, mismatched,
                f"{len(report['cases'])} cases, {refused} refused by the recorded build; "
                + "; ".join(details[:5]))]
