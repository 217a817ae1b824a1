// Chapter 8: cascade attention. Sequences whose tables start with the same blocks are
// grouped (plan_cascade); the shared prefix is attended once per group, the suffixes per
// sequence, and the two merged. Checked against the float64 reference, against chapter 5
// on the same inputs, under a permutation of the physical blocks, with NaN in every slot,
// block, table entry and workspace partition it must not read; and the errors for bad
// input. The kernels run on the reference planner's groups (golden_plan): the planner,
// plan_cascade, is the chapter's stretch exercise (test_stretch_cascade_plan.cpp).
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

// A plan made by hand: each group's members (ascending) and its prefix in blocks, the leader's
// first blocks. The core tests use these, not plan_cascade (the stretch exercise).
using HandGroups = std::vector<std::pair<std::vector<int>, int>>;
CascadePlan hand_plan(const std::vector<int>& table, int num_seqs, int width, int block_size,
                      const HandGroups& groups) {
  CascadePlan p;
  p.num_seqs = num_seqs;
  p.max_blocks_per_seq = width;
  p.block_size = block_size;
  p.group_of.assign(size_t(num_seqs), -1);
  p.prefix_len.assign(size_t(num_seqs), 0);
  for (const auto& [members, blocks] : groups) {
    pa::ch08::CascadeGroup g;
    g.members = members;
    g.prefix_len = blocks * block_size;
    g.prefix_blocks.assign(table.begin() + int64_t(members[0]) * width,
                           table.begin() + int64_t(members[0]) * width + blocks);
    for (int m : members) {
      p.group_of[size_t(m)] = int(p.groups.size());
      p.prefix_len[size_t(m)] = g.prefix_len;
    }
    p.groups.push_back(g);
  }
  return p;
}

// The reference planner's plan of a golden case (its group_of and prefix_lens).
template <typename T>
CascadePlan golden_plan(const PagedCase<T>& c, const GoldenCase& g) {
  const std::vector<int> group_of = g.get<int>("group_of"), prefix = g.get<int>("prefix_lens");
  HandGroups groups;
  for (int b = 0; b < c.shape.num_seqs; ++b) {
    const int gi = group_of[size_t(b)];
    if (gi < 0) continue;
    if (size_t(gi) >= groups.size()) groups.resize(size_t(gi) + 1);
    groups[size_t(gi)].first.push_back(b);
    groups[size_t(gi)].second = prefix[size_t(b)] / c.shape.block_size;
  }
  return hand_plan(c.table, c.shape.num_seqs, c.shape.max_blocks_per_seq, c.shape.block_size, groups);
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

  // The reference planner's groups (StretchCascadePlan.* checks plan_cascade against them).
  const CascadePlan plan = golden_plan(c, g);

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
  EXPECT_TRUE(pa::test::exactly_equal(run_cascade(moved, golden_plan(moved, g)), got, dims))
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

// The planner on hand-made tables: test_stretch_cascade_plan.cpp (the stretch exercise).

// ---- The device plan -------------------------------------------------------------------

TEST(CascadeDevicePlan, ASmallerPlanReusesTheBuffer) {
  const std::vector<int> table = {1, 2, 1, 2, 1, 3, 4, 5};
  CascadeDevicePlan dp(hand_plan(table, 4, 2, 4, {{{0, 1, 2}, 1}}));
  EXPECT_EQ(dp.num_groups(), 1);
  EXPECT_EQ(dp.max_prefix_len(), 4);
  EXPECT_EQ(dp.min_prefix_len(), 0);
  const int* before = dp.view().group_start;
  dp.upload(hand_plan({1, 2, 1, 2}, 2, 2, 4, {{{0, 1}, 2}}));
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
  const CascadePlan good = hand_plan({1, 2, 1, 2, 3, 4}, 3, 2, 4, {{{0, 1}, 2}});
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
  const CascadeDevicePlan plan(hand_plan({0, 1, 0, 1}, 2, 2, 16, {{{0, 1}, 1}}));  // prefix 16
  auto run = [&](const PagedAttentionShape& shape, const CascadeDevicePlan& p, int max_len = 32) {
    return error_of([&] {
      pa::ch08::cascade_attention<float>(shape, buf.get(), buf.get(), buf.get(), buf.get(),
                                         ints.get(), ints.get(), max_len, p, 1.f, ws);
    });
  };
  const CascadeDevicePlan three(hand_plan({0, 1, 0, 1, 2, 3}, 3, 2, 16, {{{0, 1}, 1}}));
  EXPECT_PRED2(has, run(s, three), "the cascade plan was made for another batch: 3 sequences");
  EXPECT_PRED2(has, run({2, 4, 2, 64, 8, 8, 2}, plan), "made for another batch");  // block size 8
  EXPECT_PRED2(has, run(s, CascadeDevicePlan{}), "the cascade plan is empty");
  EXPECT_PRED2(has, run(s, plan, 40), "max_context_len 40 is beyond the table's capacity");
  EXPECT_PRED2(has, run(s, plan, 8), "shared prefix of 16 tokens is longer than max_context_len 8");
  EXPECT_PRED2(has, run({2, 4, 2, 100, 16, 8, 2}, plan), "head_size 100 is not supported");
  EXPECT_PRED2(has, run({2, 6, 4, 64, 16, 8, 2}, plan), "must be a multiple of num_kv_heads");
}

}  // namespace
