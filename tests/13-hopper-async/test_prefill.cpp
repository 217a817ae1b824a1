// Chapter 13: the Hopper prefill (TMA + mbarrier + wgmma, warp-specialized) against the
// float64 reference: chapter 10's golden batches (decodes, verifications, chunked prefill,
// GQA 1 to 32, block sizes 8 to 32, NaN behind every table's padding and in the slots past
// each sequence's end), permuted blocks, and a long batch built here.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../10-varlen-attention/long_batch.h"
#include "../10-varlen-attention/varlen_case.h"
#include "../emu/schedules.h"
#include "need_hopper.h"
#include "pa/ch13_hopper.h"

namespace {

using pa::ch13::HopperPrefill;
using pa::test::GoldenCase;
using pa::test::VarlenCase;


// Chapter 10's cases this kernel takes: the cache in the queries' dtype, head sizes 64, 128, 256.
std::vector<std::string> hopper_cases() {
  std::vector<std::string> names;
  for (const std::string& n : pa::test::golden_case_names("ch10", "varlen_")) {
    if (n.find("_fp8_") != std::string::npos) continue;
    if (n.find("_d64_") != std::string::npos || n.find("_d128_") != std::string::npos ||
        n.find("_d256_") != std::string::npos)
      names.push_back(n);
  }
  return names;
}

template <typename T>
std::vector<T> run_hopper(VarlenCase<T>& c) {
  pa::ch10::check_metadata(c.shape, c.table, c.seq_lens, c.qsl);
  HopperPrefill attn;
  attn.plan(c.shape, c.seq_lens, c.qsl);
  pa::test::poison(c.out);  // a row the kernel never writes keeps this NaN
  attn.run<T>(c.out.get(), c.q.get(), c.k_pool.get(), c.v_pool.get(), c.d_table.get(), c.d_lens.get(),
              c.d_qsl.get(), c.scale);
  return c.out.download();
}

template <typename T>
void check_case(const GoldenCase& g) {
  VarlenCase<T> c(g);
  const auto dims = pa::test::varlen_out_dims(c.shape);
  std::vector<T> got;
  // Every schedule order of the emulator: a stage released one wait early is overwritten
  // under the wgmma that still reads it only when the producer runs in between.
  pa::test::for_each_schedule([&] {
    got = run_hopper(c);
    EXPECT_TRUE(pa::test::all_close(got, c.expected, dims, c.atol, c.rtol)) << c.name << ": " << g.param("note");
  });
  // The same logical cache in other physical blocks: the same bits.
  VarlenCase<T> moved(g, /*permutation_seed=*/11);
  EXPECT_TRUE(pa::test::exactly_equal(run_hopper(moved), got, dims))
      << pa::test::kBlockPlacement << "; " << c.name;
}

class HopperPrefillGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HopperPrefillGolden, MatchesReferenceWhateverTheBlockPlacement) {
  PA_NEED_HOPPER();
  const GoldenCase g(pa::test::golden_dir("ch10") + "/" + GetParam());
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp32: FAIL() << "chapter 10's cases are half and bf16";
    case pa::DType::fp16: return check_case<pa::half>(g);
    case pa::DType::bf16: return check_case<pa::bf16>(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch13, HopperPrefillGolden, ::testing::ValuesIn(hopper_cases()),
                         [](const auto& info) { return info.param; });

// A chunk over a long prefix, at the benchmark's head size and group: several KV tiles per
// thread block, both stages reused, the causal diagonal inside a tile, a partial last page.
TEST(HopperPrefillLong, ChunkOverAPrefixMatchesTheHostReference) {
  PA_NEED_HOPPER();
  pa::test::LongBatch b(8, 2, 128, 16, {700, 301}, {300, 301}, 5);
  HopperPrefill attn;
  attn.plan(b.shape, b.seq_lens, b.qsl);
  pa::DeviceBuffer<pa::half> dk(b.k), dv(b.v), dq(b.q), out(b.q.size());
  pa::DeviceBuffer<int> dt(b.table), dl(b.seq_lens), dqsl(b.qsl);
  std::vector<int> tokens;
  for (int t = 0; t < b.shape.num_tokens; t += 7) tokens.push_back(t);
  tokens.push_back(b.shape.num_tokens - 1);
  const std::vector<double> want = pa::test::host_varlen_attention(
      b.shape, b.q, b.k, b.v, b.table, b.seq_lens, b.qsl, b.scale, tokens);
  // Every schedule order: six KV tiles a thread block, so a stage is reused (and a release
  // one wait early is overwritten under its wgmma) only here.
  pa::test::for_each_schedule([&] {
    pa::test::poison(out);
    attn.run<pa::half>(out.get(), dq.get(), dk.get(), dv.get(), dt.get(), dl.get(), dqsl.get(), b.scale);
    const std::vector<pa::half> got = out.download();
    // Compare the listed tokens' rows only.
    const size_t row = size_t(b.shape.num_q_heads) * b.shape.head_size;
    std::vector<pa::half> got_rows;
    std::vector<double> want_rows;
    for (int t : tokens) {
      got_rows.insert(got_rows.end(), got.begin() + t * row, got.begin() + (t + 1) * row);
      want_rows.insert(want_rows.end(), want.begin() + t * row, want.begin() + (t + 1) * row);
    }
    EXPECT_TRUE(pa::test::all_close(got_rows, want_rows,
                                    pa::test::varlen_out_dims(int(tokens.size()), b.shape.num_q_heads,
                                                              b.shape.head_size),
                                    2e-3, 2e-2))
        << "every 7th token of a 300-token chunk over a 400-token prefix and of a 301-token prompt";
  });
}

// ---- The items ------------------------------------------------------------------------------

TEST(HopperPrefillItems, TilesOf128RowsPerKvHeadLongestFirst) {
  // Two sequences, G = 2: 100 new tokens over 50 cached (200 rows: tiles at rows 0 and 128),
  // and one decode.
  const pa::ch10::VarlenShape s{2, 101, 4, 2, 128, 16, 64, 16};
  const auto items = pa::ch13::prefill_items(s, {150, 40}, {0, 100, 101});
  ASSERT_EQ(items.size(), 6u);
  // Row 199 is token 99 at position 149: keys [0, 150). Row 127 is token 63 at position 113.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(items[i].row0, 128);
    EXPECT_EQ(items[i].kv_end, 150);
    EXPECT_EQ(items[i].kv_head, i);
  }
  for (int i = 2; i < 4; ++i) {
    EXPECT_EQ(items[i].row0, 0);
    EXPECT_EQ(items[i].kv_end, 114);
  }
  for (int i = 4; i < 6; ++i) {
    EXPECT_EQ(items[i].seq, 1);
    EXPECT_EQ(items[i].kv_end, 40);
  }
}

TEST(HopperPrefillErrors, UnsupportedSizesAreNamed) {
  HopperPrefill attn;
  const pa::ch10::VarlenShape d80{1, 4, 2, 2, 80, 16, 8, 4};
  EXPECT_TRUE(pa::test::contains_text(pa::test::error_of([&] { attn.plan(d80, {4}, {0, 4}); }),
                                      "HopperPrefill: head_size 80 is not supported (64, 128, 256)"));
}

}  // namespace
