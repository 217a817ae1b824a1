// Chapter 8: cascade attention. Sequences whose tables start with the same blocks are
// grouped (plan_cascade); the shared prefix is attended once per group, the suffixes per
// sequence, and the two merged. Checked against the float64 reference, against chapter 5
// on the same inputs, under a permutation of the physical blocks, with NaN in every slot,
// block, table entry and workspace partition it must not read; the planner on hand-made
// tables; and the errors for bad input.
#include <gtest/gtest.h>

#include "paged_case.h"
#include "pa/ch05_paged_attention_v2.h"
#include "pa/ch08_cascade.h"

namespace {

using pa::ch04::PagedAttentionShape;
using pa::ch08::CascadeDevicePlan;
using pa::ch08::CascadePlan;
using pa::ch08::plan_cascade;
using pa::test::error_of;
using pa::test::GoldenCase;
using pa::test::PagedCase;

template <typename T>
CascadePlan plan_of(const PagedCase<T>& c, int min_shared_blocks = 1) {
  return plan_cascade(c.table, c.context_lens, c.shape.num_seqs, c.shape.max_blocks_per_seq,
                      c.shape.block_size, min_shared_blocks);
}

// Runs cascade attention with `plan` on a case; the output and every workspace partition
// start as NaN, so an unwritten output or a merge of an unwritten partition shows.
template <typename T>
std::vector<T> run_cascade(PagedCase<T>& c, const CascadePlan& plan) {
  const CascadeDevicePlan device_plan(plan);
  pa::ch05::Workspace ws;
  const int most_chunks = device_plan.max_prefix_len() / c.shape.block_size;  // chunks >= 1 block
  ws.reserve(c.shape.num_seqs, c.shape.num_q_heads,
             most_chunks + pa::ch05::num_partitions(c.max_context_len) + 2, c.shape.head_size);
  ws.poison();
  pa::test::poison(c.out);
  pa::ch08::cascade_attention<T>(c.shape, c.out.get(), c.q.get(), c.k_pool.get(), c.v_pool.get(),
                                 c.d_table.get(), c.d_lens.get(), c.max_context_len, device_plan,
                                 c.scale, ws);
  return c.out.download();
}

template <typename T>
std::vector<double> as_doubles(const std::vector<T>& x) {
  std::vector<double> out;
  for (const T& e : x) out.push_back(pa::to_float(e));
  return out;
}

template <typename T>
void check_case(const GoldenCase& g) {
  PagedCase<T> c(g);
  const auto dims = pa::test::decode_out_dims(c.shape);
  const std::string name = "case " + c.name + " (" + g.param("note") + ")";

  // The planner finds the groups the reference planner found.
  const CascadePlan plan = plan_of(c);
  const std::vector<int> want_group = g.get<int>("group_of"), want_prefix = g.get<int>("prefix_lens");
  for (int b = 0; b < c.shape.num_seqs; ++b) {
    EXPECT_EQ(plan.group_of[size_t(b)], want_group[size_t(b)]) << name << ": sequence " << b << "'s group";
    EXPECT_EQ(plan.prefix_len[size_t(b)], want_prefix[size_t(b)]) << name << ": sequence " << b << "'s prefix";
  }

  const std::vector<T> got = run_cascade(c, plan);
  EXPECT_TRUE(pa::test::all_close(got, c.expected, dims, c.atol, c.rtol))
      << name << "\n  (the workspace is NaN before each run: a computed NaN may also come from "
      << "merging a prefix chunk's partition that the prefix pass never wrote)";

  // Chapter 5 on the same inputs, which reads every prefix once per sequence.
  pa::ch05::Workspace ws;
  pa::test::poison(c.out);
  pa::ch05::paged_attention<T>(c.shape, c.out.get(), c.q.get(), c.k_pool.get(), c.v_pool.get(),
                               c.d_table.get(), c.d_lens.get(), c.max_context_len, c.scale, ws);
  EXPECT_TRUE(pa::test::all_close(got, as_doubles(c.out.download()), dims, c.atol, c.rtol))
      << name << ": cascade (got) must agree with chapter 5's paged_attention (want)";

  // No group at all: every sequence through the suffix pass alone.
  EXPECT_TRUE(pa::test::all_close(run_cascade(c, plan_of(c, 1 << 20)), c.expected, dims, c.atol, c.rtol))
      << name << ": with a plan of no groups";

  PagedCase<T> moved(g, /*permutation_seed=*/11);
  EXPECT_TRUE(pa::test::exactly_equal(run_cascade(moved, plan_of(moved)), got, dims))
      << pa::test::kBlockPlacement;
}

class CascadeGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CascadeGolden, MatchesReferenceAndChapter5) {
  const GoldenCase g(pa::test::golden_dir("ch08") + "/" + GetParam());
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: return check_case<float>(g);
    case pa::DType::fp16: return check_case<pa::half>(g);
    case pa::DType::bf16: return check_case<pa::bf16>(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch08, CascadeGolden,
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

TEST(CascadePlanner, GroupsSequencesThatStartAlike) {
  const Planned p = plan_rows({{1, 2, 3}, {1, 2, 4}, {5, 6, 7}, {1, 2, 8}}, {12, 12, 12, 9});
  EXPECT_EQ(p.members, (Groups{{0, 1, 3}}));  // not neighbours in the batch
  EXPECT_EQ(p.prefix_lens, (Lens{8}));
}

TEST(CascadePlanner, ABlockSharedButNotFromTheStartIsNoGroup) {
  EXPECT_TRUE(plan_rows({{1, 2}, {3, 2}}, {8, 8}).members.empty());
  EXPECT_TRUE(plan_rows({{1, 2, 3}, {4, 2, 3}, {5, 2, 3}}, {12, 12, 12}).members.empty());
}

TEST(CascadePlanner, ASharedPartialBlockIsNotPartOfThePrefix) {
  const Planned both_partial = plan_rows({{1, 2}, {1, 2}}, {6, 7});
  EXPECT_EQ(both_partial.members, (Groups{{0, 1}}));
  EXPECT_EQ(both_partial.prefix_lens, (Lens{4}));
  EXPECT_EQ(plan_rows({{1, 2}, {1, 2}}, {8, 7}).prefix_lens, (Lens{4}));  // full in one only
  EXPECT_TRUE(plan_rows({{1, 2}, {1, 2}}, {3, 3}).members.empty());       // no full block
}

TEST(CascadePlanner, ThePrefixMayBeTheWholeContext) {
  EXPECT_EQ(plan_rows({{1, 2}, {1, 2}}, {8, 8}).prefix_lens, (Lens{8}));
}

TEST(CascadePlanner, MinSharedBlocksDecidesWhoJoins) {
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

TEST(CascadePlanner, EmptySequencesShareNothing) {
  EXPECT_TRUE(plan_rows({{1, 2}, {1, 2}, {9, 9}}, {0, 3, 0}).members.empty());
}

// ---- The device plan -------------------------------------------------------------------

TEST(CascadeDevicePlan, ASmallerPlanReusesTheBuffer) {
  const std::vector<int> table = {1, 2, 1, 2, 1, 3, 4, 5};
  CascadeDevicePlan dp(plan_cascade(table, {8, 8, 8, 8}, 4, 2, 4));
  EXPECT_EQ(dp.num_groups(), 1);
  EXPECT_EQ(dp.max_prefix_len(), 4);
  EXPECT_EQ(dp.min_prefix_len(), 0);
  const int* before = dp.view().group_start;
  dp.upload(plan_cascade({1, 2, 1, 2}, {8, 8}, 2, 2, 4));
  EXPECT_EQ(dp.view().group_start, before) << "a plan that fits must not reallocate (CUDA graphs)";
  EXPECT_EQ(dp.max_prefix_len(), 8);
  EXPECT_EQ(dp.min_prefix_len(), 8);
}

// ---- Errors ----------------------------------------------------------------------------

bool has(const std::string& message, const std::string& fragment) {
  return message.find(fragment) != std::string::npos;
}

TEST(CascadeErrors, ThePlannerRefusesTablesThatDoNotFit) {
  auto plan = [](std::vector<int> table, std::vector<int> lens, int seqs, int min_shared = 1) {
    return error_of([&] { plan_cascade(table, lens, seqs, 2, 4, min_shared); });
  };
  EXPECT_EQ(plan({0, 1}, {8}, 1), "(no error)");
  EXPECT_PRED2(has, plan({0, 1}, {8}, 1, 0), "min_shared_blocks must be >= 1, got 0");
  EXPECT_PRED2(has, plan({0, 1, 2}, {8}, 1), "block_table has 3 entries, want num_seqs * max_blocks_per_seq = 2");
  EXPECT_PRED2(has, plan({0, 1}, {8, 8}, 1), "context_lens has 2 entries, want num_seqs = 1");
  EXPECT_PRED2(has, plan({0, 1}, {9}, 1), "sequence 0: context_len 9 is outside 0..8");
  EXPECT_PRED2(has, plan({0, -1}, {5}, 1), "block_table[0][1] = -1 is not a block");
}

TEST(CascadeErrors, UploadRefusesAnInconsistentPlan) {
  const CascadePlan good = plan_cascade({1, 2, 1, 2, 3, 4}, {8, 8, 8}, 3, 2, 4);
  auto upload = [](const CascadePlan& p) { return error_of([&] { CascadeDevicePlan dp(p); }); };
  EXPECT_EQ(upload(good), "(no error)");
  CascadePlan p = good;
  p.groups[0].prefix_len = 6;
  EXPECT_PRED2(has, upload(p), "cascade group 0: prefix_len 6 is not a positive multiple of block_size 4");
  p = good;
  p.groups[0].members.push_back(7);
  EXPECT_PRED2(has, upload(p), "cascade group 0: member 7 is not a sequence of the batch");
  p = good;
  p.groups.push_back(p.groups[0]);
  EXPECT_PRED2(has, upload(p), "sequence 0 is in two cascade groups");
  p = good;
  p.prefix_len[2] = 4;
  EXPECT_PRED2(has, upload(p), "sequence 2 has prefix_len 4 but is in no cascade group");
  EXPECT_PRED2(has, upload(CascadePlan{}), "a cascade plan needs at least one sequence");
}

TEST(CascadeErrors, AttentionRefusesBadShapesAndAPlanOfAnotherBatch) {
  pa::DeviceBuffer<float> buf(4096);
  pa::DeviceBuffer<int> ints(16);
  pa::ch05::Workspace ws;
  const PagedAttentionShape s{2, 4, 2, 64, 16, 8, 2};  // 2 sequences, tables of 2 blocks
  const CascadeDevicePlan plan(plan_cascade({0, 1, 0, 1}, {32, 20}, 2, 2, 16));  // prefix 16
  auto run = [&](const PagedAttentionShape& shape, const CascadeDevicePlan& p, int max_len = 32) {
    return error_of([&] {
      pa::ch08::cascade_attention<float>(shape, buf.get(), buf.get(), buf.get(), buf.get(),
                                         ints.get(), ints.get(), max_len, p, 1.f, ws);
    });
  };
  const CascadeDevicePlan three(plan_cascade({0, 1, 0, 1, 2, 3}, {32, 20, 5}, 3, 2, 16));
  EXPECT_PRED2(has, run(s, three), "the cascade plan was made for another batch: 3 sequences");
  EXPECT_PRED2(has, run({2, 4, 2, 64, 8, 8, 2}, plan), "made for another batch");  // block size 8
  EXPECT_PRED2(has, run(s, CascadeDevicePlan{}), "the cascade plan is empty");
  EXPECT_PRED2(has, run(s, plan, 40), "max_context_len 40 is beyond the table's capacity");
  EXPECT_PRED2(has, run(s, plan, 8), "shared prefix of 16 tokens is longer than max_context_len 8");
  EXPECT_PRED2(has, run({2, 4, 2, 100, 16, 8, 2}, plan), "head_size 100 is not supported");
  EXPECT_PRED2(has, run({2, 6, 4, 64, 16, 8, 2}, plan), "must be a multiple of num_kv_heads");
}

}  // namespace
