// Chapter 3: block tables and context lengths.
//
// The host side of paging. A BlockManager gives each sequence a list of blocks and grows
// it one block at a time, only when the last block is full. Before every step a batch
// builder turns those lists into the three arrays a kernel reads:
//   block_table  [num_seqs, max_blocks_per_seq] int32: logical block -> physical block
//   context_lens [num_seqs] int32: tokens in each sequence, including this step's
//   slot_mapping [num_new_tokens] int64: where each new token's K and V are written
//   query_start_loc [num_seqs + 1] int32: sequence i's new tokens are rows
//                qsl[i] .. qsl[i + 1] - 1 of the step (what varlen kernels read)
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "pa/ch02_paged.h"
#include "pa/trace.h"

namespace pa::ch03 {

// Table entries past a sequence's last block. No kernel may read them.
inline constexpr int32_t kPaddingBlock = -1;

// ANCHOR: slot_manager
// What build_batch needs from a block manager. This chapter's BlockManager is one;
// chapter 7's sharing manager and chapter 8's caching manager are others, so the same
// build_batch (yours) makes the metadata of every later chapter's steps.
class SlotManager {
 public:
  virtual ~SlotManager() = default;
  virtual int block_size() const = 0;
  virtual int num_blocks() const = 0;
  virtual int num_free() const = 0;                         // blocks a step can still take
  virtual int blocks_needed(int seq_id, int n) const = 0;  // what append_slots(seq_id, n) takes
  virtual int length(int seq_id) const = 0;
  virtual const std::vector<int>& block_list(int seq_id) const = 0;  // physical ids, in order
  virtual std::vector<int64_t> append_slots(int seq_id, int n) = 0;
  // Blocks a whole step takes: append_slots(seq_ids[i], new_tokens[i]) for each i, in
  // order. build_batch checks it against num_free() before anything changes, and a
  // scheduler that plans a step asks the same question, so the two cannot disagree. Here:
  // the sum of blocks_needed; a manager whose sequences share blocks counts what one
  // append changes for the next (chapter 7).
  virtual int step_blocks(const std::vector<int>& seq_ids, const std::vector<int>& new_tokens) const;
};
// ANCHOR_END: slot_manager

// ANCHOR: manager
class BlockManager : public SlotManager {
 public:
  BlockManager(int num_blocks, int block_size);

  // Starts an empty sequence (no tokens, no blocks). Throws if seq_id is already live.
  void add_sequence(int seq_id);
  // Makes room for n more tokens of seq_id and returns their n slots, in order. Allocates
  // a block only when the last one is full. Throws ch02::OutOfBlocks, changing nothing,
  // if the pool cannot hold them; throws pa::Error for n < 0 or an unknown sequence.
  std::vector<int64_t> append_slots(int seq_id, int n) override;
  // Returns every block of seq_id to the allocator, exactly once, and forgets it.
  void release(int seq_id);

  bool has_sequence(int seq_id) const { return seqs_.count(seq_id) != 0; }
  const std::vector<int>& block_list(int seq_id) const override;  // physical ids, logical order
  int length(int seq_id) const override;
  int blocks_needed(int seq_id, int n) const override;
  int block_size() const override { return block_size_; }
  int num_blocks() const override { return allocator_.num_blocks(); }
  int num_free() const override { return allocator_.num_free(); }
  const ch02::BlockAllocator& allocator() const { return allocator_; }

 private:
  struct Sequence {
    int length = 0;
    std::vector<int> blocks;
  };
  Sequence& find(int seq_id, const char* what);
  int block_size_;
  ch02::BlockAllocator allocator_;
  std::unordered_map<int, Sequence> seqs_;
};
// ANCHOR_END: manager

// ANCHOR: metadata
struct BatchMetadata {
  int num_seqs = 0;
  int max_blocks_per_seq = 0;
  std::vector<int32_t> block_table;   // [num_seqs * max_blocks_per_seq], padding -1
  std::vector<int32_t> context_lens;  // [num_seqs]
  std::vector<int64_t> slot_mapping;  // [new tokens of the step, in batch order]
  std::vector<int32_t> query_start_loc;  // [num_seqs + 1]: 0, then running sums of new tokens

  // The checked mode: throws pa::Error naming the first bad entry (a block id out of
  // range, a negative length, a context_len beyond the table's capacity, a missing block,
  // a slot outside the pool, a query_start_loc that does not add up) before any kernel can
  // read it.
  void validate(int num_blocks, int block_size) const;
};

// Appends new_tokens[i] tokens to sequence seq_ids[i] (1 for a decode step, the prompt
// length for a prefill) and returns the step's metadata. max_blocks_per_seq = 0 sizes the
// table to the longest sequence of the batch. Checks everything first, so that a failure
// (out of blocks, a table too small) changes nothing.
BatchMetadata build_batch(SlotManager& manager, const std::vector<int>& seq_ids,
                          const std::vector<int>& new_tokens, int max_blocks_per_seq = 0);
// ANCHOR_END: metadata

// The host's check of a varlen batch before a kernel reads it (chapters 8 and 10 call it):
// query_start_loc [num_seqs + 1] starts at 0, never decreases and ends at num_tokens; every
// sequence has 0 <= n_b <= lens[b] <= max_blocks_per_seq * block_size; each used entry of
// block_table (not checked if empty) is a block of the pool. lens_name names the lengths in
// messages ("context_len", "seq_len"). Throws pa::Error naming the first bad entry.
void check_varlen_batch(int num_seqs, int num_tokens, int max_blocks_per_seq, int block_size,
                        int num_blocks, const std::vector<int>& block_table,
                        const std::vector<int>& lens, const std::vector<int>& query_start_loc,
                        const char* lens_name);

// ANCHOR: paged_report
// The paged bill for the same trace as chapter 1: a request holds ceil(tokens /
// block_size) blocks, so only the unused tail of its last block is wasted.
struct PagedMemoryReport {
  int64_t reserved_bytes;        // sum(ceil(t / block_size)) * block_size * bytes_per_token
  int64_t used_bytes;            // sum(t) * bytes_per_token
  double waste_fraction;         // 1 - used / reserved
  int64_t paged_seqs_in_budget;  // (budget * n) / (sum(ceil(t / bs)) * bs * bytes_per_token)
};
PagedMemoryReport paged_memory_report(const std::vector<Request>& trace, const KVConfig& cfg,
                                      int block_size, int64_t budget_bytes);
// ANCHOR_END: paged_report

}  // namespace pa::ch03
