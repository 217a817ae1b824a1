// Chapter 5: paged attention v2, which splits long contexts into partitions.
//
// v1 gives each (query head, sequence) one thread block. With few sequences and long
// contexts that is too few blocks to fill the GPU, and each one walks the whole context
// alone. v2 adds a third grid dimension: partition p of a sequence covers tokens
// [p * 512, (p + 1) * 512). Each partition's block writes its max logit, its exp-sum and
// its normalised partial output (fp32); a reduce kernel merges a sequence's partitions
// with the same rescaling as the warps of a block.
#pragma once

#include "pa/ch04_paged_attention.h"

namespace pa::ch05 {

using ch04::PagedAttentionShape;

// ANCHOR: partition
inline constexpr int kPartitionSize = 512;  // tokens per partition (a multiple of every block size)

inline int num_partitions(int max_context_len) {
  return (max_context_len + kPartitionSize - 1) / kPartitionSize;
}
// ANCHOR_END: partition

// The fp32 scratch v2 needs, grown on demand: per (sequence, head, partition) a max
// logit, an exp-sum and a partial output of head_size values.
class Workspace {
 public:
  void reserve(int num_seqs, int num_q_heads, int partitions, int head_size);
  float* max_logits() { return max_logits_.get(); }
  float* exp_sums() { return exp_sums_.get(); }
  float* partial_out() { return partial_out_.get(); }
  // Fills the scratch with NaN: a reduce that reads a partition no kernel wrote shows it.
  // (Another byte for a test's rerun that tells a NaN read from one computed.)
  void poison(int byte = 0xFF);

 private:
  DeviceBuffer<float> max_logits_, exp_sums_, partial_out_;
};

// Same contract as ch04::paged_attention_v1. max_context_len must be at least every
// context_lens[b] (it sizes the grid); the host knows it from its metadata
// (ch04::DeviceBatch::max_context_len).
template <typename T>
void paged_attention_v2(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                        const T* v_pool, const int* block_table, const int* context_lens,
                        int max_context_len, float scale, Workspace& ws,
                        cudaStream_t stream = nullptr);

// ANCHOR: heuristic
enum class Version { v1, v2 };
// v1 when one partition covers every sequence (v2 would only add the reduce), or when
// the v1 grid alone has about 8 thread blocks per SM; otherwise v2.
Version choose_version(const PagedAttentionShape& s, int max_context_len, int num_sms);
// ANCHOR_END: heuristic

// The entry point a serving loop calls: v1 or v2 by choose_version.
template <typename T>
void paged_attention(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                     const T* v_pool, const int* block_table, const int* context_lens,
                     int max_context_len, float scale, Workspace& ws, cudaStream_t stream = nullptr);

// Chapter 5's stretch exercise (merge_states.cu): merges two attentions of the same rows
// over two disjoint sets of keys, each given as its output and its log-sum-exp (natural log;
// -inf for an empty set, whose output is ignored). out_a, out_b, out: [num_rows, head_size];
// lse_a, lse_b, lse_out: [num_rows]. out = (e^lse_a out_a + e^lse_b out_b) / (e^lse_a +
// e^lse_b), lse_out = log(e^lse_a + e^lse_b) (lse_out may be null); both empty: 0 and -inf.
// Device pointers.
template <typename T>
void merge_attention_states(T* out, float* lse_out, const T* out_a, const float* lse_a, const T* out_b,
                            const float* lse_b, int num_rows, int head_size, cudaStream_t stream = nullptr);

}  // namespace pa::ch05
