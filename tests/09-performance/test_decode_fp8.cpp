// Chapter 9: the tensor-core kernel (the CUDA-core one at block size 8) on an fp8 cache against chapter 6's golden cases, with
// the planner's split and with forced odd splits. Core: the ring with the tensor-core math
// on given plans (block sizes 16 and 32); stretch: block size 8 (the CUDA-core math,
// attend_block_gqa) and decode_fp8's own plan (plan_splits). See test_decode.cpp.
#include <gtest/gtest.h>

#include <algorithm>

#include "compare.h"
#include "golden.h"
#include "paged_case.h"
#include "pa/ch09_fast_decode.h"

namespace {

using pa::test::GoldenCase;

// `planned`: decode_fp8 with its own plan; `forced`: given plans of 1, 2 and 3 partitions.
template <typename T>
void check_case(const GoldenCase& c, bool planned, bool forced) {
  const pa::ch04::PagedAttentionShape s = pa::test::paged_shape_of(c);
  const std::vector<int> lens = c.get<int>("context_lens");
  const int max_len = *std::max_element(lens.begin(), lens.end());
  pa::DeviceBuffer<T> q(pa::test::to_dtype<T>(c.get<float>("q"))), out(q.size());
  pa::DeviceBuffer<uint8_t> k(c.get<uint8_t>("k_pool")), v(c.get<uint8_t>("v_pool"));
  pa::DeviceBuffer<float> k_scale(c.get<float>("k_scale")), v_scale(c.get<float>("v_scale"));
  pa::DeviceBuffer<int> d_table(pa::test::table_with_poisoned_padding(c)), d_lens(lens);
  const float scale = float(c.get<double>("scale")[0]);
  const auto expected = c.get<double>("expected"), unquantized = c.get<double>("expected_unquantized");
  pa::ch09::Workspace ws;
  ws.reserve(s.num_seqs, s.num_q_heads, 64, s.head_size);

  const auto dims = pa::test::decode_out_dims(s);
  if (planned) {
    ws.poison();
    pa::test::poison(out);
    pa::ch09::decode_fp8<T>(s, out.get(), q.get(), k.get(), v.get(), d_table.get(), d_lens.get(),
                            max_len, k_scale.get(), v_scale.get(), scale, ws);
    const auto got = out.download();
    EXPECT_TRUE(pa::test::all_close(got, expected, dims, c.param_double("atol"), c.param_double("rtol")))
        << "vs the dequantized reference, " << c.name() << ": " << c.param("note");
    EXPECT_TRUE(pa::test::all_close(got, unquantized, dims, c.param_double("fp8_atol"), c.param_double("fp8_rtol")))
        << "vs the unquantized reference, " << c.name();
  }
  for (int splits : {1, 2, 3}) {  // one partition, and odd partition edges
    if (!forced) break;
    const int blocks = std::max(1, (max_len + s.block_size - 1) / s.block_size);
    const int per = (blocks + splits - 1) / splits;
    const pa::ch09::SplitPlan plan{(blocks + per - 1) / per, per * s.block_size};
    ws.poison();
    pa::test::poison(out);
    pa::ch09::decode_fp8_with_plan<T>(plan, s, out.get(), q.get(), k.get(), v.get(), d_table.get(),
                                      d_lens.get(), max_len, k_scale.get(), v_scale.get(), scale, ws);
    EXPECT_TRUE(pa::test::all_close(out.download(), expected, dims, c.param_double("atol"),
                                    c.param_double("rtol")))
        << plan.splits << " partitions of " << plan.partition_size << " tokens, " << c.name();
    if (splits == 1)
      EXPECT_TRUE(pa::test::all_close(out.download(), unquantized, dims, c.param_double("fp8_atol"),
                                      c.param_double("fp8_rtol")))
          << "vs the unquantized reference, one partition, " << c.name();
  }
}

void check_golden(const std::string& name, bool planned, bool forced) {
  const GoldenCase c(pa::test::golden_dir("ch06") + "/" + name);
  if (pa::parse_dtype(c.param("dtype")) == pa::DType::bf16)
    check_case<pa::bf16>(c, planned, forced);
  else
    check_case<pa::half>(c, planned, forced);
}

// The fp8 golden cases with half or bf16 queries, of block size 8 or (bs8 false) not.
std::vector<std::string> cases(bool bs8) {
  std::vector<std::string> out;
  for (const std::string& name : pa::test::golden_case_names("ch06", "decode_fp8_"))
    if (name.find("_fp32_") == std::string::npos && (name.find("_bs8_") != std::string::npos) == bs8)
      out.push_back(name);
  return out;
}

// Core: the ring, tensor cores, given plans.
class Fp8Golden : public ::testing::TestWithParam<std::string> {};
TEST_P(Fp8Golden, TheRingMatchesReference) { check_golden(GetParam(), false, true); }
INSTANTIATE_TEST_SUITE_P(Ch09, Fp8Golden, ::testing::ValuesIn(cases(false)),
                         [](const auto& info) { return info.param; });

// Stretch (attend_block_gqa): block size 8 runs the CUDA-core math.
class StretchGqaFp8 : public ::testing::TestWithParam<std::string> {};
TEST_P(StretchGqaFp8, MatchesReference) { check_golden(GetParam(), false, true); }
INSTANTIATE_TEST_SUITE_P(Ch09, StretchGqaFp8, ::testing::ValuesIn(cases(true)),
                         [](const auto& info) { return info.param; });

// Stretch (plan_splits): decode_fp8 plans its own split.
class StretchSplitPlanFp8 : public ::testing::TestWithParam<std::string> {};
TEST_P(StretchSplitPlanFp8, ThePlannersSplitMatchesReference) { check_golden(GetParam(), true, false); }
INSTANTIATE_TEST_SUITE_P(Ch09, StretchSplitPlanFp8, ::testing::ValuesIn(cases(false)),
                         [](const auto& info) { return info.param; });

TEST(DecodeFp8, MissingScalesAreRefused) {
  pa::DeviceBuffer<pa::half> buf(1024);
  pa::DeviceBuffer<uint8_t> cache(1024);
  pa::DeviceBuffer<int> ints(16);
  pa::ch09::Workspace ws;
  const std::string msg = pa::test::error_of([&] {
    pa::ch09::decode_fp8<pa::half>({1, 4, 4, 64, 16, 4, 2}, buf.get(), buf.get(), cache.get(),
                                   cache.get(), ints.get(), ints.get(), 8, nullptr, nullptr, 1.f, ws);
  });
  EXPECT_NE(msg.find("k_scale and v_scale"), std::string::npos) << msg;
}

}  // namespace
