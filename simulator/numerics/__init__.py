"""Numerics layer: float32 and narrow-format arithmetic with the semantics of sm_90 PTX.

Public API:
    fadd, fsub, fmul, ffma, fmax, fmin  -- float32 ops (``ftz=`` keyword), see :mod:`.float32`
    convert, to_float32, convert_x2, FORMATS, format_of -- cvt to/from bf16, f16, e4m3, e5m2, see :mod:`.cvt`
    flush_subnormal, canonicalize_nan, to_bits, from_bits -- bit helpers, see :mod:`.bits`
    ex2, rcp, lg2, tanh, exp2f_fast, expf_fast, logf_fast, recip_fast, mufu_model_names -- MUFU
        approximations of a GPU (model="h200", the default, "h100", ...) or correctly rounded
        (model="ideal"), see :mod:`.mufu`
"""

from .bits import (
    CANONICAL_NAN_BITS,
    canonicalize_nan,
    flush_subnormal,
    from_bits,
    hexbits,
    require_float32,
    to_bits,
)
from .cvt import FORMATS, convert, convert_x2, format_of, to_float32
from .float32 import fadd, fdiv, ffma, fmax, fmin, fmul, fsub
from .mufu import MufuDataError, ex2, exp2f_fast, expf_fast, lg2, logf_fast, rcp, recip_fast, tanh
from .mufu import model_names as mufu_model_names

__all__ = [
    "CANONICAL_NAN_BITS",
    "FORMATS",
    "MufuDataError",
    "ex2",
    "exp2f_fast",
    "expf_fast",
    "lg2",
    "logf_fast",
    "mufu_model_names",
    "rcp",
    "recip_fast",
    "tanh",
    "canonicalize_nan",
    "convert",
    "convert_x2",
    "fadd",
    "ffma",
    "flush_subnormal",
    "format_of",
    "fmax",
    "fmin",
    "fmul",
    "fdiv",
    "from_bits",
    "fsub",
    "hexbits",
    "require_float32",
    "to_bits",
    "to_float32",
]
