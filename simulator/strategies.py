"""Public hypothesis strategies for the numerical edge cases of attention on Hopper.

Use them in your own property tests::

    from hypothesis import given
    from simulator import flash, strategies as sst

    @given(sst.attention_inputs(dtype="bf16"))
    def test_mine(case):
        out, lse = flash.forward(case.q, case.k, case.v, **case.kwargs)

Strategies:
    score_values(), score_rows()    float32 logits with +-inf, NaN, +-0, subnormals, huge values
    narrow_values(fmt)              values at the format's edges (e4m3: 448, 464, 2^-9, ties)
    block_params(fmt)               kblock_m, kblock_n, schedule the kernel supports
    masks()                         causal / local window / none
    attention_inputs(...)           q, k, v plus forward keyword arguments (an AttentionCase)
    backward_cases(...)             one FA3 backward call as a recorded-case dict
                                    (simulator.replay.bwd_cases)

Requires the ``hypothesis`` package (in the ``test`` extra).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from .flash.config import DTYPES

HEAD_DIMS = (32, 64, 96, 128, 192, 256)

_SPECIAL_F32 = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38,
                -3.4028235e38, 1e4, -1e4, 1e38, -1e38, 5e4, -5e4, 1.0, -1.0]
_EDGES = {
    # e4m3: max 448, 464 is the first value that saturates, 2^-9 the smallest subnormal,
    # 2^-10 a tie between 0 and 2^-9, 2^-6 the smallest normal
    "e4m3": [448.0, -448.0, 464.0, 456.0, 2.0**-9, 2.0**-10, 3 * 2.0**-10, 2.0**-6, 240.0, 0.0],
    "bf16": [3.3895314e38, 2.0**-133, 2.0**-126, 1.0 + 2.0**-8, 65504.0, 0.0],
    "f16": [65504.0, 65520.0, 2.0**-24, 2.0**-25, 2.0**-14, 1.0 + 2.0**-11, 0.0],
}


def score_values(*, allow_nan: bool = True, allow_inf: bool = True):
    """Single float32 logits: ordinary values, huge ones (1e4 .. 1e38), subnormals, +-0,
    and (optionally) +-inf and NaN."""
    specials = [v for v in _SPECIAL_F32 if (allow_nan or not np.isnan(v))
                and (allow_inf or not np.isinf(v))]
    return st.one_of(
        st.floats(-30.0, 30.0, width=32),
        st.floats(width=32, allow_nan=allow_nan, allow_infinity=allow_inf),
        st.sampled_from(specials),
    ).map(np.float32)


@st.composite
def score_rows(draw, min_size: int = 1, max_size: int = 256):
    """float32 score rows in the shapes that stress online softmax: random values with
    specials, rows of equal values, fully masked (-inf) rows, one unmasked element among -inf,
    and rows with one huge logit."""
    n = draw(st.integers(min_size, max_size))
    kind = draw(st.sampled_from(["mixed", "equal", "masked", "one_unmasked", "huge"]))
    if kind == "equal":
        return np.full(n, draw(score_values(allow_nan=False)), dtype=np.float32)
    if kind == "masked":
        return np.full(n, -np.inf, dtype=np.float32)
    if kind == "one_unmasked":
        row = np.full(n, -np.inf, dtype=np.float32)
        row[draw(st.integers(0, n - 1))] = draw(st.floats(-1e4, 1e4, width=32))
        return row
    row = np.array(draw(st.lists(score_values(), min_size=n, max_size=n)), dtype=np.float32)
    if kind == "huge":
        row[draw(st.integers(0, n - 1))] = np.float32(draw(st.sampled_from([1e4, 1e6, 1e20, 1e38])))
    return row


def narrow_values(fmt: str):
    """Python floats that probe ``fmt``'s rounding and range edges (both signs).

    Raises:
        ValueError: ``fmt`` is not one of the formats with edge values (bf16, f16, e4m3).
    """
    if not isinstance(fmt, str) or fmt not in _EDGES:
        raise ValueError(f"fmt: expected one of {', '.join(_EDGES)}, got {fmt!r}")
    base = st.sampled_from(_EDGES[fmt])
    return st.one_of(base, base.map(lambda v: -v), st.floats(-4.0, 4.0, width=32))


def masks(local: bool = True):
    """Keyword arguments of a mask: none, causal, or (``local``) a local window (left, right)."""
    kinds = [st.just({}), st.just({"causal": True})]
    if local:
        kinds.append(st.tuples(st.integers(-1, 96), st.integers(-1, 96)).map(lambda w: {"window": w}))
    return st.one_of(*kinds)


def block_params(fmt: str = "bf16"):
    """kblock_m, kblock_n and schedule values the kernel supports for ``fmt``."""
    step = 32 if fmt == "e4m3" else 16
    return st.fixed_dictionaries({
        "kblock_m": st.sampled_from([64, 128, 192]),
        "kblock_n": st.sampled_from(sorted(n for n in {step, 2 * step, 64, 96, 128, 160, 176, 256}
                                           if n % step == 0)),
        "schedule": st.sampled_from(["plain", "intra_wg_overlap"]),
    })


@dataclass
class AttentionCase:
    """One drawn forward call: inputs and keyword arguments for ``simulator.flash.forward``."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    kwargs: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return (f"AttentionCase(q{list(self.q.shape)} {self.q.dtype}, k{list(self.k.shape)}, "
                f"kwargs={self.kwargs})")


@st.composite
def attention_inputs(draw, dtype: str | None = None, max_batch: int = 2, max_seqlen: int = 160,
                     head_dims=(32, 64), edge_values: bool = True, local: bool = True,
                     blocks: bool = True):
    """q, k, v and forward kwargs: shapes and block sizes the kernel supports, masks, softcap,
    per-batch seqlens_k (including 0), GQA, FP8 descales, and values with outliers concentrated
    in one head and the format's edge values.

    Args:
        dtype: "bf16", "f16" or "e4m3" (drawn when None).
        max_batch, max_seqlen: size bounds (keep them small: the emulator is exact, not fast).
        head_dims: head dimensions to draw from (a subset of 32, 64, 96, 128, 192, 256).
        edge_values: sprinkle the format's edge values into the inputs.
        local: also draw local windows (the published FA3 wheel has none).
        blocks: also draw kblock_m / kblock_n / schedule; False leaves FA3's dispatch.
    """
    fmt = dtype or draw(st.sampled_from(list(DTYPES)))
    b = draw(st.integers(1, max_batch))
    sq = draw(st.integers(1, max_seqlen))
    sk = draw(st.integers(1, max_seqlen))
    hkv = draw(st.sampled_from([1, 2]))
    h = hkv * draw(st.sampled_from([1, 2]))
    d = draw(st.sampled_from(list(head_dims)))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = draw(st.sampled_from([0.05, 0.5, 1.0, 3.0]))
    rng = np.random.default_rng(seed)
    arrays = []
    for shape in ((b, sq, h, d), (b, sk, hkv, d), (b, sk, hkv, d)):
        x = (scale * rng.standard_normal(shape)).astype(np.float32)
        if draw(st.booleans()):  # outliers concentrated in one head
            x[:, :, draw(st.integers(0, shape[2] - 1))] *= np.float32(draw(st.sampled_from([8, 64])))
        if edge_values and draw(st.booleans()):
            vals = draw(st.lists(narrow_values(fmt), min_size=1, max_size=8))
            flat = x.reshape(-1)
            flat[rng.integers(0, flat.size, len(vals))] = vals
        if fmt == "e4m3":
            x = np.clip(x, -448, 448)
        with np.errstate(over="ignore"):  # f16 outliers beyond 65504 become inf on purpose
            arrays.append(x.astype(DTYPES[fmt]))
    kwargs = dict(draw(masks(local=local)))
    if blocks:
        kwargs.update(draw(block_params(fmt)))
    if draw(st.booleans()):
        kwargs["softcap"] = float(draw(st.sampled_from([5.0, 30.0])))
    if draw(st.booleans()):
        kwargs["seqlens_k"] = np.array([draw(st.integers(0, sk)) for _ in range(b)], dtype=np.int64)
    if fmt == "e4m3" and draw(st.booleans()):
        ds = st.sampled_from([0.25, 0.5, 1.0, 2.0])
        for name in ("q_descale", "k_descale", "v_descale"):
            kwargs[name] = np.float32(draw(ds))
    if "window" in kwargs and kwargs.get("causal"):
        kwargs.pop("causal")
    return AttentionCase(*arrays, kwargs=kwargs)


# seqlens at FA3's backward tile edges (kBlockM 64 / 80, kBlockN 128) and beside them
_BWD_EDGES = (1, 2, 63, 64, 65, 79, 80, 81, 127, 128, 129, 160, 191, 192, 255, 256, 257, 384)


@st.composite
def backward_cases(draw, head_dim: int = 128, max_batch: int = 4, max_seqlen: int = 600,
                   max_work: int = 3_000_000):
    """One backward call as a case dict of :mod:`simulator.replay.bwd_cases` (its inputs are
    :func:`simulator.replay.bwd_cases.case_inputs` of the drawn ``seed``): dtype bf16 / fp16,
    batch 1..``max_batch``, GQA groups 1-8, seqlens 1..``max_seqlen`` with FA3's tile edges
    favoured, no mask / causal / local windows (either side unbounded or 0 included), an
    explicit softmax_scale or FA3's default, varlen launches with empty sequences and
    ``seqused_q`` / ``seqused_k``. ``batch * heads * seqlen_q * seqlen_k`` stays within
    ``max_work`` (heads are reduced to fit), so that a drawn call emulates in about a second.

    Returns (when drawn): dict with ``name`` ``"hyp"``, ``seed`` (int), ``dtype``, ``batch``,
    ``seqlen_q`` / ``seqlen_k`` (the maxima for varlen), ``heads``, ``heads_kv``, ``head_dim``,
    ``causal``, ``window`` [left, right], ``seqlens_q`` / ``seqlens_k`` (lists or None),
    ``softmax_scale`` (float or None), ``softcap`` 0.0, ``seqused_q`` / ``seqused_k`` (lists
    or None).
    """
    length = st.one_of(st.integers(1, max_seqlen), st.sampled_from(_BWD_EDGES)).map(
        lambda n: min(n, max_seqlen))
    batch = draw(st.integers(1, max_batch))
    heads_kv = draw(st.integers(1, 4))
    group = draw(st.sampled_from((1, 1, 2, 3, 4, 8)))
    kind = draw(st.sampled_from(("none", "causal", "local")))
    window = [-1, -1]
    if kind == "local":
        side = st.one_of(st.just(-1), st.just(0), st.integers(0, max_seqlen))
        window = [draw(side), draw(side)]
    varlen = draw(st.booleans())
    used_q = used_k = lens_q = lens_k = None
    if varlen:
        seq = st.one_of(length, st.just(0))
        lens_q = draw(st.lists(seq, min_size=batch, max_size=batch))
        lens_k = lens_q if draw(st.booleans()) else draw(st.lists(seq, min_size=batch,
                                                                  max_size=batch))
        if max(lens_q) == 0 or max(lens_k) == 0:
            lens_q, lens_k = [max(1, n) for n in lens_q], [max(1, n) for n in lens_k]
        which = draw(st.sampled_from((None, None, "q", "k", "qk")))
        if which and "q" in which:
            used_q = [draw(st.integers(0, n)) for n in lens_q]
        if which and "k" in which:
            used_k = [draw(st.integers(0, n)) for n in lens_k]
        sq, sk = max(lens_q), max(lens_k)
        work = sum(a * b for a, b in zip(lens_q, lens_k, strict=True))
    else:
        sq = draw(length)
        sk = sq if draw(st.booleans()) else draw(length)
        work = batch * sq * sk
    heads_kv = max(1, min(heads_kv, max_work // max(1, work * group)))
    heads = heads_kv * group
    while heads > 1 and heads * work > max_work:  # drop the group before the kv heads
        heads_kv, group = (heads_kv, group // 2) if group > 1 else (heads_kv // 2, group)
        heads = heads_kv * group
    scale = draw(st.one_of(st.none(), st.floats(0.0625, 2.0, width=32)))
    return {"name": "hyp", "seed": draw(st.integers(0, 2**31 - 1)),
            "dtype": draw(st.sampled_from(("bf16", "f16"))), "batch": batch, "seqlen_q": sq,
            "seqlen_k": sk, "heads": heads, "heads_kv": heads_kv, "head_dim": head_dim,
            "causal": kind == "causal", "window": window, "seqlens_q": lens_q,
            "seqlens_k": lens_k, "softmax_scale": None if scale is None else float(scale),
            "softcap": 0.0, "seqused_q": used_q, "seqused_k": used_k}
