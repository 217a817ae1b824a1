// Chapter 12: the hybrid block manager, by hand-worked cases (the window's edge inside a
// block, on a block edge, wider than the sequence; fork and copy-on-write in both kinds of
// group; running out of blocks) and by the errors a bad call gets.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compare.h"
#include "pa/ch12_hybrid.h"

namespace {

using pa::ch12::Attention;
using pa::ch12::full_group;
using pa::ch12::HybridBlockManager;
using pa::ch12::kNullBlock;
using pa::ch12::LayerGroup;
using pa::ch12::sliding_group;
using pa::test::error_contains;

// The entries of a table that are the null block, as a string: "N N . ." (N null, . real).
std::string shape(const std::vector<int>& table) {
  std::string s;
  for (int b : table) s += b == kNullBlock ? "N " : ". ";
  if (!s.empty()) s.pop_back();
  return s;
}

// The window's first key inside a block: window 20, blocks of 16. The query at 34 sees
// 15..34 (block 0 keeps position 15); the query at 35 sees 16..35.
TEST(HybridHand, WindowEdgeInsideABlock) {
  HybridBlockManager m(16, 16, {sliding_group(20)});
  m.add_sequence(1);
  m.append_slots(1, 34);
  EXPECT_EQ(m.free_dead_blocks(1), 0) << "at 34 tokens the next query (position 34) sees 15..34: block 0 holds 15";
  EXPECT_EQ(shape(m.block_list(0, 1)), ". . .");
  m.append_slots(1, 1);
  EXPECT_EQ(shape(m.block_list(0, 1)), ". . .")
      << "append_slots(1 token at position 34) must keep block 0: that step's query sees position 15";
  EXPECT_EQ(m.free_dead_blocks(1), 1) << "at 35 tokens the next query sees 16..35: block 0 is dead";
  EXPECT_EQ(shape(m.block_list(0, 1)), "N . .") << "the dead entry points at the null block";
  EXPECT_EQ(m.num_held(), 2);
  EXPECT_EQ(m.num_free(), 16 - 1 - 2) << "block 0 of the pool is the null block: never free";
}

// The window's first key on a block edge: window 16, blocks of 16.
TEST(HybridHand, WindowEdgeOnABlockEdge) {
  HybridBlockManager m(16, 16, {sliding_group(16)});
  m.add_sequence(1);
  m.append_slots(1, 31);
  EXPECT_EQ(m.free_dead_blocks(1), 1) << "at 31 tokens the next query sees 16..31: block 0 is dead";
  EXPECT_EQ(shape(m.block_list(0, 1)), "N .");
  m.append_slots(1, 1);  // position 31; block 1 still seen
  EXPECT_EQ(m.free_dead_blocks(1), 0) << "at 32 tokens the next query sees 17..32: block 1 holds 17..31";
  EXPECT_EQ(shape(m.block_list(0, 1)), "N .");
  m.append_slots(1, 15);  // to 47
  EXPECT_EQ(m.free_dead_blocks(1), 1) << "at 47 tokens the next query sees 32..47";
  EXPECT_EQ(shape(m.block_list(0, 1)), "N N .");
  EXPECT_EQ(m.num_held(), 1);
}

TEST(HybridHand, WindowWiderThanTheSequenceAndTheFullGroupKeepEverything) {
  HybridBlockManager m(64, 8, {full_group(), sliding_group(100)});
  m.add_sequence(3);
  m.append_slots(3, 90);
  EXPECT_EQ(m.free_dead_blocks(3), 0) << "window 100 over 90 tokens: every key is still seen";
  m.append_slots(3, 20);  // 110 tokens: the next query sees 11..110
  EXPECT_EQ(m.free_dead_blocks(3), 1) << "at 110 tokens the next query sees 11..110: only block 0 (0..7) is dead";
  EXPECT_EQ(shape(m.block_list(1, 3)).substr(0, 5), "N . .");
  for (int b : m.block_list(0, 3)) EXPECT_NE(b, kNullBlock) << "the full group gives nothing back";
  EXPECT_EQ(m.block_list(0, 3).size(), 14u);
}

// Fork and copy-on-write in both groups; a dead block two sequences share goes back to the
// pool only when the second one gives it up.
TEST(HybridHand, ForkSharesAndTheLastOwnerFrees) {
  HybridBlockManager m(32, 8, {full_group(), sliding_group(16)});
  m.add_sequence(1);
  m.append_slots(1, 20);  // 3 blocks per group, the tail half full
  m.fork(1, 2);
  EXPECT_EQ(m.block_list(1, 2), m.block_list(1, 1)) << "the child shares the parent's blocks";
  EXPECT_EQ(m.blocks_needed(2, 1), 2) << "a shared, half-full tail is copied in each group";
  const int free_before = m.num_free();
  m.append_slots(2, 1);
  EXPECT_EQ(m.num_free(), free_before - 2);
  EXPECT_EQ(m.take_copies(0).size(), 1u);
  EXPECT_EQ(m.take_copies(1).size(), 1u);
  m.append_slots(1, 8);  // 28 tokens: one new block per group, no copy (the tail is its own now)
  const int shared_block0 = m.block_list(1, 1)[0];
  EXPECT_EQ(m.group(1).refcount(shared_block0), 2);
  EXPECT_EQ(m.free_dead_blocks(1), 0)
      << "at 28 tokens block 0 is dead for sequence 1, but sequence 2 still sees it: nothing goes back";
  EXPECT_EQ(m.block_list(1, 1)[0], kNullBlock) << "sequence 1's entry points at the null block";
  EXPECT_EQ(m.group(1).refcount(shared_block0), 1) << "sequence 1 no longer owns block " << shared_block0;
  EXPECT_EQ(m.block_list(1, 2)[0], shared_block0) << "sequence 2 still holds it";
  EXPECT_TRUE(m.pool().is_allocated(shared_block0));
  m.append_slots(2, 7);  // 28 tokens too
  EXPECT_EQ(m.free_dead_blocks(2), 1) << "its last owner gives block " << shared_block0 << " back";
  EXPECT_FALSE(m.pool().is_allocated(shared_block0));
  EXPECT_EQ(m.group(1).refcount(shared_block0), 0);
  // A fork after the freeing: the null entry is copied and owned by nobody.
  m.fork(2, 3);
  EXPECT_EQ(m.block_list(1, 3)[0], kNullBlock);
  EXPECT_EQ(m.group(1).refcount(kNullBlock), 0) << "nobody owns the null block";
  m.release(1);
  m.release(2);
  m.release(3);
  EXPECT_EQ(m.num_free(), 31) << "every block but the null one is back";
  EXPECT_EQ(m.num_held(), 0);
}

// A sequence started from the prefix cache holds the cached blocks as a fork would: a dead
// block it still holds only loses the other sequence as an owner. A block whose last owner
// leaves goes to drop_block even when the cache registered it: the cache keeps it,
// evictable (free to take, not free in the pool), and a later request can still hit it.
TEST(FreeDeadBlocks, ACacheHitHoldsABlockAndTheCacheKeepsTheLastOnesRelease) {
  HybridBlockManager m(32, 8, {full_group(), sliding_group(8)}, /*prefix_caching=*/true);
  std::vector<int> tokens(48);
  for (int i = 0; i < 48; ++i) tokens[size_t(i)] = 7 * i + 3;
  m.add_sequence(1);
  m.append_slots(1, 24);  // 3 blocks per group
  m.commit(1, tokens, 24);  // every block of both groups registered
  const std::vector<int> s1 = m.block_list(1, 1);
  m.add_sequence(2, tokens, 16);  // a hit of 2 blocks; the query at 16 sees 9..16
  ASSERT_EQ(shape(m.block_list(1, 2)), "N .") << "the sliding group's hit: entry 0 null, entry 1 cached";
  ASSERT_EQ(m.block_list(1, 2)[1], s1[1]);
  ASSERT_EQ(m.group(1).refcount(s1[1]), 2) << "sequences 1 and 2 hold block " << s1[1];
  const int pool_free = m.pool().num_free(), free_before = m.num_free();
  // Sequence 1 at 24 tokens: the next query sees 17..24, so entries 0 and 1 are dead.
  EXPECT_EQ(m.free_dead_blocks(1), 1)
      << "at 24 tokens sequence 1's entries 0 and 1 are dead: block " << s1[0]
      << " (sequence 1 its only owner) goes back; block " << s1[1] << " stays, sequence 2 (a cache hit) holds it";
  EXPECT_EQ(shape(m.block_list(1, 1)), "N N .");
  EXPECT_EQ(m.group(1).refcount(s1[1]), 1) << "sequence 1 no longer owns block " << s1[1];
  EXPECT_EQ(m.group(1).refcount(s1[0]), 0) << "nobody owns block " << s1[0];
  EXPECT_EQ(m.num_evictable(), 1) << "block " << s1[0]
                                   << " had no owner left: it went to drop_block, which keeps a cached block evictable";
  EXPECT_EQ(m.pool().num_free(), pool_free) << "a cached block is not freed in the pool: the cache still names it";
  EXPECT_EQ(m.num_free(), free_before + 1) << "an evictable block counts as free";
  EXPECT_EQ(m.group(1).refcount(kNullBlock), 0) << "nobody owns the null block";
  // Sequence 2 grows to 24 too: block s1[1] is dead for it, its last owner.
  m.append_slots(2, 8);
  EXPECT_EQ(m.free_dead_blocks(2), 1) << "sequence 2, the last owner of block " << s1[1] << ", gives it back";
  EXPECT_EQ(shape(m.block_list(1, 2)), "N N .");
  EXPECT_EQ(m.num_evictable(), 2) << "blocks " << s1[0] << " and " << s1[1] << " are cached, evictable";
  EXPECT_EQ(m.free_dead_blocks(2), 0) << "nothing is dead twice: null entries are owned by nobody";
  EXPECT_EQ(m.group(1).refcount(kNullBlock), 0);
  // The cache still serves them: a request of the same 24 tokens hits 3 blocks in the full
  // group and, in the sliding group, the block the query at 24 sees.
  m.add_sequence(3, tokens, 24);
  EXPECT_EQ(shape(m.block_list(1, 3)), "N N .");
  EXPECT_EQ(m.block_list(0, 3), m.block_list(0, 1)) << "the full group's three cached blocks";
  m.release(1);
  m.release(2);
  m.release(3);
  EXPECT_EQ(m.num_held(), 0);
  EXPECT_EQ(m.num_free(), 31) << "every block but the null one can be taken again (free or evictable)";
}

TEST(HybridHand, OutOfBlocksCountsWhatTheWindowGivesBack) {
  HybridBlockManager m(5, 8, {full_group(), sliding_group(8)});  // 4 blocks to hand out
  m.add_sequence(1);
  m.append_slots(1, 16);  // 2 blocks per group
  ASSERT_EQ(m.num_free(), 0);
  // The step's query at 16 sees 9..16: block 0 of the sliding group can go back first, but
  // the two new blocks (one per group) need one more.
  EXPECT_TRUE(error_contains([&] { m.append_slots(1, 1); }, "append_slots: sequence 1 needs 2 more blocks, only 1 are free"));
  EXPECT_EQ(m.length(1), 16) << "a failed append changes nothing";
  EXPECT_EQ(shape(m.block_list(1, 1)), ". .") << "a failed append frees nothing";
  m.add_sequence(2);
  m.append_slots(2, 0);  // holds nothing
  m.release(2);
  EXPECT_EQ(m.num_free(), 0);
}

TEST(HybridErrors, BadConfigurationsAndCallsAreRefused) {
  EXPECT_TRUE(error_contains([] { HybridBlockManager(8, 16, {sliding_group(0)}); },
                             "layer group 0: window must be positive, got 0"));
  EXPECT_TRUE(error_contains([] { HybridBlockManager(8, 16, {full_group(), sliding_group(-3)}); },
                             "layer group 1: window must be positive, got -3"));
  EXPECT_TRUE(error_contains([] { HybridBlockManager(8, 16, {full_group(), LayerGroup{Attention::full, 128}}); },
                             "layer group 1 is full attention but has a window of 128"));
  EXPECT_TRUE(error_contains([] { HybridBlockManager(8, 16, {}); }, "no layer groups"));
  EXPECT_TRUE(error_contains([] { HybridBlockManager(1, 16, {full_group()}); }, "block 0 is the null block"));
  HybridBlockManager m(8, 16, {full_group(), sliding_group(4)});
  m.add_sequence(1);
  EXPECT_TRUE(error_contains([&] { m.release(7); }, "release: unknown sequence 7"));
  EXPECT_TRUE(error_contains([&] { m.fork(5, 6); }, "fork: unknown sequence 5"));
  EXPECT_TRUE(error_contains([&] { m.fork(1, 1); }, "fork: sequence 1 already exists"));
  EXPECT_TRUE(error_contains([&] { m.add_sequence(1); }, "add_sequence: sequence 1 already exists"));
  EXPECT_TRUE(error_contains([&] { m.append_slots(9, 1); }, "append_slots: unknown sequence 9"));
  EXPECT_TRUE(error_contains([&] { m.append_slots(1, -1); }, "negative token count"));
  EXPECT_TRUE(error_contains([&] { m.step_blocks({1, 1}, {1, 1}); }, "appears twice"));
  EXPECT_TRUE(error_contains([&] { m.take_copies(2); }, "no layer group 2"));
  EXPECT_TRUE(error_contains([&] { m.append_slots(1, 16 * 8); }, "needs 16 more blocks, only 7 are free"));
}

}  // namespace

namespace {

// Swap-in: a sequence restarted at 40 tokens holds fresh blocks for what its queries can
// still see, in each group, and null entries before them.
TEST(HybridHand, RestoreHoldsOnlyWhatTheWindowSees) {
  HybridBlockManager m(16, 8, {full_group(), sliding_group(10)});
  EXPECT_EQ(m.restore_blocks(40), 5 + 2) << "the full group's 5 blocks, the sliding group's blocks 3 and 4 (the query at 40 sees 31..40)";
  m.restore(4, 40);
  EXPECT_EQ(m.length(4), 40);
  EXPECT_EQ(shape(m.block_list(0, 4)), ". . . . .");
  EXPECT_EQ(shape(m.block_list(1, 4)), "N N N . .") << "the query at 40 sees 31..40: blocks 3 and 4";
  EXPECT_EQ(m.num_held(), 7);
  for (int g = 0; g < 2; ++g) {
    for (int b : m.block_list(g, 4)) {
      if (b != kNullBlock) {
        EXPECT_EQ(m.group(g).refcount(b), 1) << "group " << g << ", block " << b;
      }
    }
  }
  m.append_slots(4, 1);
  EXPECT_EQ(m.num_held(), 7 + 2) << "position 40 opens a block in each group";
  EXPECT_TRUE(error_contains([&] { m.restore(5, 64); }, "restore: sequence 5 needs 10 blocks, only 6 are free"));
  EXPECT_FALSE(m.has_sequence(5)) << "a failed restore changes nothing";
  EXPECT_EQ(m.num_free(), 6);
  EXPECT_TRUE(error_contains([&] { m.restore(4, 8); }, "restore: sequence 4 already exists"));
  m.release(4);
  EXPECT_EQ(m.num_free(), 15);
}

}  // namespace

namespace {

// The table a kernel reads for one group: null entries stay (0), padding past each
// sequence's last block is -1.
TEST(HybridHand, GroupBlockTableForAStep) {
  HybridBlockManager m(32, 8, {full_group(), sliding_group(9)});
  m.add_sequence(1);
  m.add_sequence(2);
  m.append_slots(1, 30);
  m.append_slots(2, 12);
  m.free_dead_blocks(1);  // the query at 30 sees 22..30: blocks 0 and 1 are dead
  const auto full = m.block_table(0, {2, 1});
  const auto slide = m.block_table(1, {2, 1});
  ASSERT_EQ(full.max_blocks_per_seq, 4) << "the longest table among them";
  const auto& l1 = m.block_list(0, 1);
  const auto& l2 = m.block_list(0, 2);
  const std::vector<int32_t> want_full = {l2[0], l2[1], -1, -1, l1[0], l1[1], l1[2], l1[3]};
  EXPECT_EQ(full.block_table, want_full) << "row i is seq_ids[i]'s table, padded with -1";
  const auto& s1 = m.block_list(1, 1);
  const auto& s2 = m.block_list(1, 2);
  const std::vector<int32_t> want_slide = {s2[0], s2[1], -1, -1, kNullBlock, kNullBlock, s1[2], s1[3]};
  EXPECT_EQ(slide.block_table, want_slide) << "dead entries are the null block, not padding";
  EXPECT_EQ(m.block_table(1, {1}, 6).block_table.size(), 6u);
  EXPECT_TRUE(error_contains([&] { m.block_table(1, {1}, 3); }, "sequence 1 has 4 blocks, more than max_blocks_per_seq 3"));
  EXPECT_TRUE(error_contains([&] { m.block_table(0, {7}); }, "block_table: unknown sequence 7"));
}

}  // namespace
