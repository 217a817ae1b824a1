// Chapter 11: the absorbed MLA decode against the NumPy reference (pa_ref.mla), and
// absorbed == naive through the kernel. First the scores exercise alone (MlaScores,
// MlaScoreColumns: the kernel stopped after the scores), then the whole kernel (MlaGolden).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "mla_case.h"
#include "mla_scores.h"

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
      << ", grid " << (grid < 0 ? m.grid : grid) << ", at most " << m.splits << " chunks a tile, on "
      << block_words(m.planned_block);
}

template <typename F>
void with_dtype(const GoldenCase& c, F&& f) {
  if (c.param("dtype") == "bf16") f(bf16{});
  else f(half{});
}

GoldenCase golden(const std::string& name) { return GoldenCase(golden_dir("ch11") + "/" + name); }

// ---- The scores exercise alone ------------------------------------------------------------
// MlaDecode::run_scores runs the kernel up to the scores of keys 0-63 and stops: no softmax,
// no P V (exercise 4 may still be a stub). On every thread block that takes the case's tiles.

// The thread blocks that take tiles of `rows` rows (the runner's choice among them).
std::vector<ch11::MlaBlock> blocks_taking(int rows) {
  std::vector<ch11::MlaBlock> blocks{ch11::MlaBlock::eight_warps};
  if (rows <= ch11::kSmallTileRows) {
    blocks.push_back(ch11::MlaBlock::eight_warps_queries_in_registers);
    blocks.push_back(ch11::MlaBlock::four_warps);
  }
  if (rows <= ch11::kQRegTileRows) {
    blocks.push_back(ch11::MlaBlock::key_halves);
    blocks.push_back(ch11::MlaBlock::queries_in_registers);
  }
  return blocks;
}

// The case's scores of keys 0-63 on `block`, planned on one thread block; kv_cut < the
// context: every item stopped by hand at that key (a chunk end inside a stage).
template <typename T>
std::vector<float> case_scores(MlaCase<T>& m, ch11::MlaBlock block, int kv_cut) {
  ch11::MlaDecode mla;
  mla.set_block(block);
  if (kv_cut >= (1 << 30)) {
    mla.plan(m.shape, dtype_of<T>(), m.seq_lens, m.qsl, 0, 1);
  } else {
    ch10::Plan plan = ch10::make_plan(ch11::planning_shape(m.shape), m.seq_lens, m.qsl, 1, 0);
    for (ch10::WorkItem& w : plan.items) w.kv_end = std::min(w.kv_end, kv_cut);
    mla.use_plan(m.shape, dtype_of<T>(), plan, nullptr, m.qsl);
  }
  m.planned_block = mla.block();
  DeviceBuffer<float> scores(size_t(m.shape.num_tokens) * m.shape.num_q_heads * kScoreKeys);
  poison(scores);
  mla.run_scores(scores.get(), kScoreKeys, m.q.get(), m.pool.get(), m.d_table.get(), m.d_seq_lens.get(),
                 m.d_qsl.get(), m.scale);
  PA_CUDA_CHECK(cudaDeviceSynchronize());
  return scores.download();
}

template <typename T>
void check_scores(const GoldenCase& c, int kv_cut, const std::string& want_name, const std::string& what) {
  MlaCase<T> m(c);
  const std::vector<double> want = c.get<double>(want_name);
  // fp32 sums of exact 16-bit products: the reference's float64 within about 1e-5 of a score.
  for (ch11::MlaBlock block : blocks_taking(m.max_tile_rows())) {
    const std::vector<float> got = case_scores(m, block, kv_cut);
    ASSERT_EQ(m.planned_block, block);
    EXPECT_TRUE(scores_match(got, want, m.qsl, m.seq_lens, m.shape.num_q_heads, stage_tokens_of(block), kv_cut,
                             1e-3, 1e-3))
        << c.name() << " (" << c.param("note") << "), " << what << ", on " << block_words(block);
  }
}

class MlaScores : public ::testing::TestWithParam<std::string> {};

// Every tile's item over its whole context (one thread block: no split).
TEST_P(MlaScores, FirstStageMatchesReference) {
  const GoldenCase c = golden(GetParam());
  with_dtype(c, [&](auto t) {
    check_scores<decltype(t)>(c, 1 << 30, "expected_scores", "the scores of the first 64 keys");
  });
}

// Every tile's item stopped by hand at key 37, inside a stage: keys 37-63 are masked by the
// item's end (kv_end) alone wherever the causal mask would let a row see them.
TEST_P(MlaScores, ItemsStoppingAtKey37) {
  const GoldenCase c = golden(GetParam());
  with_dtype(c, [&](auto t) {
    check_scores<decltype(t)>(c, 37, "expected_scores_first37",
                              "every item stopped at key 37 (kv_end inside a stage)");
  });
}

INSTANTIATE_TEST_SUITE_P(Ch11, MlaScores, ::testing::ValuesIn(golden_case_names("ch11", "mla_")),
                         [](const auto& info) { return info.param; });

// Scores that name the element they read (mla_scores.h, ColumnProbe): 5 sequences of 64
// tokens, one new token and 16 heads each (16-row tiles: every thread block takes them).
TEST(MlaScoreColumns, EachKeyColumnIsReadFromItsChunk) {
  using P = ColumnProbe;
  constexpr int W = ch11::kRowWidth, kBlocksPerSeq = P::kLen / P::kBlockSize;
  const int num_blocks = P::kSeqs * kBlocksPerSeq + 1;
  std::vector<int> table(size_t(P::kSeqs) * kBlocksPerSeq);
  std::iota(table.begin(), table.end(), 1);  // block 0 left all NaN: nobody's
  std::reverse(table.begin(), table.end());
  std::vector<float> pool(size_t(num_blocks) * P::kBlockSize * W, NAN);
  for (int b = 0; b < P::kSeqs; ++b)
    for (int k = 0; k < P::kLen; ++k) {
      const int64_t slot = int64_t(table[size_t(b * kBlocksPerSeq + k / P::kBlockSize)]) * P::kBlockSize +
                           k % P::kBlockSize;
      for (int col = 0; col < W; ++col) pool[size_t(slot * W + col)] = float(P::value_of(k, col));
    }
  std::vector<float> q(size_t(P::kRows) * W, 0.f);
  for (int R = 0; R < P::kRows; ++R) q[size_t(R) * W + size_t(P::column_of(R))] = 1.f;
  std::vector<int> seq_lens(P::kSeqs, P::kLen), qsl(P::kSeqs + 1);
  std::iota(qsl.begin(), qsl.end(), 0);
  const ch11::MlaShape shape{P::kSeqs, P::kSeqs, P::kHeads, P::kBlockSize, num_blocks, kBlocksPerSeq};
  DeviceBuffer<half> d_q(to_dtype<half>(q)), d_pool(to_dtype<half>(pool));
  DeviceBuffer<int> d_table(table), d_lens(seq_lens), d_qsl(qsl);
  for (ch11::MlaBlock block : blocks_taking(P::kHeads)) {
    ch11::MlaDecode mla;
    mla.set_block(block);
    mla.plan(shape, DType::fp16, seq_lens, qsl, 0, 1);
    DeviceBuffer<float> scores(size_t(P::kRows) * kScoreKeys);
    poison(scores);
    mla.run_scores(scores.get(), kScoreKeys, d_q.get(), d_pool.get(), d_table.get(), d_lens.get(), d_qsl.get(),
                   float(std::log(2.0)));  // scale * log2(e) = 1: a score is the element itself
    PA_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_TRUE(probe_reads_right(scores.download())) << "on " << block_words(block);
  }
}

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
