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
#include <set>
#include <unordered_map>
#include <utility>
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
// The first logical block that a query of the sequence at a position >= next_pos can still
// see (0 for a full group). Blocks before it are dead. (Given: the window's definition.)
int first_needed_block(const LayerGroup& group, int next_pos, int block_size);
// ANCHOR_END: first_needed_block

// ANCHOR: prefix_hit
// Stretch exercise 4. Prefix caching per group type: the longest prefix, in whole blocks,
// that every group can serve from its cache. cached[g][i]: block i of the prefix is cached
// in group g. At most max_blocks, and at most the shortest cached[g].
int prefix_hit_blocks(const std::vector<LayerGroup>& groups, const std::vector<std::vector<bool>>& cached,
                      int block_size, int max_blocks);
// ANCHOR_END: prefix_hit

class HybridBlockManager;

// ANCHOR: group_manager
// One layer group's block tables: chapter 7's SharedBlockManager, with blocks taken from and
// given back to the hybrid manager's pool, and null entries that nobody owns.
class GroupBlockManager : public ch07::SharedBlockManager {
 public:
  GroupBlockManager(HybridBlockManager& owner, const LayerGroup& group);
  const LayerGroup& layer_group() const { return group_; }

  // Exercise 1. Gives up the sequence's dead blocks (see the TODO); returns how many went
  // back to the pool (drop_block).
  int free_dead_blocks(int seq_id);

  // Chapter 7's fork and release; a null entry is copied as null and owned by nobody.
  void fork(int parent, int child);
  void release(int seq_id);
  // A new sequence holding `table` (null entries owned by nobody) and `length` tokens: a
  // prefix-cache hit. Each real block gets one owner more (an evictable one leaves the cache's
  // evictable set).
  void add_with(int seq_id, const std::vector<int>& table, int length);
  int num_free() const override;  // the shared pool's (free + evictable)

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
  // size chapter 7 refuses. prefix_caching: see match_prefix.
  HybridBlockManager(int num_blocks, int block_size, const std::vector<LayerGroup>& groups,
                     bool prefix_caching = false);
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
  // Swap-in (or any restart of a sequence whose K/V the caller copies back): starts seq_id
  // (a new id) with `length` computed tokens, holding in each group fresh blocks for the
  // entries a query from `length` on can see, null entries before them: what a swapped-out
  // sequence needs back, no more (its swap-out copied block_list's non-null entries).
  // Throws ch02::OutOfBlocks, changing nothing, if restore_blocks(length) > num_free().
  void restore(int seq_id, int length);
  int restore_blocks(int length) const;  // the blocks restore(_, length) takes
  std::vector<ch07::BlockCopy> take_copies(int group);  // that group's pending copies

  // The pool blocks append_slots(seq_id, n) takes (new blocks and copies, every group),
  // not counting what its freeing gives back.
  int blocks_needed(int seq_id, int n) const;
  // Exercise 2. The fewest free blocks with which append_slots(seq_ids[i], new_tokens[i]),
  // in order, all succeed: what a scheduler plans a step with (what each append's windows
  // give back counts, for it and the appends after it). Changes nothing.
  int step_blocks(const std::vector<int>& seq_ids, const std::vector<int>& new_tokens) const;

  // Prefix caching (on when constructed so). A full block of computed tokens is registered,
  // per group, under a chain hash of its tokens and everything before them (commit), and a
  // registered block whose last owner leaves stays cached, evictable, until the pool has no
  // free block left (the least recently given back goes first).
  // The tokens (whole blocks, at most max_tokens) of the longest prefix of `tokens` that
  // every group can serve from its cache: prefix_hit_blocks. A full group needs every block
  // of it, a sliding group only the blocks the query after it sees. Takes nothing.
  int match_prefix(const std::vector<int>& tokens, int max_tokens) const;
  // Starts seq_id (a new id) holding the first hit_tokens tokens of `tokens` from the
  // cache (hit_tokens from match_prefix): a full group each block of the prefix, a sliding
  // group the blocks its next query sees, null entries before them. Length hit_tokens.
  void add_sequence(int seq_id, const std::vector<int>& tokens, int hit_tokens);
  // Registers the sequence's full blocks whose tokens[0 .. num_computed) are computed (in
  // each group whose entry is not null). Call it before free_dead_blocks.
  void commit(int seq_id, const std::vector<int>& tokens, int num_computed);
  int num_evictable() const { return int(evictable_.size()); }

  // Group g's block table for a step, as a kernel of that group reads it: row i is
  // seq_ids[i]'s table (kNullBlock where the window freed a block), padded with
  // ch03::kPaddingBlock past its last block. max_blocks_per_seq = 0: the longest table
  // among them. Throws for an unknown sequence or a table longer than max_blocks_per_seq.
  struct GroupTable {
    int max_blocks_per_seq = 0;
    std::vector<int32_t> block_table;  // [seq_ids.size() * max_blocks_per_seq]
  };
  GroupTable block_table(int g, const std::vector<int>& seq_ids, int max_blocks_per_seq = 0) const;

  int num_groups() const { return int(groups_.size()); }
  const GroupBlockManager& group(int g) const;
  const std::vector<int>& block_list(int g, int seq_id) const { return group(g).block_list(seq_id); }
  bool has_sequence(int seq_id) const { return groups_[0]->has_sequence(seq_id); }
  int length(int seq_id) const;
  int block_size() const { return block_size_; }
  int num_blocks() const { return pool_.num_blocks(); }
  // Blocks a step can take: free, or cached and evictable. The null block is never free.
  int num_free() const { return pool_.num_free() + num_evictable(); }
  int num_held() const { return pool_.num_used() - 1 - num_evictable(); }  // in some table
  const ch02::BlockAllocator& pool() const { return pool_; }

 private:
  friend class GroupBlockManager;
  struct Cached {
    uint64_t hash = 0, parent = 0;  // hash 0: not cached
    int group = -1;
    std::vector<int> tokens;
  };
  int take_pool_block();          // a free block, else the oldest evictable one
  void drop_pool_block(int block);  // cached: evictable; otherwise free
  void unevict(int block);
  std::vector<uint64_t> chain(const std::vector<int>& tokens, int num_blocks) const;
  int cached_block(int g, int i, const std::vector<uint64_t>& hashes, const std::vector<int>& tokens) const;
  int block_size_;
  bool prefix_caching_;
  ch02::BlockAllocator pool_;
  std::vector<std::unique_ptr<GroupBlockManager>> groups_;
  std::vector<std::unordered_map<uint64_t, int>> cached_;  // per group: hash -> block
  std::vector<Cached> meta_;                                // per block
  std::set<std::pair<int64_t, int>> evictable_;            // (when given back, block)
  std::vector<int64_t> evict_tick_;                         // per block, while evictable
  std::unordered_map<int, std::vector<uint64_t>> hashes_;   // committed block hashes per sequence
  int64_t tick_ = 0;
};
// ANCHOR_END: manager

}  // namespace pa::ch12
