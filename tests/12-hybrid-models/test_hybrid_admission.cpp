// Chapter 12's engine serves what it accepts (issue 59's reproducers). add_request bounds a
// request by its peak step, one token a step: a step holds the block of its new token and
// the window's blocks before the step moves its left edge, one more than the blocks held
// between steps whenever that edge crosses a block boundary. A running request whose next
// chunk does not fit takes the longest chunk that does before anything is preempted, so a
// request alone always advances. Sizes are summed in 64 bits.
#include <gtest/gtest.h>

#include <climits>

#include "compare.h"
#include "pa/ch12_engine.h"

namespace {

using pa::ch08::EngineRequest;
using pa::ch12::HybridEngine;
using pa::ch12::HybridEngineConfig;

// The reproducers' model: fp16, head size 64, 2 query heads on 1 KV head, ffn 64, vocab 64,
// one layer per window (0: full attention).
pa::ch08::ModelConfig small_hybrid(const std::vector<int>& windows) {
  pa::ch08::ModelConfig c;
  c.vocab_size = 64;
  c.num_layers = int(windows.size());
  c.num_q_heads = 2;
  c.num_kv_heads = 1;
  c.head_size = 64;
  c.ffn_size = 64;
  c.kv_dtype = pa::DType::fp16;
  c.windows = windows;
  return c;
}

// Token t is (7t + 3) mod 64.
std::vector<int> stride_prompt(int n) {
  std::vector<int> p;
  for (int t = 0; t < n; ++t) p.push_back((7 * t + 3) % 64);
  return p;
}

struct Outcome {
  std::map<int, std::vector<int>> outputs;
  pa::ch12::HybridEngineStats stats;
  std::vector<pa::ch12::HybridStepReport> reports;
  std::map<int, int> preemptions;  // per request
};

// Runs to the end (at most max_steps steps); a throw fails the test with its message.
Outcome serve(pa::ch08::TinyModel& model, const HybridEngineConfig& cfg, const std::vector<EngineRequest>& reqs,
              int max_steps) {
  model.set_step_attention(std::make_shared<pa::ch12::HybridStepAttention>());
  HybridEngine engine(model, cfg);
  for (const EngineRequest& r : reqs) engine.add_request(r);
  Outcome out;
  try {
    while (!engine.done() && int(out.reports.size()) < max_steps) out.reports.push_back(engine.step());
  } catch (const std::exception& e) {
    ADD_FAILURE() << "step " << out.reports.size() << " threw: " << e.what();
  }
  EXPECT_TRUE(engine.done()) << "not done after " << out.reports.size() << " steps (" << engine.stats().preemptions
                             << " preemptions): a livelock";
  out.outputs = engine.outputs();
  out.stats = engine.stats();
  for (const EngineRequest& r : reqs) out.preemptions[r.id] = engine.preemptions_of(r.id);
  return out;
}

void expect_dense_tokens(pa::ch08::TinyModel& model, const std::vector<EngineRequest>& reqs, const Outcome& got) {
  for (const EngineRequest& r : reqs) {
    ASSERT_EQ(got.outputs.count(r.id), 1u) << "request " << r.id << " did not finish";
    EXPECT_EQ(got.outputs.at(r.id), pa::ch08::generate_dense(model, {r.prompt}, {r.max_new_tokens})[0].tokens)
        << "request " << r.id;
  }
}

// Reproducer 1. Window 3 and a full layer, blocks of 8, one token a step, an 8-token prompt
// and 2 new tokens. Between steps it never holds more than 3 blocks, but the step from 8
// computed tokens holds 4: the full layer's blocks 0 and 1, and the sliding layer's block 0
// (the query at 8 still sees 6 and 7) and block 1 (its own key). Pools of 3 and 4 blocks
// (2 and 3 usable) are refused at add_request with the numbers; 5 serves it.
TEST(HybridAdmissionInTheEngine, APoolBelowThePeakStepIsRefusedAtAddRequest) {
  pa::ch08::TinyModel model(small_hybrid({3, 0}));
  const EngineRequest req{0, {3, 10, 17, 24, 31, 38, 45, 52}, 2, 0};
  EXPECT_EQ(pa::ch12::peak_blocks({3, 0}, true, 8, 8), 4);
  EXPECT_EQ(pa::ch12::predicted_blocks({3, 0}, true, 8, 8, 1), 4) << "the peak: the step from 8 computed tokens";
  HybridEngineConfig cfg;
  cfg.block_size = 8;
  cfg.max_tokens_per_step = 1;
  cfg.max_seq_len = 64;
  for (int num_blocks : {3, 4}) {
    cfg.num_blocks = num_blocks;
    model.set_step_attention(std::make_shared<pa::ch12::HybridStepAttention>());
    HybridEngine engine(model, cfg);
    EXPECT_TRUE(pa::test::error_contains([&] { engine.add_request(req); },
                                         "request 0 needs up to 4 blocks (its peak step, one token a step: prompt + "
                                         "output = 10 tokens), the pool has " +
                                             std::to_string(num_blocks - 1)))
        << "num_blocks " << num_blocks;
  }
  cfg.num_blocks = 5;
  const Outcome got = serve(model, cfg, {req}, 100);
  expect_dense_tokens(model, {req}, got);
  EXPECT_EQ(got.stats.preemptions, 0);
  EXPECT_EQ(got.stats.peak_blocks_held, 4);
}

// Reproducer 2 (a). A 25-token prompt in chunks of 16 on 6 usable blocks: the second chunk
// (9 tokens, positions 16..24) needs 7 blocks, 8 tokens need 5. The running request takes
// the 8 and is not preempted (it was preempting itself: "scheduler stuck at step 1").
TEST(HybridAdmissionInTheEngine, ARunningRequestTakesAShorterChunkBeforeAnyPreemption) {
  pa::ch08::TinyModel model(small_hybrid({3, 0}));
  const EngineRequest req{0, stride_prompt(25), 1, 0};
  for (auto policy : {pa::ch08::Preemption::swap, pa::ch08::Preemption::recompute}) {
    const std::string what = policy == pa::ch08::Preemption::swap ? "swap" : "recompute";
    HybridEngineConfig cfg;
    cfg.block_size = 8;
    cfg.num_blocks = 7;
    cfg.max_tokens_per_step = 16;
    cfg.max_seq_len = 64;
    cfg.preemption = policy;
    cfg.num_swap_blocks = policy == pa::ch08::Preemption::swap ? 8 : 0;
    const Outcome got = serve(model, cfg, {req}, 100);
    expect_dense_tokens(model, {req}, got);
    EXPECT_EQ(got.stats.preemptions, 0) << what << ": a request alone is never preempted";
    std::vector<int> chunks;
    for (const auto& rep : got.reports) chunks.push_back(rep.num_tokens);
    EXPECT_EQ(chunks, (std::vector<int>{16, 8, 1})) << what << ": the chunks of each step";
  }
}

// Reproducer 2 (b). Windows 7, 7 and a full layer, chunks of 5 on 8 usable blocks,
// recompute, a second request at step 400. With prefix caching (stretch exercise 4: the
// Stretch suite below) the first request was preempted again and again (148 times in 300
// steps) and never finished; now it finishes alone, never preempted, within 4 steps a token.
void expect_long_prompt_finishes(bool prefix_caching) {
  pa::ch08::TinyModel model(small_hybrid({7, 7, 0}));
  const std::vector<EngineRequest> reqs = {{0, stride_prompt(25), 1, 0}, {1, {5}, 1, 400}};
  HybridEngineConfig cfg;
  cfg.block_size = 8;
  cfg.num_blocks = 9;
  cfg.max_tokens_per_step = 5;
  cfg.max_seq_len = 64;
  cfg.preemption = pa::ch08::Preemption::recompute;
  cfg.prefix_caching = prefix_caching;
  const Outcome got = serve(model, cfg, reqs, 1000);
  expect_dense_tokens(model, reqs, got);
  EXPECT_EQ(got.preemptions.at(0), 0) << "request 0 runs alone";
  int finished_at = -1;
  for (const auto& rep : got.reports)
    if (rep.finished > 0 && finished_at < 0) finished_at = rep.step;
  EXPECT_GE(finished_at, 0);
  EXPECT_LE(finished_at, 4 * 26) << "request 0 (26 tokens) should finish within 4 steps a token";
}

TEST(HybridAdmissionInTheEngine, ALongPromptInSmallChunksFinishesWithoutPreemption) {
  expect_long_prompt_finishes(false);
}

TEST(StretchPrefixHitInTheEngine, ALongPromptInSmallChunksFinishesWithoutPreemption) {
  expect_long_prompt_finishes(true);
}

// Reproducer 3's family: max_new_tokens = INT_MAX wrapped the 32-bit total to a negative
// number, which passed the max_seq_len check ("restore: negative length -2147483646").
TEST(HybridAdmissionInTheEngine, AHugeRequestIsRefusedByItsSizeAndMaxSeqLen) {
  pa::ch08::TinyModel model(small_hybrid({3, 0}));
  model.set_step_attention(std::make_shared<pa::ch12::HybridStepAttention>());
  HybridEngineConfig cfg;
  cfg.block_size = 8;
  cfg.max_seq_len = 64;
  HybridEngine engine(model, cfg);
  EXPECT_TRUE(pa::test::error_contains([&] { engine.add_request({7, stride_prompt(3), INT_MAX, 0}); },
                                       "request 7: prompt + output = 3 + 2147483647 = 2147483650 tokens is beyond "
                                       "max_seq_len 64"));
  engine.add_request({7, stride_prompt(3), 2, 0});  // the engine goes on serving
  engine.run();
  EXPECT_EQ(engine.outputs().at(7).size(), 2u);
}

}  // namespace
