// Chapter 5, stretch exercise: merge_attention_states, two attentions over disjoint key sets
// merged from their outputs and log-sum-exps. Against a float64 merge on the host, and
// against attention over the union of the keys.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pa/ch05_paged_attention_v2.h"
#include "pa/device_buffer.h"
#include "pa/dtype.h"

namespace {

const float kNegInf = -std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Merged {
  std::vector<float> out, lse;
};

// Runs the kernel on rows of (out_a, lse_a) and (out_b, lse_b), D values each.
template <typename T>
Merged run(const std::vector<float>& a, const std::vector<float>& la, const std::vector<float>& b,
           const std::vector<float>& lb, int D, bool with_lse = true) {
  const int R = int(la.size());
  auto to_t = [](const std::vector<float>& v) {
    std::vector<T> t;
    for (float x : v) t.push_back(pa::from_float<T>(x));
    return t;
  };
  pa::DeviceBuffer<T> da(to_t(a)), db(to_t(b)), dout(size_t(R) * D);
  pa::DeviceBuffer<float> dla(la), dlb(lb), dlse(std::vector<float>(size_t(R), 12345.f));
  dout.fill_bytes(0xFF);
  pa::ch05::merge_attention_states<T>(dout.get(), with_lse ? dlse.get() : nullptr, da.get(), dla.get(), db.get(),
                                      dlb.get(), R, D);
  Merged m;
  for (const T& x : dout.download()) m.out.push_back(pa::to_float(x));
  m.lse = dlse.download();
  return m;
}

// The merge in float64, from the definition.
Merged reference(const std::vector<float>& a, const std::vector<float>& la, const std::vector<float>& b,
                 const std::vector<float>& lb, int D) {
  Merged m;
  for (size_t r = 0; r < la.size(); ++r) {
    const double mx = std::max<double>(la[r], lb[r]);
    if (mx == -INFINITY) {
      for (int d = 0; d < D; ++d) m.out.push_back(0.f);
      m.lse.push_back(kNegInf);
      continue;
    }
    const double wa = std::exp(double(la[r]) - mx), wb = std::exp(double(lb[r]) - mx);
    for (int d = 0; d < D; ++d)
      m.out.push_back(float(((wa > 0 ? wa * a[r * D + d] : 0) + (wb > 0 ? wb * b[r * D + d] : 0)) / (wa + wb)));
    m.lse.push_back(float(mx + std::log(wa + wb)));
  }
  return m;
}

::testing::AssertionResult close(const Merged& got, const Merged& want, const std::vector<float>& la,
                                 const std::vector<float>& lb, int D, double tol, bool check_lse = true) {
  for (size_t i = 0; i < want.out.size(); ++i) {
    const double g = got.out[i], w = want.out[i];
    if (std::fabs(g - w) <= tol * (1 + std::fabs(w))) continue;
    const size_t r = i / size_t(D);
    return ::testing::AssertionFailure() << "row " << r << ", d " << i % size_t(D) << " (lse_a " << la[r] << ", lse_b "
                                         << lb[r] << "): got " << g << ", want " << w;
  }
  if (check_lse)
    for (size_t r = 0; r < want.lse.size(); ++r) {
      const double g = got.lse[r], w = want.lse[r];
      if (g == w || std::fabs(g - w) <= 1e-5 * (1 + std::fabs(w))) continue;
      return ::testing::AssertionFailure() << "lse_out of row " << r << " (lse_a " << la[r] << ", lse_b " << lb[r]
                                           << "): got " << g << ", want " << w << " = log(e^lse_a + e^lse_b)";
    }
  return ::testing::AssertionSuccess();
}

// Attention over keys split in two sets: each set's output and lse, computed on the host, then
// merged on the device, equal attention over all the keys.
TEST(StretchMergeStates, TwoHalvesMakeTheWhole) {
  const int R = 6, D = 64, na = 7, nb = 13;
  std::mt19937 rng(55);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> a, b, la, lb, whole;
  for (int r = 0; r < R; ++r) {
    std::vector<double> score(na + nb);
    std::vector<std::vector<double>> v(na + nb, std::vector<double>(D));
    for (int t = 0; t < na + nb; ++t) {
      score[size_t(t)] = 3 * nd(rng) + (r == 5 ? 40.0 : 0.0);  // row 5: large scores
      for (double& x : v[size_t(t)]) x = nd(rng);
    }
    auto attend = [&](int lo, int hi, std::vector<float>& out, std::vector<float>& lse) {
      double mx = -INFINITY, l = 0;
      for (int t = lo; t < hi; ++t) mx = std::max(mx, score[size_t(t)]);
      for (int t = lo; t < hi; ++t) l += std::exp(score[size_t(t)] - mx);
      for (int d = 0; d < D; ++d) {
        double acc = 0;
        for (int t = lo; t < hi; ++t) acc += std::exp(score[size_t(t)] - mx) * v[size_t(t)][size_t(d)];
        out.push_back(float(acc / l));
      }
      lse.push_back(float(mx + std::log(l)));
    };
    std::vector<float> unused;
    attend(0, na, a, la);
    attend(na, na + nb, b, lb);
    attend(0, na + nb, whole, unused);
  }
  const Merged got = run<float>(a, la, b, lb, D);
  Merged want;
  want.out = whole;
  EXPECT_TRUE(close(got, want, la, lb, D, 2e-5, false)) << "\n  (want: attention over all " << na + nb << " keys)";
  EXPECT_TRUE(close(got, reference(a, la, b, lb, D), la, lb, D, 2e-6));
}

std::vector<float> random_rows(int R, int D, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> x(size_t(R) * D);
  for (float& e : x) e = u(rng);
  return x;
}

TEST(StretchMergeStates, LargeLogSumExpsStayFinite) {
  const int D = 64;
  const std::vector<float> la = {100.f, 88.f, 1e4f, -50.f, 3.f}, lb = {98.f, 100.f, 1e4f - 3.f, -200.f, 3.f};
  const auto a = random_rows(5, D, 1), b = random_rows(5, D, 2);
  const Merged got = run<float>(a, la, b, lb, D);
  EXPECT_TRUE(close(got, reference(a, la, b, lb, D), la, lb, D, 2e-6))
      << "\n  (e^100 overflows a float: the weights must be taken relative to the larger lse)";
}

TEST(StretchMergeStates, AnEmptySideIsIgnoredEvenIfItHoldsNaN) {
  const int D = 80;
  const std::vector<float> la = {1.5f, kNegInf, 0.f}, lb = {kNegInf, -2.f, kNegInf};
  auto a = random_rows(3, D, 3), b = random_rows(3, D, 4);
  for (int d = 0; d < D; ++d) {
    b[size_t(0 * D + d)] = kNaN;  // row 0: b empty, its output NaN
    a[size_t(1 * D + d)] = kNaN;  // row 1: a empty
    b[size_t(2 * D + d)] = kNaN;
  }
  const Merged got = run<float>(a, la, b, lb, D);
  EXPECT_TRUE(close(got, reference(a, la, b, lb, D), la, lb, D, 1e-6))
      << "\n  (an empty set has lse -inf: its output may be NaN and must not reach the result)";
}

TEST(StretchMergeStates, BothEmptyGivesZerosAndMinusInfinity) {
  const int D = 64;
  const std::vector<float> la = {kNegInf, 0.5f}, lb = {kNegInf, 0.25f};
  auto a = random_rows(2, D, 5), b = random_rows(2, D, 6);
  for (int d = 0; d < D; ++d) a[size_t(d)] = b[size_t(d)] = kNaN;
  const Merged got = run<float>(a, la, b, lb, D);
  EXPECT_TRUE(close(got, reference(a, la, b, lb, D), la, lb, D, 1e-6))
      << "\n  (row 0: both sets empty: the output is 0 and the lse -inf)";
}

TEST(StretchMergeStates, NoLseOutputAndHalfPrecision) {
  const int R = 40, D = 128;
  std::vector<float> la(R), lb(R);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-8.f, 8.f);
  for (int r = 0; r < R; ++r) la[size_t(r)] = u(rng), lb[size_t(r)] = u(rng);
  const auto a = random_rows(R, D, 7), b = random_rows(R, D, 8);
  EXPECT_TRUE(close(run<float>(a, la, b, lb, D, false), reference(a, la, b, lb, D), la, lb, D, 2e-6, false))
      << "\n  (lse_out null: only the outputs)";
  EXPECT_TRUE(close(run<pa::half>(a, la, b, lb, D), reference(a, la, b, lb, D), la, lb, D, 2e-3)) << " (fp16)";
  EXPECT_TRUE(close(run<pa::bf16>(a, la, b, lb, D), reference(a, la, b, lb, D), la, lb, D, 1e-2)) << " (bf16)";
}

}  // namespace
