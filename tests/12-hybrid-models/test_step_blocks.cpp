// Chapter 12, exercise 2: step_blocks, the fewest free blocks with which a step's appends
// all succeed, in order (frees of earlier appends count, a shared dead block comes back only
// from its last holder, the last holder of a shared tail writes in place). Hand-worked steps
// here; StepBlocks.ExactUnderRandomOperations (test_hybrid_random.cpp) compares thousands of
// steps with what their appends took, and the engine (test_hybrid_engine.cpp,
// test_hybrid_admission.cpp, test_hybrid_traces.cpp) plans every step with it.
#include <gtest/gtest.h>

#include "pa/ch12_engine.h"
#include "compare.h"
#include "pa/ch12_hybrid.h"

namespace {

using pa::ch12::full_group;
using pa::ch12::HybridBlockManager;
using pa::ch12::kNullBlock;
using pa::ch12::sliding_group;

TEST(StepBlocks, AnAppendUsesWhatItsWindowGivesBack) {
  HybridBlockManager m(5, 8, {full_group(), sliding_group(8)});  // 4 blocks to hand out
  m.add_sequence(1);
  m.append_slots(1, 16);
  EXPECT_EQ(m.step_blocks({1}, {1}), 1)
      << "2 new blocks (one per group), less the 1 the sliding group gives back first (the query at 16 sees 9..16)";
  EXPECT_EQ(m.blocks_needed(1, 1), 2) << "blocks_needed counts what the append takes, nothing given back";
}

TEST(StepBlocks, TheStepNeedsItsHighestPointNotItsEnd) {
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

TEST(StepBlocks, ASharedDeadBlockComesBackFromItsLastOwner) {
  HybridBlockManager m(16, 8, {sliding_group(8)});
  m.add_sequence(1);
  m.append_slots(1, 24);  // blocks 0 and 1 dead at 24, not yet freed
  m.fork(1, 3);           // sequence 3 holds them too
  m.add_sequence(2);
  EXPECT_EQ(m.step_blocks({1, 2}, {0, 16}), 2)
      << "sequence 1 drops its claim on blocks 0 and 1, but sequence 3 still holds them: nothing comes back";
  EXPECT_EQ(m.step_blocks({1, 3, 2}, {0, 0, 16}), 0) << "after sequence 3 drops them too, they serve sequence 2";
}

TEST(StepBlocks, TheLastOwnerOfASharedTailWritesInPlace) {
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

// A prefix-cache hit is a holder like a fork: a dead block that a sequence started from the
// cache also holds comes back only when the second of them frees it in the step.
TEST(StepBlocks, ACacheHitHoldsADeadBlockLikeAFork) {
  HybridBlockManager m(16, 8, {sliding_group(8)}, /*prefix_caching=*/true);
  std::vector<int> tokens(32);
  for (int i = 0; i < 32; ++i) tokens[size_t(i)] = 100 + i;
  m.add_sequence(1);
  m.append_slots(1, 16);  // blocks 0 and 1
  m.commit(1, tokens, 16);
  m.add_sequence(2, tokens, 16);  // the query at 16 sees 9..16: entry 0 null, entry 1 = sequence 1's block 1
  ASSERT_EQ(m.block_list(0, 2)[0], kNullBlock);
  ASSERT_EQ(m.block_list(0, 2)[1], m.block_list(0, 1)[1]);
  m.append_slots(1, 8);  // sequence 1 at 24: its block 0 went back (cached, evictable); block 1 is dead now
  m.append_slots(2, 8);  // sequence 2 at 24: block 1 dead for it too
  m.add_sequence(3);
  EXPECT_EQ(m.step_blocks({1, 3}, {0, 16}), 2)
      << "sequence 1 gives up block 1 (entry 1), but sequence 2, a cache hit on it, still holds it: nothing "
         "comes back, and sequence 3's two blocks need 2 free";
  EXPECT_EQ(m.step_blocks({1, 2, 3}, {0, 0, 16}), 1)
      << "sequence 2 gives it up after sequence 1: it comes back and serves one of sequence 3's two blocks";
  EXPECT_EQ(m.step_blocks({2, 1, 3}, {0, 0, 16}), 1) << "the same, whichever holder frees it first";
}

// append_slots asks step_blocks when the free blocks do not cover everything an append
// takes, and refuses with what it needs and what is free once the windows have given back.
TEST(StepBlocks, AppendSlotsRefusesByWhatTheWindowsGiveBack) {
  HybridBlockManager m(6, 8, {full_group(), sliding_group(8)});  // 5 blocks to hand out
  m.add_sequence(1);
  m.append_slots(1, 16);  // 2 blocks per group; the query at 16 sees 9..16: sliding block 0 is dead
  ASSERT_EQ(m.num_free(), 1);
  EXPECT_EQ(m.step_blocks({1}, {9}), 3)
      << "4 new blocks (positions 16..24: two per group), less the 1 the sliding group gives back first";
  EXPECT_EQ(m.step_blocks({1}, {8}), 1) << "2 new blocks (one per group), less the 1 given back";
  EXPECT_TRUE(pa::test::error_contains([&] { m.append_slots(1, 9); },
                                       "append_slots: sequence 1 needs 4 more blocks, only 2 are free"));
  EXPECT_EQ(m.length(1), 16) << "a refused append changes nothing";
  EXPECT_NO_THROW(m.append_slots(1, 8)) << "2 blocks taken, 1 free and 1 given back first: it fits";
  EXPECT_EQ(m.num_free(), 0);
}

// The engine's admission bound against your step_blocks: a sequence alone, one token a
// step, its dead blocks left to each append (whose freeing comes first). Before the step
// from c it holds what the step from c - 1 left, predicted_blocks(c - 1, 1), and the step
// needs step_blocks more: the pool it needs is the larger of the two closed forms (the old
// blocks, or the step's after its frees), so the steps' peak is peak_blocks, what
// add_request asks of the pool. A pool of that peak serves every step; one block less runs
// out. (Windows of bs + 1 and 1 free a block in the very step that starts a new one: an
// upper bound that gives nothing back first counts one too many there.)
TEST(StepBlocks, OneTokenStepsPeakAtTheEnginesAdmissionBound) {
  for (int bs : {8, 16}) {
    const std::vector<std::vector<int>> patterns = {{3, 0}, {bs + 1}, {0, 2 * bs, 1}, {100, 0}};
    for (const auto& windows : patterns) {
      std::vector<pa::ch12::LayerGroup> groups;
      for (int w : windows) groups.push_back(w > 0 ? sliding_group(w) : full_group());
      const int last = 3 * bs + 2, peak = pa::ch12::peak_blocks(windows, true, bs, last);
      for (int usable : {peak, peak - 1}) {
        HybridBlockManager m(usable + 1, bs, groups);
        m.add_sequence(1);
        int most = 0, ran_out_at = -1;
        for (int c = 0; c <= last; ++c) {
          const int need = m.num_held() + m.step_blocks({1}, {1});
          const int before = c > 0 ? pa::ch12::predicted_blocks(windows, true, bs, c - 1, 1) : 0;
          if (usable == peak) {
            ASSERT_EQ(need, std::max(before, pa::ch12::predicted_blocks(windows, true, bs, c, 1)))
                << "block size " << bs << ", windows " << ::testing::PrintToString(windows) << ", the step from " << c
                << " computed tokens: held " << m.num_held() << " + step_blocks "
                << m.step_blocks({1}, {1}) << " (its dead blocks go back first)";
          }
          most = std::max(most, need);
          try {
            m.append_slots(1, 1);
          } catch (const pa::ch02::OutOfBlocks&) {
            ran_out_at = c;
            break;
          }
        }
        if (usable == peak) {
          EXPECT_EQ(most, peak) << "block size " << bs << ", windows " << ::testing::PrintToString(windows);
          EXPECT_EQ(ran_out_at, -1) << "a pool of the peak must serve every one-token step";
        } else {
          EXPECT_GE(ran_out_at, 0) << "block size " << bs << ", windows " << ::testing::PrintToString(windows)
                                   << ": a pool one block below the peak must run out";
        }
      }
    }
  }
}

}  // namespace
