"""Rounding to storage formats, and the fp8 e4m3 round trip."""

import numpy as np
import pytest

from pa_ref import E4M3_MAX, dequantize_e4m3, quantize_e4m3, round_to

ALL_BYTES = np.arange(256, dtype=np.uint8)
NAN_BYTES = {0x7F, 0xFF}  # e4m3fn has one NaN pattern per sign and no infinity


def test_round_to_gives_nearest_representable():
    x = np.array([1.0 + 2**-12, 1.0 + 2**-10, 1.0 + 2**-8, 1 / 3])
    np.testing.assert_array_equal(round_to(x, "fp16"), [1.0, 1.0 + 2**-10, 1.0 + 2**-8, 0.333251953125])
    np.testing.assert_array_equal(round_to(x, "bf16"), [1.0, 1.0, 1.0, 0.333984375])
    assert round_to(x, "fp32")[3] == np.float32(1 / 3)
    assert round_to(x, "fp16").dtype == np.float64


def test_round_to_rejects_unknown_names():
    with pytest.raises(ValueError):
        round_to(1.0, "fp8")


def test_every_e4m3_byte_round_trips():
    values = dequantize_e4m3(ALL_BYTES, 1.0)
    back = quantize_e4m3(values, 1.0)
    for byte in range(256):
        if byte in NAN_BYTES:
            assert np.isnan(values[byte])
        else:
            assert back[byte] == byte, hex(byte)


def test_e4m3_range_and_saturation():
    assert np.nanmax(dequantize_e4m3(ALL_BYTES, 1.0)) == E4M3_MAX == 448.0
    assert quantize_e4m3(448.0, 1.0) == 0x7E and quantize_e4m3(-448.0, 1.0) == 0xFE
    assert dequantize_e4m3(quantize_e4m3([1e4, -1e4, np.inf, 460.0], 1.0), 1.0).tolist() == [
        448.0, -448.0, 448.0, 448.0]
    assert np.isnan(dequantize_e4m3(quantize_e4m3(np.nan, 1.0), 1.0))


def test_e4m3_rounds_to_nearest_even():
    # 1.0625 lies halfway between 1.0 and 1.125; 1.1875 between 1.125 and 1.25.
    assert dequantize_e4m3(quantize_e4m3([1.0625, 1.1875], 1.0), 1.0).tolist() == [1.0, 1.25]


def test_e4m3_scale_divides_then_multiplies():
    x = np.array([0.5, -3.0, 96.0])  # x / 0.25 is exact in e4m3
    data = quantize_e4m3(x, 0.25)  # stored values are x / 0.25
    np.testing.assert_array_equal(data, quantize_e4m3(x / 0.25, 1.0))
    np.testing.assert_array_equal(dequantize_e4m3(data, 0.25), x)
