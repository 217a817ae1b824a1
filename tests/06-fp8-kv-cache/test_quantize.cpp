// Chapter 6: quantizing writes, bit for bit against ml_dtypes' float8_e4m3fn.
#include <gtest/gtest.h>

#include "compare.h"
#include "golden.h"
#include "pa/ch06_fp8.h"

namespace {

using pa::test::GoldenCase;
using pa::test::error_contains;

template <typename T>
void check_case(const GoldenCase& c) {
  const pa::ch02::PoolShape s{int(c.param_int("num_blocks")), int(c.param_int("block_size")),
                              int(c.param_int("num_kv_heads")), int(c.param_int("head_size"))};
  pa::ch06::Fp8Pool pool(s, c.get<float>("k_scale")[0], c.get<float>("v_scale")[0]);
  pa::DeviceBuffer<T> k(pa::test::to_dtype<T>(c.get<float>("k"))), v(pa::test::to_dtype<T>(c.get<float>("v")));
  pa::DeviceBuffer<int64_t> slots(c.get<int64_t>("slot_mapping"));
  pa::ch06::reshape_and_cache_fp8<T>(s, k.get(), v.get(), int(slots.size()), pool.k.get(),
                                     pool.v.get(), slots.get(), pool.k_scale.get(), pool.v_scale.get());
  // Byte for byte: a NaN input must give 0x7F, and a slot no token owns must keep the
  // pool's 0xFF (another NaN), so neither NaN may stand for the other.
  const uint8_t unwritten = 0xFF;
  EXPECT_TRUE(pa::test::exactly_equal_e4m3(
      pool.k.download(), c.get<uint8_t>("k_pool"),
      pa::test::k_pool_dims(s.num_blocks, s.num_kv_heads, s.head_size, s.block_size, pa::ch06::kFp8X),
      unwritten))
      << "K, " << c.name() << ": " << c.param("note");
  EXPECT_TRUE(pa::test::exactly_equal_e4m3(
      pool.v.download(), c.get<uint8_t>("v_pool"),
      pa::test::v_pool_dims(s.num_blocks, s.num_kv_heads, s.head_size, s.block_size), unwritten))
      << "V, " << c.name() << ": " << c.param("note");
}

class QuantizeGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizeGolden, PoolBytesMatchReference) {
  const GoldenCase c(pa::test::golden_dir("ch06") + "/" + GetParam());
  switch (pa::parse_dtype(c.param("dtype"))) {
    case pa::DType::fp32: return check_case<float>(c);
    case pa::DType::fp16: return check_case<pa::half>(c);
    case pa::DType::bf16: return check_case<pa::bf16>(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch06, QuantizeGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch06", "quant_")),
                         [](const auto& info) { return info.param; });

TEST(Fp8Pool, BadScalesAreRefused) {
  EXPECT_TRUE(error_contains([] { pa::ch06::Fp8Pool p({4, 16, 1, 64}, 0.f, 1.f); },
                             "fp8 scales must be positive and finite"));
  EXPECT_TRUE(error_contains([] { pa::ch06::Fp8Pool p({4, 16, 1, 72}, 1.f, 1.f); },
                             "head_size 72 is not supported"));
}

}  // namespace
