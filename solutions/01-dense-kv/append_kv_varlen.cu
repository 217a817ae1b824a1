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
  // HINT(1): Two steps: which sequence, then where in it. cu_tokens is sorted, so the first
  //   is a binary search: which b is the LAST one with cu_tokens[b] <= i (think about the
  //   empty sequences, whose entries equal the next one's)?
  // HINT(2): Keep an interval [lo, hi] of sequences that may hold token i, starting at [0,
  //   num_seqs - 1]; halve it with mid = (lo + hi + 1) / 2 (rounded up, or lo = mid never
  //   moves): cu_tokens[mid] <= i keeps [mid, hi], else [lo, mid - 1]. Then pos = start[b] + i
  //   - cu_tokens[b], and the copy is append_kv's, from row i.
  // HINT(3): int lo = 0, hi = num_seqs - 1; while (lo < hi) { mid = (lo + hi + 1) / 2; if
  //   (cu_tokens[mid] <= i) lo = mid; else hi = mid - 1; } b = lo; pos = start[b] + i -
  //   cu_tokens[b]; dst = (int64_t(b) * max_seq_len + pos) * token_elems; src = int64_t(i) *
  //   token_elems; for (e = threadIdx.x; e < token_elems; e += blockDim.x) { k_cache[dst + e]
  //   = k_new[src + e]; v_cache[dst + e] = v_new[src + e]; }
  // BEGIN SOLUTION(ch01, stretch)
  // STUB: (void)k_cache, (void)v_cache, (void)k_new, (void)v_new, (void)cu_tokens, (void)start;
  // STUB: (void)num_seqs, (void)i, (void)token_elems;
  int lo = 0, hi = num_seqs - 1;  // the sequence of token i is in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu_tokens[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  const int b = lo;
  const int pos = start[b] + i - cu_tokens[b];
  const int64_t dst = (int64_t(b) * s.max_seq_len + pos) * token_elems;
  const int64_t src = int64_t(i) * token_elems;
  for (int64_t e = threadIdx.x; e < token_elems; e += blockDim.x) {
    k_cache[dst + e] = k_new[src + e];
    v_cache[dst + e] = v_new[src + e];
  }
  // END SOLUTION
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
