// Chapter 2: paged to dense, with permuted blocks and NaN-poisoned padding and tails.
#include <gtest/gtest.h>

#include "compare.h"
#include "golden.h"
#include "pa/ch02_paged.h"

namespace {

using pa::ch02::PoolShape;
using pa::test::GoldenCase;
using pa::test::contains_text;

template <typename T>
void check_case(const GoldenCase& c) {
  const PoolShape s{int(c.param_int("num_blocks")), int(c.param_int("block_size")),
                    int(c.param_int("num_kv_heads")), int(c.param_int("head_size"))};
  const auto table_shape = c.shape("block_table");
  const int num_seqs = int(table_shape[0]), max_blocks = int(table_shape[1]);
  const int max_seq_len = int(c.param_int("max_seq_len"));
  pa::DeviceBuffer<T> k_pool(pa::test::to_dtype<T>(c.get<float>("k_pool")));
  pa::DeviceBuffer<T> v_pool(pa::test::to_dtype<T>(c.get<float>("v_pool")));
  pa::DeviceBuffer<int> table(c.get<int>("block_table")), lens(c.get<int>("context_lens"));
  const auto want_k = c.get<float>("k_dense"), want_v = c.get<float>("v_dense");
  pa::DeviceBuffer<T> k(want_k.size()), v(want_v.size());
  // Slots past context_len (NaN in the reference) must still hold this poison: its bits
  // differ from the pools' NaN padding, so copying a padding slot shows.
  pa::test::poison(k);
  pa::test::poison(v);
  pa::ch02::gather_kv<T>(s, k_pool.get(), v_pool.get(), table.get(), max_blocks, lens.get(),
                         num_seqs, max_seq_len, k.get(), v.get());
  const auto dims = pa::test::dense_cache_dims(num_seqs, max_seq_len, s.num_kv_heads, s.head_size);
  const T untouched = pa::test::output_poison<T>();
  EXPECT_TRUE(pa::test::exactly_equal(k.download(), want_k, dims, untouched))
      << "K, case " << c.name() << ": " << c.param("note");
  EXPECT_TRUE(pa::test::exactly_equal(v.download(), want_v, dims, untouched))
      << "V, case " << c.name() << ": " << c.param("note");
}

class GatherGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(GatherGolden, DenseMatchesReference) {
  const GoldenCase c(pa::test::golden_dir("ch02") + "/" + GetParam());
  switch (pa::parse_dtype(c.param("dtype"))) {
    case pa::DType::fp32: return check_case<float>(c);
    case pa::DType::fp16: return check_case<pa::half>(c);
    case pa::DType::bf16: return check_case<pa::bf16>(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch02, GatherGolden, ::testing::ValuesIn(pa::test::golden_case_names("ch02", "gather_")),
                         [](const auto& info) { return info.param; });

TEST(GatherErrors, ATableLargerThanTheDenseBufferIsRefused) {
  const PoolShape s{4, 16, 1, 64};
  pa::DeviceBuffer<float> buf(4 * 16 * 64);
  pa::DeviceBuffer<int> ints(8);
  try {
    pa::ch02::gather_kv<float>(s, buf.get(), buf.get(), ints.get(), 4, ints.get(), 1, 32,
                               buf.get(), buf.get());
    FAIL() << "4 blocks of 16 do not fit 32 slots";
  } catch (const pa::Error& e) {
    EXPECT_TRUE(contains_text(e.what(), "does not fit max_seq_len 32"));
  }
}

}  // namespace
