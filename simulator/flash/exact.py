"""Switching the forward's hardware approximations to exact arithmetic, one by one.

An :class:`Exactness` passed to :func:`simulator.flash.forward` (``exact=``) makes the mainloop
take the generic path of this module: every operation is either the H200's instruction model
(float32 ``.ftz`` FFMA/FMUL/FADD of :mod:`simulator.numerics`, the MUFU models of
:mod:`simulator.numerics.mufu`, the tensor-core model of :mod:`simulator.mma`, the ``cvt``
roundings) or, where its switch is on, the same operation in float64 on the exact values.
With every switch off the generic path gives the default path's bits (tests/test_budget.py);
with every switch on, the forward is attention in float64, which rounded once to the output
dtype is :func:`simulator.flash.reference` rounded once. :mod:`simulator.budget` uses it to
attribute the emulator's error to each approximation.

Values that an approximated operation consumes are float32 registers (a float64 value is
rounded to nearest first), as on the device; exact operations keep float64.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from .. import mma
from ..gpus import DEFAULT_GPU
from ..hw import quad_allreduce, thread_reduce
from ..numerics import convert, ffma, fmul, fsub
from ..numerics.mufu import LN2_F32, ex2, lg2, rcp, tanh

_NEG_INF = -np.inf


@dataclass(frozen=True)
class Exactness:
    """Which of the forward's hardware approximations run exact (float64) instead.

    Attributes (all False: the H200's arithmetic):
        p_rounding: P is not rounded to the input format (bf16, f16, or e4m3 for FP8, where it
            is P' = 2^8 P) before the PV GEMM (``cvt.rn`` in FA3's mainloop).
        ex2: MUFU.EX2 (``ex2.approx.ftz.f32``) becomes 2^x in float64.
        rcp_lg2: MUFU.RCP and MUFU.LG2 of finalize (1/row_sum, the LSE's log) become exact.
        ffma: the softmax's and the O rescale's float32 FFMA/FMUL/FADD (``.ftz``, with the
            compiler's FFMA contractions) and the float32 host constants (scale_log2,
            softcap_val, descale products) become float64.
        tanh: MUFU.TANH of softcap (``tanh.approx.f32``) becomes tanh in float64.
        mma: the tensor core's alignment and truncation of each k-step and its float32
            accumulator become exact dot products in float64 (QK^T and PV).
        o_rounding: O is not rounded to the output dtype and LSE not to float32 (the outputs
            are float64).
    """

    p_rounding: bool = False
    ex2: bool = False
    rcp_lg2: bool = False
    ffma: bool = False
    tanh: bool = False
    mma: bool = False
    o_rounding: bool = False

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"Exactness.{f.name}: expected True or False, got {value!r}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The switches, in the order of the mainloop."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def all(cls, **overrides) -> Exactness:
        """Every switch on (exact), then ``overrides`` (e.g. ``ex2=False``)."""
        return cls(**{**{name: True for name in cls.names()}, **overrides})


def check(exact) -> Exactness | None:
    """``exact`` as :func:`simulator.flash.forward` takes it: None or an :class:`Exactness`.

    Raises:
        ValueError: another type.
    """
    if exact is not None and not isinstance(exact, Exactness):
        raise ValueError(f"exact: expected None or a simulator.flash.Exactness, got "
                         f"{type(exact).__name__}")
    return exact


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


class Ops:
    """The arithmetic of one :class:`Exactness`: each method is the instruction model on
    float32 registers, or float64 where its switch is on."""

    def __init__(self, exact: Exactness, mufu: str = DEFAULT_GPU):
        self.exact = exact
        self.mufu = mufu

    def regs(self, x) -> np.ndarray:
        """``x`` as the softmax's registers: float64 with exact arithmetic, else float32."""
        return _f64(x) if self.exact.ffma else _f32(x)

    def mul(self, a, b):
        return _f64(a) * _f64(b) if self.exact.ffma else fmul(_f32(a), _f32(b), ftz=True)

    def sub(self, a, b):
        return _f64(a) - _f64(b) if self.exact.ffma else fsub(_f32(a), _f32(b), ftz=True)

    def fma(self, a, b, c):
        if self.exact.ffma:
            return _f64(a) * _f64(b) + _f64(c)
        return ffma(_f32(a), _f32(b), _f32(c), ftz=True)

    def exp2(self, x):
        return np.exp2(_f64(x)) if self.exact.ex2 else ex2(_f32(x), model=self.mufu)

    def rcp(self, x):
        return 1.0 / _f64(x) if self.exact.rcp_lg2 else rcp(_f32(x), model=self.mufu)

    def lg2(self, x):
        return np.log2(_f64(x)) if self.exact.rcp_lg2 else lg2(_f32(x), model=self.mufu)

    def tanh(self, x):
        return np.tanh(_f64(x)) if self.exact.tanh else tanh(_f32(x), model=self.mufu)

    def ln2(self):
        return np.log(2.0) if self.exact.ffma else LN2_F32

    def row_max(self, scores, prev):
        """Row maximum over a thread's columns, then over its quad (max is exact in either
        precision; the float32 path is hw's thread_reduce + quad_allreduce)."""
        if not self.exact.ffma:
            if prev is None:
                return quad_allreduce(thread_reduce(scores, op="max", zero_init=True), "max")
            return quad_allreduce(thread_reduce(scores, _f32(prev), op="max", zero_init=False),
                                  "max")
        m = _quad(scores.max(axis=-1), np.max)
        return m if prev is None else np.maximum(_f64(prev), m)

    def row_sum(self, p, start):
        """A thread's sum of its columns of ``p``, after ``start`` (None: from zero)."""
        if self.exact.ffma:
            total = _f64(p).sum(axis=-1)
            return total if start is None else _f64(start) + total
        if start is None:
            return thread_reduce(_f32(p), op="sum", zero_init=True)
        return thread_reduce(_f32(p), _f32(start), op="sum", zero_init=False)

    def quad_sum(self, x):
        return _quad(_f64(x), np.sum) if self.exact.ffma else quad_allreduce(_f32(x), "sum")


def _quad(x, reduce):
    """``x`` [..., 128, nrow] reduced over each quad (4 consecutive lanes) and broadcast back."""
    shape = x.shape
    q = x.reshape(shape[:-2] + (shape[-2] // 4, 4, shape[-1]))
    return np.broadcast_to(reduce(q, axis=-2, keepdims=True), q.shape).reshape(shape)


# ---- the Softmax methods on the generic path ------------------------------------------------
def max_get_scale(soft, scores, is_first: bool, check_inf: bool):
    """:meth:`simulator.flash.Softmax.max_get_scale` with ``soft.ops``'s arithmetic."""
    ops = soft.ops
    x = ops.regs(scores)
    if is_first:
        soft.row_max = ops.row_max(x, None)
        soft._row_sum_scale = None
        return np.ones_like(soft.row_max)
    prev = soft.row_max
    soft.row_max = ops.row_max(x, prev)
    cur = soft.row_max
    if check_inf:
        cur = np.where(cur == _NEG_INF, cur.dtype.type(0), cur)
    scale = ops.exp2(ops.mul(ops.sub(prev, cur), _scale(soft)))
    soft._row_sum_scale = scale
    return scale


def online_softmax(soft, scores, is_first: bool, check_inf: bool):
    """:meth:`simulator.flash.Softmax.online_softmax` with ``soft.ops``'s arithmetic (the
    row_sum rescale fused into the first add, as the FFMA of the compiled kernel)."""
    ops = soft.ops
    scale = _scale(soft)
    if soft.max_offset:
        max_scaled = ops.fma(soft.row_max, scale, -float(soft.max_offset))
    else:
        max_scaled = ops.mul(soft.row_max, scale)
    if check_inf:
        max_scaled = np.where(soft.row_max == _NEG_INF, max_scaled.dtype.type(0), max_scaled)
    p = ops.exp2(ops.fma(ops.regs(scores), scale[..., None], -max_scaled[..., None]))
    if is_first:
        soft.row_sum = ops.row_sum(p, None)
    else:
        start = ops.fma(soft._row_sum_scale, soft.row_sum, p[..., 0])
        soft.row_sum = start if p.shape[-1] == 1 else ops.row_sum(p[..., 1:], start)
    return p


def finalize(soft, final_scale):
    """:meth:`simulator.flash.Softmax.finalize` with ``soft.ops``'s arithmetic."""
    ops = soft.ops
    total = ops.quad_sum(soft.row_sum)
    soft.row_sum = total
    empty = (total == 0) | np.isnan(total)
    inv = np.where(empty, 0, ops.rcp(np.where(empty, 1, total)))
    scores_scale = ops.mul(inv, final_scale)
    if soft.max_offset:
        total = ops.mul(total, 2.0**-8)
    empty = (total == 0) | np.isnan(total)
    ln2_scale = ops.mul(_scale(soft), ops.ln2())
    log_sum = ops.mul(ops.lg2(np.where(empty, 1, total)), ops.ln2())
    lse = ops.fma(soft.row_max, ln2_scale, log_sum)
    soft.lse = np.where(empty, _NEG_INF, lse).astype(lse.dtype)
    return scores_scale


def _scale(soft):
    return np.broadcast_to(soft.ops.regs(soft.scale_log2), soft.row_max.shape)


# ---- the mainloop's other steps -------------------------------------------------------------
def gemm(a, b, c, instruction, exact: Exactness, compiled: bool = False) -> np.ndarray:
    """``c + a @ b`` on the tensor core (:func:`simulator.mma.gemm`), or exact in float64.

    ``a`` not in the instruction's format (P kept unrounded) on the tensor core: the
    alignment and truncation of each k-step applied to the exact products. ``compiled``: the
    tensor core's steps on the compiled engine (the launch's evaluator says; same bits).
    """
    if exact.mma:
        with np.errstate(invalid="ignore"):  # inf inputs: NaN, as the tensor core gives
            return _f64(c) + np.matmul(_f64(a), _f64(b))
    ins = mma.instruction_for(instruction)
    c = _f32(c)
    if a.dtype == b.dtype:
        return mma.gemm(a, b, c, instruction=ins, compiled=compiled)
    a64, b64 = _f64(a), _f64(b)
    for k0 in range(0, a64.shape[-1], ins.k):  # the kernel's k-steps, as mma.gemm issues them
        c = mma.dot_add(a64[..., k0:k0 + ins.k], b64[..., k0:k0 + ins.k, :], c, ins.params,
                        compiled=compiled)
    return c


def softcap(s, softcap_val, mufu: str, exact: Exactness) -> np.ndarray:
    """``tanh(s * softcap_val)`` (FMUL then MUFU.TANH), each exact where its switch says."""
    ops = Ops(exact, mufu)
    return ops.tanh(ops.mul(s, softcap_val))


def p_operand(p, fmt: str, exact: Exactness) -> np.ndarray:
    """P as the PV GEMM's A operand: ``cvt.rn`` to ``fmt``, or unrounded."""
    return p if exact.p_rounding else convert(_f32(p), fmt)


def output(o, fmt: str, exact: Exactness) -> np.ndarray:
    """O as stored: ``cvt.rn`` to the output format ``fmt`` (a float64 O, from exact steps,
    rounded once: :func:`round_once`), or float64."""
    if exact.o_rounding:
        return _f64(o)
    return round_once(o, fmt) if o.dtype == np.float64 else convert(_f32(o), fmt)


def round_once(x, fmt: str) -> np.ndarray:
    """float64 ``x`` rounded once, to nearest even, to ``fmt`` (``"bf16"`` or ``"f16"``).

    NumPy's float64 -> float16 cast rounds once; ml_dtypes' float64 -> bfloat16 cast rounds
    through float32 (twice), so bf16 is rounded here to 8 significant bits first (exact in
    float64), then cast. Values beyond bf16's range become +-inf, as a single rounding does.
    """
    x = _f64(x)
    if fmt == "f16":
        return x.astype(np.float16)
    if fmt != "bf16":
        raise ValueError(f"fmt: expected 'bf16' or 'f16', got {fmt!r}")
    _, e = np.frexp(x)
    step = np.maximum(e - 8, -133)  # bf16: 8 significant bits; subnormals step 2^-133
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.where(np.isfinite(x), np.ldexp(np.round(np.ldexp(x, -step)), step), x)
        return r.astype(convert(np.zeros(1, np.float32), "bf16").dtype)


def cta_scales(cfg, b, hkv):
    """(scale_log2, softcap_val, final_scale) per CTA in float64 from the exact constants
    (:func:`simulator.flash.constants.host_constants` before their float32 rounding; the
    softmax scale itself is the float32 one the reference uses too)."""
    scale = float(cfg.consts["softmax_scale"])
    qk = _f64(cfg.q_descale[b, hkv]) * _f64(cfg.k_descale[b, hkv])
    log2e = 1.0 / np.log(2.0)
    if cfg.softcap > 0:
        scale_log2 = np.full(len(b), cfg.softcap * log2e)
        softcap_val = scale / cfg.softcap * qk
    else:
        scale_log2 = scale * log2e * qk
        softcap_val = np.zeros(len(b))
    return scale_log2, softcap_val, _f64(cfg.v_descale[b, hkv])
