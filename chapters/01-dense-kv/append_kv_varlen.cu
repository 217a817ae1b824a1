// Your exercise file. (Generated from solutions/01-dense-kv/append_kv_varlen.cu; instructors regenerate with tools/make_skeletons.py.)
// Chapter 1, stretch exercise: appending many tokens at once (a prefill, or several
// sequences' chunks in one launch). The new tokens of all sequences come packed, sequence
// after sequence, with their running sums, as chapter 3's query_start_loc will be.
#include "pa/ch01_dense.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch01 {

// One thread block per new token.
// ANCHOR: append_varlen_kernel
template <typename T>
__global__ void append_kv_varlen_kernel(T* k_cache, T* v_cache, const T* k_new, const T* v_new,
                                        const int* cu_tokens, const int* start, int num_seqs,
                                        DenseShape s) {
  const int i = blockIdx.x;  // this block's new token, 0 .. num_tokens - 1
  const int64_t token_elems = int64_t(s.num_kv_heads) * s.head_size;
  // TODO(ch01, stretch): new token i belongs to the sequence b with cu_tokens[b] <= i <
  //   cu_tokens[b + 1] (cu_tokens: num_seqs + 1 non-decreasing running sums from 0; a
  //   sequence may have no new token, so several entries can be equal). After the kernel,
  //   slot start[b] + (i - cu_tokens[b]) of sequence b in k_cache and v_cache ([num_seqs,
  //   max_seq_len, Hkv, D]) holds row i of k_new and v_new ([num_tokens, Hkv, D]), and
  //   nothing else in the caches has changed. Find b in O(log num_seqs) reads of cu_tokens
  //   (a batch can hold thousands of sequences). Offsets in 64 bits. Checked by
  //   StretchAppendVarlen.* (tests/01-dense-kv/test_stretch_append_varlen.cpp).
  (void)k_cache, (void)v_cache, (void)k_new, (void)v_new, (void)cu_tokens, (void)start;
  (void)num_seqs, (void)i, (void)token_elems;
}
// ANCHOR_END: append_varlen_kernel

template <typename T>
void append_kv_varlen(const DenseShape& s, T* k_cache, T* v_cache, const T* k_new, const T* v_new,
                      int num_tokens, const int* cu_tokens, const int* start, cudaStream_t stream) {
  check_shape(s);
  PA_REQUIRE(num_tokens >= 0, "append_kv_varlen: num_tokens must be >= 0, got " << num_tokens);
  if (num_tokens == 0) return;
  launch(append_kv_varlen_kernel<T>, dim3(num_tokens), dim3(128), 0, stream, k_cache, v_cache, k_new,
         v_new, cu_tokens, start, s.num_seqs, s);
}

#define PA_INSTANTIATE(T)                                                                           \
  template void append_kv_varlen<T>(const DenseShape&, T*, T*, const T*, const T*, int, const int*, \
                                    const int*, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch01
