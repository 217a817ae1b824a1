// Chapter 10: varlen paged attention over ragged batches (decodes, spec-decode
// verifications, chunked-prefill pieces and idle sequences in one launch) against the
// float64 reference, on permuted blocks, with forced small grids (many items per thread
// block) and (the stretch exercise: StretchSplitTiles) forced KV splits,
// partials merged in the launch. The core suites plan whole tiles (kWholeTiles). Chapter 4's and chapter 6's
// decode cases are in test_decode_equality.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <sstream>

#include "varlen_case.h"

namespace {

using pa::ch10::VarlenAttention;
using pa::test::GoldenCase;
using pa::test::VarlenCase;

// What the plan looked like, for failure messages.
std::string plan_text(const VarlenAttention& attn) {
  const pa::ch10::Plan& p = attn.host_plan();
  int split = 0, by_warp = 0;
  for (const auto& w : p.items) {
    split += w.num_splits > 1;
    by_warp += w.by_warp;
  }
  std::ostringstream os;
  os << "plan: grid " << p.grid << ", " << p.items.size() << " items (" << split
     << " of them parts of a split tile, " << p.num_counters << " split tiles; " << by_warp
     << " warp items)";
  if (p.chunk_tokens) os << ", chunks of " << p.chunk_tokens << " tokens";
  return os.str();
}

using pa::ch10::kWholeTiles;

template <typename T>
void check_case(const GoldenCase& g) {
  VarlenCase<T> c(g);
  const auto dims = pa::test::varlen_out_dims(c.shape);
  VarlenAttention attn;
  const std::vector<T> got = c.run(attn, kWholeTiles);
  {
    const pa::test::NanProbe probe(c.nan_rerun(attn, kWholeTiles));
    EXPECT_TRUE(pa::test::all_close(got, c.expected, dims, c.atol, c.rtol))
        << c.name << ": " << g.param("note") << "\n  " << plan_text(attn);
  }
  if (c.fp8)  // what fp8 costs, against the values before quantization (chapter 6's bound)
    EXPECT_TRUE(pa::test::all_close(got, c.unquantized, dims, c.fp8_atol, c.fp8_rtol))
        << "vs the unquantized reference, " << c.name;

  // The same logical cache in other physical blocks: the same plan, the same bits.
  VarlenCase<T> moved(g, /*permutation_seed=*/11);
  VarlenAttention attn2;
  EXPECT_TRUE(pa::test::exactly_equal(moved.run(attn2, kWholeTiles), got, dims))
      << pa::test::kBlockPlacement << "; " << c.name;

  // Small grids: many items per thread block.
  for (int grid : {1, 3, 7}) {
    const std::vector<T> out = c.run(attn, kWholeTiles, grid);
    const pa::test::NanProbe probe(c.nan_rerun(attn, kWholeTiles, grid));
    EXPECT_TRUE(pa::test::all_close(out, c.expected, dims, c.atol, c.rtol))
        << "whole tiles, forced grid " << grid << ", " << c.name << "\n  " << plan_text(attn);
  }
}

// Stretch (the split-tile merge): the planner's own chunks; forced chunks, splits inside
// sequences (partials merged by the last item of a tile); and small grids: many items,
// splits of one tile included, per thread block.
template <typename T>
void check_split_case(const GoldenCase& g) {
  VarlenCase<T> c(g);
  const auto dims = pa::test::varlen_out_dims(c.shape);
  VarlenAttention attn;
  struct Forced {
    int chunk_tokens, grid;
  };
  for (const Forced f : {Forced{0, 0}, Forced{32, 0}, Forced{64, 0}, Forced{96, 0}, Forced{0, 1},
                         Forced{32, 3}, Forced{0, 7}}) {
    const std::vector<T> out = c.run(attn, f.chunk_tokens, f.grid);
    const pa::test::NanProbe probe(c.nan_rerun(attn, f.chunk_tokens, f.grid));
    EXPECT_TRUE(pa::test::all_close(out, c.expected, dims, c.atol, c.rtol))
        << "forced chunk_tokens " << f.chunk_tokens << ", grid " << f.grid << " (0: the "
        << "planner's), " << c.name << "\n  " << plan_text(attn);
  }
}

class VarlenGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(VarlenGolden, MatchesReferenceWhateverThePlanAndBlockPlacement) {
  const GoldenCase g(pa::test::golden_dir("ch10") + "/" + GetParam());
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: FAIL() << "chapter 10 serves half and bf16 queries: no fp32 cases";
    case pa::DType::fp16: return check_case<pa::half>(g);
    case pa::DType::bf16: return check_case<pa::bf16>(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch10, VarlenGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch10", "varlen_")),
                         [](const auto& info) { return info.param; });

class StretchSplitTiles : public ::testing::TestWithParam<std::string> {};

TEST_P(StretchSplitTiles, MatchesReferenceWithSplitTiles) {
  const GoldenCase g(pa::test::golden_dir("ch10") + "/" + GetParam());
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: FAIL() << "chapter 10 serves half and bf16 queries: no fp32 cases";
    case pa::DType::fp16: return check_split_case<pa::half>(g);
    case pa::DType::bf16: return check_split_case<pa::bf16>(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch10, StretchSplitTiles,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch10", "varlen_")),
                         [](const auto& info) { return info.param; });

// Prefix caching: two sequences whose tables point at the same physical blocks for their
// common prefix, with equal queries, get equal rows; under every plan too. (The case's
// contexts are shorter than any chunk: no plan of it splits a tile, so this core test runs
// no stretch code.)
TEST(VarlenSharedBlocks, EqualQueriesOverSharedPrefixBlocksGiveEqualRows) {
  const GoldenCase g(pa::test::golden_dir("ch10") + "/varlen_fp16_d64_bs16_g2_shared_prefix");
  ASSERT_EQ(g.param("twins"), "0,2");
  VarlenCase<pa::half> c(g);
  const int s = 0, t = 2, M = c.shape.max_blocks_per_seq;
  ASSERT_EQ(c.table[size_t(s) * M], c.table[size_t(t) * M]) << "the case shares no block";
  const int n = c.qsl[s + 1] - c.qsl[s];
  ASSERT_EQ(n, c.qsl[t + 1] - c.qsl[t]);
  const size_t row = size_t(c.shape.num_q_heads) * c.shape.head_size;
  const auto dims = pa::test::varlen_out_dims(n, c.shape.num_q_heads, c.shape.head_size);
  VarlenAttention attn;
  for (int chunk : {kWholeTiles, 0, 32}) {
    const std::vector<pa::half> out = c.run(attn, chunk);
    for (const auto& w : attn.host_plan().items)
      ASSERT_EQ(w.num_splits, 1) << "chunk_tokens " << chunk << " split a tile: this core test "
                                 << "must not run the split-tile merge (a stretch exercise)";
    EXPECT_TRUE(pa::test::all_close(out, c.expected, pa::test::varlen_out_dims(c.shape), c.atol,
                                    c.rtol))
        << c.name << ", chunk_tokens " << chunk << "\n  " << plan_text(attn);
    const std::vector<pa::half> a(out.begin() + c.qsl[s] * row, out.begin() + c.qsl[s + 1] * row);
    const std::vector<pa::half> b(out.begin() + c.qsl[t] * row, out.begin() + c.qsl[t + 1] * row);
    EXPECT_TRUE(pa::test::exactly_equal(b, a, dims))
        << "sequence " << t << " (got) reads sequence " << s << "'s prefix blocks (want) and "
        << "has the same queries and the same later tokens: its rows must be the same; "
        << "chunk_tokens " << chunk;
  }
}

}  // namespace
