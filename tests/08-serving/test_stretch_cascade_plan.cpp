// Chapter 8, stretch exercise: plan_cascade, the grouping of a decode step's sequences by
// the blocks their tables start with. Against the reference planner's groups on the golden
// cases (reference/pa_ref/cascade.py), and on hand-made tables.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "paged_case.h"
#include "pa/ch08_cascade.h"

namespace {

using pa::ch08::CascadePlan;
using pa::ch08::plan_cascade;
using pa::test::GoldenCase;
using pa::test::PagedCase;

template <typename T>
void check_plan(const GoldenCase& g) {
  PagedCase<T> c(g);
  const CascadePlan plan = plan_cascade(c.table, c.context_lens, c.shape.num_seqs, c.shape.max_blocks_per_seq,
                                        c.shape.block_size);
  const std::string name = "case " + c.name + " (" + g.param("note") + ")";
  const std::vector<int> want_group = g.get<int>("group_of"), want_prefix = g.get<int>("prefix_lens");
  for (int b = 0; b < c.shape.num_seqs; ++b) {
    EXPECT_EQ(plan.group_of[size_t(b)], want_group[size_t(b)]) << name << ": sequence " << b << "'s group";
    EXPECT_EQ(plan.prefix_len[size_t(b)], want_prefix[size_t(b)]) << name << ": sequence " << b << "'s prefix";
  }
}

class StretchCascadePlan : public ::testing::TestWithParam<std::string> {};

TEST_P(StretchCascadePlan, MatchesTheReferencePlanner) {
  const GoldenCase g(pa::test::golden_dir("ch08") + "/" + GetParam());
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: return check_plan<float>(g);
    case pa::DType::fp16: return check_plan<pa::half>(g);
    case pa::DType::bf16: return check_plan<pa::bf16>(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch08, StretchCascadePlan,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch08", "cascade_")),
                         [](const auto& info) { return info.param; });

// ---- The planner on hand-made tables (block_size 4) ------------------------------------

struct Planned {
  std::vector<std::vector<int>> members;
  std::vector<int> prefix_lens;  // per group
};

Planned plan_rows(const std::vector<std::vector<int>>& rows, const std::vector<int>& lens,
                  int min_shared_blocks = 1) {
  const int width = int(rows[0].size());
  std::vector<int> table;
  for (const auto& r : rows) table.insert(table.end(), r.begin(), r.end());
  const CascadePlan p = plan_cascade(table, lens, int(rows.size()), width, 4, min_shared_blocks);
  Planned out;
  for (size_t gi = 0; gi < p.groups.size(); ++gi) {
    const auto& g = p.groups[gi];
    out.members.push_back(g.members);
    out.prefix_lens.push_back(g.prefix_len);
    EXPECT_EQ(g.prefix_blocks.size() * 4, size_t(g.prefix_len)) << "group " << gi;
    for (size_t j = 0; j < g.prefix_blocks.size(); ++j)
      EXPECT_EQ(g.prefix_blocks[j], rows[size_t(g.members[0])][j]) << "group " << gi << " block " << j;
    for (int m : g.members) {
      EXPECT_EQ(p.group_of[size_t(m)], int(gi)) << "sequence " << m;
      EXPECT_EQ(p.prefix_len[size_t(m)], g.prefix_len) << "sequence " << m;
    }
  }
  for (size_t b = 0; b < rows.size(); ++b)
    if (p.group_of[b] < 0) EXPECT_EQ(p.prefix_len[b], 0) << "sequence " << b << " is in no group";
  return out;
}

using Groups = std::vector<std::vector<int>>;
using Lens = std::vector<int>;

TEST(StretchCascadePlanner, GroupsSequencesThatStartAlike) {
  const Planned p = plan_rows({{1, 2, 3}, {1, 2, 4}, {5, 6, 7}, {1, 2, 8}}, {12, 12, 12, 9});
  EXPECT_EQ(p.members, (Groups{{0, 1, 3}}));  // not neighbours in the batch
  EXPECT_EQ(p.prefix_lens, (Lens{8}));
}

TEST(StretchCascadePlanner, ABlockSharedButNotFromTheStartIsNoGroup) {
  EXPECT_TRUE(plan_rows({{1, 2}, {3, 2}}, {8, 8}).members.empty());
  EXPECT_TRUE(plan_rows({{1, 2, 3}, {4, 2, 3}, {5, 2, 3}}, {12, 12, 12}).members.empty());
}

TEST(StretchCascadePlanner, ASharedPartialBlockIsNotPartOfThePrefix) {
  const Planned both_partial = plan_rows({{1, 2}, {1, 2}}, {6, 7});
  EXPECT_EQ(both_partial.members, (Groups{{0, 1}}));
  EXPECT_EQ(both_partial.prefix_lens, (Lens{4}));
  EXPECT_EQ(plan_rows({{1, 2}, {1, 2}}, {8, 7}).prefix_lens, (Lens{4}));  // full in one only
  EXPECT_TRUE(plan_rows({{1, 2}, {1, 2}}, {3, 3}).members.empty());       // no full block
}

TEST(StretchCascadePlanner, ThePrefixMayBeTheWholeContext) {
  EXPECT_EQ(plan_rows({{1, 2}, {1, 2}}, {8, 8}).prefix_lens, (Lens{8}));
}

TEST(StretchCascadePlanner, MinSharedBlocksDecidesWhoJoins) {
  const std::vector<std::vector<int>> rows = {{1, 2, 3}, {1, 2, 3}, {1, 5, 6}};
  const Planned one = plan_rows(rows, {12, 12, 12}, 1);
  EXPECT_EQ(one.members, (Groups{{0, 1, 2}}));
  EXPECT_EQ(one.prefix_lens, (Lens{4}));  // what all three share
  const Planned two = plan_rows(rows, {12, 12, 12}, 2);
  EXPECT_EQ(two.members, (Groups{{0, 1}}));
  EXPECT_EQ(two.prefix_lens, (Lens{12}));
  // Two groups behind the same first block.
  const Planned split = plan_rows({{1, 2}, {1, 3}, {1, 2}, {1, 3}}, {8, 8, 8, 8}, 2);
  EXPECT_EQ(split.members, (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(split.prefix_lens, (Lens{8, 8}));
}

TEST(StretchCascadePlanner, EmptySequencesShareNothing) {
  EXPECT_TRUE(plan_rows({{1, 2}, {1, 2}, {9, 9}}, {0, 3, 0}).members.empty());
}

}  // namespace
