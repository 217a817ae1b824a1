// Chapter 1, exercise 1 of 3: write one new token's K and V into the dense cache.
#include "pa/ch01_dense.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch01 {

// One thread block per sequence; its threads copy that token's num_kv_heads * head_size
// values of K and of V. Consecutive threads touch consecutive elements (coalesced).
// ANCHOR: append_kernel
template <typename T>
__global__ void append_kv_kernel(T* k_cache, T* v_cache, const T* k_new, const T* v_new,
                                 const int* positions, DenseShape s) {
  const int seq = blockIdx.x;
  const int pos = positions[seq];
  if (pos < 0 || pos >= s.max_seq_len) return;  // padding row (or a bad position)
  const int64_t token_elems = int64_t(s.num_kv_heads) * s.head_size;
  // TODO(ch01): after the kernel, slot `pos` of sequence `seq` in k_cache and v_cache
  //   ([num_seqs, max_seq_len, Hkv, D]) holds k_new[seq] and v_new[seq] (token_elems = Hkv *
  //   D values each), and nothing else in the caches has changed. It must stay correct for
  //   caches of more than 2^31 elements.
  // HINT(1): This is a copy of token_elems contiguous values into token_elems contiguous
  //   values, once for K and once for V: work out where the source row and the destination
  //   slot start, then copy.
  // HINT(2): The source row starts at element seq * token_elems of k_new (and v_new); the
  //   destination slot at (seq * max_seq_len + pos) * token_elems of the cache. Use int64_t
  //   for both. One thread block handles one sequence: thread threadIdx.x copies elements
  //   threadIdx.x, threadIdx.x + blockDim.x, ...
  // HINT(3): copy k_new[seq, :, :] and v_new[seq, :, :] (token_elems values each)
  //   into slot `pos` of sequence `seq`. The cache is [num_seqs, max_seq_len, Hkv, D]:
  //   slot (seq, pos) starts at element (seq * max_seq_len + pos) * token_elems.
  //   Compute offsets in 64 bits: a large cache has more than 2^31 elements.
  //   Let the block's threads stride over the token_elems values.
  // BEGIN SOLUTION
  const int64_t dst = (int64_t(seq) * s.max_seq_len + pos) * token_elems;
  const int64_t src = int64_t(seq) * token_elems;
  for (int64_t e = threadIdx.x; e < token_elems; e += blockDim.x) {
    k_cache[dst + e] = k_new[src + e];
    v_cache[dst + e] = v_new[src + e];
  }
  // END SOLUTION
}
// ANCHOR_END: append_kernel

template <typename T>
void append_kv(const DenseShape& s, T* k_cache, T* v_cache, const T* k_new, const T* v_new,
               const int* positions, cudaStream_t stream) {
  check_shape(s);
  launch(append_kv_kernel<T>, dim3(s.num_seqs), dim3(128), 0, stream, k_cache, v_cache,
         k_new, v_new, positions, s);
}

template void append_kv<float>(const DenseShape&, float*, float*, const float*, const float*,
                               const int*, cudaStream_t);
template void append_kv<half>(const DenseShape&, half*, half*, const half*, const half*,
                              const int*, cudaStream_t);
template void append_kv<bf16>(const DenseShape&, bf16*, bf16*, const bf16*, const bf16*,
                              const int*, cudaStream_t);

}  // namespace pa::ch01
