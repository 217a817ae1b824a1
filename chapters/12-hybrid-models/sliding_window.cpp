// Your exercise file. (Generated from solutions/12-hybrid-models/sliding_window.cpp; instructors regenerate with tools/make_skeletons.py.)
// Chapter 12, exercise 1: giving a sequence's dead blocks back in one layer group, with
// forks and prefix-cache hits holding some of them. (Given here: first_needed_block, which
// says where a window's live blocks start. The hybrid manager around the groups is
// hybrid_block_manager.cpp; exercise 2, the blocks of a step, is step_blocks.cpp.)
#include <algorithm>

#include "pa/ch12_hybrid.h"

namespace pa::ch12 {

// ANCHOR: first_needed_block
// A query at position p of a sliding group sees the keys p - window + 1 .. p that exist
// (>= 0); later queries see less to the left, never more, so the query at next_pos decides.
// Block i holds positions i * block_size .. i * block_size + block_size - 1: the block that
// holds that query's first key is the first one still needed. A full group needs them all.
int first_needed_block(const LayerGroup& group, int next_pos, int block_size) {
  PA_REQUIRE(next_pos >= 0, "first_needed_block: negative position " << next_pos);
  if (group.kind == Attention::full) return 0;
  return std::max(0, next_pos - group.window + 1) / block_size;
}
// ANCHOR_END: first_needed_block

GroupBlockManager::GroupBlockManager(HybridBlockManager& owner, const LayerGroup& group)
    : ch07::SharedBlockManager(owner.pool_.num_blocks(), owner.block_size_), owner_(&owner), group_(group) {}

int GroupBlockManager::num_free() const { return owner_->num_free(); }

int GroupBlockManager::take_block() { return owner_->take_pool_block(); }

void GroupBlockManager::drop_block(int block) {
  PA_REQUIRE(block != kNullBlock, "drop_block: the null block (" << kNullBlock
                                      << ") is owned by nobody and is never freed");
  owner_->drop_pool_block(block);
}

void GroupBlockManager::fork(int parent, int child) {
  SharedBlockManager::fork(parent, child);
  // Chapter 7's fork counted the child as an owner of every entry; nobody owns a null one.
  for (int b : find(child, "fork").blocks)
    if (b == kNullBlock) --refcount_[size_t(kNullBlock)];
}

void GroupBlockManager::release(int seq_id) {
  // Chapter 7's release drops one count of every entry: take the null ones out first.
  Sequence& seq = find(seq_id, "release");
  seq.blocks.erase(std::remove(seq.blocks.begin(), seq.blocks.end(), kNullBlock), seq.blocks.end());
  SharedBlockManager::release(seq_id);
}

void GroupBlockManager::add_with(int seq_id, const std::vector<int>& table, int length) {
  add_sequence(seq_id);
  Sequence& seq = find(seq_id, "add_sequence");
  for (int b : table) {
    if (b != kNullBlock) {
      if (refcount_[size_t(b)] == 0) owner_->unevict(b);
      ++refcount_[size_t(b)];
    }
    seq.blocks.push_back(b);
  }
  seq.length = length;
}

// ANCHOR: free_dead_blocks
int GroupBlockManager::free_dead_blocks(int seq_id) {
  Sequence& seq = find(seq_id, "free_dead_blocks");
  // TODO(ch12): give up the sequence's dead entries in this group. Its next query is at
  //   position seq.length; an entry is dead when no key in it is seen by that query or a
  //   later one (first_needed_block, above: a full group has no dead entry). On return:
  //   - every dead entry is kNullBlock; every other entry is untouched; seq.blocks keeps its
  //     size (entry i is logical block i) and seq.length does not change;
  //   - the sequence owns none of the blocks its dead entries held: each has one owner fewer
  //     in refcount_. A block that another sequence also holds (a fork, either way, or a
  //     prefix-cache hit that shares it) stays allocated, theirs. A block left with no
  //     owner went to drop_block exactly once, a block the prefix cache registered too:
  //     the cache is not an owner, and drop_block keeps such a block cached, evictable
  //     (counted free), instead of freeing it;
  //   - a kNullBlock entry is owned by nobody: no refcount_ changes for it and it never
  //     reaches drop_block (which refuses it).
  //   Returns the number of blocks that went to drop_block. Tests: FreeDeadBlocks.*,
  //   HybridHand.*, Ch12/HeldGolden.*, Gemma3Like.*, HybridRandom.*.
  PA_TODO("ch12");
}
// ANCHOR_END: free_dead_blocks

// ANCHOR: prefix_hit_blocks
int prefix_hit_blocks(const std::vector<LayerGroup>& groups, const std::vector<std::vector<bool>>& cached,
                      int block_size, int max_blocks) {
  PA_REQUIRE(groups.size() == cached.size(),
             "prefix_hit_blocks: " << groups.size() << " groups but " << cached.size() << " cache maps");
  // TODO(ch12, stretch): return the largest P with 0 <= P <= max_blocks and P <= every
  //   cached[g].size() such that every group can serve a prefix of P blocks from its cache:
  //   the first query after the prefix (at position P * block_size) and every later one find
  //   every block they can see cached (cached[g][i]). Blocks no such query sees need not be
  //   cached: a sliding group's entries before them will be the null block. 0 if nothing
  //   fits. Checked by StretchPrefixHit.* (tests/12-hybrid-models/test_stretch_prefix_hit.cpp)
  //   and, in the engine, StretchPrefixHitInTheEngine.* (test_hybrid_engine.cpp).
  PA_TODO("ch12");
}
// ANCHOR_END: prefix_hit_blocks

}  // namespace pa::ch12
