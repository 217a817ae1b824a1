// Your exercise file. (Generated from solutions/05-paged-attention-v2/merge_states.cu; instructors regenerate with tools/make_skeletons.py.)
// Chapter 5, stretch exercise: merging two attention states. v2's reduce merges the
// partitions of one sequence inside one launch, from their max and exp-sum. The same merge,
// done on finished outputs, lets attention over a set of keys be computed in pieces by
// different kernels (a shared prefix once, each sequence's own suffix apart: chapter 8's
// cascade), each piece returning its output and its log-sum-exp.
#include <cmath>

#include "pa/ch05_paged_attention_v2.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch05 {

// One thread block per row (a query token and head).
// ANCHOR: merge_states_kernel
template <typename T>
__global__ void merge_states_kernel(T* out, float* lse_out, const T* out_a, const float* lse_a,
                                    const T* out_b, const float* lse_b, int head_size) {
  const int64_t row = blockIdx.x;
  const T* a = out_a + row * head_size;
  const T* b = out_b + row * head_size;
  T* o = out + row * head_size;
  // TODO(ch05, stretch): a and b are attention outputs of the same query over two disjoint
  //   sets of keys, with lse_a[row], lse_b[row] = log(sum over the set of exp(score)) (natural
  //   log; -inf for an empty set, whose output may hold anything, NaN included). After the
  //   kernel, o[d] (d < head_size) = (e^lse_a * a[d] + e^lse_b * b[d]) / (e^lse_a + e^lse_b),
  //   the attention over both sets, and lse_out[row] (when lse_out is not null) = log(e^lse_a
  //   + e^lse_b). Both sets empty: o = 0 and lse_out = -inf. Results are finite for any
  //   finite lse, 1e4 included (e^100 overflows a float). Math in fp32. Checked by
  //   StretchMergeStates.* (tests/05-paged-attention-v2/test_stretch_merge_states.cpp).
  (void)lse_out, (void)lse_a, (void)lse_b, (void)a, (void)b, (void)o;
}
// ANCHOR_END: merge_states_kernel

template <typename T>
void merge_attention_states(T* out, float* lse_out, const T* out_a, const float* lse_a, const T* out_b,
                            const float* lse_b, int num_rows, int head_size, cudaStream_t stream) {
  PA_REQUIRE(num_rows >= 0 && num_rows <= 2147483647, "merge_attention_states: num_rows " << num_rows);
  PA_REQUIRE(head_size > 0, "merge_attention_states: head_size must be positive, got " << head_size);
  if (num_rows == 0) return;
  launch(merge_states_kernel<T>, dim3(num_rows), dim3(128), 0, stream, out, lse_out, out_a, lse_a, out_b,
         lse_b, head_size);
}

#define PA_INSTANTIATE(T)                                                                              \
  template void merge_attention_states<T>(T*, float*, const T*, const float*, const T*, const float*, \
                                          int, int, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch05
