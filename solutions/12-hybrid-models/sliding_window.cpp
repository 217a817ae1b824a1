// Chapter 12, exercises 1 and 2: which blocks a sliding window still needs, and giving the
// others back. (The hybrid manager around them is hybrid_block_manager.cpp.)
#include <algorithm>

#include "pa/ch12_hybrid.h"

namespace pa::ch12 {

// ANCHOR: first_needed_block
int first_needed_block(const LayerGroup& group, int next_pos, int block_size) {
  PA_REQUIRE(next_pos >= 0, "first_needed_block: negative position " << next_pos);
  // TODO(ch12): return the index of the first logical block (block i holds positions
  //   i * block_size .. i * block_size + block_size - 1) that holds a key some query at a
  //   position >= next_pos can see. A query at position p of a sliding group sees the keys
  //   at positions p - window + 1 .. p that exist (>= 0): `window` keys, its own included.
  //   A query of a full group sees every earlier key. Every block before the returned one is
  //   dead: no current or future query reads it; the returned block is not.
  //   Examples (block_size 16, window 32): next_pos 0 -> 0; 46 -> 0 (position 15 is still
  //   seen); 47 -> 1.
  // HINT(1): later queries see less to the left than the query at next_pos, never more, so
  //   only that query matters. Which key is the leftmost it sees, and which block holds it?
  // HINT(2): the leftmost key of the query at next_pos is next_pos - window + 1, but never
  //   below 0; a full group's leftmost key is 0. The block that holds position x is
  //   x / block_size (rounded down: the block holding the first key is still needed).
  // HINT(3): full: return 0. Sliding: return std::max(0, next_pos - group.window + 1) /
  //   block_size.
  // BEGIN SOLUTION(ch12)
  // STUB: PA_TODO("ch12");
  if (group.kind == Attention::full) return 0;
  return std::max(0, next_pos - group.window + 1) / block_size;
  // END SOLUTION
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

int GroupBlockManager::dead_blocks_to_pool(int seq_id) const {
  const Sequence& seq = find(seq_id, "dead_blocks_to_pool");
  const int first = std::min(first_needed_block(group_, seq.length, block_size_), int(seq.blocks.size()));
  int n = 0;
  for (int i = 0; i < first; ++i)
    n += seq.blocks[size_t(i)] != kNullBlock && refcount_[size_t(seq.blocks[size_t(i)])] == 1;
  return n;
}

// ANCHOR: free_dead_blocks
int GroupBlockManager::free_dead_blocks(int seq_id) {
  Sequence& seq = find(seq_id, "free_dead_blocks");
  // TODO(ch12): the sequence's next query is at position seq.length. Every entry of
  //   seq.blocks that holds no key that query (or a later one) can see is dead: on return
  //   it is kNullBlock, and the sequence no longer owns its block: the block's refcount_
  //   has one owner fewer, and a block left with no owner went back to the pool through
  //   drop_block (a block a forked sequence still holds stays, with that owner). Entries a
  //   query can still see are untouched, and so is every entry of a full group. An entry
  //   that is already kNullBlock is owned by nobody: its refcount_ never changes and it
  //   never goes to drop_block. seq.blocks keeps its size (entry i is logical block i) and
  //   seq.length does not change. Returns the number of blocks that went back to the pool.
  // HINT(1): your first_needed_block(group_, ...) says where the live entries start. Every
  //   entry before it is dead, whatever the group (a full group's answer is 0).
  // HINT(2): for each entry before that one that is not yet kNullBlock: drop one owner (as
  //   chapter 7's release does for each block), give the block back when that was the last
  //   owner, and make the entry kNullBlock. A sequence can be shorter than the window's
  //   start is far: never index past seq.blocks.size().
  // HINT(3): first = min(first_needed_block(group_, seq.length, block_size_),
  //   seq.blocks.size()); for i < first with b = seq.blocks[i] != kNullBlock: if
  //   (--refcount_[b] == 0) { drop_block(b); ++freed; } seq.blocks[i] = kNullBlock.
  //   Return freed.
  // BEGIN SOLUTION(ch12)
  // STUB: PA_TODO("ch12");
  const int first = std::min(first_needed_block(group_, seq.length, block_size_), int(seq.blocks.size()));
  int freed = 0;
  for (int i = 0; i < first; ++i) {
    const int b = seq.blocks[size_t(i)];
    if (b == kNullBlock) continue;
    if (--refcount_[size_t(b)] == 0) {
      drop_block(b);
      ++freed;
    }
    seq.blocks[size_t(i)] = kNullBlock;
  }
  return freed;
  // END SOLUTION
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
  // HINT(1): a full group's queries see every block of the prefix; a sliding group's see
  //   from first_needed_block(group, P * block_size, block_size) on. Careful: a sliding
  //   group that can serve P blocks may fail at a smaller P (a block missing early stops
  //   a short hit, not a long one), so the longest P is not the end of a run from 0.
  // HINT(2): try P from the largest allowed down to 1; return the first P for which every
  //   group has cached[g][i] for all i in [first_needed_block(groups[g], P * block_size,
  //   block_size), P). Return 0 if none.
  // BEGIN SOLUTION(ch12, stretch)
  // STUB: PA_TODO("ch12");
  int limit = max_blocks;
  for (const auto& c : cached) limit = std::min(limit, int(c.size()));
  for (int p = limit; p > 0; --p) {
    bool ok = true;
    for (size_t g = 0; g < groups.size() && ok; ++g)
      for (int i = first_needed_block(groups[g], p * block_size, block_size); i < p && ok; ++i)
        ok = cached[g][size_t(i)];
    if (ok) return p;
  }
  return 0;
  // END SOLUTION
}
// ANCHOR_END: prefix_hit_blocks

}  // namespace pa::ch12
