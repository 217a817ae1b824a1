// Chapter 11: the fp8 latent cache's writer (given code). Chapter 2's reshape_and_cache for
// the latent, quantizing as chapter 6 does, with one scale per tile of 128 values of c_kv
// (include/pa/ch11_mla.h, "The fp8 latent cache"). Reference: pa_ref.mla.reshape_and_cache_latent_fp8.
#include <cmath>

#include "fp8.cuh"  // chapter 6: quantize_e4m3
#include "pa/ch11_mla.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch11 {

// ANCHOR: latent_writer_fp8
// One thread block of 4 warps per token: warp w quantizes tile w of c_kv (128 values, 4 a
// lane), and its tile's scale; threads 0 .. 7 copy the RoPE part, 16 bytes each.
inline constexpr int kFp8WriterThreads = 32 * kFp8Scales;  // 128
static_assert(kFp8Tile == 32 * 4, "a lane quantizes 4 values of its warp's tile");

template <typename T>
__global__ void reshape_and_cache_latent_fp8_kernel(const T* c_kv, const T* k_rope, uint8_t* latent_pool,
                                                    const int64_t* slot_mapping) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;  // a padding token: the whole block leaves
  const int tile = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint8_t* row = latent_pool + slot * kFp8RowBytes;
  // The tile's amax (exact in fp32, in any order), then its scale, as the reference: fp32
  // amax / 448, or 1 when that is 0.
  const T* src = c_kv + token * kLatentDim + tile * kFp8Tile + 4 * lane;
  float x[4], amax = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[i] = to_float(src[i]);
    amax = fmaxf(amax, fabsf(x[i]));
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  float scale = amax / 448.f;
  if (!(scale > 0.f)) scale = 1.f;  // a tile of zeros
  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) packed |= uint32_t(ch06::quantize_e4m3(x[i], scale)) << (8 * i);
  *reinterpret_cast<uint32_t*>(row + tile * kFp8Tile + 4 * lane) = packed;
  if (lane == 0) reinterpret_cast<float*>(row + kFp8ScalesAt)[tile] = scale;
  // The RoPE part, as it is: 64 values of T, 8 chunks of 16 bytes.
  if (threadIdx.x < 2 * kRopeDim / 16)
    *reinterpret_cast<uint4*>(row + kFp8RopeAt + 16 * threadIdx.x) =
        *reinterpret_cast<const uint4*>(k_rope + token * kRopeDim + 8 * threadIdx.x);
}
// ANCHOR_END: latent_writer_fp8

template <typename T>
void reshape_and_cache_latent_fp8(const LatentPoolShape& s, const T* c_kv, const T* k_rope,
                                  int num_tokens, uint8_t* latent_pool, const int64_t* slot_mapping,
                                  cudaStream_t stream) {
  static_assert(sizeof(T) == 2, "the fp8 latent row keeps k_rope in 16 bits: half or bf16");
  check_latent_pool(s);
  PA_REQUIRE(num_tokens >= 0, "reshape_and_cache_latent_fp8: negative num_tokens " << num_tokens);
  if (num_tokens == 0) return;
  launch(reshape_and_cache_latent_fp8_kernel<T>, dim3(num_tokens), dim3(kFp8WriterThreads), 0, stream, c_kv,
         k_rope, latent_pool, slot_mapping);
}

#define PA_INSTANTIATE(T)                                                                            \
  template void reshape_and_cache_latent_fp8<T>(const LatentPoolShape&, const T*, const T*, int, uint8_t*, \
                                                const int64_t*, cudaStream_t);
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch11
