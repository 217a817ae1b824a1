// Chapter 6: v1 and v2 on an fp8 cache: tight against the reference over the dequantized
// cache, and within a documented bound of the unquantized answer.
#include <gtest/gtest.h>

#include <algorithm>

#include "compare.h"
#include "golden.h"
#include "paged_case.h"
#include "pa/ch06_fp8.h"

namespace {

using pa::test::GoldenCase;

template <typename T>
void check_case(const GoldenCase& c) {
  const pa::ch04::PagedAttentionShape s = pa::test::paged_shape_of(c);
  const std::vector<int> table = pa::test::table_with_poisoned_padding(c);
  const std::vector<int> lens = c.get<int>("context_lens");
  const int max_len = *std::max_element(lens.begin(), lens.end());
  pa::DeviceBuffer<T> q(pa::test::to_dtype<T>(c.get<float>("q"))), out(q.size());
  pa::DeviceBuffer<uint8_t> k(c.get<uint8_t>("k_pool")), v(c.get<uint8_t>("v_pool"));
  pa::DeviceBuffer<float> k_scale(c.get<float>("k_scale")), v_scale(c.get<float>("v_scale"));
  pa::DeviceBuffer<int> d_table(table), d_lens(lens);
  const float scale = float(c.get<double>("scale")[0]);
  const auto expected = c.get<double>("expected"), unquantized = c.get<double>("expected_unquantized");

  pa::test::poison(out);
  pa::ch06::paged_attention_v1_fp8<T>(s, out.get(), q.get(), k.get(), v.get(), d_table.get(),
                                      d_lens.get(), k_scale.get(), v_scale.get(), scale);
  const auto v1 = out.download();
  const auto dims = pa::test::decode_out_dims(s);
  EXPECT_TRUE(pa::test::all_close(v1, expected, dims, c.param_double("atol"), c.param_double("rtol")))
      << "v1 vs the dequantized reference, " << c.name() << ": " << c.param("note");
  EXPECT_TRUE(pa::test::all_close(v1, unquantized, dims, c.param_double("fp8_atol"), c.param_double("fp8_rtol")))
      << "v1 vs the unquantized reference, " << c.name();

  pa::ch05::Workspace ws;
  pa::test::poison(out);
  pa::ch06::paged_attention_v2_fp8<T>(s, out.get(), q.get(), k.get(), v.get(), d_table.get(),
                                      d_lens.get(), max_len, k_scale.get(), v_scale.get(), scale, ws);
  const auto v2 = out.download();
  EXPECT_TRUE(pa::test::all_close(v2, expected, dims, c.param_double("atol"), c.param_double("rtol")))
      << "v2 vs the dequantized reference, " << c.name();
  // One partition: v2 must equal v1 bit for bit (longer sequences: v2 against itself).
  std::vector<bool> one_partition;
  for (int len : lens) one_partition.push_back(len <= pa::ch05::kPartitionSize);
  EXPECT_TRUE(pa::test::exactly_equal(v2, pa::test::with_rows_of(v1, v2, one_partition), dims))
      << "v2 (got) must equal v1 (want) bit for bit on a sequence of one partition, " << c.name();
}

class Fp8DecodeGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8DecodeGolden, MatchesReference) {
  const GoldenCase c(pa::test::golden_dir("ch06") + "/" + GetParam());
  switch (pa::parse_dtype(c.param("dtype"))) {
    case pa::DType::fp32: return check_case<float>(c);
    case pa::DType::fp16: return check_case<pa::half>(c);
    case pa::DType::bf16: return check_case<pa::bf16>(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch06, Fp8DecodeGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch06", "decode_fp8_")),
                         [](const auto& info) { return info.param; });

// A scale that is ignored, or K's and V's swapped, must show: the cases use
// k_scale != v_scale, both != 1, so each mistake moves the output past the tolerance.
TEST(Fp8Scales, SwappedOrIgnoredScalesAreCaught) {
  // A case whose sequences all have more than one token: with one key the softmax is 1
  // whatever k_scale is.
  const GoldenCase c(pa::test::golden_dir("ch06") + "/decode_fp8_fp16_d128_bs16_g2_edges15_16_17");
  ASSERT_EQ(c.param("dtype"), "fp16");
  const pa::ch04::PagedAttentionShape s = pa::test::paged_shape_of(c);
  pa::DeviceBuffer<pa::half> q(pa::test::to_dtype<pa::half>(c.get<float>("q"))), out(q.size());
  pa::DeviceBuffer<uint8_t> k(c.get<uint8_t>("k_pool")), v(c.get<uint8_t>("v_pool"));
  const float k_s = c.get<float>("k_scale")[0], v_s = c.get<float>("v_scale")[0];
  ASSERT_TRUE(k_s != v_s && k_s != 1.f && v_s != 1.f);
  pa::DeviceBuffer<float> right_k(std::vector<float>{k_s}), right_v(std::vector<float>{v_s}),
      one(std::vector<float>{1.f});
  pa::DeviceBuffer<int> d_table(pa::test::table_with_poisoned_padding(c)), d_lens(c.get<int>("context_lens"));
  const float scale = float(c.get<double>("scale")[0]);
  auto close_with = [&](const float* ksp, const float* vsp) {
    pa::test::poison(out);
    pa::ch06::paged_attention_v1_fp8<pa::half>(s, out.get(), q.get(), k.get(), v.get(), d_table.get(),
                                               d_lens.get(), ksp, vsp, scale);
    return bool(pa::test::all_close(out.download(), c.get<double>("expected"), pa::test::decode_out_dims(s),
                                    c.param_double("atol"), c.param_double("rtol")));
  };
  EXPECT_TRUE(close_with(right_k.get(), right_v.get()));
  EXPECT_FALSE(close_with(right_v.get(), right_k.get())) << "swapped scales went unnoticed";
  EXPECT_FALSE(close_with(one.get(), right_v.get())) << "an ignored k_scale went unnoticed";
  EXPECT_FALSE(close_with(right_k.get(), one.get())) << "an ignored v_scale went unnoticed";
}

}  // namespace
