// Chapter 5, exercise 2 of 2: merging a sequence's partitions. A header, because
// chapter 6's fp8 kernels merge their partitions with the same kernel.
#pragma once

#include <cmath>

#include "pa/ch05_paged_attention_v2.h"
#include "pa/dtype.h"

namespace pa::ch05 {

// Where partition p of (sequence, head) keeps its results in the workspace.
__host__ __device__ inline int64_t partition_index(int seq, int head, int p, int num_q_heads,
                                                   int max_partitions) {
  return (int64_t(seq) * num_q_heads + head) * max_partitions + p;
}

// ANCHOR: reduce_kernel
// Output element d of one (sequence, query head) from its `parts` partitions, whose
// results start at index `first` of the workspace. (Chapter 9's kernels call it too.)
__device__ inline float merge_partitions(const float* max_logits, const float* exp_sums,
                                         const float* partial_out, int64_t first, int parts,
                                         int D, int d) {
  // TODO(ch05): return output element d of one (sequence, head) from its `parts` partitions
  //   (workspace rows first .. first + parts - 1): the softmax over all their tokens
  //   together. parts == 0 (an empty sequence) gives 0; parts == 1 gives that partition's
  //   partial_out unchanged, so that v2 equals v1 bit for bit. Any number of partitions works
  //   (no shared memory).
  // HINT(1): Each partition's partial_out is normalised by its own exp_sum, at its own max.
  //   To combine them, bring all to a common max M (the largest max_logit): partition p then
  //   weighs exp_sums[p] * exp(max_logits[p] - M).
  // HINT(2): Early returns for parts == 0 and parts == 1. Then one loop over p for M, and a
  //   second for the weighted sum of partial_out[(first + p) * D + d] and the sum of the
  //   weights; return their quotient.
  // HINT(3): len 0 (parts == 0): 0. One partition: its partial output as it is (so
  //   that v2 equals v1 bit for bit). Otherwise M = max of the max_logits, each partition
  //   weighs w_p = exp_sums[p] * exp(max_logits[p] - M), and the result is
  //   sum_p w_p * partial_out[p][d] / sum_p w_p. Each thread loops over the partitions
  //   itself: no shared array, so no limit on the context length.
  // BEGIN SOLUTION
  // STUB: return NAN;
  if (parts == 0) return 0.f;
  if (parts == 1) return partial_out[first * D + d];
  float M = -INFINITY;
  for (int p = 0; p < parts; ++p) M = fmaxf(M, max_logits[first + p]);
  float total = 0.f, weights = 0.f;
  for (int p = 0; p < parts; ++p) {
    const float w = exp_sums[first + p] * expf(max_logits[first + p] - M);
    weights += w;
    total += w * partial_out[(first + p) * D + d];
  }
  return total / weights;
  // END SOLUTION
}

// Grid (query head, sequence): merges the sequence's partitions of partition_size tokens
// (kPartitionSize here; chapter 9 sizes them to the GPU) into out.
template <typename T>
__global__ void paged_attention_v2_reduce_kernel(T* out, const float* max_logits,
                                                 const float* exp_sums, const float* partial_out,
                                                 const int* context_lens, int partition_size,
                                                 int max_partitions, PagedAttentionShape s) {
  const int head = blockIdx.x, seq = blockIdx.y, D = s.head_size;
  const int len = context_lens[seq];
  const int parts = (len + partition_size - 1) / partition_size;
  T* o = out + (int64_t(seq) * s.num_q_heads + head) * D;
  const int64_t first = partition_index(seq, head, 0, s.num_q_heads, max_partitions);
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    o[d] = from_float<T>(merge_partitions(max_logits, exp_sums, partial_out, first, parts, D, d));
}
// ANCHOR_END: reduce_kernel

}  // namespace pa::ch05
