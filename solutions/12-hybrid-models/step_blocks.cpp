// Chapter 12, stretch exercise 6: the exact blocks of a step with sliding windows.
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
  // TODO(ch12, stretch): return the smallest num_free() with which
  //   append_slots(seq_ids[i], new_tokens[i]) for i = 0, 1, ... in this order all succeed.
  //   Each append first gives back what its sliding groups free (those blocks can serve its
  //   own new blocks and every later append's), then takes its new blocks and copies
  //   (blocks_needed). A dead block another sequence still holds goes back only when its
  //   last owner frees it, and of the owners of one shared, partly filled tail that append,
  //   the last writes in place (chapter 7's rule). Never negative; nothing changes (const).
  //   Checked by StretchStepBlocks.* (tests/12-hybrid-models/test_stretch_step_blocks.cpp).
  // HINT(1): simulate the step on counts, not on the manager: per group, how many owners
  //   each block has left after the earlier appends of the step. The answer is a running
  //   balance of blocks taken minus blocks given back, and the step needs its highest point,
  //   not its end.
  // HINT(2): per append and group: the dead entries are those before
  //   first_needed_block(group, length, block_size) that are not kNullBlock; each drops one
  //   owner, and one that reaches 0 gives a block back. The takes are blocks_needed less the
  //   copy, plus the copy while the tail's owners left are above 1 (then one fewer). Track
  //   owners left in a map per group, starting from refcount.
  // HINT(3): left[g]: block -> owners left (emplace(b, refcount(b))). net = most = 0. For
  //   each i, for each group g (m = *groups_[g], blocks = m.block_list(s), first =
  //   min(first_needed_block(m.layer_group(), m.length(s), block_size_), blocks.size())):
  //   for j < first with blocks[j] != kNullBlock: if (--left[g][blocks[j]] == 0) --net;
  //   copy = m.needs_copy(s, n); net += m.blocks_needed(s, n) - copy; if (copy && left of
  //   the tail > 1) { --left; ++net; }. After each append (all groups): most = max(most,
  //   net). Return most.
  // BEGIN SOLUTION(ch12, stretch)
  // STUB: // Given for now: every block every append takes, none given back (an upper
  // STUB: // bound; the stretch tests want the exact count). Replace it with your answer.
  // STUB: int bound = 0;
  // STUB: for (size_t i = 0; i < seq_ids.size(); ++i) bound += blocks_needed(seq_ids[i], new_tokens[i]);
  // STUB: return bound;
  std::vector<std::unordered_map<int, int>> left(groups_.size());
  int net = 0, most = 0;
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    const int s = seq_ids[i], n = new_tokens[i];
    for (size_t g = 0; g < groups_.size(); ++g) {
      const GroupBlockManager& m = *groups_[g];
      const std::vector<int>& blocks = m.block_list(s);
      auto owners = [&](int b) -> int& { return left[g].emplace(b, m.refcount(b)).first->second; };
      const int first = std::min(first_needed_block(m.layer_group(), m.length(s), block_size_), int(blocks.size()));
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
