// Chapter 11: the absorbed MLA decode against the NumPy reference (pa_ref.mla), and
// absorbed == naive through the kernel.
#include <gtest/gtest.h>

#include <cmath>

#include "mla_case.h"

namespace pa::test {
namespace {

template <typename T>
void check_case(const GoldenCase& c, int chunk, int grid, int want_splits) {
  MlaCase<T> m(c);
  const auto [atol, rtol] = tolerance_of(c);
  const std::vector<T> got = m.run(chunk, grid);
  if (want_splits == 1) ASSERT_EQ(m.splits, 1) << "a one-block plan split a tile";
  if (want_splits > 1) ASSERT_GT(m.splits, 1) << "the plan split no tile";
  EXPECT_TRUE(mla_close(got, c.get<double>("expected"), m.qsl, m.seq_lens, m.shape.num_q_heads,
                        ch11::kLatentDim, atol, rtol))
      << c.name() << " (" << c.param("note") << "), planned with chunk_tokens " << (chunk < 0 ? m.chunk_tokens : chunk)
      << ", grid " << (grid < 0 ? m.grid : grid) << ", at most " << m.splits << " chunks a tile";
}

template <typename F>
void with_dtype(const GoldenCase& c, F&& f) {
  if (c.param("dtype") == "bf16") f(bf16{});
  else f(half{});
}

GoldenCase golden(const std::string& name) { return GoldenCase(golden_dir("ch11") + "/" + name); }

// Core: the whole KV of every tile in one item (a plan for one thread block splits nothing).
class MlaGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(MlaGolden, MatchesReference) {
  const GoldenCase c = golden(GetParam());
  with_dtype(c, [&](auto t) { check_case<decltype(t)>(c, 0, 1, 1); });
}

// The core test again on a forced thread block that takes tiles of at most max_rows rows
// (a case with larger tiles is skipped, and so is one whose runner picks that block anyway:
// MatchesReference ran it there).
void check_on_block(const GoldenCase& c, ch11::MlaBlock block, int max_rows) {
  with_dtype(c, [&](auto t) {
    using T = decltype(t);
    MlaCase<T> m(c);
    if (m.max_tile_rows() > max_rows) GTEST_SKIP() << "tiles of " << m.max_tile_rows() << " rows";
    ch11::MlaDecode runner;
    runner.plan(m.shape, dtype_of<T>(), m.seq_lens, m.qsl);
    if (runner.block() == block) GTEST_SKIP() << "the runner's own choice: MatchesReference ran the case on it";
    const auto [atol, rtol] = tolerance_of(c);
    const std::vector<T> got = m.run(0, 1, block);
    ASSERT_EQ(m.planned_block, block);
    EXPECT_TRUE(mla_close(got, c.get<double>("expected"), m.qsl, m.seq_lens, m.shape.num_q_heads, ch11::kLatentDim,
                          atol, rtol))
        << c.name() << " (" << c.param("note") << ") on " << block_words(block);
  });
}

// The 4-warp thread block (one row group, 32-key stages: each warp scores 8 keys of a stage,
// kJ = 1), which takes tiles of at most 32 rows. The runner no longer picks it (the 8-warp
// block that holds the queries in registers measured faster on both pools); it stays a shape
// the kernel's code must run right on.
TEST_P(MlaGolden, OnTheFourWarpBlock) {
  check_on_block(golden(GetParam()), ch11::MlaBlock::four_warps, ch11::kSmallTileRows);
}

// The 4-warp block that holds the queries in registers (one 16-row mma tile a row group,
// kMT = 1, the scores' A fragments from q_frag's registers), which takes tiles of at most 16
// rows; the runner sends an fp8 pool's 16-row tiles there.
TEST_P(MlaGolden, WithTheQueriesInRegisters) {
  check_on_block(golden(GetParam()), ch11::MlaBlock::queries_in_registers, ch11::kQRegTileRows);
}

// The 8-warp block that holds them (two row groups of one mma tile: rows 0-15 and 16-31,
// 64-key stages), which takes tiles of at most 32 rows; the runner sends tiles of 17 to 32
// rows there.
TEST_P(MlaGolden, OnEightWarpsWithTheQueriesInRegisters) {
  check_on_block(golden(GetParam()), ch11::MlaBlock::eight_warps_queries_in_registers, ch11::kSmallTileRows);
}

// The 8-warp block on key halves (both row groups on the tile's rows, row group rg on keys
// 32 rg .. + 31 of each stage: the scores and P V see kv and tok0 moved to the row group's
// keys, and the two states merge at the item's end), which takes tiles of at most 16 rows;
// the runner sends a 16-bit pool's 16-row tiles there, so this runs only the cases whose
// runner picks another block. A row group that attends the wrong half, or a merge that drops
// one, fails MatchesReference on every case of more than 32 keys.
TEST_P(MlaGolden, OnKeyHalves) {
  check_on_block(golden(GetParam()), ch11::MlaBlock::key_halves, ch11::kQRegTileRows);
}

INSTANTIATE_TEST_SUITE_P(Ch11, MlaGolden, ::testing::ValuesIn(golden_case_names("ch11", "mla_")),
                         [](const auto& info) { return info.param; });

// Stretch: tiles split into chunks and merged by log-sum-exp (the stretch exercise).
class StretchMlaSplit : public ::testing::TestWithParam<std::string> {};

// The case's own plan: a small grid the planner fills by splitting a long sequence, or
// forced chunks.
TEST_P(StretchMlaSplit, AsPlanned) {
  const GoldenCase c = golden(GetParam());
  if (c.param_int("chunk_tokens") == 0 && c.param_int("grid") == 0)
    GTEST_SKIP() << "the case plans as the core test does";
  with_dtype(c, [&](auto t) { check_case<decltype(t)>(c, -1, -1, 2); });
}

// Every tile cut into chunks of 64 tokens.
TEST_P(StretchMlaSplit, ForcedSplitsMatchReference) {
  const GoldenCase c = golden(GetParam());
  int longest = 0;
  for (int n : c.get<int>("seq_lens")) longest = std::max(longest, n);
  if (longest <= 64) GTEST_SKIP() << "no sequence longer than one chunk";
  with_dtype(c, [&](auto t) { check_case<decltype(t)>(c, 64, 6, 2); });
}

INSTANTIATE_TEST_SUITE_P(Ch11, StretchMlaSplit, ::testing::ValuesIn(golden_case_names("ch11", "mla_")),
                         [](const auto& info) { return info.param; });

// The kernel's latent output times W_UV is the naive MLA output (K and V decompressed per
// head, then attention), up to the rounding of the absorbed query to the dtype.
class MlaNaive : public ::testing::TestWithParam<std::string> {};

template <typename T>
void check_naive(const GoldenCase& c, double tol) {
  MlaCase<T> m(c);
  const std::vector<T> lat = m.run(0, 1);
  const std::vector<double> w_uv = c.get<double>("w_uv");  // [H, 512, d_v]
  const int H = m.shape.num_q_heads, d_v = int(c.param_int("d_v")), S = m.shape.num_tokens;
  std::vector<double> sum(size_t(S) * H * d_v, 0.0);
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h)
      for (int c_ = 0; c_ < ch11::kLatentDim; ++c_) {
        const double x = to_float(lat[(size_t(s) * H + h) * ch11::kLatentDim + c_]);
        for (int v = 0; v < d_v; ++v)
          sum[(size_t(s) * H + h) * d_v + v] += x * w_uv[(size_t(h) * ch11::kLatentDim + c_) * d_v + v];
      }
  const std::vector<float> got(sum.begin(), sum.end());
  EXPECT_TRUE(mla_close(got, c.get<double>("expected_naive"), m.qsl, m.seq_lens, H, d_v, tol, tol))
      << c.name() << ": the absorbed kernel's output, times W_UV, against mla_naive";
}

TEST_P(MlaNaive, AbsorbedKernelEqualsNaive) {
  const GoldenCase c(golden_dir("ch11") + "/" + GetParam());
  if (c.param("dtype") == "bf16") check_naive<bf16>(c, 3e-2);
  else check_naive<half>(c, 5e-3);
}

INSTANTIATE_TEST_SUITE_P(Ch11, MlaNaive, ::testing::ValuesIn(golden_case_names("ch11", "naive_")),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pa::test
