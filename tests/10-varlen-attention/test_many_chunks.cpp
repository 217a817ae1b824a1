// Stretch (the split-tile merge), on the emulator too: tiles cut into many chunks, whose
// partials the solution leaves to the merge kernel (merge_kernel.cuh: one thread block a
// row, each of 16 lanes merging every 16th chunk). A student's one-level merge passes these
// as well: they check the rows, not how the merge is done.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "long_batch.h"
#include "varlen_case.h"

namespace {

using pa::test::LongBatch;

// Every row of every new token against the float64 host reference, at chunk_tokens 64.
void expect_rows(LongBatch& batch, int want_splits, const char* what) {
  std::vector<int> tokens(size_t(batch.shape.num_tokens));
  std::iota(tokens.begin(), tokens.end(), 0);
  const auto want = pa::test::host_varlen_attention(batch.shape, batch.q, batch.k, batch.v,
                                                    batch.table, batch.seq_lens, batch.qsl,
                                                    batch.scale, tokens);
  const auto dims = pa::test::varlen_out_dims(batch.shape);
  const auto got = batch.run(64);
  int most = 0;
  for (const auto& w : batch.attn.host_plan().items) most = std::max(most, w.num_splits);
  ASSERT_EQ(most, want_splits) << what << ": the plan at chunk_tokens 64";
  EXPECT_TRUE(pa::test::all_close(got, want, dims, 2e-3, 2e-3))
      << what << ", " << most << " chunks of 64 tokens";
  // The tickets must be back at zero: the same runner, planned again, runs it again.
  EXPECT_TRUE(pa::test::all_close(batch.run(64), want, dims, 2e-3, 2e-3))
      << what << ", the second launch on the same runner: are the tickets left at zero?";
  // A later plan of no split tile on the same runner: the merge kernel keeps the grid the
  // earlier plan sized (as a captured CUDA graph would), and must merge nothing of it.
  EXPECT_TRUE(pa::test::all_close(batch.run(pa::ch10::kWholeTiles), want, dims, 2e-3, 2e-3))
      << what << ", whole tiles, planned after the split plan on the same runner";
  EXPECT_TRUE(pa::test::all_close(batch.run(64), want, dims, 2e-3, 2e-3))
      << what << ", the split plan again after the whole-tile one";
}

// 32 query heads on one KV head: one 32-row tile over 2,373 keys, 38 chunks (a lane's 3 or
// 2 chunks, then the 16 lanes).
TEST(StretchManyChunks, MultiQueryDecodeOfThirtyEightChunks) {
  LongBatch batch(32, 1, 64, 16, {2373, 40}, {1, 1}, 7);
  expect_rows(batch, 38, "MQA decode over 2373 keys beside one over 40");
}

// A 64-token chunk at positions 1000..1063, its KV cut by hand into 133 chunks of 8 tokens
// (make_plan's are multiples of 64), a plan given without query_start_loc (the merge
// kernel's blocks for all 64 rows). Rows 0..23 see none of the keys of [1024, 1064): their
// chunks there are a sum of 0 (and not 0 / 0), which the merge must weigh as nothing, also
// when a lane's first chunks are such ones.
TEST(StretchManyChunks, RowsThatSeeNoKeyOfSomeChunks) {
  LongBatch batch(2, 2, 64, 16, {1064}, {64}, 9);
  std::vector<int> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 0);
  const auto want = pa::test::host_varlen_attention(batch.shape, batch.q, batch.k, batch.v,
                                                    batch.table, batch.seq_lens, batch.qsl,
                                                    batch.scale, tokens);
  const auto plan = pa::test::hand_plan(batch.shape, batch.seq_lens, batch.qsl, 5, [](int kv) {
    std::vector<std::pair<int, int>> chunks;
    for (int k = 0; 8 * k < kv; ++k) chunks.push_back({8 * k, std::min(kv, 8 * k + 8)});
    return chunks;
  });
  ASSERT_EQ(plan.items.front().num_splits, 133);
  EXPECT_TRUE(pa::test::all_close(batch.run_plan(plan), want,
                                  pa::test::varlen_out_dims(batch.shape), 2e-3, 2e-3))
      << "a 64-token chunk over 1000 cached tokens, cut by hand into 133 chunks of 8 tokens";
}

// 258 chunks of a 16-row tile (16 query heads on one KV head), a lane's batches of 8 chunks
// rescaled as its max grows (at D 64, 16 lanes x 8 chunks a batch: 3 batches). With 8 heads
// the tile is a decode tile, which the attention kernel merges itself up to 256 chunks (its
// one-level merge keeps 8 x 256 weights at most): this one it leaves to the merge kernel.
TEST(StretchManyChunks, PastTwoHundredFiftySixChunks) {
  LongBatch batch(16, 1, 64, 16, {64 * 257 + 1}, {1}, 11);
  expect_rows(batch, 258, "16 heads, a decode over 16449 keys");
  LongBatch decode(8, 1, 64, 16, {64 * 257 + 1}, {1}, 12);
  expect_rows(decode, 258, "8 heads (a decode tile), a decode over 16449 keys");
}

}  // namespace
