// Chapter 2: writing tokens into the pools, checked against the reference layout.
#include <gtest/gtest.h>

#include "compare.h"
#include "golden.h"
#include "pa/ch02_paged.h"

namespace {

using pa::ch02::PoolShape;
using pa::test::GoldenCase;
using pa::test::contains_text;

PoolShape pool_shape_of(const GoldenCase& c) {
  return PoolShape{int(c.param_int("num_blocks")), int(c.param_int("block_size")),
                   int(c.param_int("num_kv_heads")), int(c.param_int("head_size"))};
}

template <typename T>
void check_case(const GoldenCase& c) {
  const PoolShape s = pool_shape_of(c);
  ASSERT_EQ(c.param_int("x"), pa::ch02::pack_x<T>());
  pa::ch02::KVPool<T> pool(s);  // starts all NaN, like the reference's pools
  pa::DeviceBuffer<T> k(pa::test::to_dtype<T>(c.get<float>("k")));
  pa::DeviceBuffer<T> v(pa::test::to_dtype<T>(c.get<float>("v")));
  pa::DeviceBuffer<int64_t> slots(c.get<int64_t>("slot_mapping"));
  pa::ch02::reshape_and_cache<T>(s, k.get(), v.get(), int(slots.size()), pool.k.get(),
                                 pool.v.get(), slots.get());
  // NaN in the reference: a slot no token owns, which must still hold the pool's 0xFF bytes.
  const T untouched = pa::test::all_ones<T>();
  const int x = pa::ch02::pack_x<T>();
  EXPECT_TRUE(pa::test::exactly_equal(
      pool.k.download(), c.get<float>("k_pool"),
      pa::test::k_pool_dims(s.num_blocks, s.num_kv_heads, s.head_size, s.block_size, x), untouched))
      << "K pool, case " << c.name() << ": " << c.param("note");
  EXPECT_TRUE(pa::test::exactly_equal(
      pool.v.download(), c.get<float>("v_pool"),
      pa::test::v_pool_dims(s.num_blocks, s.num_kv_heads, s.head_size, s.block_size), untouched))
      << "V pool, case " << c.name() << ": " << c.param("note");
}

class ReshapeGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ReshapeGolden, PoolsMatchReference) {
  const GoldenCase c(pa::test::golden_dir("ch02") + "/" + GetParam());
  switch (pa::parse_dtype(c.param("dtype"))) {
    case pa::DType::fp32: return check_case<float>(c);
    case pa::DType::fp16: return check_case<pa::half>(c);
    case pa::DType::bf16: return check_case<pa::bf16>(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch02, ReshapeGolden, ::testing::ValuesIn(pa::test::golden_case_names("ch02", "reshape_")),
                         [](const auto& info) { return info.param; });

// The layout, spelled out: one fp16 token into block 3, offset 5, of a 16-token-block pool.
// Element (head 1, d 9) is in K chunk 9 / 8 = 1 at position 9 % 8 = 1.
TEST(ReshapeLayout, KIsPackedInSixteenByteChunksAndVIsTokenMinor) {
  const PoolShape s{6, 16, 2, 64};
  pa::ch02::KVPool<pa::half> pool(s);
  std::vector<float> row(2 * 64);
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 64; ++d) row[h * 64 + d] = float(h * 100 + d);
  pa::DeviceBuffer<pa::half> k(pa::test::to_dtype<pa::half>(row)), v(k.size());
  PA_CUDA_CHECK(cudaMemcpy(v.get(), k.get(), k.bytes(), cudaMemcpyDeviceToDevice));
  pa::DeviceBuffer<int64_t> slot(std::vector<int64_t>{3 * 16 + 5});
  pa::ch02::reshape_and_cache<pa::half>(s, k.get(), v.get(), 1, pool.k.get(), pool.v.get(), slot.get());
  const auto kp = pool.k.download(), vp = pool.v.download();
  const int x = 8, chunks = 64 / x;
  EXPECT_EQ(pa::to_float(kp[(((3 * 2 + 1) * chunks + 1) * 16 + 5) * x + 1]), 109.f);
  EXPECT_EQ(pa::to_float(vp[((3 * 2 + 1) * 64 + 9) * 16 + 5]), 109.f);
  int written = 0;
  for (const auto& e : kp) written += !std::isnan(pa::to_float(e));
  EXPECT_EQ(written, 128);  // one token, nothing else
}

TEST(ReshapeErrors, BadPoolShapesAreRefused) {
  pa::DeviceBuffer<float> buf(1024);
  pa::DeviceBuffer<int64_t> slots(1);
  auto err = [&](PoolShape s) {
    return pa::test::error_of([&] {
      pa::ch02::reshape_and_cache<float>(s, buf.get(), buf.get(), 1, buf.get(), buf.get(), slots.get());
    });
  };
  EXPECT_TRUE(contains_text(err({4, 12, 2, 64}), "block_size 12 is not supported"));
  EXPECT_TRUE(contains_text(err({4, 16, 2, 72}), "head_size 72 is not supported"));
  EXPECT_TRUE(contains_text(err({0, 16, 2, 64}), "num_blocks must be positive"));
}

}  // namespace
