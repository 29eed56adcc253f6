"""The frozen cases on which FlashAttention-4's sm90 kernels (PyPI ``flash-attn-4``,
``flash_attn.cute``, compiled by CuTe DSL at the first call) are recorded, and their inputs.

FROZEN: recordings under ``simulator/data/device/fa4/`` store, per case, a digest of the inputs
made here. Add new cases at the END of a list (a case's index is its name in the recordings)
and never change an existing one.

A case is :func:`simulator.replay.fa2_jax_cases` 's dict (``batch``, ``heads``, ``heads_kv``,
``seqlen_q``, ``seqlen_k``, ``head_dim``, ``dtype``, ``causal``, ``scale``, ``seed``, ``kind``,
``factor``, ``window`` as ``[left, right]`` with -1 for an open side, varlen ``seqlens_q`` /
``seqlens_k``) plus FA4's own options: ``softcap`` (0.0: none), ``sink`` (None, or the format
of the learnable sink logits: ``"f32"`` / ``"bf16"``; their values come from
:func:`sink_logits`) and ``pack_gqa`` (None: the library's default). Inputs are
:func:`simulator.replay.fa2_jax_cases.make_input_bits`'s (flash-attn's ``[batch, seqlen,
heads, head_dim]``, varlen packed ``[total, heads, head_dim]``).

NumPy only.
"""

from __future__ import annotations

import numpy as np

from . import fa2_jax_cases as fc
from . import sdpa_cases as sc

DTYPES = sc.DTYPES
#: FA4's sm90 tile classes (``_tile_size_fwd_sm90``: <= 64, <= 96, <= 128, <= 192, 256) and
#: head dims between them (FA4 takes any multiple of 8 from 8 to 256)
HEAD_DIMS = (32, 64, 80, 96, 128, 160, 192, 256)


def _case(seed: int, *, softcap: float = 0.0, sink: str | None = None,
          pack_gqa: bool | None = None, **kw) -> dict:
    case = fc._case(seed, **kw)
    case.update(softcap=float(softcap), sink=sink, pack_gqa=pack_gqa)
    return case


def forward_cases() -> list[dict]:
    """Forward cases: head dims x format x causal; tile edges of the 192- and 128-row tiles;
    causal with seqlen_q != seqlen_k; one- and two-sided windows; GQA / MQA with and without
    PackGQA; softcap; learnable sinks; scales; large / tiny / equal-key inputs; batch > 1;
    varlen with empty sequences."""
    cases: list[dict] = []
    seed = iter(range(40000, 100000))

    def add(**kw):
        cases.append(_case(next(seed), **kw))

    for d in HEAD_DIMS:
        for dtype in DTYPES:
            add(sq=65, sk=129, d=d, dtype=dtype)
            add(sq=65, sk=65, d=d, dtype=dtype, causal=True)
    for s in (1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 300):
        for causal in (False, True):
            add(sq=s, sk=s, d=64 if s % 2 else 128, causal=causal,
                dtype="bf16" if s % 3 else "f16")
    for sq, sk in ((129, 64), (256, 65), (65, 1), (7, 1), (1, 129), (64, 300), (65, 1000),
                   (127, 128)):
        for d in (64, 128):
            add(sq=sq, sk=sk, d=d, causal=True)
    for d in (64, 96, 128, 192, 256):
        for window in ((16, 16), (64, 0), (0, 32), (-1, 8), (32, -1)):
            add(sq=129, sk=200, d=d, window=window)
    for h, hkv in ((4, 2), (4, 1), (6, 2)):
        for d in (64, 128):
            add(h=h, hkv=hkv, sq=65, sk=129, d=d)
            add(h=h, hkv=hkv, sq=65, sk=129, d=d, causal=True, pack_gqa=False)
    for cap in (5.0, 30.0):
        for d in (64, 128, 256):
            add(sq=65, sk=129, d=d, softcap=cap, kind="large", factor=4.0, causal=d == 128)
    for sink in ("f32", "bf16"):
        for d in (64, 128):
            add(h=2, sq=65, sk=129, d=d, sink=sink, causal=d == 128)
    add(h=2, sq=65, sk=129, d=64, sink="f32", window=(4, 0))
    add(h=4, hkv=2, sq=65, sk=129, d=128, sink="f32")
    for scale in (0.05, 0.5, 2.0):
        add(sq=64, sk=128, d=128, scale=scale, causal=scale == 0.5)
    for kind, factor in (("large", 8.0), ("tiny", 2.0 ** -12), ("equal_keys", 30.0)):
        for d in (64, 128, 256):
            add(sq=65, sk=129, d=d, kind=kind, factor=factor)
    add(b=2, h=3, sq=33, sk=65, d=64)
    add(b=3, h=2, sq=200, sk=17, d=128, causal=True, dtype="f16")
    for lengths_q, lengths_k, d, causal in (
            ((5, 0, 129, 64), (7, 3, 200, 64), 64, False),
            ((5, 0, 129, 64), (7, 3, 200, 64), 128, True),
            ((1, 1, 1), (300, 17, 1), 128, False),
            ((200, 33), (200, 33), 96, True),
            ((64, 0, 65), (0, 10, 65), 256, False),
            ((193,), (129,), 64, True)):
        add(b=len(lengths_q), sq=sum(lengths_q), sk=sum(lengths_k), d=d, causal=causal,
            seqlens_q=list(lengths_q), seqlens_k=list(lengths_k))
    return cases


def backward_cases() -> list[dict]:
    """Backward cases (the forward, then ``out.backward(dout)``): head dims x format x causal,
    tile edges, GQA / MQA, windows, softcap, sinks, scales, varlen."""
    cases: list[dict] = []
    seed = iter(range(140000, 200000))

    def add(**kw):
        cases.append(_case(next(seed), **kw))

    for d in (64, 96, 128, 192, 256):
        for dtype in DTYPES:
            add(sq=65, sk=129, d=d, dtype=dtype)
            add(sq=65, sk=65, d=d, dtype=dtype, causal=True)
    for s in (1, 63, 64, 65, 127, 128, 129, 200):
        add(sq=s, sk=s, d=64 if s % 2 else 128, causal=bool(s % 3))
    for h, hkv in ((4, 2), (4, 1)):
        for d in (64, 128):
            add(h=h, hkv=hkv, sq=65, sk=129, d=d, causal=d == 128)
    for d in (64, 128):
        add(sq=129, sk=200, d=d, window=(16, 16))
        add(sq=129, sk=200, d=d, window=(-1, 8))
        add(sq=65, sk=129, d=d, softcap=5.0, kind="large", factor=4.0)
        add(h=2, sq=65, sk=129, d=d, sink="f32")
    add(sq=64, sk=128, d=128, scale=0.5, causal=True)
    add(sq=65, sk=129, d=64, kind="large", factor=8.0)
    add(b=4, sq=sum((5, 0, 129, 64)), sk=sum((7, 3, 200, 64)), d=64, causal=True,
        seqlens_q=[5, 0, 129, 64], seqlens_k=[7, 3, 200, 64])
    add(b=2, sq=sum((65, 33)), sk=sum((65, 33)), d=128,
        seqlens_q=[65, 33], seqlens_k=[65, 33])
    return cases


def sink_logits(case: dict) -> np.ndarray:
    """The learnable sink logits of a case with ``sink``: float32 ``[heads]`` (normal * 2),
    rounded to bfloat16 where ``sink == "bf16"`` (then returned as the bf16 values in float32)."""
    rng = np.random.default_rng([case["seed"], 7])
    x = rng.standard_normal(case["heads"], dtype=np.float32) * np.float32(2.0)
    if case["sink"] == "bf16":
        x = (sc._bf16_bits(x).astype(np.uint32) << np.uint32(16)).view(np.float32)
    return x


def window_args(case: dict) -> tuple[int | None, int | None]:
    """The case's ``window`` as FA4's ``window_size`` (None for an open side)."""
    left, right = case["window"]
    return (None if left < 0 else int(left), None if right < 0 else int(right))


make_input_bits = fc.make_input_bits
grad_bits = fc.grad_bits
cu_seqlens = fc.cu_seqlens


def case_digest(case: dict, backward: bool = False) -> str:
    """BLAKE2b-128 of the case and its inputs' bits (dout for a backward case; sink logits)."""
    arrays = list(make_input_bits(case))
    if backward:
        arrays.append(grad_bits(case))
    if case.get("sink"):
        arrays.append(sink_logits(case))
    return sc.input_digest(case, *arrays)


def _draw(rng, backward: bool) -> dict:
    """One drawn call's parameters (see :func:`drawn_cases`)."""
    d = 8 * int(rng.integers(1, 33)) if not backward else int(rng.choice((64, 96, 128, 192, 256)))
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
    softcap = 0.0 if rng.integers(0, 6) else float(rng.choice((5.0, 30.0)))
    sink = None if rng.integers(0, 6) else "f32"
    return {"b": int(rng.integers(1, 3)), "h": h, "hkv": hkv, "sq": sq, "sk": sk, "d": d,
            "dtype": DTYPES[int(rng.integers(0, 2))], "causal": causal, "window": window,
            "scale": scale, "kind": kind, "softcap": softcap, "sink": sink}


def drawn_cases(n: int, *, backward: bool = False, seed: int = 2040) -> list[dict]:
    """``n`` calls drawn from ``numpy.random.default_rng(seed)`` (the backward's from
    ``seed + 1``): head dims 8-256 in multiples of 8 (backward 64-256), 1-4 heads with GQA /
    MQA, batch 1-2, seqlens 1-299 (backward 1-159), causal, one- and two-sided windows,
    custom scales, softcap, learnable sinks, large / tiny / equal-key inputs, bf16 / fp16.
    Case seeds from 700000 (backward 800000) on; frozen like the lists above."""
    rng = np.random.default_rng(seed + int(backward))
    base = 800000 if backward else 700000
    return [_case(base + j, **_draw(rng, backward)) for j in range(n)]
