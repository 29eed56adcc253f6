"""Slow, independent float32 reference in exact rational arithmetic (for tests only).

It shares no code with simulator.numerics: values become Python Fractions, the operation is
exact, and one round-to-nearest-even to binary32 (subnormals, overflow to inf) follows.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

NAN = 0x7FFFFFFF


def decode(bits: int):
    """uint32 -> Fraction, or 'nan', '+inf', '-inf'; -0.0 is returned as the tuple ('zero', sign)."""
    sign = -1 if bits >> 31 else 1
    e = (bits >> 23) & 0xFF
    m = bits & 0x7FFFFF
    if e == 0xFF:
        return "nan" if m else ("+inf" if sign > 0 else "-inf")
    if e == 0 and m == 0:
        return ("zero", sign)
    if e == 0:
        return sign * Fraction(m, 1 << 149)
    return sign * Fraction((1 << 23) | m) * Fraction(2) ** (e - 150)


def round_f32(x: Fraction, zero_sign: int = 1) -> int:
    """Round an exact rational to binary32 (RNE), returning the bit pattern."""
    if x == 0:
        return 0 if zero_sign > 0 else 0x80000000
    sign = 0x80000000 if x < 0 else 0
    x = abs(x)
    e = math.floor(math.log2(x.numerator) - math.log2(x.denominator))
    while Fraction(2) ** e > x:
        e -= 1
    while Fraction(2) ** (e + 1) <= x:
        e += 1
    q = max(e, -126) - 23  # quantum: ulp of the binade (subnormal quantum 2^-149)
    scaled = x / Fraction(2) ** q
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    value = n * Fraction(2) ** q
    if value >= Fraction(2) ** 128:
        return sign | 0x7F800000
    return sign | struct.unpack("<I", struct.pack("<f", float(value)))[0]


def exact_op(op: str, *bits: int) -> int:
    """Reference result bits of fadd/fsub/fmul/ffma (no ftz) for operand bit patterns."""
    vals = [decode(b) for b in bits]
    fl = [struct.unpack("<f", struct.pack("<I", b))[0] for b in bits]
    if any(isinstance(v, str) for v in vals):
        # specials: IEEE semantics of Python floats, NaN canonical
        a = fl
        with_nan = {"fadd": lambda: a[0] + a[1], "fsub": lambda: a[0] - a[1],
                    "fmul": lambda: a[0] * a[1], "ffma": lambda: _fma_special(*a)}
        try:
            r = with_nan[op]()
        except (OverflowError, ValueError):
            r = math.nan
        if math.isnan(r):
            return NAN
        return struct.unpack("<I", struct.pack("<f", r))[0]
    def num(v):
        return Fraction(0) if isinstance(v, tuple) else v
    def zsign(v):
        return v[1] if isinstance(v, tuple) else (1 if v > 0 else -1)
    x = [num(v) for v in vals]
    if op == "fmul":
        r = x[0] * x[1]
        zs = zsign(vals[0]) * zsign(vals[1])
        return round_f32(r, zs)
    if op in ("fadd", "fsub"):
        s1 = zsign(vals[1]) * (-1 if op == "fsub" else 1)
        r = x[0] + (-x[1] if op == "fsub" else x[1])
        zs = -1 if (zsign(vals[0]) < 0 and s1 < 0) else 1
        return round_f32(r, zs)
    p_sign = zsign(vals[0]) * zsign(vals[1])
    p = x[0] * x[1]
    r = p + x[2]
    if p == 0 and x[2] == 0:
        zs = -1 if (p_sign < 0 and zsign(vals[2]) < 0) else 1
    else:
        zs = 1
    return round_f32(r, zs)


TINY = Fraction(2) ** -126 * (1 - Fraction(2) ** -25)


def exact_op_ftz(op: str, *bits: int) -> int:
    """Reference with the .ftz rules measured on the H200: subnormal inputs read as signed zero;
    a result whose exact value is tiny after rounding to 24 bits with unbounded exponent (below
    2^-126 * (1 - 2^-25) in magnitude) is written as zero of its sign."""
    flushed = [b & 0x80000000 if (b & 0x7F800000) == 0 else b for b in bits]
    out = exact_op(op, *flushed)
    vals = [decode(b) for b in flushed]
    if any(isinstance(v, str) for v in vals):
        return out
    x = [Fraction(0) if isinstance(v, tuple) else v for v in vals]
    exact = {"fadd": lambda: x[0] + x[1], "fsub": lambda: x[0] - x[1],
             "fmul": lambda: x[0] * x[1], "ffma": lambda: x[0] * x[1] + x[2]}[op]()
    if exact != 0 and abs(exact) < TINY:
        return out & 0x80000000
    if (out & 0x7F800000) == 0:
        return out & 0x80000000
    return out


def _fma_special(a, b, c):
    p = a * b
    if math.isnan(p):
        return math.nan
    return p + c
