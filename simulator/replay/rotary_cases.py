"""The frozen cases of the rotary recording (``fa3_rotary_*`` in ``simulator/data/device``):
``flash_attn_with_kvcache`` with ``rotary_cos`` / ``rotary_sin`` on the real library
(flash-attn3-jax 0.2.3, head dim 128), contiguous and paged caches.

Editing anything here changes what the recorded bits belong to. A case is a
:mod:`simulator.replay.paged_cases` case (``page_size`` 0: a contiguous cache of
``pages_per_seq`` keys per row, ``batch_k`` rows) plus ``rotary_dim``, ``interleaved``,
``rotary_seqlens`` (None or [batch]) and ``seqlen_ro`` (rows of the cos / sin tables).
The tables: ``cos(p * theta_j)`` / ``sin(p * theta_j)`` with ``theta_j = 10000 ** (-2 j /
rotary_dim)``, computed in float64, rounded to float32 and then to the case's dtype.
"""

from __future__ import annotations

import random

import numpy as np

from ..numerics.cvt import FORMATS
from . import paged_cases


def cases(seed: int = 20261204, count: int = 72) -> list[dict]:
    """The recorded cases: rotary_dim 16-128, interleaved or not, appends of 1-16 keys,
    decode and chunks of up to 16 query rows, no mask / causal / local, contiguous and paged
    caches (page sizes 16-256), ``rotary_seqlens`` in some, bf16 and fp16."""
    rng = random.Random(seed)
    out = []
    masks = [(False, (-1, -1)), (True, (-1, -1)), (False, (48, 0)), (False, (100, 8))]
    for i in range(count):
        causal, window = masks[i % 4]
        interleaved = bool((i // 4) % 2)
        rdim = [16, 32, 64, 128][(i // 8) % 4]
        ps = [0, 0, 16, 64, 256][rng.randrange(5)]
        batch = rng.choice([1, 2])
        h, hk = rng.choice([(8, 2), (4, 4), (8, 1)])
        keys = rng.choice([64, 200, 512])
        pages = keys if ps == 0 else -(-keys // ps)
        cap = keys if ps == 0 else pages * ps
        new = rng.choice([1, 2, 4, 16])
        sq = rng.choice([1, 1, 4, 16])
        lens = [rng.randint(0, cap - new) for _ in range(batch)]
        case = paged_cases.paged_case(  # the same case layout
            f"rotary{i}_d{rdim}_{'il' if interleaved else 'half'}_ps{ps}_q{sq}_n{new}", 7000 + i,
            "f16" if i % 3 == 0 else "bf16", batch, sq, h, hk, ps, pages,
            extra_pages=0 if ps == 0 else 2, cache_seqlens=lens, new=new, causal=causal,
            window=window, num_splits=rng.choice([1, 1, 2]))
        if ps == 0:
            case["num_pages"] = 0
        case.update(rotary_dim=rdim, interleaved=interleaved, seqlen_ro=cap + rng.choice([0, 7]),
                    rotary_seqlens=None if rng.random() < 0.75 else
                    [rng.randint(0, cap - new) for _ in range(batch)])
        out.append(case)
    return out


def case_inputs(case: dict) -> dict:
    """The inputs of one case: as :func:`simulator.replay.paged_cases.case_inputs` (for a
    contiguous case ``k_cache`` / ``v_cache`` are [batch_k, keys, heads_kv, 128] and
    ``page_table`` None), plus ``rotary_cos``, ``rotary_sin`` ([seqlen_ro, rotary_dim / 2] in
    the case's dtype), ``rotary_seqlens`` (int32 [batch] or None) and ``rotary_interleaved``."""
    if case["page_size"]:
        x = paged_cases.case_inputs(case)
    else:
        flat = dict(case, page_size=case["pages_per_seq"], num_pages=case["batch_k"],
                    pages_per_seq=1)
        x = paged_cases.case_inputs(flat)
        x["page_table"] = None
        x["k_cache"] = x["k_cache"][np.arange(case["batch_k"])]
        x["v_cache"] = x["v_cache"][np.arange(case["batch_k"])]
    half = case["rotary_dim"] // 2
    theta = 10000.0 ** (-2.0 * np.arange(half) / case["rotary_dim"])
    angle = np.arange(case["seqlen_ro"])[:, None] * theta[None, :]
    dt = FORMATS[case["dtype"]].dtype
    x["rotary_cos"] = np.cos(angle).astype(np.float32).astype(dt)
    x["rotary_sin"] = np.sin(angle).astype(np.float32).astype(dt)
    x["rotary_seqlens"] = (None if case["rotary_seqlens"] is None
                           else np.asarray(case["rotary_seqlens"], np.int32))
    x["rotary_interleaved"] = case["interleaved"]
    return x
