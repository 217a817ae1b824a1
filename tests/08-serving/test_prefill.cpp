// Chapter 8: prefill attention over paged KV against the float64 reference, with
// permuted physical blocks, NaN in every slot and table entry it must not read, cached
// prefixes at and around block edges, chunks that cross blocks, and an empty chunk.
#include <gtest/gtest.h>

#include "paged_case.h"
#include "pa/ch08_prefill.h"

namespace {

using pa::ch08::PrefillShape;
using pa::test::GoldenCase;

template <typename T>
struct PrefillCase {
  explicit PrefillCase(const GoldenCase& c, unsigned permutation_seed = 0) {
    const auto qs = c.shape("q"), ks = c.shape("k_pool"), ts = c.shape("block_table");
    shape = PrefillShape{int(ts[0]), int(qs[0]), int(qs[1]), int(ks[1]), int(qs[2]),
                         int(ks[3]), int(ks[0]), int(ts[1])};
    std::vector<float> k = c.get<float>("k_pool"), v = c.get<float>("v_pool");
    table = pa::test::table_with_poisoned_padding(c);
    if (permutation_seed) {  // move block b to perm[b]: the same cache, stored elsewhere
      const int n = shape.num_blocks;
      const size_t per = k.size() / size_t(n);
      std::vector<int> perm(static_cast<size_t>(n));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), std::mt19937(permutation_seed));
      std::vector<float> k2(k.size()), v2(v.size());
      for (int b = 0; b < n; ++b) {
        std::copy_n(k.begin() + b * per, per, k2.begin() + perm[size_t(b)] * per);
        std::copy_n(v.begin() + b * per, per, v2.begin() + perm[size_t(b)] * per);
      }
      k.swap(k2);
      v.swap(v2);
      for (int& id : table) id = perm[size_t(id)];
    }
    lens = c.get<int>("context_lens");
    qsl = c.get<int>("query_start_loc");
    expected = c.get<double>("expected");
    scale = float(c.get<double>("scale")[0]);
    atol = c.param_double("atol");
    rtol = c.param_double("rtol");
    q = pa::DeviceBuffer<T>(pa::test::to_dtype<T>(c.get<float>("q")));
    k_pool = pa::DeviceBuffer<T>(pa::test::to_dtype<T>(k));
    v_pool = pa::DeviceBuffer<T>(pa::test::to_dtype<T>(v));
    d_table = pa::DeviceBuffer<int>(table);
    d_lens = pa::DeviceBuffer<int>(lens);
    d_qsl = pa::DeviceBuffer<int>(qsl);
    out = pa::DeviceBuffer<T>(expected.size());
  }
  std::vector<T> run() {
    pa::test::poison(out);  // a row the kernel never writes keeps this NaN
    pa::ch08::check_metadata(shape, table, lens, qsl);
    pa::ch08::prefill_attention<T>(shape, out.get(), q.get(), k_pool.get(), v_pool.get(),
                                   d_table.get(), d_lens.get(), d_qsl.get(), scale);
    return out.download();
  }
  PrefillShape shape;
  std::vector<int> table, lens, qsl;
  std::vector<double> expected;
  float scale;
  double atol, rtol;
  pa::DeviceBuffer<T> q, k_pool, v_pool, out;
  pa::DeviceBuffer<int> d_table, d_lens, d_qsl;
};

template <typename T>
void check_case(const GoldenCase& g) {
  PrefillCase<T> c(g);
  const std::vector<T> got = c.run();
  // out: [num_tokens, Hq, D], the new tokens of every sequence one after another.
  const pa::test::Dims dims{{"query token", c.shape.num_tokens}, {"head", c.shape.num_q_heads},
                            {"d", c.shape.head_size}};
  EXPECT_TRUE(pa::test::all_close(got, c.expected, dims, c.atol, c.rtol))
      << "case " << g.name() << ": " << g.param("note");
  PrefillCase<T> moved(g, /*permutation_seed=*/11);
  EXPECT_TRUE(pa::test::exactly_equal(moved.run(), got, dims)) << pa::test::kBlockPlacement;
}

class PrefillGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefillGolden, MatchesReferenceAndIgnoresBlockPlacement) {
  const GoldenCase g(pa::test::golden_dir("ch08") + "/" + GetParam());
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: return check_case<float>(g);
    case pa::DType::fp16: return check_case<pa::half>(g);
    case pa::DType::bf16: return check_case<pa::bf16>(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch08, PrefillGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch08", "prefill_")),
                         [](const auto& info) { return info.param; });

TEST(PrefillErrors, BadShapesAndMetadataAreRefused) {
  using pa::test::error_of;
  const PrefillShape s{2, 5, 4, 2, 64, 16, 8, 2};
  const std::vector<int> table = {0, 1, 2, 3};
  auto meta = [&](std::vector<int> lens, std::vector<int> qsl, std::vector<int> t = {}) {
    return error_of([&] { pa::ch08::check_metadata(s, t.empty() ? table : t, lens, qsl); });
  };
  EXPECT_EQ(meta({20, 3}, {0, 3, 5}), "(no error)");
  EXPECT_TRUE(pa::test::contains_text(meta({20, 1}, {0, 3, 5}), "has 2 new tokens but context_len 1"));
  EXPECT_TRUE(pa::test::contains_text(meta({20, 3}, {1, 3, 5}), "query_start_loc[0] must be 0"));
  EXPECT_TRUE(pa::test::contains_text(meta({20, 3}, {0, 3, 4}), "but num_tokens is 5"));
  EXPECT_TRUE(pa::test::contains_text(meta({40, 3}, {0, 3, 5}), "beyond the table's capacity"));
  EXPECT_TRUE(pa::test::contains_text(meta({20, 3}, {0, 3, 5}, {0, 9, 2, 3}), "block_table[0][1] = 9 is not a block"));
  pa::DeviceBuffer<float> buf(64);
  pa::DeviceBuffer<int> ints(8);
  auto run = [&](PrefillShape bad) {
    return error_of([&] {
      pa::ch08::prefill_attention<float>(bad, buf.get(), buf.get(), buf.get(), buf.get(), ints.get(),
                                         ints.get(), ints.get(), 1.f);
    });
  };
  EXPECT_TRUE(pa::test::contains_text(run({1, 1, 4, 4, 100, 16, 4, 2}), "head_size 100 is not supported"));
  EXPECT_TRUE(pa::test::contains_text(run({1, 1, 4, 4, 64, 12, 4, 2}), "block_size 12 is not supported"));
  EXPECT_TRUE(pa::test::contains_text(run({1, 1, 6, 4, 64, 16, 4, 2}), "must be a multiple of num_kv_heads"));
}

}  // namespace
