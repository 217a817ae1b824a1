// Chapter 6, stretch exercise: e4m3_scale_for, a scale chosen from the data (amax / 448),
// and its max-reduction kernel. The largest magnitude is put where a reduction misses it:
// a negative value, the last element, the second half of a warp, a warp other than the
// first, a thread block other than the last, an element past the first pass of the grid.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compare.h"
#include "pa/ch06_fp8.h"
#include "pa/device_buffer.h"
#include "pa/dtype.h"

namespace {

// n values in [-1, 1], and the largest magnitude `peak` at index `at` (with sign `sign`).
std::vector<float> data(int64_t n, int64_t at, float peak, float sign, unsigned seed = 6) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = u(rng);
  if (at >= 0) x[size_t(at)] = sign * peak;
  return x;
}

// The scale e4m3_scale_for returns on x, with a forced grid (0: its own choice).
template <typename T>
float scale_of(const std::vector<float>& x, int grid_blocks) {
  std::vector<T> xt;
  for (float v : x) xt.push_back(pa::from_float<T>(v));
  pa::DeviceBuffer<T> d(xt);
  return pa::ch06::e4m3_scale_for(d.get(), int64_t(x.size()), grid_blocks);
}

template <typename T>
float host_amax(const std::vector<float>& x) {
  float a = 0.f;
  for (float v : x) a = std::max(a, std::fabs(pa::to_float(pa::from_float<T>(v))));
  return a;
}

// Checks one placement: the returned scale must be amax / 448 exactly.
template <typename T>
::testing::AssertionResult finds_peak(int64_t n, int64_t at, float sign, int grid_blocks, const std::string& why) {
  const std::vector<float> x = data(n, at, 7.5f, sign);
  const float want = host_amax<T>(x) / 448.f;
  const float got = scale_of<T>(x, grid_blocks);
  if (got == want) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << "n = " << n << ", the largest magnitude " << (sign < 0 ? "-" : "") << "7.5 at index " << at
     << " (thread block " << at / 256 << ", warp " << (at % 256) / 32 << ", lane " << at % 32 << " of a 256-thread block"
     << (grid_blocks ? ", grid forced to " + std::to_string(grid_blocks) + " blocks" : std::string()) << "): scale "
     << got << ", want " << want << " = 7.5 / 448";
  if (got * 448.f < 7.5f) os << " (the kernel's amax is " << got * 448.f << ": it missed x[" << at << "])";
  os << "\n  " << why;
  return ::testing::AssertionFailure() << os.str();
}

TEST(StretchAmax, FindsTheLargestMagnitudeWhereverItIs) {
  EXPECT_TRUE(finds_peak<float>(1000, 3, +1, 0, "a positive peak in the first warp"));
  EXPECT_TRUE(finds_peak<float>(1000, 3, -1, 0, "a negative peak: the magnitude |x| counts, not x"));
  EXPECT_TRUE(finds_peak<float>(1000, 999, +1, 0, "the last element"));
  EXPECT_TRUE(finds_peak<float>(1000, 20, +1, 0, "lane 20: the second half of a warp"));
  EXPECT_TRUE(finds_peak<float>(1000, 31, +1, 0, "lane 31: the last lane of a warp"));
  EXPECT_TRUE(finds_peak<float>(1000, 200, +1, 0, "warp 6 of the first thread block"));
  EXPECT_TRUE(finds_peak<float>(1000, 700, -1, 0, "the third thread block"));
  EXPECT_TRUE(finds_peak<float>(1, 0, -1, 0, "a single value"));
  EXPECT_TRUE(finds_peak<float>(33, 32, +1, 0, "n = 33: one value past the first warp"));
}

TEST(StretchAmax, EveryThreadBlockCounts) {
  // The peak in the first block of several: a result that the last block to finish
  // overwrites (no atomic) loses it.
  EXPECT_TRUE(finds_peak<float>(4096, 5, +1, 0, "thread block 0 of 16: every block must combine its result"));
  EXPECT_TRUE(finds_peak<float>(4096, 2100, -1, 0, "thread block 8 of 16"));
}

TEST(StretchAmax, AGridSmallerThanTheDataCoversItAll) {
  EXPECT_TRUE(finds_peak<float>(5000, 4999, +1, 1, "one thread block of 256 threads for 5000 values: each thread takes many"));
  EXPECT_TRUE(finds_peak<float>(5000, 3000, -1, 3, "3 thread blocks for 5000 values: the peak is past the grid's first pass"));
  EXPECT_TRUE(finds_peak<float>(100000, 77777, +1, 0, "100,000 values"));
}

TEST(StretchAmax, HalfAndBf16Inputs) {
  EXPECT_TRUE(finds_peak<pa::half>(3000, 2500, -1, 0, "fp16 input"));
  EXPECT_TRUE(finds_peak<pa::bf16>(3000, 1234, +1, 2, "bf16 input, grid of 2"));
}

TEST(StretchAmax, AllZerosOrNothingGiveScaleOne) {
  EXPECT_EQ(scale_of<float>(std::vector<float>(500, 0.f), 0), 1.f) << "all zeros: amax 0, scale 1";
  EXPECT_EQ(scale_of<float>({}, 0), 1.f) << "no value: scale 1";
  // A small amax: the scale shrinks with the data, so small values use e4m3's range too.
  std::vector<float> small(300, 0.f);
  small[299] = -1e-3f;
  EXPECT_EQ(scale_of<float>(small, 0), 1e-3f / 448.f) << "one value -0.001 among zeros (index 299, second block)";
}

}  // namespace
