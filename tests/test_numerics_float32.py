"""float32 ops against an independent exact-rational reference, and their input rules.

The device agreement of the same functions is tested in test_device_evidence.py; here the
emulator is checked against exact arithmetic (tests/exact_reference.py shares no code with it).
"""

from __future__ import annotations

import numpy as np
import pytest
from exact_reference import exact_op, exact_op_ftz
from hypothesis import given
from hypothesis import strategies as st

from simulator import numerics as nm
from simulator.replay.numerics_cases import SPECIALS, arith_block

OPS = ["fadd", "fsub", "fmul", "ffma"]
u32 = st.integers(min_value=0, max_value=0xFFFFFFFF)


def _f(*bits):
    return [np.array(b, dtype=np.uint32).view(np.float32) for b in bits]


def _run(op, operands, ftz):
    return getattr(nm, op)(*[o.view(np.float32) for o in operands], ftz=ftz).view(np.uint32)


@pytest.mark.parametrize("ftz", [False, True])
@pytest.mark.parametrize("op", OPS)
def test_adversarial_block_matches_exact_reference(op, ftz):
    ref_fn = exact_op_ftz if ftz else exact_op
    operands = arith_block(op, 7, size=1500)
    out = _run(op, operands, ftz)
    ref = np.array([ref_fn(op, *(int(o[i]) for o in operands)) for i in range(len(out))],
                   dtype=np.uint32)
    bad = np.nonzero(out != ref)[0]
    assert bad.size == 0, [(op, [hex(int(o[i])) for o in operands], hex(int(out[i])),
                            hex(int(ref[i]))) for i in bad[:5]]


@pytest.mark.parametrize("op", OPS)
def test_all_special_pairs(op):
    grid = np.array(np.meshgrid(*([SPECIALS] * (3 if op == "ffma" else 2)), indexing="ij"))
    operands = [g.ravel() for g in grid]
    for ftz in (False, True):
        ref_fn = exact_op_ftz if ftz else exact_op
        out = _run(op, operands, ftz)
        ref = np.array([ref_fn(op, *(int(o[i]) for o in operands)) for i in range(out.size)],
                       dtype=np.uint32)
        assert np.array_equal(out, ref), op


def test_ffma_double_rounding_trap():
    # a*b = 2^-24 * (1 - 2^-46) is half an ulp of c = 1 + 2^-23, minus a sliver far below
    # float64's resolution of the sum: RN53(a*b + c) is the float32 midpoint between c and
    # 1 + 2^-22, whose tie would go to the even 1 + 2^-22; the exact sum is below the
    # midpoint, so fma must give c.
    j = 1
    a = np.uint32((127 << 23) | j)                      # 1 + 2^-23
    b = np.uint32(((127 - 24 - 1) << 23) | ((1 << 23) - 2 * j))  # 2^-24 * (1 - 2^-23)
    c = np.uint32(0x3F800001)                           # 1 + 2^-23 (odd)
    naive = (np.float64(a.view(np.float32)) * np.float64(b.view(np.float32))
             + np.float64(c.view(np.float32))).astype(np.float32)
    out = nm.ffma(*_f(a, b, c))
    assert int(out.view(np.uint32)) == exact_op("ffma", int(a), int(b), int(c)) == int(c)
    assert int(naive.view(np.uint32)) != int(out.view(np.uint32)), "trap did not trigger"


def test_ftz_tininess_after_rounding():
    # measured on the H200 (numerics_report.json, ffma_ftz): 2^-24 * 2^-126 - 2^-126 is
    # -(2^-126)(1 - 2^-24): flushed to -0 under .ftz, although it rounds to -2^-126 otherwise
    a, b, c = _f(0x33800000, 0x00800000, 0x80800000)
    assert int(nm.ffma(a, b, c).view(np.uint32)) == 0x80800000
    assert int(nm.ffma(a, b, c, ftz=True).view(np.uint32)) == 0x80000000


@given(u32, u32, u32, st.booleans())
def test_ffma_random_bits_property(a, b, c, ftz):
    ref = (exact_op_ftz if ftz else exact_op)("ffma", a, b, c)
    assert int(nm.ffma(*_f(a, b, c), ftz=ftz).view(np.uint32)) == ref


@given(st.sampled_from(["fadd", "fsub", "fmul"]), u32, u32, st.booleans())
def test_binary_random_bits_property(op, a, b, ftz):
    ref = (exact_op_ftz if ftz else exact_op)(op, a, b)
    assert int(getattr(nm, op)(*_f(a, b), ftz=ftz).view(np.uint32)) == ref


def test_max_min_rules():
    nan, one, pz, nz = 0x7FC00000, 0x3F800000, 0x00000000, 0x80000000
    cases = [  # (a, b, max, min): PTX max/min, NaN loses, +0 > -0
        (nan, one, one, one), (one, nan, one, one), (nan, 0xFFFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF),
        (pz, nz, pz, nz), (nz, pz, pz, nz), (0x00000001, nz, 0x00000001, nz),
    ]
    for a, b, mx, mn in cases:
        fa, fb = _f(a, b)
        assert int(nm.fmax(fa, fb).view(np.uint32)) == mx
        assert int(nm.fmin(fa, fb).view(np.uint32)) == mn
    # ftz: the subnormal 2^-149 is read as +0, so max(+0-ish, -0) = +0 and min = -0
    fa, fb = _f(0x00000001, nz)
    assert int(nm.fmax(fa, fb, ftz=True).view(np.uint32)) == pz
    assert int(nm.fmin(fa, fb, ftz=True).view(np.uint32)) == nz


def test_nan_results_are_canonical():
    inf, ninf = _f(0x7F800000, 0xFF800000)
    assert int(nm.fadd(inf, ninf).view(np.uint32)) == 0x7FFFFFFF
    payload = _f(0xFFA00001)[0]
    assert int(nm.fmul(payload, np.float32(1)).view(np.uint32)) == 0x7FFFFFFF


def test_broadcasting_and_shapes():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.float32(2.0)
    c = np.ones((3,), dtype=np.float32)
    out = nm.ffma(a, b, c)
    assert out.shape == (2, 3) and out.dtype == np.float32
    assert np.array_equal(out.view(np.uint32), (a * 2 + 1).view(np.uint32))
    assert nm.fadd(np.float32(1), np.float32(2)).shape == ()


@pytest.mark.parametrize("bad", [np.ones(3), 1.0, [1.0], np.ones(3, dtype=np.float16)])
def test_non_float32_raises_type_error_naming_argument(bad):
    with pytest.raises(TypeError, match=r"^b: expected"):
        nm.fadd(np.ones(3, dtype=np.float32), bad)
    with pytest.raises(TypeError, match=r"^c: expected"):
        nm.ffma(np.ones(3, dtype=np.float32), np.ones(3, dtype=np.float32), bad)


def test_inputs_are_not_modified():
    a = np.array([1e-40, -1e-40, 1.0], dtype=np.float32)
    before = a.copy()
    nm.fmul(a, a, ftz=True)
    assert np.array_equal(a.view(np.uint32), before.view(np.uint32))


def test_ftz_threshold_exact_cases():
    # The fmul case was confirmed on the H200 (0x00800000).
    # fmul: the exact product is 2^-126 * (1 - 2^-25), the tininess threshold itself: a tie
    # that rounds to the even 2^-126, so it is not tiny and survives .ftz.
    a, b = _f(0x21118E00, 0x1EE12000)
    assert int(nm.fmul(a, b, ftz=True).view(np.uint32)) == 0x00800000
    # ffma: the float64 sum lands exactly on -2^-126 * (1 - 2^-25) while the exact value is a
    # sliver smaller in magnitude: tiny, so .ftz gives -0 (the sign of err decides).
    a, b, c = _f(0x1B12DEC1, 0x1B54A684, 0x8080000F)
    assert int(nm.ffma(a, b, c, ftz=True).view(np.uint32)) == exact_op_ftz(
        "ffma", 0x1B12DEC1, 0x1B54A684, 0x8080000F) == 0x80000000


def test_flag_and_container_types_are_checked():
    x = np.ones(3, dtype=np.float32)
    with pytest.raises(TypeError, match="^ftz: expected True or False"):
        nm.fmul(x, x, ftz="no")
    assert nm.fmul(x, x, ftz=np.True_).dtype == np.float32
    with pytest.raises(TypeError, match="plain numpy float32 array, got MaskedArray"):
        nm.fadd(np.ma.masked_array(x, mask=[0, 1, 0]), x)
    with pytest.raises(TypeError, match="^x: expected a float32"):
        nm.to_bits(np.ones(3))
    with pytest.raises(TypeError, match="^x: expected a float32"):
        nm.to_bits(np.ones(1, ">f4"))
    with pytest.raises(TypeError, match="^x: expected a float32"):
        nm.flush_subnormal(np.ones(3))


def test_zero_heavy_data_keeps_its_bits():
    z = np.zeros(1000, dtype=np.float32)
    n = np.full(1000, -0.0, dtype=np.float32)
    assert np.all(nm.ffma(z, n, n).view(np.uint32) == 0x80000000)  # -0 + -0
    assert np.all(nm.ffma(z, z, n).view(np.uint32) == 0)           # +0 + -0
