"""The frozen cases on which FlashAttention-3 as PyPI ``dew-flash-attn-cu13`` 0.3.6 builds it
(``libdew_flash_attn3.so``, sm_90a; FA3 ported from flash-attn3-jax, with backward kernels at
head dims 64, 128, 192 and 256) is recorded.

FROZEN: add new cases at the END of a list, never change an existing one (a case's index is
its name in ``simulator/data/device/dew_fa3/``).

A case is :mod:`simulator.replay.fa2_jax_cases`' dict (``window`` included; ``seqlens_q`` /
``seqlens_k`` for varlen) with the same inputs (:func:`make_input_bits`, :func:`grad_bits`).
Backward cases carry their forward: the recorder runs the forward, then the backward on its
out and LSE, three times.

NumPy only.
"""

from __future__ import annotations

import numpy as np

from .fa2_jax_cases import _case, case_digest, cu_seqlens, grad_bits, make_input_bits

__all__ = ["backward_cases", "case_digest", "cu_seqlens", "forward_cases", "grad_bits",
           "make_input_bits"]

DTYPES = ("bf16", "f16")
#: head dims asked for: the library's four backward classes and the ones it pads to them
HEAD_DIMS = (64, 96, 128, 192, 256)


def forward_cases() -> list[dict]:
    """Forward cases at every head dim class (64 / 128 / 192 / 256 and padded 96, 40, 160),
    causal, local, GQA, tile edges."""
    cases: list[dict] = []
    seed = iter(range(50000, 60000))

    def add(**kw):
        cases.append(_case(next(seed), **kw))

    for d in HEAD_DIMS + (40, 160):
        for dtype in DTYPES:
            add(sq=65, sk=129, d=d, dtype=dtype)
            add(sq=129, sk=129, d=d, dtype=dtype, causal=True)
            add(sq=100, sk=300, d=d, dtype=dtype, window=(40, 8))
        add(b=2, h=4, hkv=1, sq=33, sk=200, d=d)
        for s in (1, 63, 192, 257):
            add(sq=s, sk=s + 17, d=d, causal=bool(s % 2))
    return cases


def backward_cases() -> list[dict]:
    """Backward cases: a fixed grid over head dim x format x mask (none, causal, local) x two
    shapes, GQA, varlen, then drawn ones (seeded) to at least 300 in all."""
    cases: list[dict] = []
    seed = 60000

    def add(**kw):
        nonlocal seed
        cases.append(_case(seed, **kw))
        seed += 1

    for d in HEAD_DIMS:
        for dtype in DTYPES:
            for causal, window in ((False, (-1, -1)), (True, (-1, -1)), (False, (32, 16))):
                for sq, sk in ((65, 129), (128, 80)):
                    add(sq=sq, sk=sk, d=d, dtype=dtype, causal=causal, window=window)
    for d in HEAD_DIMS:
        add(h=4, hkv=2, sq=33, sk=100, d=d)
        add(h=4, hkv=1, sq=64, sk=64, d=d, causal=True, dtype="f16")
    for d, lens in ((64, (17, 64, 1)), (128, (100, 7, 65)), (192, (1, 129, 30, 0, 64)),
                    (256, (33, 1, 50)), (96, (65, 65))):
        for causal in (False, True):
            case = _case(seed, b=len(lens), h=2, sq=sum(lens), sk=sum(lens), d=d,
                         dtype="bf16" if causal else "f16", causal=causal)
            case["seqlens_q"] = case["seqlens_k"] = list(lens)
            cases.append(case)
            seed += 1
    rng = np.random.default_rng(2027)
    while len(cases) < 310:
        d = int(rng.choice((64, 96, 128, 192, 256)))
        causal = bool(rng.integers(0, 2))
        window = (-1, -1)
        if not causal and rng.integers(0, 4) == 0:
            window = (int(rng.integers(0, 96)), int(rng.integers(-1, 48)))
        h = int(rng.choice((1, 2)))
        add(h=h, hkv=h if rng.integers(0, 3) else 1, sq=int(rng.integers(1, 120)),
            sk=int(rng.integers(1, 120)), d=d, dtype=DTYPES[int(rng.integers(0, 2))],
            causal=causal, window=window,
            kind=str(rng.choice(("normal", "normal", "normal", "large"))))
    return cases


def drawn_backward_cases(n: int, seed: int = 2029) -> list[dict]:
    """``n`` backward calls drawn from ``numpy.random.default_rng(seed)`` (case seeds from
    400000): head dims 40-256 (the build's classes and the ones padded to them), 1-4 heads
    with GQA / MQA, seqlens 1-159 (at most two key blocks per dQ row at every head dim),
    causal, windows, scales, large / tiny / equal-key inputs, bf16 / fp16. Frozen."""
    rng = np.random.default_rng(seed)
    cases = []
    for j in range(n):
        d = int(rng.choice((40, 64, 80, 96, 128, 160, 192, 256)))
        h = int(rng.choice((1, 2, 4)))
        hkv = h if rng.integers(0, 3) else int(rng.choice([x for x in (1, 2) if h % x == 0]))
        causal = bool(rng.integers(0, 2))
        window = (-1, -1)
        if not causal and rng.integers(0, 4) == 0:
            window = (int(rng.integers(-1, 128)), int(rng.integers(-1, 64)))
        cases.append(_case(400000 + j, b=int(rng.integers(1, 3)), h=h, hkv=hkv,
                           sq=int(rng.integers(1, 160)), sk=int(rng.integers(1, 160)), d=d,
                           dtype=DTYPES[int(rng.integers(0, 2))], causal=causal, window=window,
                           scale=None if rng.integers(0, 4) else float(rng.choice((0.1, 0.5))),
                           kind=str(rng.choice(("normal",) * 5 + ("large", "tiny",
                                                                  "equal_keys")))))
    return cases
