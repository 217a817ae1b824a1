// Chapter 6: the FP8 (e4m3) KV cache.
//
// The pools hold one byte per element: the bit pattern of __nv_fp8_e4m3 (4 exponent
// bits, 3 mantissa bits, largest finite value 448, no infinity). A value is stored as
// e4m3(saturate(x / scale)), rounded to nearest even, with one scale for all of K
// (k_scale) and one for all of V (v_scale), kept on the device. The layouts are
// chapter 2's with x = 16 (16 one-byte elements make a 16-byte chunk). The attention
// kernels dequantize in registers; the softmax and the V accumulation stay in fp32.
#pragma once

#include <cstdint>

#include "pa/ch02_paged.h"
#include "pa/ch05_paged_attention_v2.h"

namespace pa::ch06 {

// ANCHOR: api
using ch02::PoolShape;
using ch04::PagedAttentionShape;

inline constexpr int kFp8X = 16;  // one-byte elements per 16-byte K chunk

// An fp8 K pool and V pool (every byte 0xFF to start: an e4m3 NaN) and their scales.
struct Fp8Pool {
  Fp8Pool(const PoolShape& shape, float k_scale, float v_scale);
  PoolShape shape;
  DeviceBuffer<uint8_t> k, v;
  DeviceBuffer<float> k_scale, v_scale;  // one float each
};

// Chapter 2's write, quantizing: pool byte = e4m3(sat(x / scale)). k, v: [num_tokens,
// num_kv_heads, head_size] in T; slot_mapping[i] < 0 skips token i. Device pointers.
template <typename T>
void reshape_and_cache_fp8(const PoolShape& s, const T* k, const T* v, int num_tokens,
                           uint8_t* k_pool, uint8_t* v_pool, const int64_t* slot_mapping,
                           const float* k_scale, const float* v_scale,
                           cudaStream_t stream = nullptr);

// Chapters 4 and 5 on an fp8 cache: same contracts, plus the two scales.
template <typename T>
void paged_attention_v1_fp8(const PagedAttentionShape& s, T* out, const T* q,
                            const uint8_t* k_pool, const uint8_t* v_pool, const int* block_table,
                            const int* context_lens, const float* k_scale, const float* v_scale,
                            float scale, cudaStream_t stream = nullptr);
template <typename T>
void paged_attention_v2_fp8(const PagedAttentionShape& s, T* out, const T* q,
                            const uint8_t* k_pool, const uint8_t* v_pool, const int* block_table,
                            const int* context_lens, int max_context_len, const float* k_scale,
                            const float* v_scale, float scale, ch05::Workspace& ws,
// ANCHOR_END: api
                            cudaStream_t stream = nullptr);

// Chapter 6's stretch exercise (scale_from_data.cu): the scale that maps the largest
// magnitude of x (device, n values) to e4m3's 448, so that nothing saturates: amax / 448,
// or 1 when every value is 0 (or n is 0). grid_blocks > 0 forces the reduction's grid size
// (tests); 0 picks one from n.
template <typename T>
float e4m3_scale_for(const T* x, int64_t n, int grid_blocks = 0, cudaStream_t stream = nullptr);

}  // namespace pa::ch06
