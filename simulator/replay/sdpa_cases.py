"""The frozen cases on which PyTorch's ``scaled_dot_product_attention`` flash backend
(FlashAttention-2 as PyTorch compiles it for sm_90) is recorded, and their inputs.

FROZEN: recordings under ``simulator/data/device/sdpa/`` store, per case, a BLAKE2b-128 digest
of the inputs made here (:func:`input_digest`). Editing a case list, a factor or the generator
changes what the recorded bits belong to; add new cases at the END of a list (a case's index
is its name in the recordings) and never change an existing one.

A case is a JSON-able dict:

* ``batch``, ``heads``, ``heads_kv`` (``heads_kv < heads``: GQA / MQA), ``seqlen_q``,
  ``seqlen_k``, ``head_dim``; ``dtype`` ``"bf16"`` or ``"f16"``; ``causal`` (the op's
  ``is_causal``; FA2 aligns the causal mask to the bottom right when ``seqlen_q != seqlen_k``);
  ``scale`` (``None``: the op's default ``1/sqrt(head_dim)``); ``seed``;
* ``kind`` with ``factor`` (:data:`KINDS`): ``"normal"`` (standard normal q, k, v),
  ``"large"`` (standard normal times ``factor``, 8 or 30: scores of hundreds to thousands, where
  the exp underflow / running-max rescale paths matter), ``"tiny"`` (times ``factor`` = 2^-12:
  fp16 inputs partly subnormal, near-uniform softmax), ``"equal_keys"`` (every key row of a
  head equal to one standard-normal row times ``factor``, q times ``factor``, v normal: all
  scores of a row equal and large, pytorch/pytorch#121558-style);
* dropout cases add ``dropout_p``; backward cases add ``dropout_p`` (0.0 for most).

Inputs (:func:`make_inputs`): ``rng = numpy.random.default_rng(seed)``; q ``[batch, heads,
seqlen_q, head_dim]``, then k and v ``[batch, heads_kv, seqlen_k, head_dim]`` drawn in that
order with ``rng.standard_normal(shape, dtype=float32)`` (for ``equal_keys``: q, then one k row
per (batch, head_kv) of shape ``[batch, heads_kv, 1, head_dim]`` broadcast over seqlen_k, then
v), times the factor in float32, rounded to the format to nearest even (``ml_dtypes.bfloat16``
/ ``numpy.float16``). SDPA's layout: the same as the op's arguments. :func:`make_grad` draws
the backward's dout ``[batch, heads, seqlen_q, head_dim]`` from ``default_rng([seed, 1])`` the
same way (factor 1). :func:`make_input_bits` gives the same inputs as uint16 bit patterns
without ml_dtypes (the recorder's path on the GPU host; the two paths agree, tested).

NumPy only; no torch here.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

#: kind -> default factor (a case's own ``factor`` is the one used)
KINDS = {"normal": 1.0, "large": 8.0, "tiny": 2.0 ** -12, "equal_keys": 30.0}
DTYPES = ("bf16", "f16")
#: the sequence lengths of the tile-edge sweeps (FA2's m / n blocks are 64 or 128 rows)
TILE_EDGES = (1, 7, 63, 64, 65, 127, 128, 129, 255, 256, 300, 1000, 2048)
#: every head dim the forward sweep asks for: FA2's classes (32 .. 256), two that are
#: multiples of 8 but not of 32 (40, 72), two that are not multiples of 8 (36, 20: the op
#: refuses them; F.sdpa pads them), two above 256 (288, 512: refused)
HEAD_DIMS = (32, 40, 64, 72, 96, 128, 160, 192, 224, 256)
ODD_HEAD_DIMS = (36, 20)
TOO_LARGE_HEAD_DIMS = (288, 512)


def _case(seed: int, *, b: int = 1, h: int = 1, hkv: int | None = None, sq: int, sk: int,
          d: int = 64, dtype: str = "bf16", causal: bool = False, scale: float | None = None,
          kind: str = "normal", factor: float | None = None, **extra) -> dict:
    case = {"batch": b, "heads": h, "heads_kv": h if hkv is None else hkv, "seqlen_q": sq,
            "seqlen_k": sk, "head_dim": d, "dtype": dtype, "causal": causal, "scale": scale,
            "seed": seed, "kind": kind, "factor": KINDS[kind] if factor is None else factor}
    case.update(extra)
    return case


def forward_cases() -> list[dict]:
    """The forward cases (frozen; see the module docstring). Groups, in order: head dims x
    format x causal; refused head dims; square tile-edge sweep; seqlen_k sweep; seqlen_q sweep;
    causal with seqlen_q != seqlen_k both ways; batch / heads; GQA / MQA; custom scales; large,
    tiny and equal-key inputs; decode-like small-batch long-seqlen_k cases (FA2's split-KV
    heuristic); batch x heads around 0.8 x the SM count at seqlen_q 1; a few long ones."""
    cases: list[dict] = []
    seed = iter(range(1000, 100000))

    def add(**kw):
        cases.append(_case(next(seed), **kw))

    # head dims x format x causal: one m block and a partial second, two n blocks
    for d in HEAD_DIMS:
        for dtype in DTYPES:
            add(sq=65, sk=129, d=d, dtype=dtype)
        add(sq=65, sk=65, d=d, causal=True)
    for d in ODD_HEAD_DIMS + TOO_LARGE_HEAD_DIMS:
        add(sq=64, sk=64, d=d)
    # square tile edges, causal and not (long ones at head_dim 32)
    for s in TILE_EDGES:
        for causal in (False, True) if s <= 300 else ((s > 1000),):
            add(sq=s, sk=s, d=64 if s <= 300 else 32, causal=causal)
    # seqlen_k sweep at seqlen_q 33 / seqlen_q sweep at seqlen_k 129 (non-causal)
    for s in TILE_EDGES:
        add(sq=33, sk=s, d=128, dtype="bf16" if s % 2 else "f16")
    for s in TILE_EDGES[:-1]:
        add(sq=s, sk=129, d=64 if s <= 300 else 32, dtype="f16" if s % 2 else "bf16")
    # causal, seqlen_q > seqlen_k (fully masked top rows) and seqlen_q < seqlen_k
    for sq, sk in ((129, 64), (256, 65), (300, 129), (1000, 255), (65, 1), (7, 1), (2, 1),
                   (128, 127)):
        add(sq=sq, sk=sk, d=64 if sq <= 300 else 32, causal=True)
    for sq, sk in ((1, 129), (64, 300), (65, 1000), (129, 2048), (7, 63), (127, 128)):
        add(sq=sq, sk=sk, d=64, causal=True, dtype="f16" if sq % 2 else "bf16")
    # batch / heads
    for b, h in ((2, 3), (3, 5), (4, 8), (4, 1), (1, 8), (2, 2)):
        add(b=b, h=h, sq=9, sk=129, d=64)
        add(b=b, h=h, sq=9, sk=9, d=64, causal=True, dtype="f16")
    # GQA / MQA
    for h, hkv, d, causal in ((8, 2, 64, False), (8, 1, 64, True), (6, 3, 128, False),
                              (4, 2, 128, True), (8, 4, 256, False), (2, 1, 96, True)):
        for dtype in DTYPES:
            add(b=2 if d <= 128 else 1, h=h, hkv=hkv, sq=9, sk=200, d=d, dtype=dtype)
        add(h=h, hkv=hkv, sq=17, sk=17, d=d, causal=causal)
    # custom scales
    for scale in (0.5, 1.0, 0.0625, 2.0, 1e-3, 0.1234567, 1.0 / 3.0, 10.0):
        add(sq=65, sk=200, d=128, scale=scale, dtype="f16" if scale > 0.9 else "bf16")
        add(sq=64, sk=64, d=64, scale=scale, causal=True)
    # large, tiny, equal keys
    for factor in (8.0, 30.0):
        for dtype in DTYPES:
            for causal in (False, True):
                add(sq=65, sk=129 if not causal else 65, d=128 if causal else 64,
                    dtype=dtype, causal=causal, kind="large", factor=factor)
        add(sq=1, sk=1000, d=128, kind="large", factor=factor)
        add(sq=129, sk=300, d=64, kind="large", factor=factor, dtype="f16")
    for dtype in DTYPES:
        add(h=2, sq=65, sk=129, d=64, dtype=dtype, kind="tiny")
        add(sq=128, sk=128, d=128, dtype=dtype, kind="tiny", causal=True)
    for dtype in DTYPES:
        add(sq=65, sk=300, d=64, dtype=dtype, kind="equal_keys")
        add(sq=64, sk=64, d=128, dtype=dtype, kind="equal_keys", causal=True)
        add(sq=1, sk=2048, d=128, dtype=dtype, kind="equal_keys", factor=8.0)
    # decode-like: small batch x heads, long seqlen_k (FA2's num_splits_heuristic territory)
    for sq in (1, 2, 4, 8, 16):
        for sk in (512, 777, 1024, 2048):
            d = (64, 128, 256)[(sq + sk) % 3]
            add(b=1 + sk % 2, h=(1, 2, 4, 8)[(sq * 7 + sk) % 4], sq=sq, sk=sk, d=d,
                dtype="bf16" if (sq + sk // 512) % 2 else "f16")
    for sq, sk, d in ((1, 4096, 128), (1, 2048, 64), (4, 1024, 128), (16, 2048, 256),
                      (1, 513, 128), (1, 8192, 64)):
        add(b=1, h=2, sq=sq, sk=sk, d=d, causal=True)
    for h, hkv, sk in ((8, 1, 2048), (8, 2, 1024), (32, 8, 1024), (16, 1, 4096)):
        add(b=1, h=h, hkv=hkv, sq=1, sk=sk, d=128)
    # batch x heads around 0.8 x 132 SMs at seqlen_q 1 (one m block each)
    for b, h in ((1, 96), (3, 35), (1, 106), (2, 53), (1, 107), (4, 27), (1, 132), (1, 133),
                 (2, 66)):
        add(b=b, h=h, sq=1, sk=1024, d=128)
    # long seqlen_k with several m blocks
    add(sq=300, sk=2048, d=64, causal=True, dtype="f16")
    add(b=2, h=2, sq=129, sk=1000, d=32)
    return cases


def dropout_cases() -> list[dict]:
    """Small forward cases with ``dropout_p`` in {0.1, 0.3, 0.5}, recorded with the debug
    attention mask (``return_debug_mask=True``) and the Philox seed / offset (frozen)."""
    cases: list[dict] = []
    shapes = ((64, 64, 64, False), (128, 128, 64, True), (65, 129, 128, False),
              (33, 77, 64, False), (1, 100, 128, False), (129, 65, 64, False),
              (256, 256, 32, True))
    seed = 5000
    for i, (sq, sk, d, causal) in enumerate(shapes):
        for j, p in enumerate((0.1, 0.3, 0.5)):
            if sq == 256 and p != 0.5:
                continue
            cases.append(_case(seed, b=1, h=1 if sq * sk > 4096 else 2, sq=sq, sk=sk, d=d,
                               dtype=DTYPES[(i + j) % 2], causal=causal, dropout_p=p))
            seed += 1
    return cases


def backward_cases() -> list[dict]:
    """Small-to-medium backward cases (frozen): bf16 and fp16, causal or not, head dims
    64 / 128 / 256, seqlen_k long enough for several n blocks to add into one dQ row (the
    non-deterministic float32 atomicAdd), GQA / MQA, batch / heads, large inputs, a custom
    scale, a few with dropout."""
    cases: list[dict] = []
    seed = 7000

    def add(**kw):
        nonlocal seed
        kw.setdefault("dropout_p", 0.0)
        cases.append(_case(seed, **kw))
        seed += 1

    # (seqlen_q, seqlen_k, head_dim, causal flags)
    plan = (((64, 64), 64, (False, True)), ((65, 129), 64, (False, True)),
            ((33, 300), 64, (False, True)), ((200, 77), 64, (False, True)),
            ((1, 129), 64, (False, True)), ((129, 1), 64, (False, True)),
            ((128, 128), 64, (True,)), ((16, 512), 64, (False,)),
            ((33, 65), 128, (False, True)), ((65, 129), 128, (False, True)),
            ((128, 128), 128, (True,)), ((17, 300), 128, (False,)),
            ((17, 65), 256, (False,)), ((33, 65), 256, (True,)))
    for i, ((sq, sk), d, flags) in enumerate(plan):
        for causal in flags:
            add(sq=sq, sk=sk, d=d, dtype=DTYPES[(i + causal) % 2], causal=causal)
    for j, (h, hkv, d, causal) in enumerate(((4, 2, 64, False), (4, 1, 64, True),
                                             (6, 3, 64, False), (2, 1, 128, True))):
        add(h=h, hkv=hkv, sq=33, sk=100, d=d, dtype=DTYPES[j % 2], causal=causal)
    add(b=2, h=2, sq=64, sk=64, d=64)
    add(h=3, sq=33, sk=65, d=64, dtype="f16", causal=True)
    add(sq=65, sk=129, d=64, kind="large", factor=8.0)
    add(sq=64, sk=64, d=64, scale=0.5, causal=True)
    for p, causal in ((0.1, False), (0.3, True), (0.5, False)):
        add(sq=64, sk=128, d=64, causal=causal, dropout_p=p)
    return cases


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounded to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
            >> np.uint32(16)).astype(np.uint16)


def _to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return _bf16_bits(x)
    if dtype == "f16":
        return x.astype(np.float16).view(np.uint16)
    raise ValueError(f"dtype must be 'bf16' or 'f16', got {dtype!r}")


def make_input_bits(case: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q, k, v) as uint16 bit patterns of the case's format (module docstring)."""
    rng = np.random.default_rng(case["seed"])
    b, h, hkv, d = case["batch"], case["heads"], case["heads_kv"], case["head_dim"]
    sq, sk = case["seqlen_q"], case["seqlen_k"]
    f = np.float32(case["factor"])
    q = rng.standard_normal((b, h, sq, d), dtype=np.float32) * f
    if case["kind"] == "equal_keys":
        row = rng.standard_normal((b, hkv, 1, d), dtype=np.float32) * f
        k = np.broadcast_to(row, (b, hkv, sk, d))
        v = rng.standard_normal((b, hkv, sk, d), dtype=np.float32)
    else:
        k = rng.standard_normal((b, hkv, sk, d), dtype=np.float32) * f
        v = rng.standard_normal((b, hkv, sk, d), dtype=np.float32) * f
    return tuple(_to_bits(x, case["dtype"]) for x in (q, k, v))


def grad_bits(case: dict) -> np.ndarray:
    """dout as uint16 bit patterns (module docstring)."""
    rng = np.random.default_rng([case["seed"], 1])
    shape = (case["batch"], case["heads"], case["seqlen_q"], case["head_dim"])
    return _to_bits(rng.standard_normal(shape, dtype=np.float32), case["dtype"])


def _as_format(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f16":
        return bits.view(np.float16)
    import ml_dtypes  # noqa: PLC0415  (the GPU host's recorder needs only the bits)

    return bits.view(ml_dtypes.bfloat16)


def make_inputs(case: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q, k, v) of a case as ``ml_dtypes.bfloat16`` / ``numpy.float16`` arrays, SDPA's layout
    ``[batch, heads(_kv), seqlen, head_dim]`` (module docstring)."""
    return tuple(_as_format(x, case["dtype"]) for x in make_input_bits(case))


def make_grad(case: dict) -> np.ndarray:
    """The backward's dout ``[batch, heads, seqlen_q, head_dim]`` in the case's format."""
    return _as_format(grad_bits(case), case["dtype"])


def input_digest(case: dict, *arrays: np.ndarray) -> str:
    """BLAKE2b-128 (hex) of the case's JSON (sorted keys) and the bytes of ``arrays`` (the
    inputs' bits, in order): detects a changed generator or case list."""
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(case, sort_keys=True).encode())
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()


def case_digest(case: dict, backward: bool = False) -> str:
    """:func:`input_digest` of a case's q, k, v (and dout for a backward case)."""
    arrays = make_input_bits(case)
    return input_digest(case, *arrays, *((grad_bits(case),) if backward else ()))


def drawn_cases(n: int, *, backward: bool = False, seed: int = 2030) -> list[dict]:
    """``n`` calls drawn from ``numpy.random.default_rng(seed)`` (the backward's from
    ``seed + 1``; case seeds from 500000, backward 600000), frozen like the lists above: head
    dims 8-256 in multiples of 8, 1-4 heads with GQA / MQA, batch 1-2, seqlens 1-255 (backward
    1-127), causal, custom scales, large / tiny / equal-key inputs, bf16 / fp16; no dropout."""
    rng = np.random.default_rng(seed + int(backward))
    top = 128 if backward else 256
    cases = []
    for j in range(n):
        h = int(rng.choice((1, 2, 3, 4)))
        hkv = h if rng.integers(0, 3) else int(rng.choice([x for x in (1, 2, 4) if h % x == 0]))
        kind = str(rng.choice(("normal",) * 5 + ("large", "tiny", "equal_keys")))
        extra = {"dropout_p": 0.0} if backward else {}
        cases.append(_case((600000 if backward else 500000) + j, b=int(rng.integers(1, 3)), h=h,
                           hkv=hkv, sq=int(rng.integers(1, top)), sk=int(rng.integers(1, top)),
                           d=8 * int(rng.integers(1, 33)), dtype=DTYPES[int(rng.integers(0, 2))],
                           causal=bool(rng.integers(0, 2)),
                           scale=None if rng.integers(0, 4) else float(rng.choice((0.05, 0.5, 2.0))),
                           kind=kind, **extra))
    return cases
