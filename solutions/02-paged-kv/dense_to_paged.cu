// Chapter 2, stretch exercise: dense to paged, the inverse of gather_kv. Moves chapter 1's
// dense cache into the pools, each sequence's tokens into the blocks its table names: how
// a server that switches to paged storage carries its running sequences over.
#include "pa/ch02_paged.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch02 {

// One thread block per (logical block, sequence). Its threads share the block's tokens'
// num_kv_heads * head_size values, reading the dense rows in order (coalesced).
// ANCHOR: dense_to_paged_kernel
template <typename T>
__global__ void dense_to_paged_kernel(const T* k_dense, const T* v_dense, int max_seq_len,
                                      const int* block_table, int max_blocks_per_seq,
                                      const int* context_lens, T* k_pool, T* v_pool, PoolShape s) {
  const int logical = blockIdx.x, seq = blockIdx.y;
  const int len = context_lens[seq];
  const int first = logical * s.block_size;
  if (first >= len) return;  // past the sequence's end: the table entry is padding
  const int tokens = min(s.block_size, len - first);
  const int64_t block = block_table[int64_t(seq) * max_blocks_per_seq + logical];
  // TODO(ch02, stretch): for each of this logical block's first `tokens` tokens o (token
  //   first + o of sequence seq), every KV head h and every d < head_size: the K pool's and
  //   the V pool's elements of (physical block `block`, head h, d, offset o), in the layouts
  //   of include/pa/ch02_paged.h, equal the dense caches' element (seq, first + o, h, d) of
  //   k_dense and v_dense ([num_seqs, max_seq_len, num_kv_heads, head_size]). Nothing else
  //   in the pools changes (a block's slots past the sequence's end keep what they held).
  //   Offsets in 64 bits. Checked by StretchDenseToPaged.*
  //   (tests/02-paged-kv/test_stretch_dense_to_paged.cpp).
  // HINT(1): This is reshape_and_cache with the slot computed from the table rather than
  //   given: token o of the block goes to offset o of physical block `block`. Let the threads
  //   stride over tokens * num_kv_heads * head_size elements, in the dense order.
  // HINT(2): Element e of the block's dense rows is token o = e / (H * D), head h = (e / D)
  //   % H, d = e % D; the dense element is ((seq * max_seq_len + first + o) * H + h) * D + d.
  //   The K pool's element starts its (block, h) region at (block * H + h) * D * bs, then
  //   the chunk d / x (of bs * x elements), then the token o (x elements), then d % x. V's
  //   region is the same size, [D][bs]: d * bs + o.
  // HINT(3): x = pack_x<T>(); H, D, bs from s; for (int64_t e = threadIdx.x; e < int64_t(tokens)
  //   * H * D; e += blockDim.x) { o = e / (H * D); h = (e / D) % H; d = e % D; src = ((seq *
  //   max_seq_len + first + o) * H + h) * D + d; region = (block * H + h) * D * bs;
  //   k_pool[region + (d / x) * bs * x + o * x + d % x] = k_dense[src]; v_pool[region + d * bs
  //   + o] = v_dense[src]; }
  // BEGIN SOLUTION(ch02, stretch)
  // STUB: (void)k_dense, (void)v_dense, (void)max_seq_len, (void)k_pool, (void)v_pool;
  // STUB: (void)tokens, (void)block;
  constexpr int x = pack_x<T>();
  const int H = s.num_kv_heads, D = s.head_size, bs = s.block_size;
  for (int64_t e = threadIdx.x; e < int64_t(tokens) * H * D; e += blockDim.x) {
    const int o = int(e / (int64_t(H) * D)), h = int(e / D % H), d = int(e % D);
    const int64_t src = ((int64_t(seq) * max_seq_len + first + o) * H + h) * D + d;
    const int64_t region = (block * H + h) * int64_t(D) * bs;
    k_pool[region + int64_t(d / x) * bs * x + o * x + d % x] = k_dense[src];
    v_pool[region + int64_t(d) * bs + o] = v_dense[src];
  }
  // END SOLUTION
}
// ANCHOR_END: dense_to_paged_kernel

template <typename T>
void dense_to_paged(const PoolShape& s, const T* k_dense, const T* v_dense, int num_seqs,
                    int max_seq_len, const int* block_table, int max_blocks_per_seq,
                    const int* context_lens, T* k_pool, T* v_pool, cudaStream_t stream) {
  check_pool_shape(s, pack_x<T>());
  PA_REQUIRE(num_seqs > 0 && num_seqs <= 65535, "dense_to_paged: num_seqs " << num_seqs << " out of range");
  PA_REQUIRE(max_blocks_per_seq > 0, "dense_to_paged: max_blocks_per_seq must be positive");
  PA_REQUIRE(int64_t(max_blocks_per_seq) * s.block_size <= max_seq_len,
             "dense_to_paged: a table of " << max_blocks_per_seq << " blocks of " << s.block_size
                                           << " tokens does not fit max_seq_len " << max_seq_len);
  launch(dense_to_paged_kernel<T>, dim3(max_blocks_per_seq, num_seqs), dim3(128), 0, stream, k_dense,
         v_dense, max_seq_len, block_table, max_blocks_per_seq, context_lens, k_pool, v_pool, s);
}

#define PA_INSTANTIATE(T)                                                                     \
  template void dense_to_paged<T>(const PoolShape&, const T*, const T*, int, int, const int*, int, \
                                  const int*, T*, T*, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch02
