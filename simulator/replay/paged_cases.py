"""The frozen cases of the paged-KV recording (``fa3_paged_*`` in ``simulator/data/device``):
``flash_attn_with_kvcache`` with a ``page_table`` on the real library, and the inputs of one
case.

Editing anything here changes what the recorded bits belong to: a replay regenerates the
inputs from the case and compares the emulator's bits with the recorded digests.

A case is a dict: ``name``, ``seed``, ``dtype`` (``"bf16"`` or ``"f16"``), ``batch``,
``seqlen_q``, ``heads``, ``heads_kv``, ``head_dim`` (128: the build's), ``page_size``,
``num_pages`` (the pool), ``pages_per_seq`` (max_num_pages_per_seq), ``batch_k`` (page-table
rows), ``cache_seqlens`` (None: every row full, or [batch] lengths), ``seqlen_new`` (keys
appended, 0: none), ``leftpad`` (None or [batch]), ``cache_batch_idx`` (None or [batch]),
``causal``, ``window`` (left, right), ``num_splits`` (>= 1: the build's glue cannot take 0).

Inputs: q from :func:`simulator.flash.inputs.attention_inputs` (seed ``seed``), the pool's keys
and values as one sequence of ``num_pages * page_size`` keys of the same call, the new keys and
values from seed ``seed + 1``; the page table is a shuffled draw of distinct pages
(``random.Random(seed)``); every entry names a page of the pool (the pages past a row's keys
too, so that no kernel load depends on FA3 skipping them).
"""

from __future__ import annotations

import random

import numpy as np

from ..flash.inputs import attention_inputs

HEAD_DIM = 128


def paged_case(name, seed, dtype, batch, sq, h, hk, ps, pages_per_seq, *, extra_pages=3,
               cache_seqlens=None, new=0, leftpad=None, batch_idx=None, batch_k=None,
               causal=False, window=(-1, -1), num_splits=1) -> dict:
    """One frozen paged-KV case as the recorders and replays read it: ``batch`` sequences of
    ``sq`` query rows, ``h`` / ``hk`` query / KV heads of head dim :data:`HEAD_DIM`, pages of
    ``ps`` keys (0: a plain cache), ``pages_per_seq`` pages per cache sequence and
    ``extra_pages`` unused ones in the pool; the keywords are
    ``flash_attn_with_kvcache``'s (``new`` appended keys per sequence)."""
    batch_k = batch if batch_k is None else batch_k
    return {"name": name, "seed": seed, "dtype": dtype, "batch": batch, "seqlen_q": sq,
            "heads": h, "heads_kv": hk, "head_dim": HEAD_DIM, "page_size": ps,
            "num_pages": batch_k * pages_per_seq + extra_pages, "pages_per_seq": pages_per_seq,
            "batch_k": batch_k,
            "cache_seqlens": None if cache_seqlens is None else [int(s) for s in cache_seqlens],
            "seqlen_new": int(new),
            "leftpad": None if leftpad is None else [int(s) for s in leftpad],
            "cache_batch_idx": None if batch_idx is None else [int(s) for s in batch_idx],
            "causal": bool(causal), "window": [int(window[0]), int(window[1])],
            "num_splits": int(num_splits)}


def cases(seed: int = 20261203, count: int = 160) -> list[dict]:
    """The recorded cases: page sizes 16-512 (and 48, 100: not multiples of any kBlockN),
    decode (seqlen_q 1) and prefill, GQA up to 8, cache lengths up to 4,096, appends of 1-16
    keys, leftpad, cache_batch_idx, no mask / causal / local, 1-8 splits, bf16 and fp16,
    TMA and non-TMA page loads."""
    rng = random.Random(seed)
    out = []
    heads = [(8, 8), (8, 1), (16, 2), (32, 8), (6, 3), (4, 4)]
    masks = [(False, (-1, -1)), (True, (-1, -1)), (False, (200, 0)), (False, (64, 16))]
    sizes = [16, 32, 48, 64, 100, 128, 256, 512]
    for i in range(count):
        kind = i % 4  # 0 decode, 1 decode with append, 2 prefill, 3 prefill with append / leftpad
        ps = sizes[rng.randrange(len(sizes))]
        h, hk = heads[rng.randrange(len(heads))]
        causal, window = masks[rng.randrange(len(masks))]
        batch = rng.choice([1, 1, 2, 3, 4])
        max_len = rng.choice([64, 300, 1000, 2048, 4096])
        pages = max(1, -(-max_len // ps))
        cap = pages * ps
        sq = 1 if kind < 2 else rng.choice([2, 17, 64, 129, 200, 300])
        new = 0 if kind in (0, 2) else rng.choice([1, 2, 4, 16])
        if kind == 3 and rng.random() < 0.4:
            new = 0
        sq = min(sq, cap)
        new = min(new, cap)
        lens = [rng.randint(0, cap - new) for _ in range(batch)] if (new or rng.random() < 0.8) \
            else None
        leftpad = None
        if lens is not None and kind == 3 and rng.random() < 0.5:
            leftpad = [rng.randint(0, n) for n in lens]
        batch_idx, batch_k = None, batch
        if rng.random() < 0.2:
            batch_k = batch + rng.randint(0, 2)
            batch_idx = rng.sample(range(batch_k), batch)
        splits = rng.choice([1, 1, 2, 3, 8])
        dtype = "f16" if rng.random() < 0.3 else "bf16"
        out.append(paged_case(f"paged{i}_ps{ps}_{'q1' if sq == 1 else f'q{sq}'}_h{h}-{hk}",
                         5000 + i, dtype, batch, sq, h, hk, ps, pages,
                         extra_pages=rng.randint(0, 4), cache_seqlens=lens, new=new,
                         leftpad=leftpad, batch_idx=batch_idx, batch_k=batch_k, causal=causal,
                         window=window, num_splits=splits))
    return out + tma_cases(len(out))


def tma_cases(start: int) -> list[dict]:
    """24 launches that take FA3's TMA page loads (``page_size % kBlockN == 0``, ``seqlen_q *
    heads / heads_kv > kBlockM``, no append, no leftpad): kBlockN 176 (no mask, page sizes 176
    and 352) and 128 (causal / local, 128-512)."""
    out = []
    shapes = [(1, 200, 8, 8), (2, 129, 8, 8), (1, 64, 16, 2), (3, 300, 4, 4), (1, 17, 32, 4),
              (2, 256, 6, 3)]
    for i in range(24):
        causal, window = [(False, (-1, -1)), (True, (-1, -1)), (False, (100, 0))][i % 3]
        ps = [176, 352][i % 2] if i % 3 == 0 else [128, 256, 512][i % 3]
        b, sq, h, hk = shapes[i % len(shapes)]
        pages = max(1, -(-[500, 1500, 3000][i % 3] // ps))
        lens = None if i % 4 == 0 else [(pages * ps * (j + 2)) // (b + 2) for j in range(b)]
        out.append(paged_case(f"paged{start + i}_tma_ps{ps}_q{sq}_h{h}-{hk}", 6000 + i,
                         "f16" if i % 5 == 0 else "bf16", b, sq, h, hk, ps, pages,
                         cache_seqlens=lens, causal=causal, window=window,
                         num_splits=[1, 2, 4][i % 3]))
    return out


def case_inputs(case: dict) -> dict:
    """The inputs of one case.

    Returns:
        dict with ``q`` [batch, seqlen_q, heads, 128], ``k_cache`` / ``v_cache`` (the pool
        [num_pages, page_size, heads_kv, 128]), ``k`` / ``v`` ([batch, seqlen_new, heads_kv,
        128] or None), ``page_table`` (int32 [batch_k, pages_per_seq]), ``cache_seqlens``,
        ``cache_leftpad``, ``cache_batch_idx`` (int32 [batch] or None), ``causal``,
        ``window_size`` (a tuple), ``num_splits``.
    """
    b, sq, h, hk, d = (case[n] for n in ("batch", "seqlen_q", "heads", "heads_kv", "head_dim"))
    ps, npages = case["page_size"], case["num_pages"]
    x = attention_inputs(case["seed"], batch=1, seqlen_q=b * sq, seqlen_k=npages * ps, heads=h,
                         heads_kv=hk, head_dim=d, dtype=case["dtype"], q_std=1.0, k_std=1.0)
    q = x["q"].reshape(b, sq, h, d)
    pool_k = x["k"].reshape(npages, ps, hk, d)
    pool_v = x["v"].reshape(npages, ps, hk, d)
    kn = vn = None
    if case["seqlen_new"]:
        y = attention_inputs(case["seed"] + 1, batch=b, seqlen_q=1, seqlen_k=case["seqlen_new"],
                             heads=hk, heads_kv=hk, head_dim=d, dtype=case["dtype"], k_std=1.0)
        kn, vn = y["k"], y["v"]
    rng = random.Random(case["seed"])
    order = list(range(npages))
    rng.shuffle(order)
    per = case["pages_per_seq"]
    table = np.array(order[: case["batch_k"] * per], np.int64).reshape(case["batch_k"], per)
    def arr(name):
        return None if case[name] is None else np.asarray(case[name], np.int32)
    return {"q": q, "k_cache": pool_k, "v_cache": pool_v, "k": kn, "v": vn,
            "page_table": table.astype(np.int32), "cache_seqlens": arr("cache_seqlens"),
            "cache_leftpad": arr("leftpad"), "cache_batch_idx": arr("cache_batch_idx"),
            "causal": case["causal"], "window_size": tuple(case["window"]),
            "num_splits": case["num_splits"]}
