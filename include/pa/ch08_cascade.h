// Chapter 8: cascade (shared-prefix) decode attention.
//
// Many decoding sequences often start with the same tokens: a system prompt, the n samples
// of one request, the beams of a beam search. With chapter 7's shared blocks their block
// tables then start with the SAME physical blocks, and chapter 5's kernels read those
// blocks once per sequence (and per query head). Cascade attention reads a shared prefix
// once for its whole group:
//
//   prefix pass  one thread block per (group, KV head, chunk of the shared prefix) loads
//                the chunk's K and V into shared memory once and applies them to every
//                query row of the group (its members x the query heads of that KV head);
//   suffix pass  each sequence's own tokens after the prefix, in chapter 5's partitions;
//   merge        chapter 5's merge_partitions over the prefix chunks and suffix partitions
//                of each (sequence, query head): softmax is associative, so splitting the
//                keys in two sets and merging by log-sum-exp gives the same attention.
//
// The host plans the groups once per step (plan_cascade) and uploads the plan
// (CascadeDevicePlan); every layer's cascade_attention then reuses it.
#pragma once

#include <cstdint>
#include <vector>

#include "pa/backend.h"
#include "pa/ch04_paged_attention.h"
#include "pa/ch05_paged_attention_v2.h"
#include "pa/device_buffer.h"

namespace pa::ch08 {

// ANCHOR: plan
// Sequences that share a prefix. A sequence that shares nothing is in no group: its whole
// context goes through the suffix pass, as in chapter 5.
struct CascadeGroup {
  std::vector<int> members;        // sequence indices, ascending (not necessarily adjacent)
  int prefix_len = 0;              // shared tokens: prefix_blocks.size() * block_size
  std::vector<int> prefix_blocks;  // the shared physical blocks, logical block 0 first
};

struct CascadePlan {
  int num_seqs = 0, max_blocks_per_seq = 0, block_size = 0;  // the batch it was made for
  std::vector<CascadeGroup> groups;
  std::vector<int> group_of;    // [num_seqs]: the group of each sequence, -1 for none
  std::vector<int> prefix_len;  // [num_seqs]: tokens its group's prefix covers (0: none)
};

// Groups the sequences of one decode step, in batch order. The first sequence not yet in
// a group leads a new one; every later sequence whose table starts with the same
// min_shared_blocks physical blocks, full in both, joins it. The group's prefix is then
// the longest run of blocks, from logical block 0, that every member holds at the same
// position and that is full (block_size tokens below context_len) in every member; so a
// shared partial last block is not part of it, and the prefix is never longer than a
// member's context. A would-be group of one is no group. Throws pa::Error for tables or
// lengths that do not fit the sizes given (a negative entry among a sequence's used
// blocks, a context_len beyond max_blocks_per_seq * block_size, min_shared_blocks < 1).
CascadePlan plan_cascade(const std::vector<int>& block_table, const std::vector<int>& context_lens,
                         int num_seqs, int max_blocks_per_seq, int block_size,
                         int min_shared_blocks = 1);
// ANCHOR_END: plan

// ANCHOR: device_plan
// What the kernels read of a plan: pointers into one device buffer.
struct CascadeView {
  int num_groups;
  const int* group_start;       // [num_groups + 1]: group g's members are members[group_start[g]
  const int* members;           //   .. group_start[g + 1] - 1]
  const int* group_prefix_len;  // [num_groups]
  const int* seq_prefix_len;    // [num_seqs]: CascadePlan::prefix_len
};

// A plan on the device. upload() copies a new plan into the same buffer (it grows only
// when the plan no longer fits), so that a step's launches, or a captured CUDA graph,
// keep their pointers.
class CascadeDevicePlan {
 public:
  CascadeDevicePlan() = default;
  explicit CascadeDevicePlan(const CascadePlan& plan) { upload(plan); }
  void upload(const CascadePlan& plan);

  CascadeView view() const;
  bool empty() const { return num_seqs_ == 0; }
  int num_seqs() const { return num_seqs_; }
  int max_blocks_per_seq() const { return max_blocks_per_seq_; }
  int block_size() const { return block_size_; }
  int num_groups() const { return num_groups_; }
  int max_prefix_len() const { return max_prefix_len_; }  // over the groups
  int min_prefix_len() const { return min_prefix_len_; }  // over the sequences (0: a loner)
  int max_group_size() const { return max_group_size_; }  // members of the largest group

 private:
  DeviceBuffer<int> data_;
  int num_seqs_ = 0, max_blocks_per_seq_ = 0, block_size_ = 0;
  int num_groups_ = 0, num_members_ = 0, max_prefix_len_ = 0, min_prefix_len_ = 0, max_group_size_ = 0;
};
// ANCHOR_END: device_plan

// Tokens per prefix chunk, for K and V of element size elem_bytes: the largest
// power-of-two multiple of block_size, at most 512, whose K and V for one KV head fit in
// 32 KB of shared memory (but at least one block).
constexpr int prefix_chunk_tokens(int head_size, int block_size, int elem_bytes) {
  int c = block_size;
  while (2 * c <= ch05::kPartitionSize && 4 * c * head_size * elem_bytes <= 32 * 1024) c *= 2;
  return c;
}

// Decode attention, one query token per sequence: the same contract and result as
// ch05::paged_attention (out, q [B, Hq, D]; chapter 2's pool layouts; GQA; context_len 0
// gives zeros; T float, half or bf16; fp32 accumulation), with the sequences' shared
// prefixes read once per group as `plan` (uploaded from plan_cascade on this batch's
// block_table and context_lens) says. ws holds the partial results of the prefix chunks
// and suffix partitions (chapter 5's layout, grown on demand). Throws pa::Error for a bad
// shape, a max_context_len beyond the table, or a plan made for another batch.
template <typename T>
void cascade_attention(const ch04::PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                       const T* v_pool, const int* block_table, const int* context_lens,
                       int max_context_len, const CascadeDevicePlan& plan, float scale,
                       ch05::Workspace& ws, cudaStream_t stream = nullptr);

}  // namespace pa::ch08
