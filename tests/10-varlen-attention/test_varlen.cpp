// Chapter 10: varlen paged attention over ragged batches (decodes, spec-decode
// verifications, chunked-prefill pieces and idle sequences in one launch) against the
// float64 reference, on permuted blocks, with forced KV splits (partials merged in the
// launch) and forced small grids (many items per thread block); and, on chapter 4's and
// chapter 6's decode cases, against the reference and chapter 9's decode kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "varlen_case.h"
#include "pa/ch09_fast_decode.h"

namespace {

using pa::ch10::VarlenAttention;
using pa::test::GoldenCase;
using pa::test::VarlenCase;

// What the plan looked like, for failure messages.
std::string plan_text(const VarlenAttention& attn) {
  const pa::ch10::Plan& p = attn.host_plan();
  int split = 0, by_warp = 0;
  for (const auto& w : p.items) {
    split += w.num_splits > 1;
    by_warp += w.by_warp;
  }
  std::ostringstream os;
  os << "plan: grid " << p.grid << ", " << p.items.size() << " items (" << split
     << " of them parts of a split tile, " << p.num_counters << " split tiles; " << by_warp
     << " warp items)";
  if (p.chunk_tokens) os << ", chunks of " << p.chunk_tokens << " tokens";
  return os.str();
}

template <typename T>
void check_case(const GoldenCase& g) {
  VarlenCase<T> c(g);
  const auto dims = pa::test::varlen_out_dims(c.shape);
  VarlenAttention attn;
  const std::vector<T> got = c.run(attn);
  EXPECT_TRUE(pa::test::all_close(got, c.expected, dims, c.atol, c.rtol))
      << c.name << ": " << g.param("note") << "\n  " << plan_text(attn);
  if (c.fp8)  // what fp8 costs, against the values before quantization (chapter 6's bound)
    EXPECT_TRUE(pa::test::all_close(got, c.unquantized, dims, c.fp8_atol, c.fp8_rtol))
        << "vs the unquantized reference, " << c.name;

  // The same logical cache in other physical blocks: the same plan, the same bits.
  VarlenCase<T> moved(g, /*permutation_seed=*/11);
  VarlenAttention attn2;
  EXPECT_TRUE(pa::test::exactly_equal(moved.run(attn2), got, dims))
      << pa::test::kBlockPlacement << "; " << c.name;

  // Forced chunks: splits inside sequences (partials merged by the last item of a tile),
  // and small grids: many items, splits of one tile included, per thread block.
  struct Forced {
    int chunk_tokens, grid;
  };
  for (const Forced f : {Forced{32, 0}, Forced{64, 0}, Forced{96, 0}, Forced{0, 1},
                         Forced{32, 3}, Forced{0, 7}}) {
    const std::vector<T> out = c.run(attn, f.chunk_tokens, f.grid);
    EXPECT_TRUE(pa::test::all_close(out, c.expected, dims, c.atol, c.rtol))
        << "forced chunk_tokens " << f.chunk_tokens << ", grid " << f.grid << " (0: the "
        << "planner's), " << c.name << "\n  " << plan_text(attn);
  }
}

class VarlenGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(VarlenGolden, MatchesReferenceWhateverThePlanAndBlockPlacement) {
  const GoldenCase g(pa::test::golden_dir("ch10") + "/" + GetParam());
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: FAIL() << "chapter 10 serves half and bf16 queries: no fp32 cases";
    case pa::DType::fp16: return check_case<pa::half>(g);
    case pa::DType::bf16: return check_case<pa::bf16>(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch10, VarlenGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch10", "varlen_")),
                         [](const auto& info) { return info.param; });

// Prefix caching: two sequences whose tables point at the same physical blocks for their
// common prefix, with equal queries, get equal rows; under every forced plan too.
TEST(VarlenSharedBlocks, EqualQueriesOverSharedPrefixBlocksGiveEqualRows) {
  const GoldenCase g(pa::test::golden_dir("ch10") + "/varlen_fp16_d64_bs16_g2_shared_prefix");
  ASSERT_EQ(g.param("twins"), "0,2");
  VarlenCase<pa::half> c(g);
  const int s = 0, t = 2, M = c.shape.max_blocks_per_seq;
  ASSERT_EQ(c.table[size_t(s) * M], c.table[size_t(t) * M]) << "the case shares no block";
  const int n = c.qsl[s + 1] - c.qsl[s];
  ASSERT_EQ(n, c.qsl[t + 1] - c.qsl[t]);
  const size_t row = size_t(c.shape.num_q_heads) * c.shape.head_size;
  const auto dims = pa::test::varlen_out_dims(n, c.shape.num_q_heads, c.shape.head_size);
  VarlenAttention attn;
  for (int chunk : {0, 32}) {
    const std::vector<pa::half> out = c.run(attn, chunk);
    EXPECT_TRUE(pa::test::all_close(out, c.expected, pa::test::varlen_out_dims(c.shape), c.atol,
                                    c.rtol))
        << c.name << ", chunk_tokens " << chunk << "\n  " << plan_text(attn);
    const std::vector<pa::half> a(out.begin() + c.qsl[s] * row, out.begin() + c.qsl[s + 1] * row);
    const std::vector<pa::half> b(out.begin() + c.qsl[t] * row, out.begin() + c.qsl[t + 1] * row);
    EXPECT_TRUE(pa::test::exactly_equal(b, a, dims))
        << "sequence " << t << " (got) reads sequence " << s << "'s prefix blocks (want) and "
        << "has the same queries and the same later tokens: its rows must be the same; "
        << "chunk_tokens " << chunk;
  }
}

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
void check_decode_case(const GoldenCase& g) {
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

  pa::ch10::check_metadata(vs, c.table, c.context_lens, qsl);
  VarlenAttention attn;
  for (int chunk : {0, 64}) {
    attn.plan(vs, pa::dtype_of<T>(), pa::ch10::CacheType::model_dtype, c.context_lens, qsl, chunk);
    attn.poison_workspace();
    pa::test::poison(out);
    attn.run<T>(out.get(), q.get(), c.k_pool.get(), c.v_pool.get(), c.d_table.get(),
                c.d_lens.get(), d_qsl.get(), c.scale);
    const std::vector<T> got = out.download();
    EXPECT_TRUE(pa::test::all_close(got, want, dims, c.atol, c.rtol))
        << "vs the reference, chunk_tokens " << chunk << ", " << c.name << ": "
        << g.param("note") << "\n  (query token = the case's non-empty sequences in order)";
    EXPECT_TRUE(pa::test::all_close(got, ch09, dims, c.atol, c.rtol))
        << "vs chapter 9's tensor_core decode (want), chunk_tokens " << chunk << ", " << c.name;
  }
}

class DecodeEquality : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeEquality, OneTokenPerSequenceIsChapter9sDecode) {
  const GoldenCase g(pa::test::golden_dir("ch04") + "/" + GetParam());
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: GTEST_SKIP() << "chapter 10 serves half and bf16 queries, not fp32";
    case pa::DType::fp16: return check_decode_case<pa::half>(g);
    case pa::DType::bf16: return check_decode_case<pa::bf16>(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch04, DecodeEquality,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch04", "decode_")),
                         [](const auto& info) { return info.param; });

template <typename T>
void check_fp8_decode_case(const GoldenCase& g) {
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

  pa::ch09::Workspace ws;
  ws.reserve(s.num_seqs, s.num_q_heads, 64, s.head_size);
  pa::test::poison(out_dec);
  pa::ch09::decode_fp8<T>(s, out_dec.get(), q_dec.get(), k.get(), v.get(), d_table.get(),
                          d_lens.get(), max_len, k_scale.get(), v_scale.get(), scale, ws);
  std::vector<double> ch09;
  for (const T& e : rows_of_busy(out_dec.download(), lens, row)) ch09.push_back(pa::to_float(e));

  pa::ch10::check_metadata(vs, table, lens, qsl);
  VarlenAttention attn;
  attn.plan(vs, pa::dtype_of<T>(), pa::ch10::CacheType::fp8_e4m3, lens, qsl);
  attn.poison_workspace();
  pa::test::poison(out);
  attn.run_fp8<T>(out.get(), q.get(), k.get(), v.get(), d_table.get(), d_lens.get(), d_qsl.get(),
                  k_scale.get(), v_scale.get(), scale);
  const std::vector<T> got = out.download();
  EXPECT_TRUE(pa::test::all_close(got, want, dims, atol, rtol))
      << "vs the dequantized reference, " << g.name() << ": " << g.param("note")
      << "\n  (query token = the case's non-empty sequences in order)";
  EXPECT_TRUE(pa::test::all_close(got, ch09, dims, atol, rtol))
      << "vs chapter 9's fp8 decode (want), " << g.name();
}

class Fp8DecodeEquality : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8DecodeEquality, OneTokenPerSequenceIsChapter9sFp8Decode) {
  const GoldenCase g(pa::test::golden_dir("ch06") + "/" + GetParam());
  if (g.param_int("block_size") == 8)
    GTEST_SKIP() << "chapter 10's e4m3 cache takes block sizes 16 and 32";
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: GTEST_SKIP() << "chapter 10 serves half and bf16 queries, not fp32";
    case pa::DType::fp16: return check_fp8_decode_case<pa::half>(g);
    case pa::DType::bf16: return check_fp8_decode_case<pa::bf16>(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch06, Fp8DecodeEquality,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch06", "decode_fp8_")),
                         [](const auto& info) { return info.param; });

}  // namespace
