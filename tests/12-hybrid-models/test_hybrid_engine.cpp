// Chapter 12 in the engine: TinyModel with a layer pattern (sliding-window and full
// layers, sinks), served from the hybrid manager's per-group block tables, must compute
// the model that the dense path (chapter 1's caches, every key kept, the window and the
// sinks applied in a reference kernel) computes: the same greedy tokens and the same
// logits up to the 16-bit cache's rounding. The pools start NaN-filled and the manager
// never hands out the null block, so a kernel that reads a freed entry shows as NaN.
#include <gtest/gtest.h>

#include <cmath>

#include "compare.h"
#include "pa/ch10_varlen.h"
#include "pa/ch12_engine.h"
#include "pa/trace.h"

namespace {

using pa::ch12::HybridEngine;
using pa::ch12::HybridEngineConfig;

std::vector<int> tokens(int n, uint64_t seed) {
  pa::SplitMix64 rng(seed);
  std::vector<int> t(static_cast<size_t>(n));
  for (int& e : t) e = int(rng.uniform_int(0, 127));
  return t;
}

// Three layers: two sliding (window 20, its edge inside a block of 8), then one full.
pa::ch08::ModelConfig hybrid_config(bool sinks) {
  pa::ch08::ModelConfig mc;
  mc.num_layers = 3;
  mc.kv_dtype = pa::DType::fp16;
  mc.windows = pa::ch08::ModelConfig::layer_pattern(3, 2, 1, 20);
  if (sinks) mc.sinks = {0.5f, -1.f, 2.f, 0.f};
  return mc;
}

// Prompts longer than the window, one of a single token; 12 new tokens each.
const int kLens[] = {45, 30, 1, 23};
constexpr int kNew = 12;

struct Served {
  std::map<int, std::vector<int>> outputs;
  std::map<int, std::vector<std::vector<float>>> logits;
  pa::ch12::HybridEngineStats stats;
  int mismatched_steps = 0;  // steps whose blocks held differ from the closed form
  std::string first_mismatch;
};

std::vector<std::vector<int>> standard_prompts() {
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(tokens(kLens[i], 900 + uint64_t(i)));
  return prompts;
}

// Request i is prompts[i], arriving at step arrivals[i] (step i when none are given).
Served serve(pa::ch08::TinyModel& model, bool free_windows, int num_blocks, int chunk, bool swap = false,
             bool prefix_caching = false, const std::vector<std::vector<int>>& prompts = standard_prompts(),
             const std::vector<int>& arrivals = {}) {
  model.set_step_attention(std::make_shared<pa::ch12::HybridStepAttention>());
  HybridEngineConfig cfg;
  cfg.num_blocks = num_blocks;
  cfg.block_size = 8;
  cfg.max_seq_len = 64;
  cfg.max_tokens_per_step = chunk;  // small: prompts in chunks, mixed with decodes
  cfg.free_windows = free_windows;
  cfg.record_logits = true;
  if (swap) {
    cfg.preemption = pa::ch08::Preemption::swap;
    cfg.num_swap_blocks = 64;
  }
  cfg.prefix_caching = prefix_caching;
  HybridEngine engine(model, cfg);
  for (int i = 0; i < int(prompts.size()); ++i)
    engine.add_request({i, prompts[size_t(i)], kNew, arrivals.empty() ? i : arrivals[size_t(i)]});
  Served out;
  const std::vector<int> windows = model.config().group_windows();
  engine.run([&](const pa::ch12::HybridStepReport& rep) {
    int want = 0;
    for (const auto& [c, n] : rep.seqs) want += pa::ch12::predicted_blocks(windows, free_windows, 8, c, n);
    if (!rep.seqs.empty() && want != rep.blocks_held && out.mismatched_steps++ == 0)
      out.first_mismatch = "step " + std::to_string(rep.step) + ": held " + std::to_string(rep.blocks_held) +
                           ", the closed form says " + std::to_string(want);
    // After the step, each window has given back what no later query sees: every live
    // sequence holds the closed form at its new length (nothing new: n = 0).
    int after = 0;
    const pa::ch12::HybridBlockManager& m = engine.blocks();
    for (int id = 0; id < 256; ++id)
      if (m.has_sequence(id)) after += pa::ch12::predicted_blocks(windows, free_windows, 8, m.length(id), 0);
    if (!prefix_caching && after != m.num_held() && out.mismatched_steps++ == 0)
      out.first_mismatch = "after step " + std::to_string(rep.step) + ": held " + std::to_string(m.num_held()) +
                           " blocks, the closed form at the new lengths says " + std::to_string(after) +
                           " (dead blocks not given back after the step)";
  });
  EXPECT_EQ(engine.blocks().num_held(), 0) << "blocks leaked";
  EXPECT_EQ(engine.blocks().num_free(), num_blocks - 1) << "blocks leaked";
  out.outputs = engine.outputs();
  out.logits = engine.logits();
  out.stats = engine.stats();
  return out;
}

void expect_dense(pa::ch08::TinyModel& model, const Served& got, const std::string& what,
                  const std::vector<std::vector<int>>& prompts = standard_prompts()) {
  const auto dense = pa::ch08::generate_dense(model, prompts, std::vector<int>(prompts.size(), kNew));
  for (int i = 0; i < int(prompts.size()); ++i) {
    ASSERT_EQ(got.outputs.count(i), 1u) << what << ": request " << i << " did not finish";
    EXPECT_EQ(got.outputs.at(i), dense[size_t(i)].tokens) << what << ": request " << i;
    const auto& rows = got.logits.at(i);
    ASSERT_EQ(rows.size(), dense[size_t(i)].logits.size()) << what << ": request " << i;
    const ::testing::AssertionResult close =
        pa::test::generated_logits_close(rows, dense[size_t(i)].logits, 5e-2, 5e-2);
    EXPECT_TRUE(close) << what << ": request " << i << " (later requests are not compared)";
    if (!close) return;
  }
}

TEST(HybridInTheEngine, PagedGivesTheDenseModelsTokensAndLogits) {
  for (bool sinks : {false, true})
    for (bool free_windows : {true, false}) {
      const std::string what = std::string(sinks ? "sinks" : "no sinks") + (free_windows ? ", windows free blocks" : ", every block kept");
      pa::ch08::TinyModel model(hybrid_config(sinks));
      const Served got = serve(model, free_windows, 48, 16);
      expect_dense(model, got, what);
      EXPECT_EQ(got.mismatched_steps, 0) << what << ": " << got.first_mismatch;
    }
}

TEST(HybridInTheEngine, TheWindowsChangeTheTokens) {  // so the test above can see a window ignored
  pa::ch08::ModelConfig full = hybrid_config(false);
  full.windows.clear();
  pa::ch08::TinyModel windowed(hybrid_config(false)), plain(full);
  const std::vector<int> prompt = tokens(kLens[0], 900);
  EXPECT_NE(pa::ch08::generate_dense(windowed, {prompt}, {kNew})[0].tokens,
            pa::ch08::generate_dense(plain, {prompt}, {kNew})[0].tokens);
}

TEST(HybridInTheEngine, FreedBlocksLowerThePeakAndPreemptionRecomputes) {
  pa::ch08::TinyModel model(hybrid_config(true));
  const Served kept = serve(model, false, 48, 16), freed = serve(model, true, 48, 16);
  EXPECT_LT(freed.stats.peak_blocks_held, kept.stats.peak_blocks_held);
  // A pool too small for all four at once: requests are preempted and recomputed.
  const Served tight = serve(model, true, 20, 16);
  EXPECT_GT(tight.stats.preemptions, 0) << "the pool of 19 blocks should force a preemption";
  EXPECT_EQ(tight.mismatched_steps, 0) << tight.first_mismatch;
  EXPECT_EQ(tight.stats.recomputes, tight.stats.preemptions);
  expect_dense(model, tight, "a pool of 19 blocks");
  // The same pool, swapping: every group's live blocks go to the host and come back.
  const Served swapped = serve(model, true, 20, 16, true);
  EXPECT_GT(swapped.stats.swap_outs, 0) << "the pool of 19 blocks should swap a request out";
  EXPECT_EQ(swapped.stats.swap_ins, swapped.stats.swap_outs);
  EXPECT_EQ(swapped.mismatched_steps, 0) << swapped.first_mismatch;
  expect_dense(model, swapped, "a pool of 19 blocks, swapping");
}

// Stretch exercise 4 in the engine: with prefix caching, a request whose prompt begins
// with blocks an earlier request computed starts after them, and still computes the dense
// model's tokens and logits (the cached blocks hold what it would have written).
TEST(StretchPrefixHitInTheEngine, LaterRequestsStartFromTheCachedPrefix) {
  pa::ch08::TinyModel model(hybrid_config(true));
  const std::vector<int> first = tokens(45, 900), other = tokens(10, 77);
  std::vector<int> shares_40(first.begin(), first.begin() + 40);  // 5 blocks of 8, then other tokens
  shares_40.insert(shares_40.end(), other.begin(), other.end());
  const std::vector<int> first_40(first.begin(), first.begin() + 40);
  const std::vector<std::vector<int>> prompts = {first, shares_40, first, tokens(30, 901), first_40};
  const std::vector<int> arrival = {0, 20, 40, 40, 40};  // after request 0 has finished (3 prompt steps + 12 tokens)
  // (The closed form is not asked: requests sharing cached blocks hold them once.)
  const Served served[2] = {serve(model, true, 48, 16, false, false, prompts, arrival),
                            serve(model, true, 48, 16, false, true, prompts, arrival)};
  // Request 1 shares 40 tokens (5 blocks) with request 0, request 2 is request 0's prompt
  // (45 tokens: 5 whole blocks), request 3 shares nothing, and request 4 is exactly 5 cached
  // blocks, whose hit stops at 4 so that its last token is computed (its logits).
  EXPECT_EQ(served[0].stats.prefix_hit_tokens, 0);
  EXPECT_EQ(served[1].stats.prefix_hit_tokens, 40 + 40 + 32)
      << "requests 1 and 2 should each start after 5 cached blocks (the sliding group needs "
         "only the blocks its window sees at 40: 2 .. 4), request 4 after 4";
  EXPECT_EQ(served[1].stats.computed_tokens, served[0].stats.computed_tokens - 112);
  expect_dense(model, served[0], "prefix caching off", prompts);
  expect_dense(model, served[1], "prefix caching on", prompts);
}

// A request preempted for recompute comes back through the cache: its own committed
// blocks (prompt and generated tokens) are a hit, in every group its window allows.
TEST(StretchPrefixHitInTheEngine, PreemptedRequestsRecomputeFromTheCache) {
  pa::ch08::TinyModel model(hybrid_config(true));
  const Served tight = serve(model, true, 20, 16, false, true);
  EXPECT_GT(tight.stats.recomputes, 0) << "the pool of 19 blocks should force a recompute";
  EXPECT_GT(tight.stats.prefix_hit_tokens, 0) << "a recomputed request should find its own blocks cached";
  EXPECT_EQ(tight.mismatched_steps, 0) << tight.first_mismatch;
  expect_dense(model, tight, "a pool of 19 blocks, prefix caching");
}

TEST(HybridInTheEngine, LayerGroupsSharePoolsWithOnePageSize) {
  pa::ch08::ModelConfig mc;
  mc.num_layers = 12;  // Gemma 3: 5 sliding : 1 full -> 10 and 2 layers, groups of gcd = 2
  mc.windows = pa::ch08::ModelConfig::layer_pattern(12, 5, 1, 1024);
  EXPECT_EQ(mc.layers_per_group(), 2);
  EXPECT_EQ(mc.group_windows(), (std::vector<int>{1024, 1024, 1024, 0, 1024, 1024}));
  const int group[] = {0, 0, 1, 1, 2, 3, 2, 4, 4, 5, 5, 3}, slot[] = {0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1, 1};
  for (int l = 0; l < 12; ++l) {
    EXPECT_EQ(mc.layer_group(l), group[l]) << "layer " << l;
    EXPECT_EQ(mc.layer_slot(l), slot[l]) << "layer " << l;
  }
  mc.windows = pa::ch08::ModelConfig::layer_pattern(24, 1, 1, 128);  // gpt-oss: alternating
  mc.num_layers = 24;
  EXPECT_EQ(mc.layers_per_group(), 12);
  EXPECT_EQ(mc.group_windows(), (std::vector<int>{128, 0}));
  mc.windows.clear();  // one window: one group of every layer, pool l for layer l (chapter 8)
  EXPECT_EQ(mc.layers_per_group(), 24);
  EXPECT_EQ(mc.layer_slot(17), 17);
  // The closed form by hand (block 8, window 20): 45 computed + 1 new -> blocks 3..5.
  EXPECT_EQ(pa::ch12::predicted_blocks({20}, true, 8, 45, 1), 3);
  EXPECT_EQ(pa::ch12::predicted_blocks({20, 0}, true, 8, 45, 1), 3 + 6);
  EXPECT_EQ(pa::ch12::predicted_blocks({20, 0}, false, 8, 45, 1), 6 + 6);
  EXPECT_EQ(pa::ch12::predicted_blocks({20}, true, 8, 0, 16), 2);  // a first chunk frees nothing
}

TEST(HybridInTheEngine, BadPatternsAndAttentionsAreRefusedByName) {
  pa::ch08::ModelConfig mc = hybrid_config(false);
  mc.windows = {20, 0};
  EXPECT_TRUE(pa::test::error_contains([&] { pa::ch08::TinyModel m(mc); }, "windows: one per layer: expected 3"));
  mc.windows = {20, -4, 0};
  EXPECT_TRUE(pa::test::error_contains([&] { pa::ch08::TinyModel m(mc); }, "layer 1 has window -4"));
  mc = hybrid_config(true);
  mc.sinks.pop_back();
  EXPECT_TRUE(pa::test::error_contains([&] { pa::ch08::TinyModel m(mc); }, "sinks: one per query head: expected 4"));
  pa::ch08::TinyModel model(hybrid_config(false));
  HybridEngineConfig cfg;
  cfg.block_size = 8;
  {
    HybridEngine engine(model, cfg);  // no step attention set
    engine.add_request({0, tokens(5, 1), 2, 0});
    EXPECT_TRUE(pa::test::error_contains([&] { engine.run(); }, "needs a step attention that takes them"));
  }
  model.set_step_attention(std::make_shared<pa::ch10::VarlenStepAttention>());
  HybridEngine engine(model, cfg);
  engine.add_request({0, tokens(5, 1), 2, 0});
  EXPECT_TRUE(pa::test::error_contains([&] { engine.run(); }, "layer group 0 has a sliding window of 20"));
}

}  // namespace
