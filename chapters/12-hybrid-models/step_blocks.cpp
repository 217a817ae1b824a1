// Your exercise file. (Generated from solutions/12-hybrid-models/step_blocks.cpp; instructors regenerate with tools/make_skeletons.py.)
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
  PA_TODO("ch12");
}
// ANCHOR_END: step_blocks

}  // namespace pa::ch12
