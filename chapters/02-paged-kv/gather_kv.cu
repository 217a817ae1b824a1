// Your exercise file. (Generated from solutions/02-paged-kv/gather_kv.cu; instructors regenerate with tools/make_skeletons.py.)
// Chapter 2, exercise 4 of 4: gather a paged cache back into chapter 1's dense layout,
// so that the dense decode kernel can run on paged storage. (Chapter 4 removes this copy
// by walking the block table inside the attention kernel.)
#include "pa/ch02_paged.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch02 {

// One thread block per (logical block, sequence, KV head). In both pools the block's
// tokens for one head form one contiguous region of head_size * block_size elements, so the
// block stages that region in shared memory with coalesced 16-byte loads, then writes each
// token's head vector to the dense array with coalesced 16-byte stores. The shared-memory
// tile turns the pool's layout into the dense one (a transpose, for V).
template <typename T>
__host__ __device__ constexpr int v_tile_stride(int block_size) { return block_size + 1; }  // +1: fewer bank conflicts

// ANCHOR: gather_kernel
template <typename T>
__global__ void gather_kv_kernel(const T* k_pool, const T* v_pool, const int* block_table,
                                 int max_blocks_per_seq, const int* context_lens,
                                 int max_seq_len, T* k_dense, T* v_dense, PoolShape s) {
  constexpr int x = pack_x<T>();
  const int logical = blockIdx.x, seq = blockIdx.y, head = blockIdx.z;
  const int len = context_lens[seq];
  const int first = logical * s.block_size;
  if (first >= len) return;  // past the sequence's end: the table entry is padding, don't read it
  const int tokens = min(s.block_size, len - first);
  const int64_t block = block_table[int64_t(seq) * max_blocks_per_seq + logical];
  const int D = s.head_size, H = s.num_kv_heads, bs = s.block_size, chunks = D / x;
  const int64_t region = (block * H + head) * int64_t(D) * bs;  // where (block, head) starts
  // Dense element (seq, t, head, d) is at ((seq * max_seq_len + t) * H + head) * D + d.
  const int64_t dense = (int64_t(seq) * max_seq_len + first) * H * D + int64_t(head) * D;
  PA_DYNAMIC_SHARED(T, tile);  // D * (bs + 1) elements
  // TODO(ch02): for each of the block's first `tokens` tokens o and every d < D,
  //   k_dense[dense + o * H * D + d] is element d of token o's K for this head in k_pool
  //   ([num_blocks][H][D/x][bs][x]), and v_dense likewise from v_pool
  //   ([num_blocks][H][D][bs]). Nothing is written for o >= tokens. The block's 128 threads
  //   move the data through the shared tile `tile` (D * (bs + 1) elements), so that their
  //   global loads and stores are 16-byte (uint4) and coalesced.
  // (your code here)
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
  PA_REQUIRE(s.num_kv_heads <= 65535, "gather_kv: num_kv_heads must be at most 65535");
  const size_t tile_bytes = size_t(s.head_size) * v_tile_stride<T>(s.block_size) * sizeof(T);
  launch(gather_kv_kernel<T>, dim3(max_blocks_per_seq, num_seqs, s.num_kv_heads), dim3(128),
         tile_bytes, stream, k_pool, v_pool, block_table, max_blocks_per_seq, context_lens,
         max_seq_len, k_dense, v_dense, s);
}

#define PA_INSTANTIATE(T)                                                                    \
  template void gather_kv<T>(const PoolShape&, const T*, const T*, const int*, int, const int*, \
                             int, int, T*, T*, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch02
