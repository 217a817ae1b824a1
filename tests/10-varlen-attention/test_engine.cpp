// Chapter 10 in chapter 8's engine: one varlen launch per layer for the whole step
// (prefill chunks, decodes, forked samples and beams together) gives the tokens of the
// engine's first version (chapter 5's decode + chapter 8's prefill) on the same fp16 cache.
#include <gtest/gtest.h>

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
      for (const auto& [id, rows] : want.logits)
        for (size_t t = 0; t < rows.size(); ++t) {
          const std::vector<double> w(rows[t].begin(), rows[t].end());
          EXPECT_TRUE(pa::test::all_close(got.logits.at(id)[t], w, {{"logit", int64_t(w.size())}}, tol, tol))
              << what << ": request " << id << ", generated token " << t;
        }
    }
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

}  // namespace
