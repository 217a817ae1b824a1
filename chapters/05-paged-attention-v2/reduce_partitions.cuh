// Your exercise file. (Generated from solutions/05-paged-attention-v2/reduce_partitions.cuh; instructors regenerate with tools/make_skeletons.py.)
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
// Grid (query head, sequence): merges the sequence's partitions into out.
template <typename T>
__global__ void paged_attention_v2_reduce_kernel(T* out, const float* max_logits,
                                                 const float* exp_sums, const float* partial_out,
                                                 const int* context_lens, int max_partitions,
                                                 PagedAttentionShape s) {
  const int head = blockIdx.x, seq = blockIdx.y, D = s.head_size;
  const int len = context_lens[seq];
  const int parts = (len + kPartitionSize - 1) / kPartitionSize;
  T* o = out + (int64_t(seq) * s.num_q_heads + head) * D;
  const int64_t first = partition_index(seq, head, 0, s.num_q_heads, max_partitions);
  // TODO(ch05): write out. len 0: zeros. One partition: its partial output as it is (so
  //   that v2 equals v1 bit for bit). Otherwise M = max of the max_logits, each partition
  //   weighs w_p = exp_sums[p] * exp(max_logits[p] - M), and
  //   out[d] = sum_p w_p * partial_out[p][d] / sum_p w_p. Each thread may loop over the
  //   partitions itself: no shared array, so no limit on the context length.
  // (your code here)
}
// ANCHOR_END: reduce_kernel

}  // namespace pa::ch05
