"""The frozen cases of the ``attention_chunk`` recording (``fa3_chunk_*`` in
``simulator/data/device``): FA3's forward with keys cut into chunks, on flash-attn3-jax 0.2.3
(head dim 128, bf16 / fp16; its FFI takes ``attention_chunk``, its Python glue passes 0).

Chunk lengths below, at and above kBlockN (128 for a local head-dim-128 tile), not multiples of
16 too; no mask, causal and windows narrower than the chunk; seqlen_q below, equal to and above
seqlen_k (negative offsets); GQA; varlen launches with several sequences.
"""

from __future__ import annotations

import random

import numpy as np

from ..flash.inputs import attention_inputs

SEED = 20261206


def cases() -> list[dict]:
    """All cases, in a fixed order (60 single launches, 20 varlen)."""
    rng = random.Random(SEED)
    out = []
    for i in range(80):
        c = {"seed": SEED + i, "dtype": rng.choice(("bf16", "bf16", "f16")),
             "chunk": rng.choice((16, 40, 64, 100, 128, 176, 256, 300, 1024)),
             "causal": rng.random() < 0.5,
             "window": rng.choice(((-1, -1), (-1, -1), (-1, -1), (50, 0), (200, 30), (7, 7))),
             "heads_kv": rng.choice((1, 2)), "group": rng.choice((1, 2, 4))}
        if i < 60:
            c.update(varlen=False, batch=rng.choice((1, 2)),
                     seqlen_q=rng.choice((1, 37, 128, 300, 513)),
                     seqlen_k=rng.choice((1, 37, 128, 300, 513, 1000)))
        else:
            n = rng.choice((1, 2, 3))
            c.update(varlen=True, batch=n, seqlens_q=[rng.choice((0, 1, 60, 257)) for _ in range(n)],
                     seqlens_k=[rng.choice((1, 60, 257, 700)) for _ in range(n)])
        out.append(c)
    return out


def call_args(case: dict) -> dict:
    """The arrays and options of one case: q, k, v (bf16 / fp16, head dim 128) and for varlen
    cu_seqlens_q / cu_seqlens_k / max_seqlen_q / max_seqlen_k (q, k, v packed)."""
    h = case["heads_kv"] * case["group"]
    if not case["varlen"]:
        x = attention_inputs(case["seed"], batch=case["batch"], seqlen_q=case["seqlen_q"],
                             seqlen_k=case["seqlen_k"], heads=h, heads_kv=case["heads_kv"],
                             head_dim=128, dtype=case["dtype"])
        return {"q": x["q"], "k": x["k"], "v": x["v"], "causal": case["causal"],
                "window": tuple(case["window"]), "attention_chunk": case["chunk"]}
    lq, lk = case["seqlens_q"], case["seqlens_k"]
    x = attention_inputs(case["seed"], batch=1, seqlen_q=max(1, sum(lq)), seqlen_k=sum(lk),
                         heads=h, heads_kv=case["heads_kv"], head_dim=128, dtype=case["dtype"])
    return {"q": x["q"][0, :sum(lq)], "k": x["k"][0], "v": x["v"][0], "causal": case["causal"],
            "window": tuple(case["window"]), "attention_chunk": case["chunk"],
            "cu_seqlens_q": np.concatenate([[0], np.cumsum(lq)]).astype(np.int32),
            "cu_seqlens_k": np.concatenate([[0], np.cumsum(lk)]).astype(np.int32),
            "max_seqlen_q": max(1, max(lq)), "max_seqlen_k": max(lk)}


def emulate(case: dict) -> tuple[np.ndarray, np.ndarray]:
    """The emulator's (out, lse) of one case through ``simulator.fa3``."""
    from .. import fa3  # noqa: PLC0415

    a = call_args(case)
    common = dict(causal=a["causal"], window_size=a["window"], attention_chunk=a["attention_chunk"],
                  return_attn_probs=True)
    if case["varlen"]:
        return fa3.flash_attn_varlen_func(a["q"], a["k"], a["v"], a["cu_seqlens_q"],
                                          a["cu_seqlens_k"], a["max_seqlen_q"], a["max_seqlen_k"],
                                          **common)
    return fa3.flash_attn_func(a["q"], a["k"], a["v"], **common)
