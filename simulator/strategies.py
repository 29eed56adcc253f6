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

Requires the ``hypothesis`` package (in the ``test`` extra).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from .numerics.cvt import FORMATS

DTYPES = {name: FORMATS[name].dtype for name in ("bf16", "f16", "e4m3")}
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
