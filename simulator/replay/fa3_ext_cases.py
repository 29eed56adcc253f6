"""The FA3 inference-API calls beyond :mod:`simulator.replay.fa3_api_cases` on which the real
library is recorded (frozen, like it): ``qv`` (MLA: head_dim 64 or less with head_dim_v 256 /
512) in ``flash_attn_func``, ``flash_attn_varlen_func`` and ``flash_attn_with_kvcache``;
``flash_attn_with_kvcache`` with varlen queries (``cu_seqlens_q``, ``max_seqlen_q``) and varlen
new keys (``cu_seqlens_k_new``), rotary appends among them; and ``scheduler_metadata`` from
``get_scheduler_metadata``. A case is a JSON-able dict in fa3_api_cases' format plus
``qv`` (bool), ``lens_q`` / ``lens_new`` (per-batch lengths: varlen queries / new keys),
``rotary`` (0 = none, else rotary_dim; ``interleaved``) and ``metadata`` (bool: the call gets
``scheduler_metadata`` from ``get_scheduler_metadata`` on its own arguments).
"""

from __future__ import annotations

import random

import numpy as np

from ..flash.inputs import attention_inputs
from . import fa3_api_cases

MATRIX_SEED = 20261204
#: (head_dim, head_dim_v) of FA3's qv kernels: HasQv needs kernel head dim 64, kHeadDimV >= 256
QV_DIMS = ((64, 512), (64, 256), (48, 512), (32, 256), (64, 384))


def matrix() -> list[dict]:
    """All cases, in a fixed order: 60 qv calls (25 KV-cache decode / prefill, 20
    flash_attn_func, 15 varlen), 50 KV-cache calls with varlen queries and / or new keys (a
    third with rotary), 30 KV-cache calls with ``scheduler_metadata``."""
    rng = random.Random(MATRIX_SEED)
    cases = []
    for i in range(25):
        cases.append(_qv(rng, _kvcache(rng, MATRIX_SEED + len(cases), i, qv=True)))
    for _ in range(20):
        cases.append(_qv(rng, _func(rng, MATRIX_SEED + len(cases))))
    for _ in range(15):
        cases.append(_qv(rng, _varlen(rng, MATRIX_SEED + len(cases))))
    for i in range(50):
        cases.append(_varlen_cache(rng, _kvcache(rng, MATRIX_SEED + len(cases), i), i))
    for i in range(30):
        c = _kvcache(rng, MATRIX_SEED + len(cases), i)
        if i % 3 == 0:
            c = _varlen_cache(rng, c, i)
        c["metadata"] = True
        cases.append(c)
    return cases


def _base(rng: random.Random, seed: int) -> dict:
    ratio = rng.choice((1, 2, 4, 8))
    hkv = rng.choice((1, 2)) if ratio < 8 else 1
    return {"seed": seed, "dtype": "bf16", "head_dim": rng.choice((64, 128)), "heads": hkv * ratio,
            "heads_kv": hkv, "causal": rng.random() < 0.5, "softcap": rng.choice((0.0, 0.0, 30.0)),
            "descales": False}


def _qv(rng: random.Random, c: dict) -> dict:
    """Turn a case into a qv case: FA3's MLA shapes (many query heads, one or two kv heads)."""
    d, dv = rng.choice(QV_DIMS)
    c.update(qv=True, head_dim=d, head_dim_v=dv, softcap=0.0, descales=False)
    if c["api"] == "kvcache":
        c["seqlen_new"] = 0 if rng.random() < 0.6 else c["seqlen_new"]
    return c


def _kvcache(rng: random.Random, seed: int, i: int, qv: bool = False) -> dict:
    c = _base(rng, seed)
    if qv:  # decode shapes: up to 128 query heads on one kv head, long caches sometimes
        c["heads_kv"] = rng.choice((1, 1, 2))
        c["heads"] = c["heads_kv"] * rng.choice((8, 16, 32, 64, 128 // c["heads_kv"]))
    batch = rng.choice((1, 1, 2, 3, 4, 8))
    s_cache = rng.choice((257, 700, 1024, 2048, 4096) if not qv or i % 8 else (8192, 16384))
    while batch * c["heads"] * s_cache * (c["head_dim"] + c.get("head_dim_v", 0)) > 60_000_000 \
            and batch > 1:
        batch //= 2
    sq = rng.choice((1, 1, 1, 2, 4, 16))
    c.update(api="kvcache", batch=batch, seqlen_q=sq, seqlen_cache=s_cache,
             seqlen_new=rng.choice((0, 0, 1, sq)),
             num_splits=rng.choice((0, 0, 0, 1, 2, 4, 8)), cache_batch_idx=rng.random() < 0.2,
             cache_leftpad=rng.random() < 0.2)
    c["cache_seqlens"] = [rng.randint(0, s_cache - c["seqlen_new"]) for _ in range(batch)]
    return c


def _func(rng: random.Random, seed: int) -> dict:
    c = _base(rng, seed)
    c["heads_kv"] = 1
    c["heads"] = rng.choice((4, 8, 16, 32))
    c.update(api="func", batch=rng.choice((1, 2)), seqlen_q=rng.choice((1, 3, 16, 64, 130)),
             seqlen_k=rng.choice((100, 300, 1000, 2048)), num_splits=rng.choice((1, 1, 0, 2, 4)))
    return c


def _varlen(rng: random.Random, seed: int) -> dict:
    c = _base(rng, seed)
    c["heads_kv"] = 1
    c["heads"] = rng.choice((4, 8, 16))
    batch = rng.choice((1, 2, 3, 4))
    c.update(api="varlen", batch=batch,
             seqlens_q=[rng.choice((0, 1, 5, 64, 130)) for _ in range(batch)],
             seqlens_k=[rng.choice((0, 1, 50, 200, 600)) for _ in range(batch)],
             seqused_q=False, seqused_k=rng.random() < 0.3, extra_max=rng.choice((0, 0, 5)),
             num_splits=rng.choice((1, 1, 2, 0)))
    return c


def _varlen_cache(rng: random.Random, c: dict, i: int) -> dict:
    """A KV-cache case with varlen queries (``lens_q``), varlen new keys (``lens_new``) or
    both; a third with rotary appends."""
    b, s_cache = c["batch"], c["seqlen_cache"]
    kind = i % 3
    if kind in (0, 2):
        c["lens_q"] = [rng.choice((0, 1, 2, 5, 16)) for _ in range(b)]
        c["extra_max"] = rng.choice((0, 0, 3))
    if kind in (1, 2):
        c["lens_new"] = [rng.choice((0, 1, 3, 8)) for _ in range(b)]
        c["cache_seqlens"] = [rng.randint(0, s_cache - n) for n in c["lens_new"]]
        c["seqlen_new"] = 0
    elif c["seqlen_new"]:
        longest = max(c["lens_q"])
        c["seqlen_new"] = max(1, longest)
        c["cache_seqlens"] = [rng.randint(0, s_cache - c["seqlen_new"]) for _ in range(b)]
    if i % 3 == 1 and c["head_dim"] in (64, 128):
        c["rotary"] = rng.choice((16, 32, c["head_dim"]))
        c["interleaved"] = rng.random() < 0.5
        c["cache_leftpad"] = False
    return c


def call_args(case: dict) -> tuple[str, dict]:
    """(function name, keyword arguments as NumPy arrays) of one case; ``scheduler_metadata``
    is the string ``"auto"`` when the case asks for it (each side computes its own)."""
    base = {k: v for k, v in case.items()
            if k not in ("qv", "lens_q", "lens_new", "rotary", "interleaved", "metadata")}
    if base["api"] == "kvcache" and ("lens_q" in case or "lens_new" in case):
        name, args = "flash_attn_with_kvcache", _varlen_cache_args(case)
    else:
        name, args = fa3_api_cases.call_args(base)
    if case.get("qv"):
        args["qv"] = _qv_array(case, args["q"])
    if case.get("metadata"):
        args["scheduler_metadata"] = "auto"
    return name, args


def _qv_array(case: dict, q: np.ndarray) -> np.ndarray:
    """qv of q's rows and heads with head_dim_v columns, from the case's seed."""
    rng = np.random.default_rng(case["seed"] + 17)
    return (1.5 * rng.standard_normal(q.shape[:-1] + (case["head_dim_v"],))).astype(q.dtype)


def _varlen_cache_args(case: dict) -> dict:
    """A KV-cache call with packed queries and / or packed new keys (``lens_q``,
    ``lens_new``); rotary tables when ``rotary`` is set."""
    b, s_cache = case["batch"], case["seqlen_cache"]
    lens_q = case.get("lens_q")
    lens_new = case.get("lens_new")
    sq = max(1, max(lens_q)) + case.get("extra_max", 0) if lens_q else case["seqlen_q"]
    rows = b + 2 if case["cache_batch_idx"] else b
    total_q = sum(lens_q) if lens_q else b * sq
    x = attention_inputs(case["seed"], batch=rows, seqlen_q=max(1, total_q, sum(lens_new or [0])),
                         seqlen_k=s_cache, heads=case["heads"], heads_kv=case["heads_kv"],
                         head_dim=case["head_dim"], dtype=case["dtype"],
                         head_dim_v=case.get("head_dim_v"))
    rng = np.random.default_rng(case["seed"])
    seqlens = np.asarray(case["cache_seqlens"], dtype=np.int32)
    args = {"k_cache": x["k"], "v_cache": x["v"], "cache_seqlens": seqlens,
            "causal": case["causal"], "softcap": case["softcap"],
            "num_splits": case["num_splits"], "return_softmax_lse": True}
    if lens_q:
        args["q"] = np.ascontiguousarray(x["q"][0, :total_q])
        args["cu_seqlens_q"] = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
        args["max_seqlen_q"] = sq
    else:
        args["q"] = np.ascontiguousarray(x["q"][:b, :sq])
    hkv = case["heads_kv"]
    if lens_new:
        total = sum(lens_new)
        args["k"] = np.ascontiguousarray(x["q"][1 % rows, :total, :hkv])
        args["v"] = np.ascontiguousarray(x["q"][1 % rows, :total, :hkv][..., ::-1])
        args["cu_seqlens_k_new"] = np.concatenate([[0], np.cumsum(lens_new)]).astype(np.int32)
    elif case["seqlen_new"]:
        s_new = case["seqlen_new"]
        args["k"] = np.ascontiguousarray(x["q"][:b, :s_new, :hkv])
        args["v"] = np.ascontiguousarray(x["q"][:b, :s_new, :hkv][..., ::-1])
    if case["cache_batch_idx"]:
        args["cache_batch_idx"] = rng.permutation(rows)[:b].astype(np.int32)
    if case["cache_leftpad"]:
        args["cache_leftpad"] = np.array([rng.integers(0, s + 1) for s in seqlens], dtype=np.int32)
    if case.get("rotary") and "k" in args:
        rd = case["rotary"]
        pos = np.arange(s_cache + sq)[:, None] / (10000.0 ** (np.arange(rd // 2) / (rd // 2)))
        args["rotary_cos"] = np.cos(pos).astype(args["q"].dtype)
        args["rotary_sin"] = np.sin(pos).astype(args["q"].dtype)
        args["rotary_interleaved"] = bool(case.get("interleaved", True))
    return args


def metadata_args(name: str, args: dict) -> dict:
    """``get_scheduler_metadata``'s keyword arguments for a KV-cache call's arguments
    (hopper/flash_attn_interface.py: the same batch, lengths, heads, dims, dtype, masks and
    split options as the call)."""
    q, kc, vc = args["q"], args["k_cache"], args["v_cache"]
    varlen_q = "cu_seqlens_q" in args
    batch = args["cu_seqlens_q"].shape[0] - 1 if varlen_q else q.shape[0]
    k_new = args.get("k")
    if k_new is None:
        s_new = 0
    elif "cu_seqlens_k_new" in args:
        s_new = int(np.diff(args["cu_seqlens_k_new"]).max(initial=0))
    else:
        s_new = k_new.shape[1]
    return {"batch_size": batch, "max_seqlen_q": args["max_seqlen_q"] if varlen_q else q.shape[1],
            "max_seqlen_k": kc.shape[1], "num_heads_q": q.shape[-2], "num_heads_kv": kc.shape[2],
            "headdim": q.shape[-1], "cache_seqlens": args["cache_seqlens"],
            "qkv_dtype": q.dtype, "headdim_v": vc.shape[-1],
            "cu_seqlens_q": args.get("cu_seqlens_q"), "cu_seqlens_k_new": args.get("cu_seqlens_k_new"),
            "cache_leftpad": args.get("cache_leftpad"), "max_seqlen_k_new": s_new,
            "causal": args["causal"], "has_softcap": args["softcap"] > 0,
            "num_splits": args["num_splits"]}


def drawn_calls():
    """A hypothesis strategy of cases in :func:`matrix`'s format with small shapes (caches up
    to 1,024 keys, batch up to 4): qv calls of the three entry points, KV-cache calls with
    varlen queries / new keys / rotary, and calls with ``scheduler_metadata``. Needs
    hypothesis (the ``test`` extra)."""
    from hypothesis import strategies as st  # noqa: PLC0415 - optional dependency

    @st.composite
    def call(draw):
        rng = random.Random(draw(st.integers(0, 2**31 - 1)))
        seed = draw(st.integers(0, 2**31 - 1))
        kind = draw(st.sampled_from(("qv_kvcache", "qv_func", "qv_varlen", "varlen_cache",
                                     "varlen_cache", "metadata")))
        if kind == "qv_func":
            return _qv(rng, _func(rng, seed))
        if kind == "qv_varlen":
            return _qv(rng, _varlen(rng, seed))
        c = _kvcache(rng, seed, draw(st.integers(1, 7)), qv=kind == "qv_kvcache")
        c["seqlen_cache"] = draw(st.sampled_from((64, 130, 257, 512, 1024)))
        c["batch"] = min(c["batch"], 4)
        c["seqlen_new"] = min(c["seqlen_new"], c["seqlen_cache"] - 1)
        c["cache_seqlens"] = [rng.randint(0, c["seqlen_cache"] - c["seqlen_new"])
                              for _ in range(c["batch"])]
        if kind == "qv_kvcache":
            return _qv(rng, c)
        if kind == "varlen_cache" or draw(st.booleans()):
            c = _varlen_cache(rng, c, draw(st.integers(0, 2)))
        if kind == "metadata":
            c["metadata"] = True
        return c

    return call()
