// Chapter 2, exercise 3 of 4: write new tokens' K and V into their slots of the pools.
#include "pa/ch02_paged.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch02 {

// One thread block per token. For K, each thread moves one 16-byte chunk of x elements:
// they are contiguous in k[token] and contiguous in the pool, [block, head, d/x, slot, :].
// For V, each thread moves single elements: consecutive d are block_size apart in the pool.
// ANCHOR: reshape_kernel
template <typename T>
__global__ void reshape_and_cache_kernel(const T* k, const T* v, T* k_pool, T* v_pool,
                                         const int64_t* slot_mapping, PoolShape s) {
  constexpr int x = pack_x<T>();
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;  // padding
  const int64_t block = slot / s.block_size;
  const int offset = int(slot % s.block_size);
  const int D = s.head_size, chunks = D / x;
  const T* k_src = k + token * s.num_kv_heads * D;
  const T* v_src = v + token * s.num_kv_heads * D;
  // TODO(ch02): the token of this thread block (its slot = slot_mapping[token] >= 0) is
  //   stored at block = slot / block_size, offset = slot % block_size: for every KV head and
  //   d < D, K element (block, head, d, offset) = k_src[head * D + d] and V alike, in the
  //   pool layouts k_pool [num_blocks][Hkv][D/x][block_size][x] and v_pool
  //   [num_blocks][Hkv][D][block_size] (d = c * x + j for K). No other slot changes. Offsets
  //   are 64-bit.
  // HINT(1): Write each element's address from its layout, outermost index first. The x
  //   elements of a K chunk are contiguous both in k_src and in the pool, so K can move as
  //   16-byte chunks; V moves element by element (consecutive d are block_size apart).
  // HINT(2): K: thread i (striding by blockDim.x) takes (head, c) = (i / chunks, i % chunks)
  //   for i < Hkv * chunks and copies one uint4 from k_src + head * D + c * x. V: i < Hkv *
  //   D, (head, d) = (i / D, i % D). `block` is already an int64_t, so products that start
  //   with it stay 64-bit.
  // HINT(3): copy the token into the pools.
  //   K: for each (head, chunk c) pair, copy the 16 bytes k_src[head * D + c * x ...] to
  //      k_pool element (((block * Hkv + head) * chunks + c) * block_size + offset) * x
  //      (use a uint4 load and store: a chunk is exactly 16 bytes).
  //   V: for each (head, d), v_pool[((block * Hkv + head) * D + d) * block_size + offset].
  //   Let the block's threads stride over the work; keep every offset in 64 bits.
  // BEGIN SOLUTION
  for (int i = threadIdx.x; i < s.num_kv_heads * chunks; i += blockDim.x) {
    const int head = i / chunks, c = i % chunks;
    const int64_t dst = (((block * s.num_kv_heads + head) * chunks + c) * s.block_size + offset) * x;
    *reinterpret_cast<uint4*>(k_pool + dst) =
        *reinterpret_cast<const uint4*>(k_src + head * D + c * x);
  }
  for (int i = threadIdx.x; i < s.num_kv_heads * D; i += blockDim.x) {
    const int head = i / D, d = i % D;
    v_pool[((block * s.num_kv_heads + head) * D + d) * s.block_size + offset] = v_src[i];
  }
  // END SOLUTION
}
// ANCHOR_END: reshape_kernel

template <typename T>
void reshape_and_cache(const PoolShape& s, const T* k, const T* v, int num_tokens, T* k_pool,
                       T* v_pool, const int64_t* slot_mapping, cudaStream_t stream) {
  check_pool_shape(s, pack_x<T>());
  PA_REQUIRE(num_tokens >= 0, "reshape_and_cache: negative num_tokens " << num_tokens);
  if (num_tokens == 0) return;
  launch(reshape_and_cache_kernel<T>, dim3(num_tokens), dim3(128), 0, stream, k, v, k_pool,
         v_pool, slot_mapping, s);
}

#define PA_INSTANTIATE(T)                                                                    \
  template void reshape_and_cache<T>(const PoolShape&, const T*, const T*, int, T*, T*, \
                                     const int64_t*, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch02
