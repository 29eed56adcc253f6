"""Conversion API rules (device agreement is in test_device_evidence.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from simulator import numerics as nm


def _f(*vals):
    return np.array(vals, dtype=np.float32)


def test_e4m3_satfinite_clamps_and_nan():
    out = nm.convert(_f(448, 464, 480, 1e6, np.inf, -np.inf, np.nan, -np.nan), "e4m3")
    assert out.dtype == ml_dtypes.float8_e4m3fn
    assert out.view(np.uint8).tolist() == [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x7F, 0x7F]


def test_e4m3_smallest_subnormal_and_underflow():
    # 2^-9 is the smallest e4m3 subnormal; 2^-10 is a tie between 0 and 2^-9 -> even (0)
    out = nm.convert(_f(2.0**-9, 2.0**-10, 1.5 * 2.0**-10), "e4m3").view(np.uint8)
    assert out.tolist() == [0x01, 0x00, 0x01]


def test_bf16_plain_overflows_and_satfinite_clamps():
    big = _f(3.4e38, -np.inf)
    assert nm.convert(big, "bf16").view(np.uint16).tolist() == [0x7F80, 0xFF80]
    assert nm.convert(big, "bf16", satfinite=True).view(np.uint16).tolist() == [0x7F7F, 0xFF7F]


def test_nan_bit_patterns():
    nan = _f(np.nan)
    assert nm.convert(nan, "bf16").view(np.uint16)[0] == 0x7FFF
    assert nm.convert(nan, "f16").view(np.uint16)[0] == 0x7FFF
    assert nm.convert(nan, "e5m2").view(np.uint8)[0] == 0x7F


def test_x2_packing_order():
    hi, lo = _f(1.0), _f(-2.0)
    assert int(nm.convert_x2(hi, lo, "bf16")[0]) == 0x3F80C000
    assert int(nm.convert_x2(hi, lo, "e4m3")[0]) == 0x38C0


def test_to_float32_is_exact_for_numbers():
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    wide = nm.to_float32(codes)
    finite = ~np.isnan(wide)
    assert np.array_equal(wide[finite].astype(ml_dtypes.float8_e4m3fn).view(np.uint8),
                          codes[finite].view(np.uint8))
    assert set(wide[~finite].view(np.uint32).tolist()) == {0x7FFFFFFF}


def test_unknown_format_lists_supported():
    with pytest.raises(ValueError, match="supported: bf16, f16, e4m3, e5m2"):
        nm.convert(_f(1), "fp8")


def test_non_saturating_fp8_is_refused():
    with pytest.raises(ValueError, match="no non-saturating cvt"):
        nm.convert(_f(1), "e4m3", satfinite=False)


def test_wrong_dtypes():
    with pytest.raises(TypeError, match="^x: expected a float32"):
        nm.convert(np.ones(2), "bf16")
    with pytest.raises(TypeError, match="^x: expected an array of dtype"):
        nm.to_float32(np.ones(2, dtype=np.float32))
    with pytest.raises(TypeError, match="satfinite"):
        nm.convert(_f(1), "bf16", satfinite="yes")


def test_zero_d_inputs_give_zero_d_arrays():
    out = nm.convert_x2(np.float32(1), np.float32(1), "bf16")
    assert isinstance(out, np.ndarray) and out.shape == ()
    for fmt in ("bf16", "f16", "e4m3"):
        wide = nm.to_float32(nm.convert(np.asarray(np.float32(1.5)), fmt))
        assert isinstance(wide, np.ndarray) and wide.shape == () and wide == 1.5
    assert nm.convert(_f(1e6), "bf16", satfinite=np.True_).dtype == ml_dtypes.bfloat16


def test_format_of_finds_the_format_of_a_dtype():
    from simulator.numerics import FORMATS, format_of

    for name, f in FORMATS.items():
        assert format_of(f.dtype) is f and format_of(f.dtype).name == name
    assert format_of(ml_dtypes.bfloat16).name == "bf16"
    with pytest.raises(ValueError, match="dtype: expected one of"):
        format_of(np.float32)
