"""The FA3 Python-API calls on which the real library is recorded (frozen, like fa3_cases).

Each case is a JSON-able dict naming the function (``func``: ``flash_attn_func``, ``varlen``:
``flash_attn_varlen_func``, ``kvcache``: ``flash_attn_with_kvcache``) and its arguments; the
arrays come from :func:`simulator.flash.inputs.attention_inputs` with the case's seed.
:func:`call_args` rebuilds the call; the same dict of NumPy arguments goes to
``simulator.fa3`` and, converted to CUDA tensors, to the library. Covered: varlen batches
(causal or not, softcap, GQA, seqused_q / seqused_k, empty sequences), KV-cache decode and
chunked prefill (batch 1-64, caches up to 16k, GQA ratios 1-16, ``num_splits`` 0 = FA3's
heuristic and 1-16, appended k / v, ``cache_batch_idx``, ``cache_leftpad``) and
``flash_attn_func`` with explicit and heuristic splits; bf16 and e4m3 (with descales).
"""

from __future__ import annotations

import json
import random

import numpy as np

from ..flash.inputs import attention_inputs

MATRIX_SEED = 20261202
#: the second block's seed: V head dims different from Q/K's, 32k caches, direct combine calls
MATRIX_SEED_2 = 20261203
_DIMS = {"bf16": (64, 80, 128, 256), "e4m3": (64, 128, 256)}
#: (head_dim, head_dim_v) pairs FA3 compiles a kernel for (hopper/flash_api.cpp,
#: run_mha_fwd_constexpr); (64, 128) and (48, 96) run the 64 / 256 kernel while the host
#: heuristics assume a 64 / 128 tile
_DV_PAIRS = {"bf16": ((192, 128), (160, 128), (176, 112), (64, 256), (64, 128), (48, 96),
                      (64, 512), (64, 32)),
             "e4m3": ((192, 128), (144, 112))}


def matrix() -> list[dict]:
    """All API cases, in a fixed order: the first block (200 calls, head_dim_v = head_dim,
    caches up to 16k), then the second (:func:`_second_block`)."""
    rng = random.Random(MATRIX_SEED)
    cases = []
    for i in range(90):
        cases.append(_kvcache(rng, MATRIX_SEED + len(cases), i))
    for i in range(70):
        cases.append(_varlen(rng, MATRIX_SEED + len(cases), i))
    for i in range(40):
        cases.append(_func(rng, MATRIX_SEED + len(cases), i))
    return cases + _second_block()


def _second_block() -> list[dict]:
    """70 KV-cache calls (eight with one long cache: 32,768 keys in four, 16,384 in four),
    40 varlen and 15
    flash_attn_func calls, a third of them (all of the func ones) with a V head dim different
    from Q/K's, and 25 direct ``flash_attn_combine`` calls."""
    rng = random.Random(MATRIX_SEED_2)
    seed = MATRIX_SEED_2 * 1000
    cases = []
    for i in range(70):
        c = _kvcache(rng, seed + len(cases), i, long_keys=32768 if i % 18 == 0 else 16384)
        cases.append(_with_dv(rng, c, i % 3 == 1))
    for i in range(40):
        cases.append(_with_dv(rng, _varlen(rng, seed + len(cases), i), i % 3 == 1))
    for i in range(15):
        cases.append(_with_dv(rng, _func(rng, seed + len(cases), i), True))
    for _ in range(25):
        cases.append(_combine_case(rng, seed + len(cases)))
    return cases


def _with_dv(rng: random.Random, c: dict, on: bool) -> dict:
    """Give a case a V head dim different from Q/K's (one of FA3's pairs for its dtype)."""
    if not on:
        return c
    d, dv = rng.choice(_DV_PAIRS[c["dtype"]])
    c["head_dim"], c["head_dim_v"] = d, dv
    if dv < d and c["api"] == "kvcache":
        c["seqlen_new"] = 0  # FA3's append spills past such V rows (not emulated)
    return c


def _combine_case(rng: random.Random, seed: int) -> dict:
    """A direct ``flash_attn_combine`` call: random float32 partials, some splits empty
    (LSE -inf), some rows with no split at all."""
    return {"seed": seed, "api": "combine", "dtype": "f32",
            "num_splits": rng.choice((2, 3, 5, 8, 16, 33, 100)),
            "batch": rng.choice((1, 2, 3)), "seqlen_q": rng.choice((1, 4, 17, 64)),
            "heads": rng.choice((1, 2, 6)), "head_dim_v": rng.choice((8, 30, 64, 96, 128, 200, 256)),
            "out_dtype": rng.choice(("float32", "float32", "bfloat16", "float16")),
            "empty": rng.choice((0.0, 0.2, 0.6)), "lse_std": rng.choice((1.0, 10.0, 60.0))}


def _common(rng: random.Random, seed: int) -> dict:
    fmt = rng.choice(("bf16", "bf16", "e4m3"))
    ratio = rng.choice((1, 2, 4, 8, 16))
    hkv = rng.choice((1, 1, 2, 4)) if ratio < 16 else 1
    return {"seed": seed, "dtype": fmt, "head_dim": rng.choice(_DIMS[fmt]), "heads": hkv * ratio,
            "heads_kv": hkv, "causal": rng.random() < 0.5,
            "softcap": rng.choice((0.0, 0.0, 0.0, 30.0)),
            "descales": fmt == "e4m3" and rng.random() < 0.6}


def _kvcache(rng: random.Random, seed: int, i: int, long_keys: int = 16384) -> dict:
    c = _common(rng, seed)
    batch = rng.choice((1, 1, 2, 3, 4, 8, 16, 32, 64))
    long = i % 9 == 0
    if long:  # one long cache: a single kv head, head dim 64, few query heads
        batch, c["heads_kv"], c["head_dim"] = 1, 1, 64
        c["heads"] = rng.choice((1, 2))
        c["dtype"], c["descales"] = "bf16", False
    s_cache = long_keys if long else rng.choice((257, 512, 1000, 1536, 2048, 3000, 4096))
    # keep the CPU replay small: query heads x keys x head dim over the batch
    while not long and batch * c["heads"] * s_cache * c["head_dim"] > 2_000_000:
        if s_cache > 257:
            s_cache = max(257, s_cache // 2)
        elif c["heads"] > c["heads_kv"]:
            c["heads"] //= 2
        else:
            batch = max(1, batch // 2)
    sq = rng.choice((1, 1, 1, 1, 2, 4, 16, 64))
    s_new = rng.choice((0, 0, 1, sq)) if sq <= 64 else 0
    c.update(api="kvcache", batch=batch, seqlen_q=sq, seqlen_cache=s_cache, seqlen_new=s_new,
             num_splits=rng.choice((0, 0, 0, 1, 2, 3, 4, 8, 16)),
             cache_seqlens=[rng.randint(0, s_cache - s_new) for _ in range(batch)],
             cache_batch_idx=rng.random() < 0.3, cache_leftpad=rng.random() < 0.25)
    return c


def _varlen(rng: random.Random, seed: int, i: int) -> dict:
    c = _common(rng, seed)
    while c["heads"] * c["head_dim"] > 512 and c["heads"] > c["heads_kv"]:
        c["heads"] //= 2
    batch = rng.choice((1, 2, 3, 5, 8))
    lq = [rng.choice((0, 1, 7, 64, 130, 200, 300)) for _ in range(batch)]
    lk = [rng.choice((0, 1, 50, 128, 200, 333, 500)) for _ in range(batch)]
    c.update(api="varlen", batch=batch, seqlens_q=lq, seqlens_k=lk,
             seqused_q=rng.random() < 0.2, seqused_k=rng.random() < 0.3,
             extra_max=rng.choice((0, 0, 5)), num_splits=rng.choice((1, 1, 1, 2, 0)))
    return c


def _func(rng: random.Random, seed: int, i: int) -> dict:
    c = _common(rng, seed)
    while c["heads"] * c["head_dim"] > 512 and c["heads"] > c["heads_kv"]:
        c["heads"] //= 2
    c.update(api="func", batch=rng.choice((1, 2, 4)), seqlen_q=rng.choice((1, 1, 16, 128, 200)),
             seqlen_k=rng.choice((300, 1000, 2048, 4000)), num_splits=rng.choice((0, 2, 3, 5, 8)))
    while c["batch"] * c["heads"] * c["seqlen_k"] * c["head_dim"] > 2_000_000 and c["seqlen_k"] > 300:
        c["seqlen_k"] //= 2
    return c


def call_args(case: dict) -> tuple[str, dict]:
    """(function name, keyword arguments as NumPy arrays) of one case."""
    api = case["api"]
    if api == "combine":
        return "flash_attn_combine", _combine_args(case)
    if api == "kvcache":
        return "flash_attn_with_kvcache", _kvcache_args(case)
    if api == "varlen":
        return "flash_attn_varlen_func", _varlen_args(case)
    x = attention_inputs(case["seed"], batch=case["batch"], seqlen_q=case["seqlen_q"],
                         seqlen_k=case["seqlen_k"], heads=case["heads"], heads_kv=case["heads_kv"],
                         head_dim=case["head_dim"], dtype=case["dtype"], descales=case["descales"],
                         head_dim_v=case.get("head_dim_v"))
    return "flash_attn_func", {**_base(case, x), "num_splits": case["num_splits"],
                               "return_attn_probs": True}


def _base(case: dict, x: dict) -> dict:
    return {"q": x["q"], "k": x["k"], "v": x["v"], "causal": case["causal"],
            "softcap": case["softcap"], "q_descale": x["q_descale"], "k_descale": x["k_descale"],
            "v_descale": x["v_descale"]}


def _kvcache_args(case: dict) -> dict:
    b, s_cache, s_new = case["batch"], case["seqlen_cache"], case["seqlen_new"]
    rows = b + 2 if case["cache_batch_idx"] else b
    x = attention_inputs(case["seed"], batch=rows, seqlen_q=max(case["seqlen_q"], s_new),
                         seqlen_k=s_cache, heads=case["heads"], heads_kv=case["heads_kv"],
                         head_dim=case["head_dim"], dtype=case["dtype"], descales=case["descales"],
                         head_dim_v=case.get("head_dim_v"))
    rng = np.random.default_rng(case["seed"])
    seqlens = np.asarray(case["cache_seqlens"], dtype=np.int32)
    args = {"q": np.ascontiguousarray(x["q"][:b, : case["seqlen_q"]]), "k_cache": x["k"],
            "v_cache": x["v"], "cache_seqlens": seqlens, "causal": case["causal"],
            "softcap": case["softcap"], "num_splits": case["num_splits"],
            "return_softmax_lse": True}
    for n in ("q_descale", "k_descale", "v_descale"):
        args[n] = None if x[n] is None else np.ascontiguousarray(x[n][:b])
    if s_new:
        # new keys: the q rows' positions of the same stream, scaled like keys
        args["k"] = np.ascontiguousarray(x["q"][:b, :s_new, : case["heads_kv"]])
        if case.get("head_dim_v", case["head_dim"]) == case["head_dim"]:
            args["v"] = np.ascontiguousarray(x["q"][:b, :s_new, : case["heads_kv"]][..., ::-1])
        else:  # V's own head dim: the last cache positions' values, reversed
            args["v"] = np.ascontiguousarray(x["v"][:b, s_cache - s_new:][..., ::-1])
    if case["cache_batch_idx"]:
        args["cache_batch_idx"] = rng.permutation(rows)[:b].astype(np.int32)
    if case["cache_leftpad"]:
        args["cache_leftpad"] = np.array([rng.integers(0, s + 1) for s in seqlens], dtype=np.int32)
    return args


def _varlen_args(case: dict) -> dict:
    lq, lk = case["seqlens_q"], case["seqlens_k"]
    x = attention_inputs(case["seed"], batch=1, seqlen_q=max(1, sum(lq)), seqlen_k=max(1, sum(lk)),
                         heads=case["heads"], heads_kv=case["heads_kv"], head_dim=case["head_dim"],
                         dtype=case["dtype"], descales=False, head_dim_v=case.get("head_dim_v"))
    rng = np.random.default_rng(case["seed"])
    args = {"q": x["q"][0], "k": x["k"][0], "v": x["v"][0],
            "cu_seqlens_q": np.concatenate([[0], np.cumsum(lq)]).astype(np.int32),
            "cu_seqlens_k": np.concatenate([[0], np.cumsum(lk)]).astype(np.int32),
            "max_seqlen_q": max(1, max(lq)) + case["extra_max"],
            "max_seqlen_k": max(1, max(lk)) + case["extra_max"],
            "causal": case["causal"], "softcap": case["softcap"],
            "num_splits": case["num_splits"], "return_attn_probs": True}
    if case["seqused_q"]:
        args["seqused_q"] = np.array([rng.integers(0, n + 1) for n in lq], dtype=np.int32)
    if case["seqused_k"]:
        args["seqused_k"] = np.array([rng.integers(0, n + 1) for n in lk], dtype=np.int32)
    if case["descales"]:
        args.update({n: (0.5 + rng.random((case["batch"], case["heads_kv"]))).astype(np.float32)
                     for n in ("q_descale", "k_descale", "v_descale")})
    return args


def _combine_args(case: dict) -> dict:
    """out_partial [splits, batch, seqlen, heads, dv] and lse_partial [splits, batch, seqlen,
    heads] (``mha_combine``'s layouts), float32; ``out_dtype`` a NumPy dtype."""
    import ml_dtypes  # noqa: PLC0415

    rng = np.random.default_rng(case["seed"])
    s, b, sq, h, dv = (case[n] for n in ("num_splits", "batch", "seqlen_q", "heads", "head_dim_v"))
    out = rng.standard_normal((s, b, sq, h, dv)).astype(np.float32)
    lse = (case["lse_std"] * rng.standard_normal((s, b, sq, h))).astype(np.float32)
    lse[rng.random((s, b, sq, h)) < case["empty"]] = -np.inf
    if case["empty"] and sq > 1:
        lse[:, :, 0] = -np.inf  # a row no split saw
    dt = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
    return {"out_partial": out, "lse_partial": lse, "out_dtype": np.dtype(dt[case["out_dtype"]])}


def args_digest(args: dict) -> str:
    """BLAKE2b-128 of a call's array bits and scalar arguments (detects a changed generator)."""
    import hashlib  # noqa: PLC0415

    h = hashlib.blake2b(digest_size=16)
    for name in sorted(args):
        val = args[name]
        h.update(name.encode())
        if isinstance(val, np.ndarray):
            h.update(str(val.dtype).encode() + np.ascontiguousarray(val).view(np.uint8).tobytes())
        elif isinstance(val, np.dtype):
            h.update(str(val).encode())
        else:
            h.update(json.dumps(val).encode())
    return h.hexdigest()


def unwritten_rows(name: str, args: dict) -> np.ndarray | None:
    """Bool [total_q]: packed query rows FA3 leaves unwritten in a varlen call (its output is
    ``torch.empty``): rows beyond ``seqused_q`` of a sequence, and rows after the last
    sequence (``cu_seqlens_q[-1]`` below the packed length). None for other calls."""
    if name != "flash_attn_varlen_func":
        return None
    cq = args["cu_seqlens_q"]
    used = args.get("seqused_q")
    used = np.diff(cq) if used is None else used
    mask = np.ones(args["q"].shape[0], dtype=bool)
    for b, u in enumerate(used):
        mask[cq[b]: cq[b] + u] = False
    return mask if mask.any() else None


def canonical(name: str, args: dict, out: np.ndarray, lse: np.ndarray):
    """(out, lse) with the rows FA3 leaves unwritten set to 0 and -inf, so that recordings and
    the emulator compare on what FA3 defines (out [total_q, heads, d], lse [heads, total_q])."""
    mask = unwritten_rows(name, args)
    if mask is None:
        return out, lse
    out, lse = out.copy(), lse.copy()
    out[mask] = 0
    lse[:, mask] = -np.inf
    return out, lse


def canonical_partials(out_accum: np.ndarray, lse_accum: np.ndarray, heads_second: bool = True):
    """The Split kernel's partials with O set to 0 where the split's LSE is -inf: FA3 leaves
    the partial O of a split without K/V blocks unwritten (``torch.empty`` memory) and the
    combine kernel never reads it. ``out_accum`` [splits, batch, heads, seqlen, d] as FA3 lays
    it out (``heads_second``), or [splits, batch, seqlen, heads, d]; ``lse_accum``
    [splits, batch, heads, seqlen]."""
    empty = lse_accum == -np.inf
    if not heads_second:
        empty = np.swapaxes(empty, 2, 3)
    out = out_accum.copy()
    out[empty] = 0
    return out, lse_accum


def drawn_calls():
    """A hypothesis strategy of API-call cases in :func:`matrix`'s format (smaller shapes, so
    that thousands replay in minutes: caches up to 1,024 keys, batch up to 4, head dims 64, 80,
    128; a quarter with one of FA3's V head dims different from Q/K's): KV cache (splits
    0-16, append, cache_batch_idx, cache_leftpad, GQA 1-16), varlen (empty sequences,
    seqused), flash_attn_func with splits, and direct flash_attn_combine calls.
    Needs hypothesis (the ``test`` extra)."""
    from hypothesis import strategies as st  # noqa: PLC0415 - optional dependency

    @st.composite
    def common(draw, seed):
        fmt = draw(st.sampled_from(("bf16", "e4m3")))
        ratio = draw(st.sampled_from((1, 2, 4, 8, 16)))
        hkv = draw(st.sampled_from((1, 2))) if ratio <= 4 else 1
        dims = (64, 80, 128) if fmt == "bf16" else (64, 128)
        c = {"seed": seed, "dtype": fmt, "head_dim": draw(st.sampled_from(dims)),
             "heads": hkv * ratio, "heads_kv": hkv, "causal": draw(st.booleans()),
             "softcap": draw(st.sampled_from((0.0, 0.0, 30.0))),
             "descales": fmt == "e4m3" and draw(st.booleans())}
        if draw(st.sampled_from((False, False, False, True))):  # V head dim unlike Q/K's
            c["head_dim"], c["head_dim_v"] = draw(st.sampled_from(_DV_PAIRS[fmt]))
        return c

    def no_spill(c):  # FA3's append spills past V rows narrower than Q/K's (not emulated)
        if c.get("head_dim_v", c["head_dim"]) < c["head_dim"]:
            c["seqlen_new"] = 0
        return c

    @st.composite
    def call(draw):
        c = draw(common(draw(st.integers(0, 2**31 - 1))))
        api = draw(st.sampled_from(("kvcache", "kvcache", "kvcache", "varlen", "varlen", "func",
                                    "combine")))
        if api == "combine":
            return {"seed": c["seed"], "api": api, "dtype": "f32",
                    "num_splits": draw(st.sampled_from((2, 3, 4, 7, 16, 64))),
                    "batch": draw(st.integers(1, 3)), "seqlen_q": draw(st.sampled_from((1, 3, 16))),
                    "heads": draw(st.integers(1, 4)),
                    "head_dim_v": draw(st.sampled_from((8, 36, 64, 68, 128, 256))),
                    "out_dtype": draw(st.sampled_from(("float32", "bfloat16", "float16"))),
                    "empty": draw(st.sampled_from((0.0, 0.3, 0.9))),
                    "lse_std": draw(st.sampled_from((1.0, 30.0, 200.0)))}
        if api == "kvcache":
            batch = draw(st.sampled_from((1, 2, 3, 4)))
            s_cache = draw(st.sampled_from((64, 130, 257, 512, 1024)))
            sq = draw(st.sampled_from((1, 1, 2, 4, 16)))
            s_new = draw(st.sampled_from((0, 0, 1, sq)))
            s_new = min(s_new, s_cache - 1)
            c.update(api=api, batch=batch, seqlen_q=sq, seqlen_cache=s_cache, seqlen_new=s_new,
                     num_splits=draw(st.sampled_from((0, 0, 1, 2, 3, 4, 8, 16))),
                     cache_seqlens=[draw(st.integers(0, s_cache - s_new)) for _ in range(batch)],
                     cache_batch_idx=draw(st.booleans()), cache_leftpad=draw(st.booleans()))
            c = no_spill(c)
        elif api == "varlen":
            batch = draw(st.integers(1, 3))
            c.update(api=api, batch=batch,
                     seqlens_q=[draw(st.sampled_from((0, 1, 5, 64, 130))) for _ in range(batch)],
                     seqlens_k=[draw(st.sampled_from((0, 1, 40, 128, 300))) for _ in range(batch)],
                     seqused_q=draw(st.booleans()), seqused_k=draw(st.booleans()),
                     extra_max=draw(st.sampled_from((0, 3))),
                     num_splits=draw(st.sampled_from((1, 1, 2, 0))))
        else:
            c.update(api=api, batch=draw(st.integers(1, 2)), seqlen_q=draw(st.sampled_from((1, 7, 64))),
                     seqlen_k=draw(st.sampled_from((200, 450, 700))),
                     num_splits=draw(st.sampled_from((0, 2, 3, 5, 8))))
        return c

    return call()


def result_bits(name: str, args: dict, out: np.ndarray, lse: np.ndarray,
                caches: dict | None = None) -> dict[str, np.ndarray]:
    """The bits a recorded call is compared on: canonical out (uint16) and lse (uint32), and for
    a KV-cache call the caches after it (from ``caches`` when given, else ``args``: the
    emulator updates the arguments in place, the library returns its copies)."""
    out, lse = canonical(name, args, out, lse)
    out = np.ascontiguousarray(out)
    bits = {"out": out.view({2: np.uint16, 4: np.uint32}[out.itemsize]),
            "lse": np.ascontiguousarray(lse).view(np.uint32)}
    for key in ("k_cache", "v_cache"):
        src = args if caches is None else caches
        if key in src:
            arr = np.ascontiguousarray(src[key])
            bits[key] = arr.view(np.uint16 if arr.itemsize == 2 else np.uint8)
    return bits
