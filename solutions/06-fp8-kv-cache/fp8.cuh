// Chapter 6, exercises 1 and 2 of 4: converting between fp32 and e4m3 bytes.
#pragma once

#include <cstdint>

#include "pa/backend.h"

namespace pa::ch06 {

// ANCHOR: fp8_convert
// e4m3(saturate(x / scale)), round to nearest even: 448 is the largest finite e4m3 value
// and there is no infinity, so out-of-range values (infinities too) become +-448; NaN
// stays NaN. The division is done in fp32, as the reference does it.
__host__ __device__ inline uint8_t quantize_e4m3(float x, float scale) {
  // TODO(ch06): return the e4m3 byte of x / scale (divided in fp32), rounded to nearest even
  //   and saturated: out-of-range values and infinities become +-448, NaN stays NaN.
  //   Bit-exact with the reference (ml_dtypes float8_e4m3fn with saturation), on the host and
  //   on the device.
  // HINT(1): Don't write the rounding yourself: the CUDA toolkit's cuda_fp8.h has a converter
  //   for exactly this, usable on the host, on the device and on the emulator.
  // HINT(2): one call of the toolkit's __nv_cvt_float_to_fp8, with __NV_SATFINITE and
  //   __NV_E4M3.
  // BEGIN SOLUTION
  // STUB: return 0;
  return __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
  // END SOLUTION
}

// Sixteen e4m3 bytes (one 16-byte load) to sixteen floats. Pairs convert together: on
// sm_89 and later one instruction turns two e4m3 bytes into two halves.
__host__ __device__ inline void e4m3x16_to_float(const uint4& raw, float* out) {
  // TODO(ch06): out[i] = the value of byte i of raw as an e4m3 number (byte 0 is the
  //   lowest-addressed), for i < 16, exactly (every e4m3 value is a float; NaN stays NaN).
  // HINT(1): Again the toolkit converts for you, two bytes at a time, into a pair of halves
  //   (exact: every e4m3 value is an fp16 value), and a pair of halves converts to a float2.
  // HINT(2): view raw as 8 __nv_fp8x2_storage_t pairs (element 2i in the low byte),
  //   convert each with __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3), then
  //   __half22float2(__half2(...)) gives out[2i] and out[2i + 1].
  // BEGIN SOLUTION
  const __nv_fp8x2_storage_t* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&raw);
  for (int i = 0; i < 8; ++i) {
    const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3)));
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
  // END SOLUTION
}
// ANCHOR_END: fp8_convert

// Eight bytes (a uint2), for rows shorter than 16 tokens.
__host__ __device__ inline void e4m3x8_to_float(const uint2& raw, float* out) {
  const uint4 wide = make_uint4(raw.x, raw.y, 0u, 0u);
  float all[16];
  e4m3x16_to_float(wide, all);
  for (int i = 0; i < 8; ++i) out[i] = all[i];
}

}  // namespace pa::ch06
