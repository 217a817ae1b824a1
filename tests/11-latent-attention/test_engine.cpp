// Chapter 11 in chapter 8's engine: an MLA TinyModel whose paged path runs absorbed over
// the latent pool (ch11::MlaStepAttention) computes the model its dense path computes
// decompressed (K and V per head, chapter 1's attention): the same greedy tokens and
// logits within the 16-bit cache's tolerance, on a trace that mixes prefill chunks,
// decodes, beams and preemption.
#include <gtest/gtest.h>

#include "compare.h"
#include "pa/ch08_engine.h"
#include "pa/ch11_mla.h"
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

pa::ch08::ModelConfig mla_config(pa::DType dtype) {
  pa::ch08::ModelConfig mc;
  mc.attention = pa::ch08::AttentionKind::mla;
  mc.kv_dtype = dtype;
  return mc;  // 4 heads of 64 (nope and v), latent 512 + rope 64, 2 layers
}

// Ragged prompts: 1 token, a block less one, a block, a block and one, more than two blocks.
const int kPromptLens[] = {1, 15, 16, 17, 40};

struct Served {
  std::map<int, std::vector<int>> outputs;
  std::map<int, std::vector<std::vector<float>>> logits;
  pa::ch08::EngineStats stats;
  int max_pieces = 0;
};

// Request i arrives at step i * arrival_gap.
Served serve(pa::ch08::TinyModel& model, EngineConfig cfg, int max_new, int arrival_gap = 1) {
  auto attention = std::make_shared<pa::ch11::MlaStepAttention>();
  model.set_step_attention(attention);
  cfg.record_logits = true;
  Engine engine(model, cfg);
  for (int i = 0; i < 5; ++i) engine.add_request({i, tokens(kPromptLens[i], 900 + uint64_t(i)), max_new, i * arrival_gap});
  Served out;
  engine.run([&](const pa::ch08::StepReport&) { out.max_pieces = std::max(out.max_pieces, attention->pieces()); });
  EXPECT_EQ(engine.blocks().num_free(), cfg.num_blocks) << "blocks still held after the trace drained";
  EXPECT_EQ(attention->steps_planned(), engine.stats().steps) << "one plan per step";
  out.outputs = engine.outputs();
  out.logits = engine.logits();
  out.stats = engine.stats();
  return out;
}

// The engine's tokens and logits against greedy decoding on the dense, decompressed path.
void expect_dense_agrees(pa::ch08::TinyModel& model, const Served& got, int max_new, double tol,
                         const std::string& what) {
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(tokens(kPromptLens[i], 900 + uint64_t(i)));
  const auto want = pa::ch08::generate_dense(model, prompts, std::vector<int>(5, max_new));
  for (int i = 0; i < 5; ++i) {
    const auto& w = want[size_t(i)];
    ASSERT_EQ(got.outputs.at(i), w.tokens) << what << ": request " << i << " (prompt of " << kPromptLens[i]
                                           << " tokens): the paged MLA path chose other greedy tokens";
    const ::testing::AssertionResult close = pa::test::generated_logits_close(got.logits.at(i), w.logits, tol, tol);
    EXPECT_TRUE(close) << what << ": request " << i << " (later requests are not compared)";
    if (!close) return;
  }
}

TEST(MlaInTheEngine, PagedAbsorbedEqualsDenseDecompressed) {
  for (pa::DType dtype : {pa::DType::fp16, pa::DType::bf16})
    for (int chunk : {7, 64}) {  // 7: prompts in chunks of up to 7 (two pieces), mixed with decodes
      const std::string what = std::string(pa::dtype_name(dtype)) + ", " + std::to_string(chunk) + " tokens per step";
      pa::ch08::TinyModel model(mla_config(dtype));
      EngineConfig cfg;
      cfg.num_blocks = 24;
      cfg.max_seq_len = 64;
      cfg.max_tokens_per_step = chunk;
      const Served got = serve(model, cfg, 5);
      if (chunk == 64) EXPECT_GE(got.max_pieces, 10) << what << ": the 40-token prompt is 10 pieces of 4";
      // The cache holds c_kv, k_rope and q_abs rounded to 16 bits; the kernel rounds P too.
      expect_dense_agrees(model, got, 5, dtype == pa::DType::fp16 ? 2e-2 : 1e-1, what);
    }
}

TEST(MlaInTheEngine, PreemptionSwapsAndRecomputesTheLatentPool) {
  for (auto preemption : {pa::ch08::Preemption::swap, pa::ch08::Preemption::recompute}) {
    const std::string what = preemption == pa::ch08::Preemption::swap ? "swap" : "recompute";
    pa::ch08::TinyModel model(mla_config(pa::DType::fp16));
    EngineConfig cfg;
    cfg.num_blocks = 5;  // 80 slots for 5 requests of 13 to 52 tokens, all at once: someone is preempted
    cfg.max_seq_len = 64;
    cfg.max_tokens_per_step = 32;
    cfg.preemption = preemption;
    const Served got = serve(model, cfg, 12, 0);
    EXPECT_GT(got.stats.preemptions, 0) << what << ": the budget was meant to force a preemption";
    if (preemption == pa::ch08::Preemption::swap) EXPECT_GT(got.stats.swap_ins, 0) << what;
    expect_dense_agrees(model, got, 12, 2e-2, what);
  }
}

TEST(MlaInTheEngine, BeamsAndSamplesShareLatentBlocks) {
  // Forks share the prompt's latent blocks; a shared partial tail is copied on write.
  pa::ch08::TinyModel model(mla_config(pa::DType::fp16));
  model.set_step_attention(std::make_shared<pa::ch11::MlaStepAttention>());
  EngineConfig cfg;
  cfg.num_blocks = 24;
  cfg.max_seq_len = 64;
  Engine engine(model, cfg);
  EngineRequest beam{0, tokens(20, 5), 6, 0};
  beam.sampling.beam_width = 2;
  EngineRequest samples{1, tokens(17, 6), 6, 0};
  samples.sampling.n = 2;
  samples.sampling.temperature = 0.f;  // greedy samples: both must equal the dense tokens
  engine.add_request(beam);
  engine.add_request(samples);
  engine.run();
  EXPECT_GT(engine.stats().cow_copies, 0) << "no latent block was copied on write";
  const auto want = pa::ch08::generate_dense(model, {tokens(17, 6)}, {6});
  for (size_t k = 0; k < engine.completions().at(1).size(); ++k)
    EXPECT_EQ(engine.completions().at(1)[k].tokens, want[0].tokens) << "request 1, sample " << k;
  EXPECT_EQ(engine.completions().at(0).size(), 2u) << "request 0: two beams";
  EXPECT_EQ(engine.blocks().num_free(), cfg.num_blocks) << "blocks still held";
}

TEST(MlaInTheEngine, PiecesOfAtMostFourTokensEndAtTheirLastToken) {
  // Sequence 0 decodes 1 token at context 20; sequence 1 brings a chunk of 9 at context 30
  // (tokens 21..29); sequence 2 has no new token. Table width 2.
  pa::ch03::BatchMetadata md;
  md.num_seqs = 3;
  md.max_blocks_per_seq = 2;
  md.block_table = {4, 5, 6, 7, 8, -1};
  md.context_lens = {20, 30, 3};
  md.query_start_loc = {0, 1, 10, 10};
  const auto p = pa::ch11::MlaStepAttention::cut(md);
  EXPECT_EQ(p.query_start_loc, (std::vector<int>{0, 1, 5, 9, 10})) << "pieces: sequence 0, then 4 + 4 + 1 of sequence 1";
  EXPECT_EQ(p.seq_lens, (std::vector<int>{20, 25, 29, 30})) << "each piece's context ends at its last token";
  EXPECT_EQ(p.block_table, (std::vector<int>{4, 5, 6, 7, 6, 7, 6, 7})) << "a piece reads its sequence's table row";
}

TEST(MlaInTheEngine, AMisconfiguredModelIsRefusedByName) {
  auto run_one = [](const pa::ch08::ModelConfig& mc, std::shared_ptr<pa::ch08::StepAttention> a) {
    pa::ch08::TinyModel model(mc);
    if (a) model.set_step_attention(a);
    EngineConfig cfg;
    Engine engine(model, cfg);
    engine.add_request({0, tokens(5, 1), 2, 0});
    return pa::test::error_of([&] { engine.run(); });
  };
  auto mla = std::make_shared<pa::ch11::MlaStepAttention>();
  pa::ch08::ModelConfig narrow = mla_config(pa::DType::bf16);
  narrow.latent_dim = 256;  // the kernel reads rows of 512 + 64
  EXPECT_TRUE(pa::test::contains_text(run_one(narrow, mla), "a latent row is c_kv 512 + k_rope 64 = 576 wide, got 256 + 64"));
  EXPECT_TRUE(pa::test::contains_text(run_one(mla_config(pa::DType::fp32), mla), "needs a 16-bit cache"));
  EXPECT_TRUE(pa::test::contains_text(run_one(mla_config(pa::DType::bf16), nullptr),
                                      "an MLA model's paged path needs a step attention"));
  pa::ch08::ModelConfig gqa;
  gqa.kv_dtype = pa::DType::bf16;
  EXPECT_TRUE(pa::test::contains_text(run_one(gqa, mla), "chapter 11's kernel reads a latent cache"));
  pa::ch08::ModelConfig odd = mla_config(pa::DType::bf16);
  odd.rope_dim = 63;
  EXPECT_TRUE(pa::test::error_contains([&] { pa::ch08::TinyModel m(odd); }, "a positive, even rope_dim"));
}

TEST(MlaInTheEngine, ALatentTokenCostsItsRowInEveryLayer) {
  pa::ch08::ModelConfig mc = mla_config(pa::DType::bf16);
  EXPECT_EQ(mc.kv_bytes_per_token(), 2 * pa::ch11::latent_bytes_per_token_layer(2)) << "2 layers of 1,152 B";
  pa::ch08::PagedKV kv(mc, 8, 16);
  EXPECT_EQ(kv.block_bytes(), 16 * 1152) << "one layer's block: 16 rows of 576 bf16";
  EXPECT_EQ(kv.k_pools().size(), 2u);
  EXPECT_TRUE(kv.v_pools().empty()) << "MLA has no V pool";
}

}  // namespace
