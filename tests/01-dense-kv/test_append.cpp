// Chapter 1: appending tokens to the dense cache, and decoding what was appended.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compare.h"
#include "golden.h"
#include "pa/ch01_dense.h"

namespace {

using pa::ch01::DenseKVCache;
using pa::ch01::DenseShape;
using pa::test::contains_text;

std::vector<float> normal(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

// Appends steps with some sequences sitting out, then checks every slot of the cache:
// written slots hold exactly the appended rows, and the rest are still poisoned (NaN).
TEST(Append, WritesEachTokenToItsSlotAndNothingElse) {
  const DenseShape s{3, 9, 4, 2, 64};
  const size_t row = size_t(s.num_kv_heads) * s.head_size;
  DenseKVCache<float> cache(s);
  std::vector<std::vector<float>> k_rows(s.num_seqs), v_rows(s.num_seqs);
  pa::DeviceBuffer<float> k_new(s.num_seqs * row), v_new(s.num_seqs * row);
  for (int step = 0; step < 8; ++step) {
    std::vector<bool> active = {true, step % 2 == 0, step < 3};
    std::vector<float> k = normal(s.num_seqs * row, 100 + step);
    std::vector<float> v = normal(s.num_seqs * row, 200 + step);
    k_new.upload(k);
    v_new.upload(v);
    cache.append(k_new.get(), v_new.get(), active);
    for (int b = 0; b < s.num_seqs; ++b)
      if (active[b]) {
        k_rows[b].insert(k_rows[b].end(), k.begin() + b * row, k.begin() + (b + 1) * row);
        v_rows[b].insert(v_rows[b].end(), v.begin() + b * row, v.begin() + (b + 1) * row);
      }
  }
  EXPECT_EQ(cache.lengths(), (std::vector<int>{8, 4, 3}));
  const size_t total = size_t(s.num_seqs) * s.max_seq_len * row;
  std::vector<float> k_host(total), v_host(total);
  PA_CUDA_CHECK(cudaMemcpy(k_host.data(), cache.k_cache(), total * 4, cudaMemcpyDeviceToHost));
  PA_CUDA_CHECK(cudaMemcpy(v_host.data(), cache.v_cache(), total * 4, cudaMemcpyDeviceToHost));
  // The appended rows, and NaN (untouched: still the cache's 0xFF poison) in every other slot.
  std::vector<float> want_k(total, NAN), want_v(total, NAN);
  for (int b = 0; b < s.num_seqs; ++b) {
    std::copy(k_rows[b].begin(), k_rows[b].end(), want_k.begin() + b * s.max_seq_len * row);
    std::copy(v_rows[b].begin(), v_rows[b].end(), want_v.begin() + b * s.max_seq_len * row);
  }
  const auto dims = pa::test::dense_cache_dims(s.num_seqs, s.max_seq_len, s.num_kv_heads, s.head_size);
  EXPECT_TRUE(pa::test::exactly_equal(k_host, want_k, dims, pa::test::all_ones<float>())) << "K cache";
  EXPECT_TRUE(pa::test::exactly_equal(v_host, want_v, dims, pa::test::all_ones<float>())) << "V cache";
}

TEST(Append, AFullSequenceIsAnErrorAndNothingChanges) {
  const DenseShape s{2, 2, 2, 2, 64};
  DenseKVCache<pa::half> cache(s);
  pa::DeviceBuffer<pa::half> k(pa::test::to_dtype<pa::half>(normal(2 * 128, 1)));
  cache.append(k.get(), k.get());
  cache.append(k.get(), k.get(), {true, false});
  try {
    cache.append(k.get(), k.get());
    FAIL() << "appending to a full sequence must throw";
  } catch (const pa::Error& e) {
    EXPECT_TRUE(contains_text(e.what(), "sequence 0 is full (max_seq_len 2)"));
  }
  EXPECT_EQ(cache.lengths(), (std::vector<int>{2, 1}));  // the failed call changed nothing
  cache.append(k.get(), k.get(), {false, true});        // sequence 1 still has room
  EXPECT_EQ(cache.lengths(), (std::vector<int>{2, 2}));
}

// End to end: build the cache token by token through append, then decode, and compare
// with the reference's answer for the same golden case.
template <typename T>
void append_then_decode(const pa::test::GoldenCase& c) {
  const auto qs = c.shape("q"), ks = c.shape("k_cache");
  const DenseShape s{int(qs[0]), int(ks[1]), int(qs[1]), int(ks[2]), int(qs[2])};
  const std::vector<float> k_all = c.get<float>("k_cache"), v_all = c.get<float>("v_cache");
  const std::vector<int> lens = c.get<int>("context_lens");
  const size_t row = size_t(s.num_kv_heads) * s.head_size;
  DenseKVCache<T> cache(s);
  pa::DeviceBuffer<T> k_new(s.num_seqs * row), v_new(s.num_seqs * row);
  for (int t = 0; t < s.max_seq_len; ++t) {
    std::vector<bool> active(s.num_seqs);
    std::vector<float> k(s.num_seqs * row, 0.f), v(s.num_seqs * row, 0.f);
    bool any = false;
    for (int b = 0; b < s.num_seqs; ++b) {
      active[b] = t < lens[b];
      any |= active[b];
      if (!active[b]) continue;
      const size_t from = (size_t(b) * s.max_seq_len + t) * row;
      std::copy(k_all.begin() + from, k_all.begin() + from + row, k.begin() + b * row);
      std::copy(v_all.begin() + from, v_all.begin() + from + row, v.begin() + b * row);
    }
    if (!any) break;
    k_new.upload(pa::test::to_dtype<T>(k));
    v_new.upload(pa::test::to_dtype<T>(v));
    cache.append(k_new.get(), v_new.get(), active);
  }
  ASSERT_EQ(cache.lengths(), lens);
  pa::DeviceBuffer<T> q(pa::test::to_dtype<T>(c.get<float>("q")));
  pa::DeviceBuffer<T> out(q.size());
  pa::test::poison(out);
  cache.decode(out.get(), q.get(), static_cast<float>(c.get<double>("scale")[0]));
  EXPECT_TRUE(pa::test::all_close(out.download(), c.get<double>("expected"),
                                  pa::test::decode_out_dims(s.num_seqs, s.num_q_heads, s.head_size),
                                  c.param_double("atol"), c.param_double("rtol")))
      << "case " << c.name();
}

TEST(Append, AppendThenDecodeMatchesReference) {
  int checked = 0;
  for (const auto& c : pa::test::golden_cases(pa::test::golden_dir("ch01"), "decode_")) {
    SCOPED_TRACE(c.name());
    if (c.param("dtype") == "fp16") append_then_decode<pa::half>(c), ++checked;
    if (c.param("dtype") == "bf16") append_then_decode<pa::bf16>(c), ++checked;
  }
  EXPECT_GE(checked, 5);
}

}  // namespace

namespace {

// Offsets past 2^31 elements: sequence 1 of this cache starts at element 2^31, so an
// int32 offset would wrap and write (or read) somewhere else. GPU only: it needs 16 GiB.
TEST(Append, OffsetsBeyondTwoToThe31AreComputedIn64Bits) {
  if (std::string(PA_BACKEND_NAME) != "cuda") GTEST_SKIP() << "needs 16 GiB of GPU memory";
  const DenseShape s{2, 1 << 21, 8, 8, 128};  // (1 << 21) * 8 * 128 = 2^31 elements per sequence
  DenseKVCache<pa::half> cache(s);
  const size_t row = size_t(s.num_kv_heads) * s.head_size, qrow = size_t(s.num_q_heads) * s.head_size;
  std::vector<std::vector<float>> k_hist(2), v_hist(2);
  pa::DeviceBuffer<pa::half> k_new(2 * row), v_new(2 * row);
  for (int t = 0; t < 5; ++t) {
    const auto k = pa::test::to_dtype<pa::half>(normal(2 * row, 300 + t));
    const auto v = pa::test::to_dtype<pa::half>(normal(2 * row, 400 + t));
    k_new.upload(k);
    v_new.upload(v);
    cache.append(k_new.get(), v_new.get());
    for (size_t e = row; e < 2 * row; ++e) {  // keep sequence 1's rows
      k_hist[1].push_back(pa::to_float(k[e]));
      v_hist[1].push_back(pa::to_float(v[e]));
    }
  }
  const auto qh = pa::test::to_dtype<pa::half>(normal(2 * qrow, 9));
  pa::DeviceBuffer<pa::half> q(qh), out(2 * qrow);
  pa::test::poison(out);
  cache.decode(out.get(), q.get(), 0.125f);
  const auto got = out.download();
  std::vector<double> want(qrow);
  for (int h = 0; h < s.num_q_heads; ++h) {
    double score[5], mx = -1e300, sum = 0;
    for (int t = 0; t < 5; ++t) {
      double dot = 0;
      for (int d = 0; d < 128; ++d)
        dot += double(pa::to_float(qh[qrow + h * 128 + d])) * k_hist[1][t * row + h * 128 + d];
      mx = std::max(mx, score[t] = 0.125 * dot);
    }
    for (double& x : score) sum += (x = std::exp(x - mx));
    for (int d = 0; d < 128; ++d) {
      double o = 0;
      for (int t = 0; t < 5; ++t) o += score[t] * v_hist[1][t * row + h * 128 + d];
      want[h * 128 + d] = o / sum;
    }
  }
  const std::vector<pa::half> seq1(got.begin() + qrow, got.end());
  EXPECT_TRUE(pa::test::all_close(seq1, want, {{"head", s.num_q_heads}, {"d", s.head_size}}, 2e-3, 2e-3))
      << "sequence 1";
}

}  // namespace
