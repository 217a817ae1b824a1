// Chapter 10 on the GPU only: shapes too large for golden files or for the emulator. A
// 32K-token decode beside 63 short ones (the planner must split the long one), and a
// 1024-token prefill chunk over a 4096-token prefix, against float64 host references; and
// a launch captured in a CUDA graph, replayed after a new plan (the emulator has no graphs).
#include <gtest/gtest.h>

#if !defined(PA_BACKEND_CPU)

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <random>

#include "long_batch.h"
#include "varlen_case.h"

namespace {

using pa::ch10::CacheType;
using pa::ch10::VarlenAttention;
using pa::ch10::VarlenShape;
using pa::test::LongBatch;

// CUDA graphs: a launch captured on one step's plan and replayed after plan() for another
// (of no more items) must run the new plan: the kernel may take nothing per plan by value.
// (Hq, Hkv): 32/8, and MQA's 32/1, whose long sequence is one tile of many chunks that the
// merge kernel merges: the short step's plan has none, and its captured launch must still
// merge the long step's.
void replay_after_new_plan(int num_q_heads, int num_kv_heads, int long_len, int chunk_tokens) {
  std::vector<int> lens(64, 300);
  lens[0] = long_len;
  LongBatch b(num_q_heads, num_kv_heads, 128, 16, lens, std::vector<int>(64, 1), 5);
  pa::DeviceBuffer<pa::half> dk(b.k), dv(b.v), dq(b.q), out(b.q.size());
  pa::DeviceBuffer<int> dt(b.table), dl(b.seq_lens), dqsl(b.qsl);
  cudaStream_t stream;
  PA_CUDA_CHECK(cudaStreamCreate(&stream));
  VarlenAttention& attn = b.attn;
  auto plan = [&](const std::vector<int>& seq_lens) {
    attn.plan(b.shape, pa::DType::fp16, CacheType::model_dtype, seq_lens, b.qsl, chunk_tokens, 0,
              stream);
    dl.upload(seq_lens);
  };
  auto run = [&] {
    attn.run<pa::half>(out.get(), dq.get(), dk.get(), dv.get(), dt.get(), dl.get(), dqsl.get(),
                       b.scale, stream);
  };
  // The long step first: its plan sizes the buffers that the short step's then fits in.
  plan(b.seq_lens);
  pa::test::poison(out);
  run();
  PA_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<pa::half> want = out.download();
  // The KV tokens the plan's items cover: another plan, another total.
  auto planned_tokens = [&] {
    int64_t total = 0;
    for (const pa::ch10::WorkItem& w : attn.host_plan().items) total += w.kv_end - w.kv_begin;
    return total;
  };
  const int64_t long_tokens = planned_tokens();
  int most_chunks = 1;
  for (const pa::ch10::WorkItem& w : attn.host_plan().items) most_chunks = std::max(most_chunks, w.num_splits);
  if (num_kv_heads == 1)  // a 32-row tile of more than 16 chunks: the merge kernel's
    ASSERT_GT(most_chunks, 16) << "the planner's cut of the " << long_len << "-token MQA sequence";
  // The same sequences cut to 32 tokens: 512 warp items, two per thread block (as many
  // items as the long step's whole tiles, so the plans differ in what the items hold).
  // Captured.
  plan(std::vector<int>(64, 32));
  ASSERT_NE(planned_tokens(), long_tokens);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  PA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  run();
  PA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  PA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  // The long step again, replayed from the short step's graph.
  plan(b.seq_lens);
  pa::test::poison(out);
  PA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  PA_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(pa::test::exactly_equal(out.download(), want, pa::test::varlen_out_dims(b.shape)))
      << "the graph captured on the short step's plan, replayed after plan() for the long step, "
         "must give the long step's direct result: does the kernel take something per plan by "
         "value (a count, a size) instead of reading it from device memory?";
  PA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  PA_CUDA_CHECK(cudaGraphDestroy(graph));
  PA_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(VarlenGraph, AReplayedLaunchRunsTheNewPlan) {
  replay_after_new_plan(32, 8, 4000, pa::ch10::kWholeTiles);
}
TEST(StretchVarlenGraph, AReplayedLaunchMergesTheNewPlansLongTile) {
  replay_after_new_plan(32, 1, 32768, 0);  // the planner's chunks
}

// Stretch: the planner splits the 32K sequence's tiles.
TEST(StretchVarlenLong, ThirtyTwoThousandTokensBesideSixtyThreeDecodes) {
  std::vector<int> lens = {32768}, new_lens(64, 1);
  std::mt19937 rng(5);
  for (int i = 0; i < 63; ++i) lens.push_back(1 + int(rng() % 700));
  LongBatch batch(32, 8, 128, 16, lens, new_lens, 21);
  const pa::ch04::PagedAttentionShape s{batch.shape.num_seqs, 32, 8, 128, 16,
                                        batch.shape.num_blocks, batch.shape.max_blocks_per_seq};
  const auto want = pa::test::host_paged_decode(s, batch.q, batch.k, batch.v, batch.table, lens,
                                                batch.scale);
  const auto dims = pa::test::varlen_out_dims(batch.shape);
  const auto got = batch.run();
  int split = 0;
  for (const auto& w : batch.attn.host_plan().items) split += w.num_splits > 1;
  EXPECT_GT(split, 0) << "the planner did not split the 32K sequence";
  EXPECT_TRUE(pa::test::all_close(got, want, dims, 2e-3, 2e-3))
      << "32K + 63 decodes, the planner's split (" << split << " split items)";
  EXPECT_TRUE(pa::test::all_close(batch.run(2048), want, dims, 2e-3, 2e-3))
      << "32K + 63 decodes, chunks of 2048";
}

void prefill_chunk(std::initializer_list<int> chunks) {
  // The chunk, with decodes and a short spec-decode beside it.
  LongBatch batch(32, 8, 128, 16, {5120, 300, 77, 2000}, {1024, 1, 1, 4}, 33);
  // Every 29th token of the chunk, its first and last ones, and every other sequence's rows.
  std::vector<int> tokens;
  for (int t = 0; t < 1024; t += 29) tokens.push_back(t);
  for (int t : {1, 63, 64, 1022, 1023}) tokens.push_back(t);
  for (int t = 1024; t < batch.shape.num_tokens; ++t) tokens.push_back(t);
  const auto ref = pa::test::host_varlen_attention(batch.shape, batch.q, batch.k, batch.v,
                                                   batch.table, batch.seq_lens, batch.qsl,
                                                   batch.scale, tokens);
  const auto dims = pa::test::varlen_out_dims(batch.shape);
  const size_t row = size_t(batch.shape.num_q_heads) * batch.shape.head_size;
  for (int chunk : chunks) {
    const auto got = batch.run(chunk);
    // The rows not computed on the host are compared with themselves: only a NaN (never
    // written, or read from the poison) fails there.
    std::vector<double> want(got.size());
    for (size_t i = 0; i < got.size(); ++i) want[i] = pa::to_float(got[i]);
    for (int t : tokens)
      std::copy_n(ref.begin() + t * row, row, want.begin() + t * row);
    EXPECT_TRUE(pa::test::all_close(got, want, dims, 2e-3, 2e-3))
        << "1024-token chunk over 4096 cached tokens (sampled rows), chunk_tokens " << chunk;
  }
}

TEST(VarlenLong, PrefillChunkOf1024OverA4096Prefix) { prefill_chunk({pa::ch10::kWholeTiles}); }
TEST(StretchVarlenLong, PrefillChunkOf1024OverA4096Prefix) { prefill_chunk({0, 1024}); }

// A 64-row tile cut into 512 chunks of 64 tokens: more than one merge keeps weights for,
// so the solution leaves it to the merge kernel. It must agree with the host, as with the
// planner's own cut.
TEST(StretchVarlenLong, FiveHundredTwelveChunksOfOneTile) {
  LongBatch batch(32, 8, 128, 16, {32768}, {16}, 41);  // 16 tokens x 4 heads: a 64-row tile
  std::vector<int> tokens(16);
  std::iota(tokens.begin(), tokens.end(), 0);
  const auto want = pa::test::host_varlen_attention(batch.shape, batch.q, batch.k, batch.v,
                                                    batch.table, batch.seq_lens, batch.qsl,
                                                    batch.scale, tokens);
  const auto dims = pa::test::varlen_out_dims(batch.shape);
  for (int chunk : {0, 64}) {
    const auto got = batch.run(chunk);
    EXPECT_TRUE(pa::test::all_close(got, want, dims, 2e-3, 2e-3))
        << "16 new tokens over 32K cached ones, chunk_tokens " << chunk << ", "
        << batch.attn.host_plan().items.size() << " items";
  }
  EXPECT_EQ(batch.attn.host_plan().items.front().num_splits, 512) << "the chunk-64 plan";
}

}  // namespace

#endif  // !PA_BACKEND_CPU
