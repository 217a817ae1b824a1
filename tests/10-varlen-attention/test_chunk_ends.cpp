// Chapter 10's kernel on plans make_plan never makes: every tile's KV cut into chunks of 40,
// 48 or 80 tokens, so that chunks end INSIDE a stage of the ring (make_plan's chunks are
// multiples of kKvTile and always end between stages), and with 40, inside one of a stage's
// 16-token halves (the warps skip whole halves past kv_end, not the slots of a half). The
// stage past a chunk's end holds zeros (K) that score 0, not -inf: only the mask's kv_end
// condition keeps them out of the chunk's softmax. The partials of each tile are merged as
// usual; the output must be the reference's, whatever the cut.
#include <gtest/gtest.h>

#include <sstream>
#include <utility>
#include <vector>

#include "varlen_case.h"

namespace {

using pa::ch10::Plan;
using pa::ch10::VarlenAttention;
using pa::ch10::WorkItem;
using pa::test::GoldenCase;
using pa::test::VarlenCase;

// Every tile's KV cut into chunks of `cut` tokens (a multiple of the 16-byte V piece's
// tokens: 8, or 16 for e4m3): split tiles, by hand.
Plan cut_every_tile(const pa::ch10::VarlenShape& s, const std::vector<int>& seq_lens,
                    const std::vector<int>& qsl, int cut, int grid) {
  return pa::test::hand_plan(s, seq_lens, qsl, grid, [cut](int kv_needed) {
    std::vector<std::pair<int, int>> chunks;
    for (int k = 0; k * cut < kv_needed; ++k) chunks.push_back({k * cut, std::min(kv_needed, (k + 1) * cut)});
    return chunks;
  });
}

template <typename T>
void check_cuts(const GoldenCase& g) {
  VarlenCase<T> c(g);
  const auto dims = pa::test::varlen_out_dims(c.shape);
  VarlenAttention attn;
  const std::vector<int> cuts = c.fp8 ? std::vector<int>{48, 80} : std::vector<int>{40, 48, 80};
  for (const int cut : cuts) {
    const Plan p = cut_every_tile(c.shape, c.seq_lens, c.qsl, cut, 3);
    attn.use_plan(c.shape, pa::dtype_of<T>(), c.cache(), p);
    attn.poison_workspace();
    pa::test::poison(c.out);
    if (c.fp8)
      attn.run_fp8<T>(c.out.get(), c.q.get(), c.k8.get(), c.v8.get(), c.d_table.get(),
                      c.d_lens.get(), c.d_qsl.get(), c.k_scale.get(), c.v_scale.get(), c.scale);
    else
      attn.run<T>(c.out.get(), c.q.get(), c.k_pool.get(), c.v_pool.get(), c.d_table.get(),
                  c.d_lens.get(), c.d_qsl.get(), c.scale);
    int split = 0;
    for (const WorkItem& w : p.items) split += w.num_splits > 1;
    EXPECT_TRUE(pa::test::all_close(c.out.download(), c.expected, dims, c.atol, c.rtol))
        << c.name << ": every tile's KV cut by hand into chunks of " << cut << " tokens ("
        << p.items.size() << " items, " << split << " of them chunks of a split tile, on 3 "
        << "thread blocks): a chunk [kv_begin, kv_end) ends inside a stage, whose "
        << "slots past kv_end hold zeros. A query token that fails here and not in "
        << "VarlenGolden sees keys at or past its item's kv_end: the mask must hide every key "
        << "at kpos >= kv_end (a score of 0 is not -inf).";
  }
}

// Every tile of the batch as ONE item (no split, so no merge: the core track) that stops at
// the sequence's first `keys` tokens, kv_end = min(kv_needed, keys).
Plan stop_every_tile(const pa::ch10::VarlenShape& s, const std::vector<int>& seq_lens,
                     const std::vector<int>& qsl, int keys, int grid) {
  return pa::test::hand_plan(s, seq_lens, qsl, grid, [keys](int kv_needed) {
    return std::vector<std::pair<int, int>>{{0, std::min(kv_needed, keys)}};
  });
}

template <typename T>
void check_item_ends(const GoldenCase& g) {
  VarlenCase<T> c(g);
  const int keys = g.param_int("first_keys");
  const std::vector<double> expected = g.get<double>("expected_first_keys");
  VarlenAttention attn;
  const Plan p = stop_every_tile(c.shape, c.seq_lens, c.qsl, keys, 3);
  attn.use_plan(c.shape, pa::dtype_of<T>(), c.cache(), p);
  pa::test::poison(c.out);
  if (c.fp8)
    attn.run_fp8<T>(c.out.get(), c.q.get(), c.k8.get(), c.v8.get(), c.d_table.get(), c.d_lens.get(),
                    c.d_qsl.get(), c.k_scale.get(), c.v_scale.get(), c.scale);
  else
    attn.run<T>(c.out.get(), c.q.get(), c.k_pool.get(), c.v_pool.get(), c.d_table.get(), c.d_lens.get(),
                c.d_qsl.get(), c.scale);
  EXPECT_TRUE(pa::test::all_close(c.out.download(), expected, pa::test::varlen_out_dims(c.shape), c.atol,
                                  c.rtol))
      << c.name << ": every tile run as one item that stops at kv_end = " << keys << " (inside a stage, "
      << "no split): each row must see only its keys before kv_end (and, causally, up to its own "
      << "position). A query token that fails here and not in VarlenGolden sees keys at or past its "
      << "item's kv_end: the stage's slots past kv_end hold zeros, and a score of 0 is not -inf.";
}

// Core: a row must see only its item's [kv_begin, kv_end) (the mask exercise's contract).
class VarlenItemEnds : public ::testing::TestWithParam<std::string> {};

TEST_P(VarlenItemEnds, ItemsStoppingInsideAStageSeeNothingPastTheirEnd) {
  const GoldenCase g(pa::test::golden_dir("ch10") + "/" + GetParam());
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp16: return check_item_ends<pa::half>(g);
    case pa::DType::bf16: return check_item_ends<pa::bf16>(g);
    default: FAIL() << "chapter 10 serves half and bf16 queries";
  }
}

// reference/pa_ref/golden_ch10.py's FIRST_KEYS_CASES: decode, verification, chunked prefill,
// multi-query, an e4m3 cache and D 256.
INSTANTIATE_TEST_SUITE_P(Ch10, VarlenItemEnds,
                         ::testing::Values("varlen_fp16_d128_bs16_g4_decode_edges",
                                           "varlen_fp16_d128_bs16_g4_spec",
                                           "varlen_bf16_d96_bs16_g8_spec",
                                           "varlen_fp16_d80_bs8_g2_chunked",
                                           "varlen_fp16_d128_bs16_g16_mqa",
                                           "varlen_fp16_d64_bs16_g32_mqa_decode",
                                           "varlen_fp8_bf16_d64_bs32_g2_mixed",
                                           "varlen_fp8_fp16_d256_bs32_g2_prefill"),
                         [](const auto& info) { return std::string(info.param); });

// Stretch: every plan here splits tiles (the merge is the stretch exercise), and only a split
// tile's chunk can end before its rows' own positions: kv_end matters only there.
class StretchVarlenChunkEnds : public ::testing::TestWithParam<std::string> {};

TEST_P(StretchVarlenChunkEnds, ChunksEndingInsideAStageSeeNothingPastTheirEnd) {
  const GoldenCase g(pa::test::golden_dir("ch10") + "/" + GetParam());
  switch (pa::parse_dtype(g.param("dtype"))) {
    case pa::DType::fp16: return check_cuts<pa::half>(g);
    case pa::DType::bf16: return check_cuts<pa::bf16>(g);
    default: FAIL() << "chapter 10 serves half and bf16 queries";
  }
}

// Multi-token tiles (the general path, where the mask is): verifications of at most 32 rows
// (the warps split the tokens), a prefill of 64-row tiles, multi-query, D 256 (32-token
// stages) and an e4m3 cache.
INSTANTIATE_TEST_SUITE_P(Ch10, StretchVarlenChunkEnds,
                         ::testing::Values("varlen_fp16_d128_bs16_g4_spec",
                                           "varlen_fp16_d80_bs8_g2_chunked",
                                           "varlen_fp16_d128_bs16_g16_mqa",
                                           "varlen_bf16_d256_bs16_g4_mixed",
                                           "varlen_fp8_bf16_d64_bs32_g2_mixed"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
