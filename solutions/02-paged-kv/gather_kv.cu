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
  // HINT(1): Think of two trips through shared memory. K: the (block, head) region is
  //   [chunks][bs][x] and token o's dense row is [chunks][x], so a 16-byte chunk moves whole:
  //   load the region into the tile as uint4, sync, then store chunk (c, o) to its dense
  //   place. V: the region is [D][bs] (tokens contiguous) and the dense row is [D] per token:
  //   a transpose, element by element, inside the tile.
  // HINT(2): Let i = threadIdx.x, i += blockDim.x, run over the work with c = i % chunks
  //   (varying fastest, so neighbouring threads store neighbouring 16 bytes) and o = i /
  //   chunks. Give V's tile rows a stride of bs + 1 (v_tile_stride) so that the column reads
  //   spread over the shared-memory banks. A __syncthreads() after each staging, and one
  //   before V reuses the tile.
  // HINT(3): copy `tokens` tokens of this (block, head) into the dense arrays.
  //   K: the region is [chunks][bs][x]. Stage it in `tile` (uint4 loads), __syncthreads(),
  //      then token o's chunk c (16 bytes at tile + (c * bs + o) * x) goes to
  //      k_dense + dense + o * H * D + c * x. Let c vary fastest across threads.
  //   V: the region is [D][bs]; token o's element d is region[d * bs + o]. Stage it with
  //      rows padded to bs + 1 elements (tile[d * (bs + 1) + o]), __syncthreads(), then
  //      assemble x elements d = c*x .. c*x + x - 1 of token o and store them as one uint4.
  //   __syncthreads() between reusing the tile for K and for V.
  // BEGIN SOLUTION
  for (int i = threadIdx.x; i < chunks * bs; i += blockDim.x)
    reinterpret_cast<uint4*>(tile)[i] = reinterpret_cast<const uint4*>(k_pool + region)[i];
  __syncthreads();
  for (int i = threadIdx.x; i < tokens * chunks; i += blockDim.x) {
    const int o = i / chunks, c = i % chunks;
    *reinterpret_cast<uint4*>(k_dense + dense + int64_t(o) * H * D + c * x) =
        reinterpret_cast<const uint4*>(tile)[c * bs + o];
  }
  __syncthreads();  // every K read of the tile is done before V overwrites it
  const int stride = v_tile_stride<T>(bs);
  for (int i = threadIdx.x; i < D * bs / x; i += blockDim.x) {  // 16-byte loads of x tokens
    const uint4 raw = reinterpret_cast<const uint4*>(v_pool + region)[i];
    const T* vals = reinterpret_cast<const T*>(&raw);
    const int d = (i * x) / bs, o = (i * x) % bs;
    for (int j = 0; j < x; ++j) tile[d * stride + o + j] = vals[j];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < tokens * chunks; i += blockDim.x) {
    const int o = i / chunks, c = i % chunks;
    uint4 out;
    T* vals = reinterpret_cast<T*>(&out);
    for (int j = 0; j < x; ++j) vals[j] = tile[(c * x + j) * stride + o];
    *reinterpret_cast<uint4*>(v_dense + dense + int64_t(o) * H * D + c * x) = out;
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
