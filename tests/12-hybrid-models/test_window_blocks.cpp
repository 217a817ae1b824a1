// Chapter 12: which blocks a sliding window still needs (first_needed_block) and the blocks a
// layer group holds as a sequence grows, against reference/pa_ref/hybrid.py (golden cases
// from golden_ch12.py), and the Gemma-3-like accounting at 32K tokens.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "compare.h"
#include "golden.h"
#include "pa/ch12_hybrid.h"

namespace {

using pa::ch12::Attention;
using pa::ch12::first_needed_block;
using pa::ch12::full_group;
using pa::ch12::HybridBlockManager;
using pa::ch12::kNullBlock;
using pa::ch12::LayerGroup;
using pa::ch12::sliding_group;
using pa::test::GoldenCase;

LayerGroup group_of(int window) { return window == 0 ? full_group() : sliding_group(window); }
std::string group_text(int window) {
  return window == 0 ? "full group" : "sliding group, window " + std::to_string(window);
}

// Hand-worked: block_size 16, window 32. The query at 46 sees 15..46 (block 0's last key);
// the query at 47 sees 16..47, so block 0 is dead.
TEST(FirstNeededBlock, HandWorkedEdges) {
  const LayerGroup w32 = sliding_group(32);
  EXPECT_EQ(first_needed_block(w32, 0, 16), 0) << "the first query sees position 0";
  EXPECT_EQ(first_needed_block(w32, 31, 16), 0) << "window 32 at position 31 sees 0..31";
  EXPECT_EQ(first_needed_block(w32, 46, 16), 0) << "window 32 at position 46 sees 15..46: block 0 holds 15";
  EXPECT_EQ(first_needed_block(w32, 47, 16), 1) << "window 32 at position 47 sees 16..47: block 0 is dead";
  EXPECT_EQ(first_needed_block(w32, 63, 16), 2) << "window 32 at position 63 sees 32..63";
  // The window's edge inside a block: window 20 at position 40 sees 21..40 (block 1).
  EXPECT_EQ(first_needed_block(sliding_group(20), 34, 16), 0) << "window 20 at 34 sees 15..34";
  EXPECT_EQ(first_needed_block(sliding_group(20), 35, 16), 1) << "window 20 at 35 sees 16..35";
  // A window of one key: the query sees only itself.
  EXPECT_EQ(first_needed_block(sliding_group(1), 16, 16), 1) << "window 1 at 16 sees only 16";
  EXPECT_EQ(first_needed_block(sliding_group(1), 15, 16), 0) << "window 1 at 15 sees only 15";
  // Wider than the sequence: everything is needed.
  EXPECT_EQ(first_needed_block(sliding_group(1000), 500, 16), 0) << "window 1000 at 500 sees 0..500";
  EXPECT_EQ(first_needed_block(full_group(), 100000, 16), 0) << "a full group needs every block";
}

TEST(FirstNeededBlock, MatchesTheReference) {
  const GoldenCase c(pa::test::golden_dir("ch12") + "/first_needed");
  const auto w = c.get<int>("window"), bs = c.get<int>("block_size"), p = c.get<int>("next_pos"),
             want = c.get<int>("expect");
  int wrong = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const int got = first_needed_block(group_of(w[i]), p[i], bs[i]);
    if (got != want[i] && ++wrong <= 5)
      ADD_FAILURE() << group_text(w[i]) << ", block_size " << bs[i] << ", next_pos " << p[i]
                    << ": first_needed_block " << got << ", the reference (hybrid.py) says " << want[i];
  }
  EXPECT_EQ(wrong, 0) << "of " << want.size() << " cases";
}

// One sequence grown by a script of appends in a manager of one group; after each append and
// each free_dead_blocks the group holds exactly what hybrid.py says, and its table's dead
// entries are the null block.
class HeldGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HeldGolden, BlocksHeldMatchTheReference) {
  const GoldenCase c(pa::test::golden_dir("ch12") + "/" + GetParam());
  const int window = int(c.param_int("window")), bs = int(c.param_int("block_size"));
  const auto chunks = c.get<int>("chunks"), after_append = c.get<int>("expect_after_append"),
             after_free = c.get<int>("expect_after_free");
  HybridBlockManager m(400, bs, {group_of(window)});
  m.add_sequence(7);
  std::string script;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int before = m.length(7);
    script += " append_slots(seq 7, " + std::to_string(chunks[i]) + ")";
    SCOPED_TRACE(group_text(window) + ", block_size " + std::to_string(bs) + ", after" + script);
    m.append_slots(7, chunks[i]);
    ASSERT_EQ(m.num_held(), after_append[i])
        << "blocks held after growing from " << before << " to " << m.length(7)
        << " tokens (append_slots frees what the queries from position " << before << " on cannot see first)";
    script += " free_dead_blocks(seq 7)";
    m.free_dead_blocks(7);
    ASSERT_EQ(m.num_held(), after_free[i]) << "blocks held at " << m.length(7) << " tokens, after free_dead_blocks";
    const auto& table = m.block_list(0, 7);
    const int dead = int(table.size()) - after_free[i];
    for (int j = 0; j < int(table.size()); ++j)
      ASSERT_EQ(table[size_t(j)] == kNullBlock, j < dead)
          << "entry " << j << " of " << table.size() << " (the first " << dead << " are dead: the null block "
          << kNullBlock << "; the others hold a real block)";
  }
}

INSTANTIATE_TEST_SUITE_P(Ch12, HeldGolden, ::testing::ValuesIn(pa::test::golden_case_names("ch12", "held_")),
                         [](const auto& info) { return info.param; });

// Five sliding layers of 1,024 per full layer, 32K tokens, blocks of 16: the reference's
// accounting (test_hybrid.py checks the same two numbers: 12,288 and 2,368).
TEST(Gemma3Like, BlocksHeldAt32K) {
  const GoldenCase c(pa::test::golden_dir("ch12") + "/gemma3_32k");
  const int length = int(c.param_int("length")), bs = int(c.param_int("block_size"));
  std::vector<LayerGroup> groups, all_full;
  for (int w : c.get<int>("windows")) {
    groups.push_back(group_of(w));
    all_full.push_back(full_group());
  }
  const int pool = int(c.param_int("full_blocks")) + 1;
  for (const bool hybrid : {false, true}) {
    HybridBlockManager m(pool, bs, hybrid ? groups : all_full);
    m.add_sequence(0);
    for (int done = 0; done < length; done += 512) m.append_slots(0, 512);  // a chunked prefill
    m.free_dead_blocks(0);
    const int64_t want = hybrid ? c.param_int("hybrid_blocks") : c.param_int("full_blocks");
    EXPECT_EQ(m.num_held(), want) << (hybrid ? "5 sliding (1,024) : 1 full" : "6 full groups")
                                  << " at " << length << " tokens: blocks held (the reference says " << want << ")";
    std::set<int> in_tables;  // the blocks the six tables name, the null block aside
    for (int g = 0; g < m.num_groups(); ++g)
      for (int b : m.block_list(g, 0))
        if (b != kNullBlock) in_tables.insert(b);
    EXPECT_EQ(int(in_tables.size()), want) << "the blocks the tables name";
    EXPECT_EQ(m.pool().num_free(), pool - 1 - want) << "every other block but the null one is free in the pool";
  }
}

}  // namespace
