"""The fp8 e4m3 quantizer, bit for bit, and attention over an fp8 cache."""

import os
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from pa_ref import (
    E4M3_MAX,
    E4M3_NAN,
    FP8_X,
    dequantize_e4m3,
    dequantize_pools,
    pack_x,
    paged_decode_attention,
    paged_decode_attention_fp8,
    partitioned_decode_attention_fp8,
    quantize_e4m3,
    reshape_and_cache,
    reshape_and_cache_fp8,
)

ALL_BYTES = np.arange(256, dtype=np.uint8)
NAN_BYTES = {0x7F, 0xFF}  # e4m3fn has one NaN pattern per sign and no infinity
VALUES = dequantize_e4m3(ALL_BYTES, 1.0)  # the value of every byte


def exact_e4m3(quotient):
    """The byte nearest to the exact rational `quotient` (|quotient| <= 448), ties to even."""
    sign = 0x80 if quotient < 0 else 0x00
    magnitude = abs(quotient)
    # Bytes 0x00 .. 0x7E are the non-negative finite values, in increasing order;
    # an even byte has an even mantissa.
    nearest = min(range(0x7F), key=lambda b: (abs(Fraction(float(VALUES[b])) - magnitude), b & 1))
    return sign | nearest


def test_every_byte_round_trips():
    for scale in (1.0, 2.0**-4, 1.7, 0.45):  # 1 and 2^-4 exactly; 1.7 and 0.45 through f32
        values = dequantize_e4m3(ALL_BYTES, scale)
        back = quantize_e4m3(values, scale)
        for byte in range(256):
            if byte in NAN_BYTES:
                assert np.isnan(values[byte]) and back[byte] == E4M3_NAN, (scale, hex(byte))
            else:
                assert back[byte] == byte, (scale, hex(byte))


def test_dequantize_is_value_times_scale_exactly():
    scale = np.float32(1.7)
    got = dequantize_e4m3(ALL_BYTES, scale)
    finite = ~np.isnan(VALUES)
    # 4 significant bits times 24 fit in float64: the product is exact.
    assert [Fraction(g) for g in got[finite]] == [Fraction(v) * Fraction(float(scale))
                                                  for v in VALUES[finite]]
    assert got.dtype == np.float64 and np.isnan(got[[0x7F, 0xFF]]).all()
    assert np.nanmax(VALUES) == E4M3_MAX == 448.0 and VALUES[0x7E] == 448.0


def test_saturation():
    x = np.array([448.0, -448.0, 449.0, 464.0, 480.0, 1e4, -1e4, np.inf, -np.inf, 3e38, 1e300])
    assert quantize_e4m3(x, 1.0).tolist() == [0x7E, 0xFE, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x7E, 0xFE,
                                              0x7E, 0x7E]
    # With a scale, the limit is 448 * scale.
    assert quantize_e4m3([448 * 0.0625, 60000.0, -np.inf], 0.0625).tolist() == [0x7E, 0x7E, 0xFE]


def test_nan_gives_0x7f_whatever_its_sign_or_payload():
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], dtype=np.uint32).view(np.float32)
    assert quantize_e4m3(nans, 1.0).tolist() == [E4M3_NAN] * 4
    half_nans = np.array([0x7E00, 0xFE00, 0x7C01], dtype=np.uint16).view(np.float16)
    assert quantize_e4m3(half_nans, 0.5).tolist() == [E4M3_NAN] * 3
    # So 0xFF (a negative NaN) is never produced: the tests poison with it.
    everything = np.arange(2**16, dtype=np.uint16).view(np.float16)
    assert 0xFF not in quantize_e4m3(everything, 1.0)


def test_zeros_and_subnormals():
    # e4m3 subnormals are k * 2^-9, k = 1..7; 2^-6 is the smallest normal (0x08).
    x = np.array([0.0, -0.0, 2**-9, -(2**-9), 2**-8, 7 * 2**-9, 2**-6,
                  2**-10,  # halfway between 0 and 2^-9: ties to 0 (even)
                  -(2**-10), 3 * 2**-10, 5 * 2**-10,  # ties -> 2, 2
                  15 * 2**-10,  # halfway between 7 * 2^-9 and 2^-6: -> 2^-6 (0x08, even)
                  2**-10 + 2**-20, 2**-12])
    assert quantize_e4m3(x, 1.0).tolist() == [0x00, 0x80, 0x01, 0x81, 0x02, 0x07, 0x08,
                                              0x00, 0x80, 0x02, 0x02, 0x08, 0x01, 0x00]
    # Scaled: 2^-8 * scale lands on the subnormal 2^-8.
    assert quantize_e4m3([2**-8 * 0.0625, 2**-10 * 0.0625], 0.0625).tolist() == [0x02, 0x00]


def test_rounds_to_nearest_even():
    x = np.array([1.0625, 1.1875, -1.0625, 1.0625 + 2**-10, 17.0, 19.0, 248.0, 0.5 + 2**-5])
    assert dequantize_e4m3(quantize_e4m3(x, 1.0), 1.0).tolist() == [
        1.0, 1.25, -1.0, 1.125, 16.0, 20.0, 256.0, 0.5]


def test_division_is_done_in_float32():
    # x / 1.7 rounded to float32 is exactly 0.015625 + 2^-10 (halfway between the
    # e4m3 values 0x07 and 0x08, so ties go to 0x08); the exact quotient is just below.
    scale = np.float32(1.7)
    x = np.float32(0.02490234375)  # an fp16 value
    quotient = x / scale
    assert float(quotient) == 7 * 2**-9 + 2**-10
    exact = Fraction(float(x)) / Fraction(float(scale))
    assert exact < Fraction(float(quotient))
    assert quantize_e4m3(x, scale) == 0x08
    assert exact_e4m3(exact) == 0x07  # what rounding the exact quotient would give
    # Multiplying by the reciprocal is not the same either, for some values.
    xs = np.arange(1, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)
    by_reciprocal = quantize_e4m3(xs * (np.float32(1) / scale), 1.0)
    assert (by_reciprocal != quantize_e4m3(xs, scale)).any()


def test_matches_exact_rounding_of_the_float32_quotient():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(300) * 2.0 ** rng.uniform(-14, 10, 300)).astype(np.float32)
    for scale in (np.float32(1.0), np.float32(0.3)):
        got = quantize_e4m3(x, scale)
        want = [exact_e4m3(Fraction(float(q))) if abs(q) <= E4M3_MAX else
                (0x7E if q > 0 else 0xFE) for q in x / scale]
        assert got.tolist() == want


def test_bad_scales_are_rejected():
    for scale in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError):
            quantize_e4m3(1.0, scale)
        with pytest.raises(ValueError):
            dequantize_e4m3(0x38, scale)


# ---------------------------------------------------------------- the CUDA header


def cuda_include_dir():
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda_fp8.h").exists():
            return Path(root) / "include"
    return None


CONVERT_CPP = r"""
#include <cuda_fp8.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
int main(int argc, char** argv) {
    const float scale = std::strtof(argv[3], nullptr);
    FILE* in = std::fopen(argv[1], "rb");
    std::vector<float> x;
    float v;
    while (std::fread(&v, 4, 1, in) == 1) x.push_back(v);
    std::fclose(in);
    std::vector<unsigned char> out(x.size());
    for (size_t i = 0; i < x.size(); ++i)
        out[i] = __nv_cvt_float_to_fp8(x[i] / scale, __NV_SATFINITE, __NV_E4M3);
    FILE* o = std::fopen(argv[2], "wb");
    std::fwrite(out.data(), 1, out.size(), o);
    std::fclose(o);
}
"""


@pytest.mark.skipif(cuda_include_dir() is None or shutil.which("g++") is None,
                    reason="needs g++ and the CUDA toolkit's cuda_fp8.h")
def test_matches_cuda_fp8_conversion(tmp_path):
    """Bit-exact with CUDA's own conversion (its host code, compiled by g++)."""
    (tmp_path / "convert.cpp").write_text(CONVERT_CPP)
    subprocess.run(["g++", "-O1", "-std=c++17", f"-I{cuda_include_dir()}", "convert.cpp",
                    "-o", "convert"], cwd=tmp_path, check=True)
    # Every sign and exponent, with the mantissa bits that decide the rounding
    # (the top 5 and a few sticky patterns), plus random bit patterns.
    sign = np.arange(2, dtype=np.uint32)[:, None, None, None] << 31
    exponent = np.arange(256, dtype=np.uint32)[None, :, None, None] << 23
    top = np.arange(32, dtype=np.uint32)[None, None, :, None] << 18
    sticky = np.array([0, 1, 0x20000, 0x1FFFF, 0x3FFFF], dtype=np.uint32)
    bits = (sign | exponent | top | sticky).ravel()
    rng = np.random.default_rng(1)
    bits = np.concatenate([bits, rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)])
    x = bits.view(np.float32)
    for scale in (1.0, 0.0625, 1.7, 0.45):
        x.tofile(tmp_path / "in.bin")
        subprocess.run(["./convert", "in.bin", "out.bin", repr(float(np.float32(scale)))],
                       cwd=tmp_path, check=True)
        cuda = np.fromfile(tmp_path / "out.bin", dtype=np.uint8)
        ours = quantize_e4m3(x, scale)
        bad = np.flatnonzero(cuda != ours)
        assert bad.size == 0, (scale, [(hex(bits[i]), hex(cuda[i]), hex(ours[i])) for i in bad[:5]])


# ---------------------------------------------------------------- pools and attention


def test_fp8_pools_pack_16_per_chunk():
    assert pack_x("fp8") == FP8_X == 16


def test_reshape_and_cache_fp8_writes_quantized_bytes():
    rng = np.random.default_rng(2)
    nb, hkv, d, bs, t = 4, 2, 32, 8, 5
    k, v = rng.standard_normal((2, t, hkv, d))
    slots = np.array([3, -1, 8, 31, 0])
    k_pool = np.full((nb, hkv, d // 16, bs, 16), 0xFF, dtype=np.uint8)
    v_pool = np.full((nb, hkv, d, bs), 0xFF, dtype=np.uint8)
    reshape_and_cache_fp8(k, v, k_pool, v_pool, slots, 0.0625, 0.03125)
    want_k = np.full_like(k_pool, 0xFF)
    want_v = np.full_like(v_pool, 0xFF)
    reshape_and_cache(quantize_e4m3(k, 0.0625), quantize_e4m3(v, 0.03125), want_k, want_v, slots)
    np.testing.assert_array_equal(k_pool, want_k)
    np.testing.assert_array_equal(v_pool, want_v)
    assert (v_pool == 0xFF).sum() == v_pool.size - 4 * hkv * d  # 4 real tokens written
    with pytest.raises(ValueError):  # float pools are not fp8 pools
        reshape_and_cache_fp8(k, v, k_pool.astype(np.float32), v_pool, slots, 1.0, 1.0)


def test_attention_over_fp8_is_attention_over_the_dequantized_cache():
    rng = np.random.default_rng(3)
    nb, hkv, hq, d, bs = 12, 2, 4, 32, 8
    k_pool = quantize_e4m3(rng.standard_normal((nb, hkv, d // 16, bs, 16)), 0.05)
    v_pool = quantize_e4m3(rng.standard_normal((nb, hkv, d, bs)), 0.02)
    table = np.array([[5, 2, 9, -1], [0, 11, 3, 7]])
    lens = np.array([19, 32])
    q = rng.standard_normal((2, hq, d))
    args = (q, k_pool, v_pool, table, lens, d**-0.5, bs, np.float32(0.05), np.float32(0.02))
    k, v = dequantize_pools(k_pool, v_pool, np.float32(0.05), np.float32(0.02))
    want = paged_decode_attention(q, k, v, table, lens, d**-0.5, bs)
    np.testing.assert_array_equal(paged_decode_attention_fp8(*args), want)
    np.testing.assert_allclose(partitioned_decode_attention_fp8(*args, partition_size=16), want,
                               rtol=1e-12, atol=1e-12)
