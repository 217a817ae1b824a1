// Chapter 7: copy_blocks moves whole blocks of every layer's K and V in one launch.
#include <gtest/gtest.h>

#include "compare.h"
#include "golden.h"
#include "pa/ch07_cow.h"

namespace {

using pa::test::GoldenCase;
using pa::test::error_contains;

template <typename T>
void check_case(const GoldenCase& c) {
  const pa::ch02::PoolShape s{int(c.param_int("num_blocks")), int(c.param_int("block_size")),
                              int(c.param_int("num_kv_heads")), int(c.param_int("head_size"))};
  const int layers = int(c.param_int("num_layers"));
  const auto k_all = c.get<float>("k_pools"), v_all = c.get<float>("v_pools");
  const size_t per_layer = k_all.size() / size_t(layers);
  std::vector<pa::DeviceBuffer<T>> k, v;
  std::vector<T*> kp, vp;
  for (int l = 0; l < layers; ++l) {
    k.emplace_back(pa::test::to_dtype<T>(std::vector<float>(k_all.begin() + l * per_layer, k_all.begin() + (l + 1) * per_layer)));
    v.emplace_back(pa::test::to_dtype<T>(std::vector<float>(v_all.begin() + l * per_layer, v_all.begin() + (l + 1) * per_layer)));
    kp.push_back(k.back().get());
    vp.push_back(v.back().get());
  }
  const auto pairs = c.get<int>("pairs");
  std::vector<pa::ch07::BlockCopy> copies;
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) copies.push_back({pairs[i], pairs[i + 1]});
  pa::ch07::copy_blocks<T>(kp, vp, s, copies);
  // Bit for bit, NaN included: the pools' NaN slots are data here, copied with their block.
  const auto want_k = pa::test::to_dtype<T>(c.get<float>("expected_k_pools"));
  const auto want_v = pa::test::to_dtype<T>(c.get<float>("expected_v_pools"));
  auto layer = [&](const std::vector<T>& all, int l) {
    return std::vector<T>(all.begin() + l * per_layer, all.begin() + (l + 1) * per_layer);
  };
  const auto k_dims = pa::test::k_pool_dims(s.num_blocks, s.num_kv_heads, s.head_size, s.block_size,
                                            pa::ch02::pack_x<T>());
  const auto v_dims = pa::test::v_pool_dims(s.num_blocks, s.num_kv_heads, s.head_size, s.block_size);
  for (int l = 0; l < layers; ++l) {
    EXPECT_TRUE(pa::test::exactly_equal(k[l].download(), layer(want_k, l), k_dims))
        << "K, layer " << l << ", " << c.name();
    EXPECT_TRUE(pa::test::exactly_equal(v[l].download(), layer(want_v, l), v_dims))
        << "V, layer " << l << ", " << c.name();
  }
}

class CopyGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CopyGolden, PoolsMatchReference) {
  const GoldenCase c(pa::test::golden_dir("ch07") + "/" + GetParam());
  switch (pa::parse_dtype(c.param("dtype"))) {
    case pa::DType::fp32: return check_case<float>(c);
    case pa::DType::fp16: return check_case<pa::half>(c);
    case pa::DType::bf16: return check_case<pa::bf16>(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch07, CopyGolden, ::testing::ValuesIn(pa::test::golden_case_names("ch07", "copy_")),
                         [](const auto& info) { return info.param; });

TEST(CopyBlocks, BadCopiesAreRefused) {
  const pa::ch02::PoolShape s{4, 16, 1, 64};
  pa::DeviceBuffer<float> k(4 * 16 * 64), v(4 * 16 * 64);
  std::vector<float*> kp = {k.get()}, vp = {v.get()};
  EXPECT_TRUE(error_contains([&] { pa::ch07::copy_blocks<float>(kp, vp, s, {{1, 4}}); },
                             "outside the pool of 4 blocks"));
  EXPECT_TRUE(error_contains([&] { pa::ch07::copy_blocks<float>(kp, vp, s, {{2, 2}}); },
                             "copied onto itself"));
  // Chained copies would race: 1 -> 2 while 2 -> 3 reads block 2.
  EXPECT_TRUE(error_contains([&] { pa::ch07::copy_blocks<float>(kp, vp, s, {{1, 2}, {2, 3}}); },
                             "the copies run in parallel"));
  EXPECT_TRUE(error_contains([&] { pa::ch07::copy_blocks<float>(kp, vp, s, {{0, 3}, {1, 3}}); },
                             "the copies run in parallel"));
}

}  // namespace
