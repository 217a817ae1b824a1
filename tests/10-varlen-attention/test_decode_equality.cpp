// Chapter 10 on chapter 4's and chapter 6's decode cases (one new token per sequence):
// against the float64 reference, and, built with PA_WITH_CH09 (test_ch10_vs_ch09_solution),
// against chapter 9's decode kernels on the same inputs as well. The chapter's own test
// binary leaves chapter 9's kernels out: its first build would compile all of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>

#include "varlen_case.h"
#ifdef PA_WITH_CH09
#include "pa/ch09_fast_decode.h"
#endif

namespace {

using pa::ch10::VarlenAttention;
using pa::test::GoldenCase;

// ---- Decode equality: every n_b = 1 is chapter 9's decode ------------------------------

// The rows of the sequences that have a token (a decode of an empty sequence does not
// exist: its new token would be part of it, so it gets no row), of a [B, Hq, D] tensor.
template <typename V>
std::vector<V> rows_of_busy(const std::vector<V>& x, const std::vector<int>& lens, size_t row) {
  std::vector<V> out;
  for (size_t b = 0; b < lens.size(); ++b)
    if (lens[b] > 0) out.insert(out.end(), x.begin() + b * row, x.begin() + (b + 1) * row);
  return out;
}

// A decode batch as varlen metadata: one new token per non-empty sequence.
std::vector<int> decode_query_start_loc(const std::vector<int>& lens) {
  std::vector<int> qsl{0};
  for (int n : lens) qsl.push_back(qsl.back() + (n > 0));
  return qsl;
}

template <typename T>
void check_decode_case(const GoldenCase& g, std::initializer_list<int> chunks) {
  pa::test::PagedCase<T> c(g, /*permutation_seed=*/0);
  const auto& s = c.shape;
  const size_t row = size_t(s.num_q_heads) * s.head_size;
  const std::vector<int> qsl = decode_query_start_loc(c.context_lens);
  const int tokens = qsl.back();
  const pa::ch10::VarlenShape vs{s.num_seqs, tokens, s.num_q_heads, s.num_kv_heads,
                                 s.head_size, s.block_size, s.num_blocks, s.max_blocks_per_seq};
  const std::vector<T> q_all = c.q.download();
  pa::DeviceBuffer<T> q(rows_of_busy(q_all, c.context_lens, row)), out(size_t(tokens) * row);
  pa::DeviceBuffer<int> d_qsl(qsl);
  const auto want = rows_of_busy(c.expected, c.context_lens, row);
  const auto dims = pa::test::varlen_out_dims(vs);

#ifdef PA_WITH_CH09
  // Chapter 9's tensor-core decode on the same inputs.
  pa::ch09::Workspace ws;
  ws.reserve(s.num_seqs, s.num_q_heads, 64, s.head_size);
  pa::test::poison(c.out);
  pa::ch09::decode<T>(pa::ch09::Version::tensor_core, s, c.out.get(), c.q.get(), c.k_pool.get(),
                      c.v_pool.get(), c.d_table.get(), c.d_lens.get(), c.max_context_len, c.scale,
                      ws);
  std::vector<double> ch09;
  for (const T& v : rows_of_busy(c.out.download(), c.context_lens, row))
    ch09.push_back(pa::to_float(v));
#endif

  pa::ch10::check_metadata(vs, c.table, c.context_lens, qsl);
  VarlenAttention attn;
  for (int chunk : chunks) {
    attn.plan(vs, pa::dtype_of<T>(), pa::ch10::CacheType::model_dtype, c.context_lens, qsl, chunk);
    attn.poison_workspace();
    pa::test::poison(out);
    attn.run<T>(out.get(), q.get(), c.k_pool.get(), c.v_pool.get(), c.d_table.get(),
                c.d_lens.get(), d_qsl.get(), c.scale);
    const std::vector<T> got = out.download();
    EXPECT_TRUE(pa::test::all_close(got, want, dims, c.atol, c.rtol))
        << "vs the reference, chunk_tokens " << chunk << ", " << c.name << ": "
        << g.param("note") << "\n  (query token = the case's non-empty sequences in order)";
#ifdef PA_WITH_CH09
    EXPECT_TRUE(pa::test::all_close(got, ch09, dims, c.atol, c.rtol))
        << "vs chapter 9's tensor_core decode (want), chunk_tokens " << chunk << ", " << c.name;
#endif
  }
}

void check_decode(const std::string& name, std::initializer_list<int> chunks) {
  const GoldenCase g(pa::test::golden_dir("ch04") + "/" + name);
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: GTEST_SKIP() << "chapter 10 serves half and bf16 queries, not fp32";
    case pa::DType::fp16: return check_decode_case<pa::half>(g, chunks);
    case pa::DType::bf16: return check_decode_case<pa::bf16>(g, chunks);
  }
}

// Core: whole tiles (no split tile: the stretch exercise's merge never runs).
class DecodeEquality : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeEquality, OneTokenPerSequenceIsChapter9sDecode) {
  check_decode(GetParam(), {pa::ch10::kWholeTiles});
}

INSTANTIATE_TEST_SUITE_P(Ch04, DecodeEquality,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch04", "decode_")),
                         [](const auto& info) { return info.param; });

// Stretch (the split-tile merge): the planner's own chunks, and forced chunks of 64 tokens.
class StretchDecodeEquality : public ::testing::TestWithParam<std::string> {};

TEST_P(StretchDecodeEquality, OneTokenPerSequenceIsChapter9sDecode) { check_decode(GetParam(), {0, 64}); }

INSTANTIATE_TEST_SUITE_P(Ch04, StretchDecodeEquality,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch04", "decode_")),
                         [](const auto& info) { return info.param; });

template <typename T>
void check_fp8_decode_case(const GoldenCase& g, int chunk) {
  const pa::ch04::PagedAttentionShape s = pa::test::paged_shape_of(g);
  const std::vector<int> lens = g.get<int>("context_lens");
  const int max_len = *std::max_element(lens.begin(), lens.end());
  const size_t row = size_t(s.num_q_heads) * s.head_size;
  const std::vector<int> qsl = decode_query_start_loc(lens), table =
      pa::test::table_with_poisoned_padding(g);
  const int tokens = qsl.back();
  const pa::ch10::VarlenShape vs{s.num_seqs, tokens, s.num_q_heads, s.num_kv_heads,
                                 s.head_size, s.block_size, s.num_blocks, s.max_blocks_per_seq};
  const std::vector<T> q_all = pa::test::to_dtype<T>(g.get<float>("q"));
  pa::DeviceBuffer<T> q_dec(q_all), out_dec(q_all.size());
  pa::DeviceBuffer<T> q(rows_of_busy(q_all, lens, row)), out(size_t(tokens) * row);
  pa::DeviceBuffer<uint8_t> k(g.get<uint8_t>("k_pool")), v(g.get<uint8_t>("v_pool"));
  pa::DeviceBuffer<float> k_scale(g.get<float>("k_scale")), v_scale(g.get<float>("v_scale"));
  pa::DeviceBuffer<int> d_table(table), d_lens(lens), d_qsl(qsl);
  const float scale = float(g.get<double>("scale")[0]);
  const double atol = g.param_double("atol"), rtol = g.param_double("rtol");
  const auto want = rows_of_busy(g.get<double>("expected"), lens, row);
  const auto dims = pa::test::varlen_out_dims(vs);

#ifdef PA_WITH_CH09
  pa::ch09::Workspace ws;
  ws.reserve(s.num_seqs, s.num_q_heads, 64, s.head_size);
  pa::test::poison(out_dec);
  pa::ch09::decode_fp8<T>(s, out_dec.get(), q_dec.get(), k.get(), v.get(), d_table.get(),
                          d_lens.get(), max_len, k_scale.get(), v_scale.get(), scale, ws);
  std::vector<double> ch09;
  for (const T& e : rows_of_busy(out_dec.download(), lens, row)) ch09.push_back(pa::to_float(e));
#endif

  pa::ch10::check_metadata(vs, table, lens, qsl);
  VarlenAttention attn;
  attn.plan(vs, pa::dtype_of<T>(), pa::ch10::CacheType::fp8_e4m3, lens, qsl, chunk);
  attn.poison_workspace();
  pa::test::poison(out);
  attn.run_fp8<T>(out.get(), q.get(), k.get(), v.get(), d_table.get(), d_lens.get(), d_qsl.get(),
                  k_scale.get(), v_scale.get(), scale);
  const std::vector<T> got = out.download();
  EXPECT_TRUE(pa::test::all_close(got, want, dims, atol, rtol))
      << "vs the dequantized reference, chunk_tokens " << chunk << ", " << g.name() << ": "
      << g.param("note")
      << "\n  (query token = the case's non-empty sequences in order)";
#ifdef PA_WITH_CH09
  EXPECT_TRUE(pa::test::all_close(got, ch09, dims, atol, rtol))
      << "vs chapter 9's fp8 decode (want), " << g.name();
#endif
}

void check_fp8_decode(const std::string& name, int chunk) {
  const GoldenCase g(pa::test::golden_dir("ch06") + "/" + name);
  if (g.param_int("block_size") == 8)
    GTEST_SKIP() << "chapter 10's e4m3 cache takes block sizes 16 and 32";
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: GTEST_SKIP() << "chapter 10 serves half and bf16 queries, not fp32";
    case pa::DType::fp16: return check_fp8_decode_case<pa::half>(g, chunk);
    case pa::DType::bf16: return check_fp8_decode_case<pa::bf16>(g, chunk);
  }
}

// Core: whole tiles. Stretch: the planner's own chunks (split tiles).
class Fp8DecodeEquality : public ::testing::TestWithParam<std::string> {};
TEST_P(Fp8DecodeEquality, OneTokenPerSequenceIsChapter9sFp8Decode) {
  check_fp8_decode(GetParam(), pa::ch10::kWholeTiles);
}
INSTANTIATE_TEST_SUITE_P(Ch06, Fp8DecodeEquality,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch06", "decode_fp8_")),
                         [](const auto& info) { return info.param; });

class StretchFp8DecodeEquality : public ::testing::TestWithParam<std::string> {};
TEST_P(StretchFp8DecodeEquality, OneTokenPerSequenceIsChapter9sFp8Decode) { check_fp8_decode(GetParam(), 0); }
INSTANTIATE_TEST_SUITE_P(Ch06, StretchFp8DecodeEquality,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch06", "decode_fp8_")),
                         [](const auto& info) { return info.param; });

}  // namespace
