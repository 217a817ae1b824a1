// Chapter 8: the same requests through the engine's variants give the same tokens:
// cascade attention for decode rows that share a prefix, and a 16-bit KV cache.
#include <gtest/gtest.h>

#include "compare.h"
#include "serving_helpers.h"

namespace {

using pa::ch08::Engine;
using pa::ch08::EngineConfig;
using pa::ch08::EngineRequest;
using pa::test::random_tokens;

// Four requests sharing a 40-token system prompt, one of them with 4 samples and one a
// 3-beam search: decode steps where many rows share their first blocks.
std::vector<EngineRequest> shared_prefix_requests() {
  const std::vector<int> system = random_tokens(40, 500);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 4; ++i)
    reqs.push_back({i, pa::test::concat(system, random_tokens(3 + 5 * i, 510 + uint64_t(i))), 8, i});
  reqs[1].sampling.n = 4;
  reqs[1].sampling.temperature = 0.7f;
  reqs[1].sampling.seed = 5;
  reqs[2].sampling.beam_width = 3;
  return reqs;
}

struct Outcome {
  std::map<int, std::vector<pa::ch08::Completion>> completions;
  std::map<int, std::vector<std::vector<float>>> logits;
};

Outcome serve(pa::ch08::TinyModel& model, EngineConfig cfg, const std::vector<EngineRequest>& reqs) {
  cfg.num_blocks = 48;
  cfg.max_seq_len = 96;
  cfg.max_tokens_per_step = 128;
  cfg.record_logits = true;
  Engine engine(model, cfg);
  for (const auto& r : reqs) engine.add_request(r);
  engine.run();
  EXPECT_EQ(engine.blocks().num_free(), cfg.num_blocks) << "blocks leaked";
  return {engine.completions(), engine.logits()};
}

void expect_same(const Outcome& got, const Outcome& want, double tol, const std::string& what) {
  for (const auto& [id, cs] : want.completions) {
    ASSERT_EQ(got.completions.at(id).size(), cs.size()) << what << ": request " << id;
    for (size_t k = 0; k < cs.size(); ++k)
      EXPECT_EQ(got.completions.at(id)[k].tokens, cs[k].tokens) << what << ": request " << id << ", sequence " << k;
  }
  for (const auto& [id, rows] : want.logits)
    for (size_t t = 0; t < rows.size(); ++t) {
      const std::vector<double> w(rows[t].begin(), rows[t].end());
      EXPECT_TRUE(pa::test::all_close(got.logits.at(id)[t], w, {{"logit", int64_t(w.size())}}, tol, tol))
          << what << ": request " << id << ", generated token " << t;
    }
}

TEST(EngineVariants, CascadeAttentionGivesThePlainTokens) {
  const auto reqs = shared_prefix_requests();
  EngineConfig cascade;
  cascade.cascade = true;
  expect_same(serve(pa::test::tiny_model(), cascade, reqs), serve(pa::test::tiny_model(), EngineConfig{}, reqs), 1e-3,
              "cascade vs chapter 5");
}

TEST(EngineVariants, A16BitCacheGivesTheFp32CachesTokens) {
  // Greedy requests and a beam search (sampled tokens could move with the rounding).
  const auto all = shared_prefix_requests();
  const std::vector<EngineRequest> reqs = {all[0], all[2], all[3]};
  const Outcome fp32 = serve(pa::test::tiny_model(), EngineConfig{}, reqs);
  for (pa::DType t : {pa::DType::fp16, pa::DType::bf16}) {
    pa::ch08::ModelConfig mc;
    mc.kv_dtype = t;
    pa::ch08::TinyModel model(mc);  // the same weights (same seed), a 16-bit cache
    // Rounding q, k and v moves the logits by about the cache's epsilon times their size.
    const double tol = t == pa::DType::fp16 ? 2e-2 : 1.5e-1;
    expect_same(serve(model, EngineConfig{}, reqs), fp32, tol, pa::dtype_name(t));
  }
}

TEST(EngineVariants, AStepAttentionNeedsA16BitCache) {
  struct Never : pa::ch08::StepAttention {
    void plan(const std::vector<pa::ch03::BatchMetadata>&, const pa::ch08::StepCache&) override {}
    void run(int, void*, const void*, const void*, const void*, float, cudaStream_t) override {}
  };
  pa::ch08::TinyModel model{pa::ch08::ModelConfig{}};
  model.set_step_attention(std::make_shared<Never>());
  Engine engine(model, EngineConfig{});
  engine.add_request({0, random_tokens(5, 1), 2, 0});
  EXPECT_TRUE(pa::test::contains_text(pa::test::error_of([&] { engine.run(); }), "needs a 16-bit cache"));
}

}  // namespace
