// Chapter 12, stretch exercise: step_blocks, the fewest free blocks with which a step's
// appends all succeed, in order (frees of earlier appends count, a shared dead block comes
// back only from its last owner, the last owner of a shared tail writes in place). Hand-
// worked steps here; StretchStepBlocks.ExactUnderRandomOperations (test_hybrid_random.cpp)
// compares thousands of steps with what their appends took.
#include <gtest/gtest.h>

#include "pa/ch12_hybrid.h"

namespace {

using pa::ch12::full_group;
using pa::ch12::HybridBlockManager;
using pa::ch12::sliding_group;

TEST(StretchStepBlocks, AnAppendUsesWhatItsWindowGivesBack) {
  HybridBlockManager m(5, 8, {full_group(), sliding_group(8)});  // 4 blocks to hand out
  m.add_sequence(1);
  m.append_slots(1, 16);
  EXPECT_EQ(m.step_blocks({1}, {1}), 1)
      << "2 new blocks (one per group), less the 1 the sliding group gives back first (the query at 16 sees 9..16)";
  EXPECT_EQ(m.blocks_needed(1, 1), 2) << "blocks_needed counts what the append takes, nothing given back";
}

TEST(StretchStepBlocks, TheStepNeedsItsHighestPointNotItsEnd) {
  HybridBlockManager m(16, 8, {sliding_group(8)});
  m.add_sequence(1);
  m.append_slots(1, 24);  // blocks 0..2; the query at 24 sees 17..24: blocks 0 and 1 are dead
  m.add_sequence(2);
  m.append_slots(2, 8);
  EXPECT_EQ(m.step_blocks({2, 1}, {16, 0}), 2)
      << "sequence 2 takes 2 blocks before sequence 1 gives 2 back: the step needs 2 free, although it ends at 0";
  EXPECT_EQ(m.step_blocks({1, 2}, {0, 16}), 0) << "sequence 1 gives 2 back first: they serve sequence 2";
  EXPECT_EQ(m.step_blocks({1, 2}, {1, 17}), 2)
      << "sequence 1: 2 back, then 1 taken (position 24); sequence 2: 3 taken (positions 8..24): the balance "
         "goes -1, then 2";
}

TEST(StretchStepBlocks, ASharedDeadBlockComesBackFromItsLastOwner) {
  HybridBlockManager m(16, 8, {sliding_group(8)});
  m.add_sequence(1);
  m.append_slots(1, 24);  // blocks 0 and 1 dead at 24, not yet freed
  m.fork(1, 3);           // sequence 3 holds them too
  m.add_sequence(2);
  EXPECT_EQ(m.step_blocks({1, 2}, {0, 16}), 2)
      << "sequence 1 drops its claim on blocks 0 and 1, but sequence 3 still holds them: nothing comes back";
  EXPECT_EQ(m.step_blocks({1, 3, 2}, {0, 0, 16}), 0) << "after sequence 3 drops them too, they serve sequence 2";
}

TEST(StretchStepBlocks, TheLastOwnerOfASharedTailWritesInPlace) {
  HybridBlockManager m(16, 8, {full_group(), sliding_group(100)});
  m.add_sequence(1);
  m.append_slots(1, 12);  // the tail (8..11) half full in each group
  m.fork(1, 2);
  m.fork(1, 3);
  EXPECT_EQ(m.step_blocks({1, 2, 3}, {1, 1, 1}), 4)
      << "three owners of each tail append: two copies per group, the third writes in place";
  EXPECT_EQ(m.step_blocks({1, 2}, {1, 1}), 4) << "two of three owners append: both copy";
  EXPECT_EQ(m.step_blocks({1}, {5}), 4) << "per group: the tail's copy, and a new block for positions 16..";
}

}  // namespace
