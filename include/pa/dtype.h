// The activation types a kernel may be instantiated for, and float conversions that
// work in host and device code on both backends. Arithmetic is always done in float.
#pragma once

#include <string>

#include "pa/check.h"

namespace pa {

using half = __half;
using bf16 = __nv_bfloat16;

__host__ __device__ inline float to_float(float x) { return x; }
__host__ __device__ inline float to_float(half x) { return __half2float(x); }
__host__ __device__ inline float to_float(bf16 x) { return __bfloat162float(x); }

template <typename T> __host__ __device__ inline T from_float(float x);
template <> __host__ __device__ inline float from_float<float>(float x) { return x; }
template <> __host__ __device__ inline half from_float<half>(float x) { return __float2half_rn(x); }
template <> __host__ __device__ inline bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }

// The names the reference and the golden cases use.
enum class DType { fp32, fp16, bf16 };
inline const char* dtype_name(DType t) {
  return t == DType::fp32 ? "fp32" : (t == DType::fp16 ? "fp16" : "bf16");
}
inline DType parse_dtype(const std::string& name) {
  for (DType t : {DType::fp32, DType::fp16, DType::bf16})
    if (name == dtype_name(t)) return t;
  throw Error("unknown dtype '" + name + "' (expected fp32, fp16 or bf16)");
}
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::fp32; }
template <> constexpr DType dtype_of<half>() { return DType::fp16; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }

}  // namespace pa
