// Chapter 8: the tiny decoder on the paged path (prefill kernel, chapter 5's decode,
// chunked prefill, continuous batching) gives the dense path's greedy tokens, and its
// logits within tolerance.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "compare.h"
#include "serving_helpers.h"

namespace {

using pa::test::random_tokens;
using pa::test::tiny_model;

struct Prompts {
  std::vector<std::vector<int>> prompts;
  std::vector<int> max_new;
};

// Lengths around the 16-token block edge, and a one-token prompt.
Prompts edge_prompts() {
  Prompts p;
  const int lens[] = {1, 15, 16, 17, 33};
  const int news[] = {6, 5, 4, 6, 3};
  for (int i = 0; i < 5; ++i) {
    p.prompts.push_back(random_tokens(lens[i], 100 + uint64_t(i)));
    p.max_new.push_back(news[i]);
  }
  return p;
}

void expect_same_as_dense(int max_tokens_per_step, int arrival_gap) {
  const Prompts p = edge_prompts();
  static const std::vector<pa::ch08::Generation> dense =
      pa::ch08::generate_dense(tiny_model(), p.prompts, p.max_new);
  pa::ch08::EngineConfig cfg;
  cfg.num_blocks = 40;
  cfg.max_seq_len = 64;
  cfg.max_tokens_per_step = max_tokens_per_step;
  cfg.record_logits = true;
  pa::ch08::Engine engine(tiny_model(), cfg);
  for (int i = 0; i < int(p.prompts.size()); ++i)
    engine.add_request({i, p.prompts[size_t(i)], p.max_new[size_t(i)], i * arrival_gap});
  engine.run();
  for (int i = 0; i < int(p.prompts.size()); ++i) {
    EXPECT_EQ(engine.outputs().at(i), dense[size_t(i)].tokens) << "request " << i;
    const auto& got = engine.logits().at(i);
    ASSERT_EQ(got.size(), dense[size_t(i)].logits.size());
    for (size_t t = 0; t < got.size(); ++t) {
      const std::vector<double> want(dense[size_t(i)].logits[t].begin(), dense[size_t(i)].logits[t].end());
      EXPECT_TRUE(pa::test::all_close(got[t], want, {{"logit", int64_t(want.size())}}, 1e-3, 1e-3))
          << "request " << i << ", generated token " << t;
    }
  }
}

TEST(PagedVsDense, SameTokensAndLogitsWholePrompts) { expect_same_as_dense(512, 0); }

// Prompts cut into chunks of 7 tokens, and requests joining mid-flight: decode and
// prefill rows share steps.
TEST(PagedVsDense, SameTokensWithChunkedPrefillAndLateArrivals) { expect_same_as_dense(7, 2); }

TEST(PagedVsDense, TheTokensAreNotTrivial) {
  // A model that always says the same token would pass the tests above by accident.
  const auto dense = pa::ch08::generate_dense(tiny_model(), {random_tokens(8, 1)}, {12});
  std::set<int> distinct(dense[0].tokens.begin(), dense[0].tokens.end());
  EXPECT_GE(distinct.size(), 3u);
}

TEST(ModelErrors, BadStepsAreRefused) {
  pa::ch08::PagedKV kv(tiny_model().config(), 4, 16);
  pa::ch08::StepInput in;
  in.tokens = {1, 500};
  in.positions = {0, 1};
  in.batch.num_seqs = 1;
  in.batch.max_blocks_per_seq = 1;
  in.batch.slot_mapping = {0, 1};
  in.batch.block_table = {0};
  in.batch.context_lens = {2};
  in.batch.query_start_loc = {0, 2};
  EXPECT_TRUE(pa::test::contains_text(pa::test::error_of([&] { tiny_model().forward_paged(in, kv); }), "outside the vocabulary"));
  in.tokens = {1, 2};
  in.batch.slot_mapping = {0, 64};
  EXPECT_TRUE(pa::test::contains_text(pa::test::error_of([&] { tiny_model().forward_paged(in, kv); }), "slot 64 is outside the pool"));
  in.batch.slot_mapping = {0, 1};
  in.batch.context_lens = {1};
  EXPECT_TRUE(pa::test::contains_text(pa::test::error_of([&] { tiny_model().forward_paged(in, kv); }), "2 new tokens but context_len 1"));
}

}  // namespace

namespace {

// GPU only (too slow for the emulator): contexts past 512 tokens, where chapter 5's
// heuristic may pick v2 for the decode rows, and 256-token prefill chunks.
TEST(PagedVsDenseLarge, LongContextsMatchTheDensePath) {
  if (std::string(PA_BACKEND_NAME) != "cuda" && !std::getenv("PA_CH08_FORCE_LARGE"))
    GTEST_SKIP() << "long contexts: GPU only (PA_CH08_FORCE_LARGE=1 runs it here, slowly)";
  const std::vector<std::vector<int>> prompts = {random_tokens(600, 201), random_tokens(1030, 202),
                                                 random_tokens(17, 203)};
  const std::vector<int> max_new = {8, 8, 40};
  const auto dense = pa::ch08::generate_dense(tiny_model(), prompts, max_new);
  pa::ch08::EngineConfig cfg;
  cfg.num_blocks = 200;
  cfg.max_seq_len = 1100;
  cfg.max_tokens_per_step = 256;
  cfg.record_logits = true;
  pa::ch08::Engine engine(tiny_model(), cfg);
  for (int i = 0; i < 3; ++i) engine.add_request({i, prompts[size_t(i)], max_new[size_t(i)], 0});
  engine.run();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(engine.outputs().at(i), dense[size_t(i)].tokens) << "request " << i;
    const auto& got = engine.logits().at(i);
    for (size_t t = 0; t < got.size(); ++t) {
      const std::vector<double> want(dense[size_t(i)].logits[t].begin(), dense[size_t(i)].logits[t].end());
      EXPECT_TRUE(pa::test::all_close(got[t], want, {{"logit", int64_t(want.size())}}, 2e-3, 2e-3))
          << "request " << i << ", generated token " << t;
    }
  }
  EXPECT_EQ(engine.blocks().num_free(), cfg.num_blocks);
}

}  // namespace

namespace {

// GPU only: decode steps replayed from CUDA graphs give the tokens of the plain path and
// its logits up to rounding (chapter 5 may pick v1 or v2 differently for a padded batch).
TEST(CudaGraphs, DecodeReplaysMatchThePlainPath) {
  if (!pa::ch08::TinyModel::graphs_supported()) GTEST_SKIP() << "CUDA graphs: GPU only (the emulator has none)";
  std::vector<pa::ch08::EngineRequest> reqs;
  for (int i = 0; i < 11; ++i) reqs.push_back({i, random_tokens(5 + 13 * i, 300 + uint64_t(i)), 20 + i, i / 3});
  reqs[3].sampling.n = 3;             // forks and copy-on-write under replay
  reqs[3].sampling.temperature = 1.f;
  reqs[3].sampling.seed = 7;
  reqs[5].sampling.beam_width = 2;
  std::map<int, std::vector<pa::ch08::Completion>> got[2];
  std::map<int, std::vector<std::vector<float>>> logits[2];
  for (int graphs = 0; graphs < 2; ++graphs) {
    pa::ch08::EngineConfig cfg;
    cfg.num_blocks = 96;
    cfg.max_seq_len = 192;
    cfg.max_tokens_per_step = 64;
    cfg.record_logits = true;
    cfg.cuda_graphs = graphs == 1;
    pa::ch08::Engine engine(tiny_model(), cfg);
    for (const auto& r : reqs) engine.add_request(r);
    engine.run();
    got[graphs] = engine.completions();
    logits[graphs] = engine.logits();
    if (graphs) {
      EXPECT_GT(engine.stats().graph_steps, 10) << "decode-only steps should replay graphs";
      EXPECT_GE(tiny_model().graphs_captured(), 2) << "one graph per batch-size bucket";
    }
  }
  for (const auto& r : reqs) {
    ASSERT_EQ(got[1].at(r.id).size(), got[0].at(r.id).size()) << "request " << r.id;
    for (size_t k = 0; k < got[0].at(r.id).size(); ++k)
      EXPECT_EQ(got[1].at(r.id)[k].tokens, got[0].at(r.id)[k].tokens) << "request " << r.id << ", sequence " << k;
    if (!logits[0].count(r.id)) continue;
    for (size_t t = 0; t < logits[0].at(r.id).size(); ++t) {
      const std::vector<double> want(logits[0].at(r.id)[t].begin(), logits[0].at(r.id)[t].end());
      EXPECT_TRUE(pa::test::all_close(logits[1].at(r.id)[t], want, {{"logit", int64_t(want.size())}}, 1e-4, 1e-4))
          << "request " << r.id << ", generated token " << t;
    }
  }
}

}  // namespace
