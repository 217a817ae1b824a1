// Your exercise file. (Generated from solutions/01-dense-kv/append_kv.cu; instructors regenerate with tools/make_skeletons.py.)
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
  // (your code here)
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
