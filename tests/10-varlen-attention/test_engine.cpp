// Chapter 10 in chapter 8's engine: one varlen launch per layer for the whole step
// (prefill chunks, decodes, forked samples and beams together) gives the tokens of the
// engine's first version (chapter 5's decode + chapter 8's prefill) on the same fp16 cache.
#include <gtest/gtest.h>

#include <cstring>

#include "compare.h"
#include "pa/ch08_engine.h"
#include "pa/ch10_varlen.h"
#include "pa/trace.h"

namespace {

using pa::ch08::Engine;
using pa::ch08::EngineConfig;
using pa::ch08::EngineRequest;

std::vector<int> tokens(int n, uint64_t seed) {
  pa::SplitMix64 rng(seed);
  std::vector<int> t(static_cast<size_t>(n));
  for (int& e : t) e = int(rng.uniform_int(0, 127));
  return t;
}

struct Outcome {
  std::map<int, std::vector<pa::ch08::Completion>> completions;
  std::map<int, std::vector<std::vector<float>>> logits;
  int steps = 0;
};

Outcome serve(bool varlen, pa::DType dtype, int max_tokens_per_step) {
  pa::ch08::ModelConfig mc;
  mc.kv_dtype = dtype;
  pa::ch08::TinyModel model(mc);
  auto attention = std::make_shared<pa::ch10::VarlenStepAttention>();
  if (varlen) model.set_step_attention(attention);
  EngineConfig cfg;
  cfg.num_blocks = 40;
  cfg.max_seq_len = 96;
  cfg.max_tokens_per_step = max_tokens_per_step;  // small: prompts in chunks, mixed with decodes
  cfg.record_logits = true;
  Engine engine(model, cfg);
  const int lens[] = {1, 15, 16, 17, 40};
  for (int i = 0; i < 5; ++i) {
    EngineRequest r{i, tokens(lens[i], 700 + uint64_t(i)), 6, i};
    if (i == 3) r.sampling.beam_width = 2;
    engine.add_request(r);
  }
  engine.run();
  EXPECT_EQ(engine.blocks().num_free(), cfg.num_blocks) << "blocks leaked";
  if (varlen) EXPECT_EQ(attention->steps_planned(), engine.stats().steps - 0) << "one plan per step that ran";
  return {engine.completions(), engine.logits(), engine.stats().steps};
}

TEST(VarlenInTheEngine, SameTokensAsTheEnginesFirstVersion) {
  for (pa::DType dtype : {pa::DType::fp16, pa::DType::bf16})
    for (int chunk : {24, 256}) {
      const std::string what = std::string(pa::dtype_name(dtype)) + ", " + std::to_string(chunk) + " tokens per step";
      const Outcome got = serve(true, dtype, chunk), want = serve(false, dtype, chunk);
      for (const auto& [id, cs] : want.completions) {
        ASSERT_EQ(got.completions.at(id).size(), cs.size()) << what << ": request " << id;
        for (size_t k = 0; k < cs.size(); ++k)
          EXPECT_EQ(got.completions.at(id)[k].tokens, cs[k].tokens) << what << ": request " << id << ", sequence " << k;
      }
      // Both read the same 16-bit K/V; the varlen kernel also rounds P to 16 bits for PV.
      const double tol = dtype == pa::DType::fp16 ? 2e-2 : 1e-1;
      for (const auto& [id, rows] : want.logits) {
        const ::testing::AssertionResult close = pa::test::generated_logits_close(got.logits.at(id), rows, tol, tol);
        EXPECT_TRUE(close) << what << ": request " << id << " (later requests are not compared)";
        if (!close) return;
      }
    }
}

// Chapter 12's layer groups through the same interface: plan() takes one batch per group
// (the same tokens, each group its own block tables) and run(g) reads group g's tables.
// Each group's output must equal, bit for bit, a one-group plan of that group's batch.
TEST(VarlenInTheEngine, EachLayerGroupReadsItsOwnBlockTables) {
  const int Hq = 4, Hkv = 2, D = 64, bs = 16, nb = 12, M = 3;
  const pa::ch02::PoolShape pool{nb, bs, Hkv, D};
  pa::ch03::BatchMetadata a;  // two sequences: a decode at context 20, a chunk of 5 at context 33
  a.num_seqs = 2;
  a.max_blocks_per_seq = M;
  a.block_table = {3, 7, -1, 1, 9, 4};
  a.context_lens = {20, 33};
  a.query_start_loc = {0, 1, 6};
  a.slot_mapping = {7 * bs + 3, 4 * bs + 0, 4 * bs + 1, 4 * bs + 2, 4 * bs + 3, 4 * bs + 4};
  pa::ch03::BatchMetadata b = a;  // another group: other blocks (a window's null entries are block 0)
  b.block_table = {0, 5, -1, 0, 2, 11};
  const int N = 6;
  pa::SplitMix64 rng(77);
  auto random = [&](size_t n) {
    std::vector<half> v(n);
    for (half& e : v) e = pa::from_float<half>(float(rng.uniform_int(-1000, 1000)) / 500.f);
    return pa::DeviceBuffer<half>(v);
  };
  pa::DeviceBuffer<half> k = random(size_t(pa::ch02::pool_elems(pool))), v = random(size_t(pa::ch02::pool_elems(pool)));
  pa::DeviceBuffer<half> q = random(size_t(N) * Hq * D);
  auto output = [&](pa::ch08::StepAttention& att, int group) {
    pa::DeviceBuffer<half> out(size_t(N) * Hq * D);
    att.run(group, out.get(), q.get(), k.get(), v.get(), 0.125f, nullptr);
    std::vector<half> host(out.size());
    PA_CUDA_CHECK(cudaMemcpy(host.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost));
    std::vector<uint16_t> bits(host.size());
    std::memcpy(bits.data(), host.data(), host.size() * sizeof(half));
    return bits;
  };
  pa::ch08::StepCache cache;
  cache.pool = pool;
  cache.num_q_heads = Hq;
  cache.dtype = pa::DType::fp16;
  pa::ch10::VarlenStepAttention both, only_a, only_b;
  both.plan(std::vector<pa::ch03::BatchMetadata>{a, b}, cache);
  only_a.plan(a, pool, Hq, pa::DType::fp16);
  only_b.plan(b, pool, Hq, pa::DType::fp16);
  const auto want_a = output(only_a, 0), want_b = output(only_b, 0);
  ASSERT_NE(want_a, want_b) << "the two groups' tables should give different outputs";
  EXPECT_EQ(output(both, 0), want_a) << "layer group 0 did not read group 0's block tables";
  EXPECT_EQ(output(both, 1), want_b) << "layer group 1 did not read group 1's block tables";
  EXPECT_TRUE(pa::test::error_contains([&] { output(both, 2); }, "layer group 2 was not planned (2 groups)"));
}

TEST(VarlenInTheEngine, AnFp32CacheIsRefusedByName) {
  pa::ch08::TinyModel model{pa::ch08::ModelConfig{}};
  model.set_step_attention(std::make_shared<pa::ch10::VarlenStepAttention>());
  Engine engine(model, EngineConfig{});
  engine.add_request({0, tokens(5, 1), 2, 0});
  std::string msg = "(no error)";
  try {
    engine.run();
  } catch (const pa::Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("needs a 16-bit cache"), std::string::npos) << msg;
}

// An MLA model (chapter 8's latent option, chapter 11's cache) on this kernel, which reads
// K/V pools: refused by name, not read as if its latent pool held K and V.
TEST(VarlenInTheEngine, AnMlaModelIsRefusedByName) {
  pa::ch08::ModelConfig mc;
  mc.attention = pa::ch08::AttentionKind::mla;
  mc.kv_dtype = pa::DType::bf16;
  pa::ch08::TinyModel model(mc);
  model.set_step_attention(std::make_shared<pa::ch10::VarlenStepAttention>());
  Engine engine(model, EngineConfig{});
  engine.add_request({0, tokens(5, 1), 2, 0});
  EXPECT_TRUE(pa::test::contains_text(pa::test::error_of([&] { engine.run(); }), "not a latent cache (MLA)"));
}

}  // namespace
