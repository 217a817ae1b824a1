// Chapter 2, exercise 3 of 3: gather a paged cache back into chapter 1's dense layout,
// so that the dense decode kernel can run on paged storage. (Chapter 4 removes this copy
// by walking the block table inside the attention kernel.)
#include "pa/ch02_paged.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch02 {

// One thread block per (logical block, sequence). The block looks up its physical block
// once, then copies up to block_size tokens: K as 16-byte chunks, V element by element.
// ANCHOR: gather_kernel
template <typename T>
__global__ void gather_kv_kernel(const T* k_pool, const T* v_pool, const int* block_table,
                                 int max_blocks_per_seq, const int* context_lens,
                                 int max_seq_len, T* k_dense, T* v_dense, PoolShape s) {
  constexpr int x = pack_x<T>();
  const int logical = blockIdx.x, seq = blockIdx.y;
  const int len = context_lens[seq];
  const int first = logical * s.block_size;
  if (first >= len) return;  // past the sequence's end: the table entry is padding, don't read it
  const int tokens = min(s.block_size, len - first);
  const int64_t block = block_table[int64_t(seq) * max_blocks_per_seq + logical];
  const int D = s.head_size, chunks = D / x, H = s.num_kv_heads;
  // Dense element (seq, t, head, d) is at ((seq * max_seq_len + t) * H + head) * D + d.
  const int64_t dense_first = (int64_t(seq) * max_seq_len + first) * H * D;
  // TODO(ch02): copy `tokens` tokens of physical block `block` into the dense arrays.
  //   K chunk (head, c, token o) is at k_pool[(((block * H + head) * chunks + c) *
  //   block_size + o) * x], 16 bytes, and goes to dense token first + o, elements
  //   head * D + c * x ... + x - 1. V element (head, d, o) is at
  //   v_pool[((block * H + head) * D + d) * block_size + o]. Put o in the fastest-moving
  //   part of the thread index so that neighbouring threads read neighbouring addresses.
  // BEGIN SOLUTION
  for (int i = threadIdx.x; i < H * chunks * tokens; i += blockDim.x) {
    const int o = i % tokens, hc = i / tokens, head = hc / chunks, c = hc % chunks;
    const int64_t src = (((block * H + head) * chunks + c) * s.block_size + o) * x;
    *reinterpret_cast<uint4*>(k_dense + dense_first + int64_t(o) * H * D + head * D + c * x) =
        *reinterpret_cast<const uint4*>(k_pool + src);
  }
  for (int i = threadIdx.x; i < H * D * tokens; i += blockDim.x) {
    const int o = i % tokens, hd = i / tokens;  // hd = head * D + d
    v_dense[dense_first + int64_t(o) * H * D + hd] =
        v_pool[(block * H * D + hd) * s.block_size + o];
  }
  // END SOLUTION
}
// ANCHOR_END: gather_kernel

template <typename T>
void gather_kv(const PoolShape& s, const T* k_pool, const T* v_pool, const int* block_table,
               int max_blocks_per_seq, const int* context_lens, int num_seqs, int max_seq_len,
               T* k_dense, T* v_dense, cudaStream_t stream) {
  check_pool_shape(s, pack_x<T>());
  PA_REQUIRE(num_seqs > 0 && num_seqs <= 65535, "gather_kv: num_seqs " << num_seqs << " out of range");
  PA_REQUIRE(max_blocks_per_seq > 0, "gather_kv: max_blocks_per_seq must be positive");
  PA_REQUIRE(int64_t(max_blocks_per_seq) * s.block_size <= max_seq_len,
             "gather_kv: a table of " << max_blocks_per_seq << " blocks of " << s.block_size
                                      << " tokens does not fit max_seq_len " << max_seq_len);
  launch(gather_kv_kernel<T>, dim3(max_blocks_per_seq, num_seqs), dim3(256), 0, stream, k_pool,
         v_pool, block_table, max_blocks_per_seq, context_lens, max_seq_len, k_dense, v_dense, s);
}

#define PA_INSTANTIATE(T)                                                                    \
  template void gather_kv<T>(const PoolShape&, const T*, const T*, const int*, int, const int*, \
                             int, int, T*, T*, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch02
