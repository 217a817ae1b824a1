// Your exercise file. (Generated from solutions/11-latent-attention/latent_writer.cu; instructors regenerate with tools/make_skeletons.py.)
// Chapter 11, exercise 1 of 4: write new tokens' latent rows into their slots of the pool.
// Chapter 2's reshape_and_cache, for the latent: one row per token, for every head.
#include "pa/ch11_mla.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch11 {

// One thread block per token; a thread moves one 16-byte chunk (8 fp16/bf16 values) of the
// token's row: 64 chunks of c_kv, then 8 of k_rope.
inline constexpr int kChunkElems = 8;
inline constexpr int kRowChunks = kRowWidth / kChunkElems;  // 72

// ANCHOR: latent_writer
template <typename T>
__global__ void reshape_and_cache_latent_kernel(const T* c_kv, const T* k_rope, T* latent_pool,
                                                const int64_t* slot_mapping) {
  static_assert(sizeof(T) * kChunkElems == 16, "a chunk is 16 bytes");
  const int64_t token = blockIdx.x;
  const int chunk = threadIdx.x;  // 0 .. kRowChunks - 1: this thread's 16 bytes of the row
  if (chunk >= kRowChunks) return;
  // TODO(ch11): token `token`'s row, [c_kv[token] (kLatentDim values) | k_rope[token]
  //   (kRopeDim values)], is in the pool at its slot slot_mapping[token] (chapter 2's slot:
  //   block * block_size + offset), laid out as include/pa/ch11_mla.h says
  //   ([num_blocks, block_size, kRowWidth]); this thread moves the row's 16-byte chunk
  //   `chunk` (elements 8 * chunk .. 8 * chunk + 7 of the row). A token whose slot is
  //   negative is padding: nothing is written for it. No other element of the pool changes.
  //   Offsets are 64-bit (a pool of a few GB passes 2^31 elements).
  (void)token;
}
// ANCHOR_END: latent_writer

template <typename T>
void reshape_and_cache_latent(const LatentPoolShape& s, const T* c_kv, const T* k_rope,
                              int num_tokens, T* latent_pool, const int64_t* slot_mapping,
                              cudaStream_t stream) {
  check_latent_pool(s);
  PA_REQUIRE(num_tokens >= 0, "reshape_and_cache_latent: negative num_tokens " << num_tokens);
  if (num_tokens == 0) return;
  launch(reshape_and_cache_latent_kernel<T>, dim3(num_tokens), dim3(96), 0, stream, c_kv, k_rope,
         latent_pool, slot_mapping);
}

#define PA_INSTANTIATE(T)                                                                        \
  template void reshape_and_cache_latent<T>(const LatentPoolShape&, const T*, const T*, int, T*, \
                                            const int64_t*, cudaStream_t);
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch11
