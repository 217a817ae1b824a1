// Chapter 6, exercise 3 of 4: quantize new tokens' K and V into the fp8 pools.
#include "fp8.cuh"
#include "pa/ch06_fp8.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch06 {

// ANCHOR: reshape_fp8_kernel
// One thread block per token, as in chapter 2. A K chunk is 16 elements: 16 values of T
// in, one 16-byte store out.
template <typename T>
__global__ void reshape_and_cache_fp8_kernel(const T* k, const T* v, uint8_t* k_pool,
                                             uint8_t* v_pool, const int64_t* slot_mapping,
                                             const float* k_scale, const float* v_scale,
                                             PoolShape s) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  const int64_t block = slot / s.block_size;
  const int offset = int(slot % s.block_size);
  const int D = s.head_size, chunks = D / kFp8X;
  const T* k_src = k + token * s.num_kv_heads * D;
  const T* v_src = v + token * s.num_kv_heads * D;
  const float ks = *k_scale, vs = *v_scale;
  // TODO(ch06): chapter 2's reshape_and_cache into one-byte pools: for every KV head and d <
  //   D, K byte (block, head, d, offset) = quantize_e4m3(k_src[head * D + d], ks) in the
  //   layout [num_blocks][Hkv][D/16][block_size][16], and V byte (block, head, d, offset) =
  //   quantize_e4m3(v_src[head * D + d], vs) in [num_blocks][Hkv][D][block_size]. No other
  //   slot changes; offsets are 64-bit.
  // HINT(1): Your chapter 2 kernel has the addresses, with x = kFp8X = 16. A K chunk is still
  //   one 16-byte store, but its source is 16 values of T: quantize them into a local uint4
  //   first (to_float turns a T into a float), then store it once.
  // HINT(2): Thread i < Hkv * chunks: head = i / chunks, c = i % chunks; fill the 16 bytes of
  //   a uint4 with quantize_e4m3(to_float(k_src[head * D + c * 16 + j]), ks) and store it at
  //   k_pool + (((block * Hkv + head) * chunks + c) * block_size + offset) * 16. V: i < Hkv *
  //   D as in chapter 2, each byte quantized with vs.
  // HINT(3): as chapter 2's reshape_and_cache, but each stored byte is
  //   quantize_e4m3(value, scale) with ks for K and vs for V. K: thread i handles chunk
  //   (head, c): quantize k_src[head * D + c * 16 + j] for j < 16 into a uint4 and store it
  //   at k_pool + (((block * Hkv + head) * chunks + c) * block_size + offset) * 16.
  //   V: v_pool[((block * Hkv + head) * D + d) * block_size + offset].
  // BEGIN SOLUTION
  for (int i = threadIdx.x; i < s.num_kv_heads * chunks; i += blockDim.x) {
    const int head = i / chunks, c = i % chunks;
    uint4 packed;
    uint8_t* bytes = reinterpret_cast<uint8_t*>(&packed);
    for (int j = 0; j < kFp8X; ++j)
      bytes[j] = quantize_e4m3(to_float(k_src[head * D + c * kFp8X + j]), ks);
    const int64_t dst =
        (((block * s.num_kv_heads + head) * chunks + c) * s.block_size + offset) * kFp8X;
    *reinterpret_cast<uint4*>(k_pool + dst) = packed;
  }
  for (int i = threadIdx.x; i < s.num_kv_heads * D; i += blockDim.x) {
    const int head = i / D, d = i % D;
    v_pool[((block * s.num_kv_heads + head) * D + d) * s.block_size + offset] =
        quantize_e4m3(to_float(v_src[i]), vs);
  }
  // END SOLUTION
}
// ANCHOR_END: reshape_fp8_kernel

template <typename T>
void reshape_and_cache_fp8(const PoolShape& s, const T* k, const T* v, int num_tokens,
                           uint8_t* k_pool, uint8_t* v_pool, const int64_t* slot_mapping,
                           const float* k_scale, const float* v_scale, cudaStream_t stream) {
  ch02::check_pool_shape(s, kFp8X);
  PA_REQUIRE(num_tokens >= 0, "reshape_and_cache_fp8: negative num_tokens " << num_tokens);
  if (num_tokens == 0) return;
  launch(reshape_and_cache_fp8_kernel<T>, dim3(num_tokens), dim3(128), 0, stream, k, v, k_pool,
         v_pool, slot_mapping, k_scale, v_scale, s);
}

#define PA_INSTANTIATE(T)                                                                   \
  template void reshape_and_cache_fp8<T>(const PoolShape&, const T*, const T*, int, uint8_t*, \
                                         uint8_t*, const int64_t*, const float*, const float*, \
                                         cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch06
