// Chapter 5: paged attention v2 (partitions of 512 tokens and a reduce) against the
// reference; v2 with one partition equals v1 bit for bit; long contexts on the GPU.
#include <gtest/gtest.h>

#include "paged_case.h"
#include "pa/ch05_paged_attention_v2.h"

namespace {

using pa::ch04::PagedAttentionShape;
using pa::test::GoldenCase;
using pa::test::PagedCase;
using pa::test::contains_text;

// Which sequences have at most one partition (where v2 must equal v1 bit for bit).
template <typename T>
std::vector<bool> one_partition(const PagedCase<T>& c) {
  std::vector<bool> one;
  for (int len : c.context_lens) one.push_back(len <= pa::ch05::kPartitionSize);
  return one;
}

template <typename T>
void check_case(const GoldenCase& g) {
  PagedCase<T> c(g);
  pa::ch05::Workspace ws;
  // Scratch for more partitions than any sequence has, all NaN: a reduce that reads a
  // partition past its sequence's own count (or one no kernel wrote) leaks NaN.
  ws.reserve(c.shape.num_seqs, c.shape.num_q_heads, pa::ch05::num_partitions(c.max_context_len) + 2,
             c.shape.head_size);
  // poisoned: the scratch all NaN; or a NanProbe's rerun, with the pools' padding 0 and the
  // scratch all 0x3F bytes (every float 0.747: an unwritten partition's exp-sum is not 0).
  auto run_v2 = [&](bool poisoned = true) {
    ws.poison(poisoned ? 0xFF : 0x3F);
    pa::test::poison(c.out);
    pa::ch05::paged_attention_v2<T>(c.shape, c.out.get(), c.q.get(), c.k_pool.get(), c.v_pool.get(),
                                    c.d_table.get(), c.d_lens.get(), c.max_context_len, c.scale, ws);
    return c.out.download();
  };
  const std::vector<T> v2 = run_v2();
  const auto dims = pa::test::decode_out_dims(c.shape);
  const pa::test::NanProbe probe(
      [&](int64_t i) { return c.with_finite_padding([&] { return std::isnan(pa::to_float(run_v2(false)[size_t(i)])); }); });
  EXPECT_TRUE(pa::test::all_close(v2, c.expected, dims, c.atol, c.rtol))
      << "case " << c.name << ": " << g.param("note");

  pa::test::poison(c.out);
  pa::ch04::paged_attention_v1<T>(c.shape, c.out.get(), c.q.get(), c.k_pool.get(), c.v_pool.get(),
                                  c.d_table.get(), c.d_lens.get(), c.scale);
  // One partition: v2 must equal v1 bit for bit (longer sequences: v2 against itself).
  const std::vector<T> v1_where_one = pa::test::with_rows_of(c.out.download(), v2, one_partition(c));
  EXPECT_TRUE(pa::test::exactly_equal(v2, v1_where_one, dims))
      << "v2 (got) must equal v1 (want) bit for bit on a sequence of one partition";
  // The automatic choice gives the reference answer too.
  pa::test::poison(c.out);
  pa::ch05::paged_attention<T>(c.shape, c.out.get(), c.q.get(), c.k_pool.get(), c.v_pool.get(),
                               c.d_table.get(), c.d_lens.get(), c.max_context_len, c.scale, ws);
  EXPECT_TRUE(pa::test::all_close(c.out.download(), c.expected, dims, c.atol, c.rtol)) << "paged_attention";
}

class PagedV2Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(PagedV2Golden, MatchesReferenceAndV1) {
  const GoldenCase g(pa::test::golden_dir("ch04") + "/" + GetParam());
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: return check_case<float>(g);
    case pa::DType::fp16: return check_case<pa::half>(g);
    case pa::DType::bf16: return check_case<pa::bf16>(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch05, PagedV2Golden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch04", "decode_")),
                         [](const auto& info) { return info.param; });

TEST(PagedV2, HeuristicSplitsOnlyWhenTheGridIsSmall) {
  using pa::ch05::Version;
  const PagedAttentionShape few{8, 32, 8, 128, 16, 1 << 14, 2048};
  EXPECT_EQ(pa::ch05::choose_version(few, 512, 132), Version::v1);    // one partition
  EXPECT_EQ(pa::ch05::choose_version(few, 32768, 132), Version::v2);  // 256 blocks, long
  const PagedAttentionShape many{512, 32, 8, 128, 16, 1 << 14, 2048};
  EXPECT_EQ(pa::ch05::choose_version(many, 4096, 132), Version::v1);  // 16384 blocks fill it
}

TEST(PagedV2, MaxContextBeyondTheTableIsRefused) {
  pa::DeviceBuffer<float> buf(1024);
  pa::DeviceBuffer<int> ints(16);
  pa::ch05::Workspace ws;
  const std::string msg = pa::test::error_of([&] {
    pa::ch05::paged_attention_v2<float>({1, 4, 4, 64, 16, 4, 2}, buf.get(), buf.get(), buf.get(),
                                        buf.get(), ints.get(), ints.get(), 33, 1.f, ws);
  });
  EXPECT_TRUE(contains_text(msg, "beyond the table's capacity"));
}

// The merge's common max must be the largest of ALL the partitions' maxes. Any common base
// gives the same softmax on paper, so the golden cases (scores within a few units of each
// other) cannot tell; here one key scores 100 (exp(100) overflows fp32) in a single
// partition: the last of three (sequence 0), the middle one (sequence 1), the first one
// (sequence 2). A merge whose M misses that partition computes exp(100 - M) = inf and NaN.
TEST(PagedV2, MergeRescalesToTheLargestMaxOfAnyPartition) {
  const int len = 1100, bs = 16, blocks = (len + bs - 1) / bs;  // partitions of 512, 512, 76
  const PagedAttentionShape s{3, 2, 1, 64, bs, 3 * blocks, blocks};
  const int D = s.head_size, x = 16 / int(sizeof(float));
  std::mt19937 rng(26);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> k(size_t(s.num_blocks) * s.num_kv_heads * D * bs), v(k.size()),
      q(size_t(s.num_seqs) * s.num_q_heads * D);
  for (auto& e : k) e = normal(rng);
  for (auto& e : v) e = normal(rng);
  for (auto& e : q) e = normal(rng);
  std::vector<int> table(size_t(s.num_seqs) * blocks), lens(size_t(s.num_seqs), len);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  const float scale = 0.125f;
  const int outlier[3] = {1050, 700, 100};  // in partition 2, 1, 0
  for (int b = 0; b < s.num_seqs; ++b) {
    // Key `outlier[b]` = c * (query head 0 of sequence b), with c * |q|^2 * scale = 100.
    const float* qb = &q[size_t(b) * s.num_q_heads * D];
    double qq = 0;
    for (int d = 0; d < D; ++d) qq += double(qb[d]) * qb[d];
    const int t = outlier[b];
    const int64_t base = int64_t(table[size_t(b) * blocks + t / bs]) * D * bs;  // one KV head
    for (int d = 0; d < D; ++d)
      k[size_t(base + (int64_t(d / x) * bs + t % bs) * x + d % x)] = float(100.0 / (qq * scale) * qb[d]);
  }
  pa::DeviceBuffer<float> dk(k), dv(v), dq(q), out(q.size());
  pa::DeviceBuffer<int> dt(table), dl(lens);
  pa::ch05::Workspace ws;
  pa::test::poison(out);
  pa::ch05::paged_attention_v2<float>(s, out.get(), dq.get(), dk.get(), dv.get(), dt.get(), dl.get(),
                                      len, scale, ws);
  const auto want = pa::test::host_paged_decode(s, q, k, v, table, lens, scale);
  EXPECT_TRUE(pa::test::all_close(out.download(), want, pa::test::decode_out_dims(s), 1e-5, 1e-5))
      << "one key of score 100 in partition 2 (sequence 0), 1 (sequence 1), 0 (sequence 2): the "
         "merge must rescale every partition to the largest max_logit of all of them";
}

// GPU only: 32K-token contexts against a float64 host reference, and v1 against v2 there.
TEST(PagedV2Long, ThirtyTwoThousandTokens) {
  if (std::string(PA_BACKEND_NAME) != "cuda") GTEST_SKIP() << "long contexts run on the GPU";
  const int len = 32768, bs = 16, blocks = len / bs;
  const PagedAttentionShape s{2, 8, 2, 128, bs, 2 * blocks + 7, blocks};
  const size_t per_block = size_t(s.num_kv_heads) * s.head_size * bs;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<pa::half> k(per_block * s.num_blocks), v(k.size()),
      q(size_t(s.num_seqs) * s.num_q_heads * s.head_size);
  for (auto& e : k) e = pa::from_float<pa::half>(normal(rng));
  for (auto& e : v) e = pa::from_float<pa::half>(normal(rng));
  for (auto& e : q) e = pa::from_float<pa::half>(normal(rng));
  std::vector<int> ids(s.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int> table(ids.begin(), ids.begin() + 2 * blocks), lens = {len, len - 1000};
  pa::DeviceBuffer<pa::half> dk(k), dv(v), dq(q), out(q.size());
  pa::DeviceBuffer<int> dt(table), dl(lens);
  pa::ch05::Workspace ws;
  const float scale = 0.0883883f;
  pa::test::poison(out);
  pa::ch05::paged_attention_v2<pa::half>(s, out.get(), dq.get(), dk.get(), dv.get(), dt.get(),
                                         dl.get(), len, scale, ws);
  const auto v2 = out.download();
  const auto want = pa::test::host_paged_decode(s, q, k, v, table, lens, scale);
  const auto dims = pa::test::decode_out_dims(s);
  EXPECT_TRUE(pa::test::all_close(v2, want, dims, 2e-3, 2e-3)) << "v2";
  pa::test::poison(out);
  pa::ch04::paged_attention_v1<pa::half>(s, out.get(), dq.get(), dk.get(), dv.get(), dt.get(),
                                         dl.get(), scale);
  EXPECT_TRUE(pa::test::all_close(out.download(), want, dims, 2e-3, 2e-3)) << "v1";
}

}  // namespace
