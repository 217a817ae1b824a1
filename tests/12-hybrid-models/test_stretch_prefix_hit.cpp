// Chapter 12, stretch exercise: prefix caching per group type. A full group's hit needs
// every block of the prefix; a sliding group's only the blocks the query after it sees.
// prefix_hit_blocks against hybrid.prefix_hit_blocks (golden case prefix_hit), by hand, and
// in the manager: commit, release, match_prefix, add_sequence with a hit, eviction.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compare.h"
#include "golden.h"
#include "pa/ch12_hybrid.h"

namespace {

using pa::ch12::full_group;
using pa::ch12::HybridBlockManager;
using pa::ch12::kNullBlock;
using pa::ch12::LayerGroup;
using pa::ch12::prefix_hit_blocks;
using pa::ch12::sliding_group;
using pa::test::GoldenCase;

std::vector<bool> bits(const std::string& s) {  // "..x.": x = cached
  std::vector<bool> out;
  for (char c : s) out.push_back(c == 'x');
  return out;
}

TEST(StretchPrefixHit, HandWorked) {
  const LayerGroup full = full_group(), slide = sliding_group(8);  // blocks of 4: the last two
  EXPECT_EQ(prefix_hit_blocks({full}, {bits("xxx.")}, 4, 10), 3) << "a full group: the leading run";
  EXPECT_EQ(prefix_hit_blocks({slide}, {bits("..xx.x")}, 4, 10), 4)
      << "window 8, blocks of 4: a prefix of 4 blocks needs only blocks 2 and 3 (the query at 16 sees 9..16)";
  EXPECT_EQ(prefix_hit_blocks({slide}, {bits(".xxx.x")}, 4, 10), 4)
      << "block 0 missing stops a 1-block hit, not a 4-block one: try the longest first";
  EXPECT_EQ(prefix_hit_blocks({full, slide}, {bits("xxxxx."), bits("..xx.x")}, 4, 10), 4)
      << "every group must serve the prefix: the full group allows 5, the sliding group 4 of those";
  EXPECT_EQ(prefix_hit_blocks({full}, {bits("xxxxxx")}, 4, 2), 2) << "at most max_blocks";
  EXPECT_EQ(prefix_hit_blocks({slide}, {bits("......")}, 4, 10), 0) << "nothing cached";
  EXPECT_EQ(prefix_hit_blocks({sliding_group(5)}, {bits(".x.x")}, 4, 10), 4)
      << "window 5, blocks of 4: the query at 16 sees 12..16, so a 4-block prefix needs only block 3";
  EXPECT_EQ(prefix_hit_blocks({sliding_group(5)}, {bits("..x.")}, 4, 10), 3)
      << "window 5: the query at 12 sees 8..12, so a 3-block prefix needs only block 2 (4 blocks need block 3)";
  EXPECT_EQ(prefix_hit_blocks({sliding_group(4)}, {bits("xx.x")}, 4, 10), 4)
      << "window 4 on a block edge: the query at 16 sees 13..16, block 3 only";
  EXPECT_EQ(prefix_hit_blocks({sliding_group(6)}, {bits("xx.x")}, 4, 10), 2)
      << "window 6: the query at 16 sees 11..16 (blocks 2 and 3: 2 is missing), at 12 it sees 7..12 "
         "(blocks 1 and 2), at 8 it sees 3..8 (blocks 0 and 1)";
}

TEST(StretchPrefixHit, MatchesTheReference) {
  const GoldenCase c(pa::test::golden_dir("ch12") + "/prefix_hit");
  const auto windows = c.get<int>("windows"), bs = c.get<int>("block_size"), max_blocks = c.get<int>("max_blocks"),
             cached = c.get<int>("cached"), want = c.get<int>("expect");
  int wrong = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    std::vector<LayerGroup> groups;
    std::vector<std::vector<bool>> maps(3);
    std::string text;
    for (size_t g = 0; g < 3; ++g) {
      const int w = windows[3 * k + g];
      groups.push_back(w == 0 ? full_group() : sliding_group(w));
      text += (g ? ", " : "") + (w == 0 ? std::string("full ") : "window " + std::to_string(w) + " ");
      for (size_t i = 0; i < 12; ++i) {
        maps[g].push_back(cached[(3 * k + g) * 12 + i] != 0);
        text += maps[g].back() ? 'x' : '.';
      }
    }
    const int got = prefix_hit_blocks(groups, maps, bs[k], max_blocks[k]);
    if (got != want[k] && ++wrong <= 5)
      ADD_FAILURE() << "instance " << k << ": groups " << text << " (x = cached), block_size " << bs[k]
                    << ", max_blocks " << max_blocks[k] << ": prefix_hit_blocks " << got
                    << ", the reference (hybrid.py) says " << want[k];
  }
  EXPECT_EQ(wrong, 0) << "of " << want.size() << " instances";
}

std::vector<int> prompt(int n, int seed) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back(1000 * seed + i);
  return t;
}

// A full group and a sliding group (window 10, blocks of 8). A 40-token prompt computed,
// committed and released stays cached; the same prompt hits 40 tokens: the full group's
// five blocks, and the sliding group's blocks 3 and 4 (the query at 40 sees 31..40).
TEST(StretchPrefixHit, ManagerServesAHitPerGroupType) {
  HybridBlockManager m(24, 8, {full_group(), sliding_group(10)}, /*prefix_caching=*/true);
  const std::vector<int> tokens = prompt(45, 1);
  m.add_sequence(1);
  m.append_slots(1, 40);
  m.commit(1, tokens, 40);
  const std::vector<int> full1 = m.block_list(0, 1), slide1 = m.block_list(1, 1);
  m.release(1);
  EXPECT_EQ(m.num_evictable(), 10) << "every registered block stays cached when its owner leaves";
  EXPECT_EQ(m.num_free(), 23) << "free + evictable: what a step can take";
  EXPECT_EQ(m.match_prefix(tokens, 44), 40);
  EXPECT_EQ(m.match_prefix(tokens, 39), 32) << "whole blocks, at most max_tokens";
  EXPECT_EQ(m.match_prefix(prompt(45, 2), 44), 0) << "another prompt: no hit";
  m.add_sequence(2, tokens, 40);
  EXPECT_EQ(m.length(2), 40);
  EXPECT_EQ(m.block_list(0, 2), full1) << "the full group holds every block of the prefix";
  const std::vector<int> want_slide = {kNullBlock, kNullBlock, kNullBlock, slide1[3], slide1[4]};
  EXPECT_EQ(m.block_list(1, 2), want_slide) << "the sliding group holds what the query at 40 sees, null before";
  EXPECT_EQ(m.num_evictable(), 3) << "the sliding group's blocks 0..2 stay evictable";
  EXPECT_EQ(m.num_held(), 7);
  m.append_slots(2, 5);  // one new block per group, not committed
  m.release(2);
  EXPECT_EQ(m.num_evictable(), 10) << "the ten registered blocks are cached again; the two new ones are free";
  EXPECT_EQ(m.pool().num_free(), 13);
}

TEST(StretchPrefixHit, EvictionLosesTheHitOfAFullGroup) {
  HybridBlockManager m(7, 8, {full_group()}, true);  // 6 blocks
  const std::vector<int> tokens = prompt(33, 4);
  m.add_sequence(1);
  m.append_slots(1, 32);
  m.commit(1, tokens, 32);
  m.release(1);  // 4 evictable, block 0 (the prompt's first) given back first
  m.add_sequence(2);
  m.append_slots(2, 24);  // 2 free, then 1 evicted: the prompt's first block
  EXPECT_EQ(m.num_evictable(), 3);
  EXPECT_EQ(m.match_prefix(tokens, 32), 0) << "a full group needs every block: the first one is gone";
  HybridBlockManager s(7, 8, {sliding_group(10)}, true);
  s.add_sequence(1);
  s.append_slots(1, 32);
  s.commit(1, tokens, 32);
  s.release(1);
  s.add_sequence(2);
  s.append_slots(2, 24);
  EXPECT_EQ(s.match_prefix(tokens, 32), 32)
      << "a sliding group (window 10) needs blocks 2 and 3 for a 32-token hit: block 0 being gone does not matter";
}

}  // namespace
