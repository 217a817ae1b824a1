// Chapter 12: hybrid models. Part 1, the allocator: one pool of blocks for full-attention
// and sliding-window layers.
//
// A hybrid model mixes layer types: Gemma 3 has five sliding-window layers (a query at
// position p sees only the keys [p - window + 1, p]) for each full-attention layer (it sees
// [0, p]). Layers of one type form a layer group; every group has its own block table per
// sequence, and all groups take their blocks from ONE pool with one page size.
//
// A full group keeps every block. A sliding group gives a block back as soon as no current
// or future query of the sequence can see it, and its table entry then points at the null
// block (kNullBlock): a reserved block that is never handed out and never freed, and that a
// kernel must never read (tests fill it with NaN). The entry keeps its place, so logical
// block i is still entry i and a kernel's index arithmetic does not change.
//
// Each group is chapter 7's sharing manager (refcounts, fork, copy-on-write) whose blocks
// come from the shared pool through take_block()/drop_block(). HybridBlockManager drives
// the groups together: one sequence id lives in every group, with the same length.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pa/ch02_paged.h"
#include "pa/ch03_block_table.h"
#include "pa/ch07_cow.h"

namespace pa::ch12 {

// ANCHOR: groups
// Block 0 of the pool: the table entry of a block the window gave back. Owned by nobody.
inline constexpr int kNullBlock = 0;

enum class Attention { full, sliding };

struct LayerGroup {
  Attention kind = Attention::full;
  int window = 0;  // sliding: the keys a query sees, its own included (> 0); full: 0
};
inline LayerGroup full_group() { return {Attention::full, 0}; }
inline LayerGroup sliding_group(int window) { return {Attention::sliding, window}; }
// ANCHOR_END: groups

// ANCHOR: first_needed_block
// Exercise 1. The first logical block that a query of the sequence at a position >=
// next_pos can still see (0 for a full group). Blocks before it are dead.
int first_needed_block(const LayerGroup& group, int next_pos, int block_size);
// ANCHOR_END: first_needed_block

class HybridBlockManager;

// ANCHOR: group_manager
// One layer group's block tables: chapter 7's SharedBlockManager, with blocks taken from and
// given back to the hybrid manager's pool, and null entries that nobody owns.
class GroupBlockManager : public ch07::SharedBlockManager {
 public:
  GroupBlockManager(HybridBlockManager& owner, const LayerGroup& group);
  const LayerGroup& layer_group() const { return group_; }

  // Exercise 2. Gives up the sequence's dead blocks (see the TODO); returns how many went
  // back to the pool.
  int free_dead_blocks(int seq_id);
  // What free_dead_blocks(seq_id) would give back to the pool now; changes nothing.
  int dead_blocks_to_pool(int seq_id) const;

  // Chapter 7's fork and release; a null entry is copied as null and owned by nobody.
  void fork(int parent, int child);
  void release(int seq_id);
  int num_free() const override;  // the shared pool's

 protected:
  int take_block() override;             // from the shared pool
  void drop_block(int block) override;   // to the shared pool; never the null block

 private:
  HybridBlockManager* owner_;
  LayerGroup group_;
};
// ANCHOR_END: group_manager

// ANCHOR: manager
class HybridBlockManager {
 public:
  // A pool of num_blocks blocks (block 0 is the null block, so num_blocks - 1 can be handed
  // out) shared by the layer groups. Throws pa::Error for no group, a sliding window <= 0
  // ("layer group G: window must be positive, got W"), a window on a full group ("layer
  // group G is full attention but has a window of W"), fewer than 2 blocks, or a block
  // size chapter 7 refuses.
  HybridBlockManager(int num_blocks, int block_size, const std::vector<LayerGroup>& groups);
  HybridBlockManager(const HybridBlockManager&) = delete;
  HybridBlockManager& operator=(const HybridBlockManager&) = delete;

  void add_sequence(int seq_id);      // empty in every group; throws if seq_id is live
  void fork(int parent, int child);   // in every group; "fork: unknown sequence P"
  // Room for n more tokens in every group: first each sliding group frees the blocks that
  // no query from the current length on can see (this step's queries start there), then
  // each group appends as chapter 7 does (copy-on-write included). Returns the slots per
  // group: [group][token]. Throws ch02::OutOfBlocks, changing nothing, when the pool
  // (with the blocks the freeing gives back) is short: "append_slots: sequence S needs N
  // more blocks, only F are free".
  std::vector<std::vector<int64_t>> append_slots(int seq_id, int n);
  // After a step has computed the sequence's tokens: frees what no later query can see.
  // Returns the blocks given back to the pool. append_slots does it too, first.
  int free_dead_blocks(int seq_id);
  void release(int seq_id);            // every group; "release: unknown sequence S"
  std::vector<ch07::BlockCopy> take_copies(int group);  // that group's pending copies

  // The pool blocks append_slots(seq_id, n) takes (new blocks and copies, every group),
  // not counting what its freeing gives back.
  int blocks_needed(int seq_id, int n) const;
  // The fewest free blocks with which append_slots(seq_ids[i], new_tokens[i]), in order,
  // all succeed: what a scheduler plans a step with (frees of earlier appends count).
  int step_blocks(const std::vector<int>& seq_ids, const std::vector<int>& new_tokens) const;

  int num_groups() const { return int(groups_.size()); }
  const GroupBlockManager& group(int g) const;
  const std::vector<int>& block_list(int g, int seq_id) const { return group(g).block_list(seq_id); }
  bool has_sequence(int seq_id) const { return groups_[0]->has_sequence(seq_id); }
  int length(int seq_id) const;
  int block_size() const { return block_size_; }
  int num_blocks() const { return pool_.num_blocks(); }
  int num_free() const { return pool_.num_free(); }        // the null block is never free
  int num_held() const { return pool_.num_used() - 1; }    // blocks some table holds
  const ch02::BlockAllocator& pool() const { return pool_; }

 private:
  friend class GroupBlockManager;
  int block_size_;
  ch02::BlockAllocator pool_;
  std::vector<std::unique_ptr<GroupBlockManager>> groups_;
};
// ANCHOR_END: manager

}  // namespace pa::ch12
