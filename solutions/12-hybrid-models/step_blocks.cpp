// Chapter 12, exercise 2: the blocks a step takes from the one pool, every layer group
// together, when each append's windows give blocks back first. The engine plans every step
// with it (hybrid_engine.cpp: how long a chunk fits, what is left for an admission), and
// append_slots asks it before it refuses an append (hybrid_block_manager.cpp).
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "pa/ch12_hybrid.h"

namespace pa::ch12 {

// ANCHOR: step_blocks
int HybridBlockManager::step_blocks(const std::vector<int>& seq_ids, const std::vector<int>& new_tokens) const {
  PA_REQUIRE(seq_ids.size() == new_tokens.size(),
             "step_blocks: " << seq_ids.size() << " sequences but " << new_tokens.size() << " token counts");
  std::unordered_set<int> seen;
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    PA_REQUIRE(has_sequence(seq_ids[i]), "step_blocks: unknown sequence " << seq_ids[i]);
    PA_REQUIRE(new_tokens[i] >= 0, "step_blocks: negative token count " << new_tokens[i] << " for sequence "
                                                                        << seq_ids[i]);
    PA_REQUIRE(seen.insert(seq_ids[i]).second, "step_blocks: sequence " << seq_ids[i] << " appears twice in one step");
  }
  // TODO(ch12): return the smallest num_free() with which append_slots(seq_ids[i],
  //   new_tokens[i]) for i = 0, 1, ... in this order all succeed, every layer group drawing
  //   on the one pool. Each append, in each group, first gives back what free_dead_blocks
  //   would give back at that moment (its entries before first_needed_block(group,
  //   length, block_size)), and those blocks serve its own new blocks and every later
  //   append's; then it takes blocks_needed: its new blocks, plus a copy of a shared,
  //   partly filled tail. Sequences of one step may share blocks (forks, prefix-cache hits):
  //   a dead block goes back only from the last of its holders to free it, so an earlier
  //   append of the step may leave it fewer holders; and of the holders of one shared tail
  //   that append, the last one left writes in place, with no copy (chapter 7's rule).
  //   Never negative. Nothing changes (const): the manager stays as it was. Tests:
  //   StepBlocks.* (test_step_blocks.cpp; StepBlocks.ExactUnderRandomOperations in
  //   test_hybrid_random.cpp compares thousands of steps with what their appends took).
  // HINT(1): Simulate the step on counts, not on the manager: how many holders each block
  //   has left after the step's earlier appends, per group. The answer is a running balance
  //   of blocks taken minus blocks given back, and the step needs its highest point, not
  //   its end: an append that takes before a later one gives back needs those blocks then.
  // HINT(2): Per append and group: each entry before first_needed_block(...) that is not
  //   kNullBlock drops one holder, and one left with none comes back (the balance goes
  //   down). The takes are blocks_needed less the copy, plus the copy only while the tail
  //   still has more than one holder left (the copy takes one of them away). Start each
  //   block's holders at its refcount, in a map per group; look at the highest point after
  //   each append, starting from 0.
  // HINT(3): left[g]: block -> holders left (emplace(b, m.refcount(b))). net = most = 0. For
  //   each i (s, n), each group g (m = *groups_[g], blocks = m.block_list(s), first =
  //   first_needed_block(m.layer_group(), m.length(s), block_size_)): for j < first with
  //   blocks[j] != kNullBlock: if (--left[g][blocks[j]] == 0) --net; copy =
  //   m.needs_copy(s, n); net += m.blocks_needed(s, n) - copy; if (copy && left of
  //   blocks.back() > 1) { --that; ++net; }. After the groups: most = max(most, net).
  //   Return most.
  // BEGIN SOLUTION(ch12)
  // STUB: PA_TODO("ch12");
  std::vector<std::unordered_map<int, int>> left(groups_.size());
  int net = 0, most = 0;
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    const int s = seq_ids[i], n = new_tokens[i];
    for (size_t g = 0; g < groups_.size(); ++g) {
      const GroupBlockManager& m = *groups_[g];
      const std::vector<int>& blocks = m.block_list(s);
      auto owners = [&](int b) -> int& { return left[g].emplace(b, m.refcount(b)).first->second; };
      const int first = first_needed_block(m.layer_group(), m.length(s), block_size_);
      for (int j = 0; j < first; ++j)
        if (blocks[size_t(j)] != kNullBlock && --owners(blocks[size_t(j)]) == 0) --net;
      const bool copy = m.needs_copy(s, n);
      net += m.blocks_needed(s, n) - (copy ? 1 : 0);
      if (copy && owners(blocks.back()) > 1) {
        --owners(blocks.back());
        ++net;
      }
    }
    most = std::max(most, net);
  }
  return most;
  // END SOLUTION
}
// ANCHOR_END: step_blocks

}  // namespace pa::ch12
