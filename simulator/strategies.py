"""Public hypothesis strategies for the numerical edge cases of attention on Hopper.

Use them in your own property tests::

    from hypothesis import given, settings
    from simulator import flash, strategies as sst

    sst.warm_up()  # the MUFU tables, once per process (about 1 s): not in the first example

    # after warm_up() a drawn call takes 10-70 ms on 2 busy cores, within hypothesis's 200 ms
    # deadline; a slower or busier machine would fail on time, not on bits: no deadline
    @settings(deadline=None)
    @given(sst.fa3_calls(dtype="bf16"))
    def test_fa3_api(call):       # call: flash_attn_func(q=bf16[1, 37, 4, 64], ..., causal=True)
        out, lse = call.run()     # simulator.fa3.<entry point>(**arrays, **FA3 keywords)

    @settings(deadline=None)
    @given(sst.attention_inputs(dtype="bf16", drawn=True))  # kernel-level, values that shrink
    def test_kernel(case):
        out, lse = flash.forward(case.q, case.k, case.v, **case.kwargs)

Strategies:
    score_values(), score_rows()    float32 logits with +-inf, NaN, +-0, subnormals, huge values
    narrow_values(fmt)              values at the format's edges (e4m3: 448, 464, 2^-9, ties)
    block_params(fmt)               kblock_m, kblock_n, schedule the kernel supports
    masks()                         causal / local window / none
    attention_inputs(...)           q, k, v plus forward keyword arguments (an AttentionCase)
    backward_cases(...)             one FA3 backward call as a recorded-case dict
                                    (simulator.replay.bwd_cases)
    fa3_func_calls(...), fa3_varlen_calls(...), fa3_kvcache_calls(...), fa3_calls(...)
                                    one call of simulator.fa3's flash_attn_func /
                                    flash_attn_varlen_func / flash_attn_with_kvcache in FA3's
                                    keywords (window_size=, softcap=, causal=, num_splits=,
                                    softmax_scale=, descales): an FA3Call, run() calls it
    float_arrays(shape, fmt)        arrays whose values hypothesis draws and shrinks
    warm_up()                       load the MUFU tables before the first example

The fa3_* strategies draw every array value through hypothesis (float_arrays), so a failing
call shrinks to small shapes and few non-zero values; attention_inputs does with drawn=True
(by default its arrays come from a generator seeded by a drawn seed: the device campaigns of
simulator.measure.hypothesis_replay were drawn so; those values do not shrink).

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


def _check_dtype(dtype, name: str = "dtype", optional: bool = True) -> None:
    """Raises ValueError unless ``dtype`` is one of :data:`DTYPES` (or None, where drawn)."""
    if not (optional and dtype is None) and not (isinstance(dtype, str) and dtype in DTYPES):
        raise ValueError(f"{name}: expected {'None or ' if optional else ''}one of "
                         f"{', '.join(DTYPES)}, got {dtype!r}")


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
    """kblock_m, kblock_n and schedule values the kernel supports for ``fmt``.

    Raises:
        ValueError: ``fmt`` is not one of bf16, f16, e4m3.
    """
    _check_dtype(fmt, "fmt", optional=False)
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
        arrays = ", ".join(f"{n}={_brief(getattr(self, n))}" for n in ("q", "k", "v"))
        kwargs = ", ".join(f"{n}={_brief(x)}" for n, x in self.kwargs.items())
        return f"AttentionCase({arrays}, kwargs=dict({kwargs}))"

    def _repr_pretty_(self, printer, cycle) -> None:
        """hypothesis's failure report shows the repr, not the arrays in full."""
        printer.text(repr(self))


@st.composite
def attention_inputs(draw, dtype: str | None = None, max_batch: int = 2, max_seqlen: int = 160,
                     head_dims=(32, 64), edge_values: bool = True, local: bool = True,
                     blocks: bool = True, drawn: bool = False):
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
        drawn: q, k, v from :func:`float_arrays` (every value drawn by hypothesis: a failing
            case shrinks to few non-zero values) instead of the default, a generator seeded
            by a drawn seed (normal values times a drawn scale; the device campaigns of
            ``simulator.measure.hypothesis_replay`` were drawn so, and their values do not
            shrink).
    """
    _check_dtype(dtype)
    fmt = dtype or draw(st.sampled_from(list(DTYPES)))
    b = draw(st.integers(1, max_batch))
    sq = draw(st.integers(1, max_seqlen))
    sk = draw(st.integers(1, max_seqlen))
    hkv = draw(st.sampled_from([1, 2]))
    h = hkv * draw(st.sampled_from([1, 2]))
    d = draw(st.sampled_from(list(head_dims)))
    if drawn:
        arrays = [draw(float_arrays(shape, fmt, edge_values=edge_values))
                  for shape in ((b, sq, h, d), (b, sk, hkv, d), (b, sk, hkv, d))]
        return AttentionCase(*arrays, kwargs=draw(_forward_kwargs(fmt, b, sk, local, blocks)))
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
    return AttentionCase(*arrays, kwargs=draw(_forward_kwargs(fmt, b, sk, local, blocks)))


@st.composite
def _forward_kwargs(draw, fmt: str, b: int, sk: int, local: bool, blocks: bool) -> dict:
    """:func:`attention_inputs`' keyword arguments of ``flash.forward``."""
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
    return kwargs


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


# ---- FA3's Python API: drawn calls of simulator.fa3's entry points, with arrays that shrink ----

def warm_up() -> None:
    """Load what the first emulated call of a process reads (the H200 MUFU tables ex2, rcp,
    lg2 and tanh: about 1 s from the cache, a few seconds on a cold one), so that the cost is
    not charged to the first drawn example. Call it once, before ``@given`` tests run."""
    from .numerics import mufu

    mufu.model().resolve(("ex2", "rcp", "lg2", "tanh"))


def _wave(shape, amplitude: float, freqs, phase: float) -> np.ndarray:
    """``amplitude * sin(sum_i freqs[i] * index_i + phase)`` over the indices of ``shape``,
    float32: every element differs, from a handful of drawn numbers (float64, then rounded)."""
    grid = sum(f * np.arange(n, dtype=np.float64).reshape([-1 if i == j else 1
                                                           for j in range(len(shape))])
               for i, (f, n) in enumerate(zip(freqs, shape, strict=True)))
    return (amplitude * np.sin(grid + phase) * np.ones(shape)).astype(np.float32)


@st.composite
def float_arrays(draw, shape, fmt: str = "bf16", *, edge_values: bool = True):
    """An array of ``shape`` in ``fmt`` ("bf16", "f16" or "e4m3") whose values are drawn by
    hypothesis, so that a failing example shrinks: in half the examples a wave
    ``a * sin(f . index + phase)`` (amplitude 0-8, one frequency per axis, a phase: every
    element differs), and over it a sparse set of elements drawn one by one
    (``hypothesis.extra.numpy.arrays`` over zeros: ordinary values in -8 .. 8 and, with
    ``edge_values``, :func:`narrow_values` of ``fmt``). Shrinking turns the wave off (its flag
    is drawn first) and drops sparse elements: a failure that one value causes shrinks to
    that value in zeros, one the wave causes to a constant array (frequencies 0). Rounded
    to ``fmt`` with ``cvt.rn`` (e4m3: clipped to +-448 first, as ``.satfinite`` does); f16
    values beyond its range become inf.

    Raises:
        ValueError: ``fmt`` is not one of bf16, f16, e4m3.
    """
    from hypothesis.extra import numpy as hnp

    if fmt not in DTYPES:
        raise ValueError(f"fmt: expected one of {', '.join(DTYPES)}, got {fmt!r}")
    shape = tuple(int(n) for n in shape)
    wave = np.zeros(shape, np.float32)
    if draw(st.booleans()):  # drawn first and shrinks to False: a minimal example is sparse
        amplitude = draw(st.floats(0.0, 8.0, width=32))
        freqs = [draw(st.floats(0.0, 3.125, width=32)) for _ in shape]
        wave = _wave(shape, amplitude, freqs, draw(st.floats(0.0, 6.25, width=32)))
    values = st.floats(-8.0, 8.0, width=32)
    if edge_values:
        values = st.one_of(values, narrow_values(fmt))
    sparse = draw(hnp.arrays(np.float32, shape, elements=values.map(np.float32),
                             fill=st.just(np.float32(0.0))))
    x = np.where(sparse != 0, sparse, wave)
    if fmt == "e4m3":
        x = np.clip(x, -448, 448)
    with np.errstate(over="ignore"):  # f16 edge values beyond 65504 become inf on purpose
        return x.astype(DTYPES[fmt])


_SHORT = {np.dtype(v): k for k, v in DTYPES.items()}
_SHORT.update({np.dtype(np.float32): "f32", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"})


def _brief(x) -> str:
    """An argument as a failure report shows it: small integer arrays by value, other arrays
    by format and shape, and where at most three elements are non-zero (a shrunk example)
    those by index: ``bf16[1, 2, 1, 64](zeros, [0, 1, 0, 5]=3)``."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "iu" and x.size <= 8:
            return str(x.tolist())
        text = f"{_SHORT.get(x.dtype, str(x.dtype))}{list(x.shape)}"
        nonzero = np.flatnonzero(x.astype(np.float32) != 0) if x.size <= 2**20 else None
        if nonzero is not None and len(nonzero) <= 3:  # a shrunk example: its few values
            at = [f"{list(map(int, np.unravel_index(i, x.shape)))}={float(x.flat[i]):.6g}"
                  for i in nonzero]
            text += "(zeros" + "".join(f", {a}" for a in at) + ")"
        return text
    if isinstance(x, np.floating):
        return repr(float(x))
    return repr(x)


#: arrays an entry point writes in place (appended keys): copied before every :meth:`FA3Call.run`
_IN_PLACE = ("k_cache", "v_cache")


@dataclass(repr=False)
class FA3Call:
    """One drawn call of an entry point of :mod:`simulator.fa3`, in FA3's own keywords.

    ``fn``: "flash_attn_func", "flash_attn_varlen_func" or "flash_attn_with_kvcache";
    ``arrays``: its array arguments by name (q, k, v, cu_seqlens_q, k_cache, cache_seqlens,
    ...); ``kwargs``: the rest (causal, window_size, softcap, num_splits, softmax_scale,
    descales, and the flag that returns softmax_lse). Its repr is the call with every array
    as format and shape (``q=bf16[1, 37, 4, 64]``), so a failing example reads in one line.
    """

    fn: str
    arrays: dict
    kwargs: dict = field(default_factory=dict)

    def run(self, **extra):
        """Call ``simulator.fa3.<fn>`` (``extra``: more keywords, e.g. ``progress=False``) on
        copies of the arrays it writes in place, so that a call re-runs alike (hypothesis runs
        an example again while shrinking). Returns ``(out, softmax_lse)``."""
        from . import fa3

        args = {n: (x.copy() if n in _IN_PLACE else x) for n, x in self.arrays.items()}
        result = getattr(fa3, self.fn)(**args, **self.kwargs, **extra)
        return result[0], result[1]

    def __getattr__(self, name):
        arrays = self.__dict__.get("arrays", {})
        if name in arrays:
            return arrays[name]
        raise AttributeError(name)

    def __repr__(self) -> str:
        parts = [f"{n}={_brief(x)}" for n, x in self.arrays.items()]
        parts += [f"{n}={_brief(x)}" for n, x in self.kwargs.items()]
        return f"{self.fn}({', '.join(parts)})"

    def _repr_pretty_(self, printer, cycle) -> None:
        """hypothesis's failure report (its pretty printer would list a dataclass's fields,
        the arrays in full): the repr."""
        printer.text(repr(self))


@st.composite
def _fa3_options(draw, fmt: str, max_seqlen: int, num_splits=(1, 1, 0, 2, 3),
                 pack_gqa=(None, None, True, False)):
    """FA3's keywords common to the entry points: causal, window_size, softcap, num_splits,
    softmax_scale (None: FA3's 1/sqrt(head_dim)), pack_gqa (left out when None)."""
    kw = {"causal": draw(st.booleans())}
    if draw(st.booleans()):
        side = st.one_of(st.just(-1), st.integers(0, max_seqlen))
        kw["window_size"] = (draw(side), draw(side))
    kw["softcap"] = float(draw(st.sampled_from((0.0, 0.0, 5.0, 30.0))))
    kw["num_splits"] = draw(st.sampled_from(num_splits))
    if draw(st.booleans()):
        kw["softmax_scale"] = float(draw(st.sampled_from((0.05, 0.125, 0.5, 1.0))))
    pack = draw(st.sampled_from(pack_gqa))
    if pack is not None:
        kw["pack_gqa"] = pack
    return kw


def _heads(draw, head_dims):
    hkv = draw(st.sampled_from((1, 2)))
    return hkv * draw(st.sampled_from((1, 2))), hkv, draw(st.sampled_from(list(head_dims)))


def _descales(draw, fmt: str, batch: int, hkv: int) -> dict:
    """FP8 descales as FA3 takes them: float32 [batch, heads_kv] (or none)."""
    if fmt != "e4m3" or not draw(st.booleans()):
        return {}
    ds = st.sampled_from((0.25, 0.5, 1.0, 2.0))
    return {n: np.array([[draw(ds) for _ in range(hkv)] for _ in range(batch)], np.float32)
            for n in ("q_descale", "k_descale", "v_descale")}


@st.composite
def fa3_func_calls(draw, dtype: str | None = None, max_batch: int = 2, max_seqlen: int = 64,
                   head_dims=(64,), edge_values: bool = True):
    """:class:`FA3Call` of ``flash_attn_func(q, k, v, ...)``: q [batch, seqlen_q, heads,
    head_dim], k / v [batch, seqlen_k, heads_kv, head_dim] (GQA 1-2), in ``dtype`` ("bf16",
    "f16", "e4m3"; drawn when None), values from :func:`float_arrays`; causal, window_size,
    softcap, num_splits (1, 0 = FA3's heuristic, 2, 3), softmax_scale, pack_gqa, e4m3
    descales [batch, heads_kv]; ``return_attn_probs=True`` (run() returns out and
    softmax_lse)."""
    _check_dtype(dtype)
    fmt = dtype or draw(st.sampled_from(list(DTYPES)))
    b = draw(st.integers(1, max_batch))
    sq, sk = draw(st.integers(1, max_seqlen)), draw(st.integers(1, max_seqlen))
    h, hkv, d = _heads(draw, head_dims)
    arrays = {"q": draw(float_arrays((b, sq, h, d), fmt, edge_values=edge_values)),
              "k": draw(float_arrays((b, sk, hkv, d), fmt, edge_values=edge_values)),
              "v": draw(float_arrays((b, sk, hkv, d), fmt, edge_values=edge_values))}
    kw = draw(_fa3_options(fmt, max_seqlen))
    kw.update(_descales(draw, fmt, b, hkv))
    kw["return_attn_probs"] = True
    return FA3Call("flash_attn_func", arrays, kw)


@st.composite
def fa3_varlen_calls(draw, dtype: str | None = None, max_batch: int = 3, max_seqlen: int = 48,
                     head_dims=(64,), edge_values: bool = True):
    """:class:`FA3Call` of ``flash_attn_varlen_func``: 1..``max_batch`` packed sequences of
    1..``max_seqlen`` query rows and keys each, q [total_q, heads, head_dim], k / v [total_k,
    heads_kv, head_dim], cu_seqlens_q / cu_seqlens_k int32 [batch + 1], max_seqlen_q /
    max_seqlen_k the longest sequences, in half the calls seqused_k int32 [batch] (0 to each
    sequence's keys); the keywords of :func:`fa3_func_calls` (num_splits 1 or 0: FA3's
    heuristic per sequence; pack_gqa None or True)."""
    _check_dtype(dtype)
    fmt = dtype or draw(st.sampled_from(list(DTYPES)))
    b = draw(st.integers(1, max_batch))
    rows = draw(st.lists(st.integers(1, max_seqlen), min_size=b, max_size=b))
    keys = draw(st.lists(st.integers(1, max_seqlen), min_size=b, max_size=b))
    h, hkv, d = _heads(draw, head_dims)
    arrays = {"q": draw(float_arrays((sum(rows), h, d), fmt, edge_values=edge_values)),
              "k": draw(float_arrays((sum(keys), hkv, d), fmt, edge_values=edge_values)),
              "v": draw(float_arrays((sum(keys), hkv, d), fmt, edge_values=edge_values)),
              "cu_seqlens_q": np.concatenate([[0], np.cumsum(rows)]).astype(np.int32),
              "cu_seqlens_k": np.concatenate([[0], np.cumsum(keys)]).astype(np.int32)}
    if draw(st.booleans()):  # keys of each sequence actually used, 0 included
        arrays["seqused_k"] = np.array([draw(st.integers(0, n)) for n in keys], np.int32)
    kw = {"max_seqlen_q": max(rows), "max_seqlen_k": max(keys)}
    # pack_gqa=False with FA3's split heuristic on a varlen GQA launch is not emulated
    kw.update(draw(_fa3_options(fmt, max_seqlen, num_splits=(1, 1, 0), pack_gqa=(None, True))))
    kw.update(_descales(draw, fmt, b, hkv))
    kw["return_attn_probs"] = True
    return FA3Call("flash_attn_varlen_func", arrays, kw)


@st.composite
def fa3_kvcache_calls(draw, dtype: str | None = None, max_batch: int = 2, max_cache: int = 96,
                      max_seqlen_q: int = 4, head_dims=(64,), edge_values: bool = True):
    """:class:`FA3Call` of ``flash_attn_with_kvcache`` (decode and short prefill): q [batch,
    1..``max_seqlen_q``, heads, head_dim], k_cache / v_cache [batch, seqlen_cache, heads_kv,
    head_dim] (seqlen_cache up to ``max_cache``), new keys k / v [batch, seqlen_new, ...]
    (seqlen_new 0..seqlen_q; none when 0) appended at cache_seqlens (int32 [batch]);
    ``dtype`` "bf16" or "f16" (drawn when None); the keywords of :func:`fa3_func_calls` with
    num_splits 0 (FA3's heuristic), 1, 2, 4 and pack_gqa None or True;
    ``return_softmax_lse=True``. run() appends into
    copies of the caches."""
    _check_dtype(dtype)
    fmt = dtype or draw(st.sampled_from(("bf16", "f16")))
    b = draw(st.integers(1, max_batch))
    sq = draw(st.integers(1, max_seqlen_q))
    s_new = draw(st.integers(0, sq))
    # FA3 appends only into a cache at least seqlen_q long (hopper/flash_api.cpp)
    s_cache = draw(st.integers(sq if s_new else 1, max(max_cache, sq)))
    h, hkv, d = _heads(draw, head_dims)
    arrays = {"q": draw(float_arrays((b, sq, h, d), fmt, edge_values=edge_values)),
              "k_cache": draw(float_arrays((b, s_cache, hkv, d), fmt, edge_values=edge_values)),
              "v_cache": draw(float_arrays((b, s_cache, hkv, d), fmt, edge_values=edge_values))}
    if s_new:
        arrays["k"] = draw(float_arrays((b, s_new, hkv, d), fmt, edge_values=edge_values))
        arrays["v"] = draw(float_arrays((b, s_new, hkv, d), fmt, edge_values=edge_values))
    arrays["cache_seqlens"] = np.array(
        [draw(st.integers(0 if s_new else 1, s_cache - s_new)) for _ in range(b)], np.int32)
    # a cache with cache_seqlens is a varlen launch: pack_gqa=False with splits not emulated
    kw = draw(_fa3_options(fmt, max_cache, num_splits=(0, 0, 1, 2, 4), pack_gqa=(None, True)))
    kw["return_softmax_lse"] = True
    return FA3Call("flash_attn_with_kvcache", arrays, kw)


def fa3_calls(dtype: str | None = None, head_dims=(64,), edge_values: bool = True):
    """Any of :func:`fa3_func_calls`, :func:`fa3_varlen_calls`, :func:`fa3_kvcache_calls`
    (the KV cache in bf16 / f16 only: with ``dtype="e4m3"`` it is left out).

    Raises:
        ValueError: ``dtype`` is not None or one of bf16, f16, e4m3.
    """
    _check_dtype(dtype)
    kinds = [fa3_func_calls(dtype, head_dims=head_dims, edge_values=edge_values),
             fa3_varlen_calls(dtype, head_dims=head_dims, edge_values=edge_values)]
    if dtype != "e4m3":
        kinds.append(fa3_kvcache_calls(dtype, head_dims=head_dims, edge_values=edge_values))
    return st.one_of(*kinds)
