"""The frozen cases on which flash-attn 2.x's kernels as PyPI ``flash-attn-jax`` 0.6.2 builds
them (sm_80 PTX, JIT-compiled by the driver for sm_90) are recorded, and their inputs.

FROZEN: recordings under ``simulator/data/device/fa2_jax/`` store, per case, a digest of the
inputs made here. Add new cases at the END of a list (a case's index is its name in the
recordings) and never change an existing one.

A case is :func:`simulator.replay.sdpa_cases` 's dict (``batch``, ``heads``, ``heads_kv``,
``seqlen_q``, ``seqlen_k``, ``head_dim``, ``dtype``, ``causal``, ``scale``, ``seed``, ``kind``,
``factor``) plus ``window``: ``[left, right]`` (-1: unbounded), and for a varlen case
``seqlens_q`` / ``seqlens_k`` (each sequence's length; ``batch`` is their count, ``seqlen_q`` /
``seqlen_k`` their totals). Inputs are :func:`simulator.replay.sdpa_cases.make_input_bits`'s
(SDPA's ``[batch, heads, seqlen, head_dim]``), moved to flash-attn's ``[batch, seqlen, heads,
head_dim]`` (:func:`make_input_bits`); a varlen case draws one batch-1 tensor of the total
length and packs it ``[total, heads, head_dim]``. dout (backward) is
:func:`simulator.replay.sdpa_cases.grad_bits`'s, moved the same way.

NumPy only.
"""

from __future__ import annotations

import numpy as np

from . import sdpa_cases as sc

DTYPES = sc.DTYPES
#: FA2's head-dim classes and two between them (the kernel pads 40 to 64, 72 to 96)
HEAD_DIMS = (32, 40, 64, 72, 96, 128, 160, 192, 224, 256)


def _case(seed: int, *, window=(-1, -1), **kw) -> dict:
    case = sc._case(seed, **kw)
    case["window"] = [int(window[0]), int(window[1])]
    return case


def forward_cases() -> list[dict]:
    """Forward cases (``flash_mha_fwd``): head dims x format x causal; tile edges; causal with
    seqlen_q != seqlen_k; local windows; GQA / MQA; scales; large / tiny / equal-key inputs;
    decode-like shapes where the split-KV heuristic (132 SMs) splits, at head dims 64, 128 and
    256 only (each split kernel module is JIT-compiled from tens of MB of PTX)."""
    cases: list[dict] = []
    seed = iter(range(20000, 100000))

    def add(**kw):
        cases.append(_case(next(seed), **kw))

    for d in HEAD_DIMS:
        for dtype in DTYPES:
            add(sq=65, sk=129, d=d, dtype=dtype)
            add(sq=65, sk=65, d=d, dtype=dtype, causal=True)
    for s in (1, 7, 63, 64, 65, 127, 128, 129, 255, 256, 300):
        for causal in (False, True):
            add(sq=s, sk=s, d=64, causal=causal, dtype="bf16" if s % 2 else "f16")
    for s in (1, 63, 129, 300, 1000):
        add(sq=33, sk=s, d=128, dtype="bf16" if s % 2 else "f16")
        add(sq=s, sk=129, d=96)
    for sq, sk in ((129, 64), (256, 65), (65, 1), (7, 1), (1, 129), (64, 300), (65, 1000),
                   (127, 128)):
        add(sq=sq, sk=sk, d=64 if sq % 2 else 128, causal=True)
    for wl, wr, causal in ((16, 0, False), (0, 0, False), (32, 32, False), (63, 5, False),
                           (100, -1, False), (-1, 20, False), (40, 0, True), (200, 17, False)):
        for d, dtype in ((64, "bf16"), (128, "f16"), (256, "bf16")):
            add(sq=129, sk=300, d=d, dtype=dtype, causal=causal, window=(wl, wr))
    for h, hkv, d in ((8, 2, 64), (8, 1, 128), (6, 3, 96), (4, 2, 256)):
        for causal in (False, True):
            add(b=2, h=h, hkv=hkv, sq=17, sk=200, d=d, causal=causal,
                dtype="f16" if causal else "bf16")
    for b, h in ((2, 3), (3, 5), (4, 1)):
        add(b=b, h=h, sq=33, sk=129, d=64)
    for scale in (0.5, 1.0, 0.0625, 1e-3, 1.0 / 3.0, 10.0):
        add(sq=65, sk=200, d=128, scale=scale, dtype="f16" if scale > 0.9 else "bf16")
    for factor in (8.0, 30.0):
        for dtype in DTYPES:
            add(sq=65, sk=129, d=64, dtype=dtype, kind="large", factor=factor)
            add(sq=65, sk=65, d=128, dtype=dtype, kind="large", factor=factor, causal=True)
    for dtype in DTYPES:
        add(h=2, sq=65, sk=129, d=64, dtype=dtype, kind="tiny")
        add(sq=65, sk=300, d=64, dtype=dtype, kind="equal_keys")
        add(sq=64, sk=64, d=128, dtype=dtype, kind="equal_keys", causal=True)
    # decode-like: b * h * ceil(sq / 64) well under 0.8 * 264, several key blocks
    for sq, sk, d, b, h in ((1, 512, 64, 1, 2), (1, 1024, 128, 1, 4), (4, 777, 64, 2, 1),
                            (1, 2048, 128, 1, 1), (16, 1024, 256, 1, 2), (1, 513, 128, 2, 2),
                            (8, 2048, 64, 1, 8), (1, 4096, 128, 1, 2), (2, 1500, 256, 1, 1),
                            (1, 300, 64, 1, 1)):
        add(b=b, h=h, sq=sq, sk=sk, d=d, dtype="bf16" if sk % 2 == 0 else "f16")
    for sq, sk, d in ((1, 1024, 128), (16, 2048, 64), (4, 1000, 128)):
        add(b=1, h=2, sq=sq, sk=sk, d=d, causal=True)
    for h, hkv, sk in ((8, 1, 2048), (8, 2, 1024)):
        add(b=1, h=h, hkv=hkv, sq=1, sk=sk, d=128)
    add(b=1, h=2, sq=1, sk=1024, d=128, window=(256, 0))
    add(b=1, h=2, sq=1, sk=1024, d=64, kind="large", factor=8.0)
    # drawn: shapes, flags and windows from a seeded generator
    rng = np.random.default_rng(2026)
    for _ in range(160):
        d = int(rng.choice((32, 64, 96, 128, 192, 256)))
        sq, sk = int(rng.integers(1, 200)), int(rng.integers(1, 300))
        causal = bool(rng.integers(0, 2))
        h = int(rng.choice((1, 2)))
        hkv = h if rng.integers(0, 3) else 1
        b = int(rng.integers(1, 3))
        window = (-1, -1)
        if not causal and rng.integers(0, 4) == 0:
            window = (int(rng.integers(0, 128)), int(rng.integers(-1, 64)))
        kind = str(rng.choice(("normal", "normal", "normal", "large")))
        add(b=b, h=h, hkv=hkv, sq=sq, sk=sk, d=d, dtype=DTYPES[int(rng.integers(0, 2))],
            causal=causal, window=window, kind=kind)
    return cases


def varlen_cases() -> list[dict]:
    """Varlen cases (``flash_mha_varlen_fwd``): sequences packed along one axis, empty ones
    included, causal / local, GQA."""
    cases: list[dict] = []
    seed = 30000
    plans = (((17, 64, 1), (17, 64, 1)), ((100, 7, 65), None), ((1, 129, 30, 0, 64), None),
             ((200, 3), (50, 300)), ((65, 65, 65), None), ((33, 1), (1, 33)),
             ((128, 256), None), ((5, 0, 9), (9, 4, 5)))
    for i, (sq, sk) in enumerate(plans):
        sk = sq if sk is None else sk
        for j, (d, causal, window) in enumerate(((64, False, (-1, -1)), (128, True, (-1, -1)),
                                                 (96, False, (32, 8)))):
            h, hkv = ((4, 2) if j == 1 else (2, 2))
            case = _case(seed, b=len(sq), h=h, hkv=hkv, sq=sum(sq), sk=sum(sk), d=d,
                         dtype=DTYPES[(i + j) % 2], causal=causal, window=window)
            case["seqlens_q"], case["seqlens_k"] = list(sq), list(sk)
            cases.append(case)
            seed += 1
    return cases


def backward_cases() -> list[dict]:
    """Backward cases (``flash_mha_bwd``, run default and deterministic): head dims 32-256,
    bf16 / fp16, causal, local, several key blocks per dQ row, GQA (the per-query-head dK / dV
    summed by the glue), large inputs."""
    cases: list[dict] = []
    seed = 40000

    def add(**kw):
        nonlocal seed
        cases.append(_case(seed, **kw))
        seed += 1

    for i, d in enumerate((32, 64, 96, 128, 192, 256)):
        for j, (sq, sk) in enumerate(((65, 129), (33, 300))):
            add(sq=sq, sk=sk, d=d, dtype=DTYPES[(i + j) % 2])
        add(sq=64, sk=64, d=d, dtype=DTYPES[i % 2], causal=True)
        add(sq=129, sk=65, d=d, dtype=DTYPES[(i + 1) % 2], causal=True)
    for d in (40, 72, 160):
        add(sq=33, sk=65, d=d)
    for sq, sk in ((1, 129), (129, 1), (7, 63), (200, 77), (128, 128), (16, 512)):
        for causal in (False, True):
            add(sq=sq, sk=sk, d=64, causal=causal, dtype="f16" if causal else "bf16")
    for wl, wr in ((16, 0), (32, 32), (0, 0), (-1, 20)):
        add(sq=129, sk=200, d=64, window=(wl, wr))
        add(sq=65, sk=129, d=128, window=(wl, wr), dtype="f16")
    for h, hkv, d, causal in ((4, 2, 64, False), (4, 1, 64, True), (6, 3, 128, False)):
        add(h=h, hkv=hkv, sq=33, sk=100, d=d, causal=causal)
    add(b=2, h=3, sq=33, sk=65, d=64)
    add(sq=65, sk=129, d=64, kind="large", factor=8.0)
    add(sq=64, sk=64, d=128, scale=0.5, causal=True, dtype="f16")
    return cases


def _to_fa(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3))


def make_input_bits(case: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q, k, v) uint16 bits in flash-attn's layout: ``[batch, seqlen, heads(_kv), head_dim]``,
    or ``[total, heads(_kv), head_dim]`` for a varlen case (module docstring)."""
    if "seqlens_q" in case:
        flat = dict(case, batch=1)
        return tuple(_to_fa(x)[0] for x in sc.make_input_bits(flat))
    return tuple(_to_fa(x) for x in sc.make_input_bits(case))


def grad_bits(case: dict) -> np.ndarray:
    """dout's uint16 bits, ``[batch, seqlen_q, heads, head_dim]``."""
    return _to_fa(sc.grad_bits(case))


def cu_seqlens(lengths) -> np.ndarray:
    """int32 ``[n + 1]`` cumulative offsets of the sequence lengths."""
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def case_digest(case: dict, backward: bool = False) -> str:
    """BLAKE2b-128 of the case and its inputs' bits (and dout for a backward case)."""
    arrays = make_input_bits(case)
    return sc.input_digest(case, *arrays, *((grad_bits(case),) if backward else ()))


def _draw(rng, backward: bool) -> dict:
    """One drawn call's parameters (see :func:`drawn_cases`)."""
    d = int(rng.choice((32, 40, 64, 72, 96, 128, 192, 256) if not backward
                       else (32, 64, 96, 128, 192, 256)))
    h = int(rng.choice((1, 2, 4)))
    hkv = h if rng.integers(0, 3) else int(rng.choice([x for x in (1, 2) if h % x == 0]))
    top = 160 if backward else 300
    sq, sk = int(rng.integers(1, top)), int(rng.integers(1, top))
    causal = bool(rng.integers(0, 2))
    window = (-1, -1)
    if not causal and rng.integers(0, 4) == 0:
        window = (int(rng.integers(-1, 160)), int(rng.integers(-1, 96)))
    scale = None if rng.integers(0, 4) else float(rng.choice((0.05, 0.125, 0.5, 1.0)))
    kind = str(rng.choice(("normal",) * 5 + ("large", "tiny", "equal_keys")))
    return {"b": int(rng.integers(1, 3)), "h": h, "hkv": hkv, "sq": sq, "sk": sk, "d": d,
            "dtype": DTYPES[int(rng.integers(0, 2))], "causal": causal, "window": window,
            "scale": scale, "kind": kind}


def drawn_cases(n: int, *, backward: bool = False, seed: int = 2028) -> list[dict]:
    """``n`` calls drawn from a seeded generator (``numpy.random.default_rng(seed)``; the
    backward's from ``seed + 1``): head dims 32-256 (40 and 72 padded by the kernel), 1-4
    heads with GQA / MQA, seqlens 1-299 (backward 1-159), causal, one- and two-sided windows,
    custom scales, large / tiny / equal-key inputs, bf16 / fp16. Case seeds from 200000
    (backward 300000) on; frozen like the lists above."""
    rng = np.random.default_rng(seed + int(backward))
    base = 300000 if backward else 200000
    return [_case(base + j, **_draw(rng, backward)) for j in range(n)]
