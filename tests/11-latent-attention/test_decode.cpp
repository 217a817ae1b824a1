// Chapter 11: the absorbed MLA decode against the NumPy reference (pa_ref.mla), and
// absorbed == naive through the kernel.
#include <gtest/gtest.h>

#include <cmath>

#include "mla_case.h"

namespace pa::test {
namespace {

template <typename T>
void check_case(const GoldenCase& c, int chunk, int grid, bool want_splits) {
  MlaCase<T> m(c);
  const auto [atol, rtol] = tolerance_of(c);
  const std::vector<T> got = m.run(chunk, grid);
  if (want_splits) ASSERT_GT(m.splits, 1) << "the forced chunk of " << chunk << " tokens split no tile";
  EXPECT_TRUE(mla_close(got, c.get<double>("expected"), m.qsl, m.seq_lens, m.shape.num_q_heads,
                        ch11::kLatentDim, atol, rtol))
      << c.name() << " (" << c.param("note") << "), planned with chunk_tokens " << (chunk < 0 ? m.chunk_tokens : chunk)
      << ", grid " << (grid < 0 ? m.grid : grid) << ", at most " << m.splits << " chunks a tile";
}

class MlaGolden : public ::testing::TestWithParam<std::string> {
 protected:
  GoldenCase golden() const { return GoldenCase(golden_dir("ch11") + "/" + GetParam()); }
  template <typename F>
  void with_dtype(const GoldenCase& c, F&& f) {
    if (c.param("dtype") == "bf16") f(bf16{});
    else f(half{});
  }
};

// The case as the planner plans it (its own chunks, or the case's forced ones).
TEST_P(MlaGolden, MatchesReference) {
  const GoldenCase c = golden();
  with_dtype(c, [&](auto t) { check_case<decltype(t)>(c, -1, -1, false); });
}

// Every tile cut into chunks of 64 tokens, merged by log-sum-exp: the same output.
TEST_P(MlaGolden, ForcedSplitsMatchReference) {
  const GoldenCase c = golden();
  int longest = 0;
  for (int n : c.get<int>("seq_lens")) longest = std::max(longest, n);
  if (longest <= 64) GTEST_SKIP() << "no sequence longer than one chunk";
  with_dtype(c, [&](auto t) { check_case<decltype(t)>(c, 64, 6, true); });
}

INSTANTIATE_TEST_SUITE_P(Ch11, MlaGolden, ::testing::ValuesIn(golden_case_names("ch11", "mla_")),
                         [](const auto& info) { return info.param; });

// The kernel's latent output times W_UV is the naive MLA output (K and V decompressed per
// head, then attention), up to the rounding of the absorbed query to the dtype.
class MlaNaive : public ::testing::TestWithParam<std::string> {};

template <typename T>
void check_naive(const GoldenCase& c, double tol) {
  MlaCase<T> m(c);
  const std::vector<T> lat = m.run();
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
