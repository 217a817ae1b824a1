// Chapter 8: beam search on shared blocks (issue 13). The engine's beams fork, share
// their blocks, copy a shared tail on write and die while their blocks are still shared
// with survivors; a host beam search that recomputes every beam from scratch on the dense
// path (no paging, no sharing, no copy-on-write) must find the same beams and scores.
#include <gtest/gtest.h>

#include <set>

#include "compare.h"
#include "serving_helpers.h"

namespace {

using pa::ch08::Completion;
using pa::ch08::Engine;
using pa::ch08::EngineConfig;
using pa::ch08::EngineRequest;
using pa::test::blocks_consistent;
using pa::test::concat;
using pa::test::dense_logits;
using pa::test::expect_no_leaks;
using pa::test::live_sequences;
using pa::test::random_tokens;
using pa::test::tiny_model;

struct HostBeam {
  std::vector<int> tokens;  // prompt + generated
  double score = 0;
};

// The reference: the same select_beams as the engine, fed logits that teacher forcing on
// the dense path recomputes from scratch for every beam at every step. Beams are kept in
// select_beams' order (best first), as the engine keeps them.
std::vector<HostBeam> host_beam_search(const std::vector<int>& prompt, int max_new, int width) {
  const int vocab = tiny_model().config().vocab_size;
  std::vector<HostBeam> beams = {{prompt, 0.0}};
  for (int step = 0; step < max_new; ++step) {
    std::vector<std::vector<int>> seqs;
    for (const HostBeam& b : beams) seqs.push_back(b.tokens);
    const auto logits = dense_logits(seqs);
    std::vector<const float*> rows;
    std::vector<double> scores;
    for (size_t b = 0; b < beams.size(); ++b) {
      rows.push_back(logits[b].back().data());
      scores.push_back(beams[b].score);
    }
    std::vector<HostBeam> next;
    for (const auto& c : pa::ch08::select_beams(rows, scores, vocab, width))
      next.push_back({concat(beams[size_t(c.beam)].tokens, {c.token}), c.score});
    beams = std::move(next);
  }
  return beams;
}

EngineConfig config(int block_size) {
  EngineConfig cfg;
  cfg.block_size = block_size;
  cfg.num_blocks = 64 * 16 / block_size;
  cfg.max_seq_len = 64;
  return cfg;
}

EngineRequest beam_request(int id, std::vector<int> prompt, int max_new, int width) {
  EngineRequest r{id, std::move(prompt), max_new, 0, {}};
  r.sampling.beam_width = width;
  return r;
}

// Runs one beam request step by step. After every step the sharing bookkeeping holds
// (refcounts = holders, nothing lost or freed twice); a sequence that disappears before
// the request finishes is a beam that died, and it counts as "died shared" if one of its
// blocks had another holder just before.
struct BeamRun {
  std::vector<Completion> beams;
  int died = 0, died_shared = 0, steps_with_sharing = 0;
};
BeamRun run_beams(const EngineConfig& cfg, const EngineRequest& r) {
  BeamRun out;
  Engine engine(tiny_model(), cfg);
  engine.add_request(r);
  std::map<int, bool> shared_before;  // live sequence -> holds a block with refcount > 1
  while (!engine.done()) {
    const auto rep = engine.step();
    const auto live = live_sequences(engine.blocks());
    const auto ok = blocks_consistent(engine.blocks(), live);
    EXPECT_TRUE(ok) << "beam width " << r.sampling.beam_width << ", after step " << rep.step;
    if (!ok) break;
    if (rep.blocks_in_use < rep.blocks_unshared) ++out.steps_with_sharing;
    const std::set<int> now(live.begin(), live.end());
    if (!engine.completions().count(r.id))
      for (const auto& [id, shared] : shared_before)
        if (!now.count(id)) {
          ++out.died;
          out.died_shared += shared ? 1 : 0;
        }
    shared_before.clear();
    for (int id : live) {
      bool shared = false;
      for (int b : engine.blocks().block_list(id)) shared = shared || engine.blocks().refcount(b) > 1;
      shared_before[id] = shared;
    }
  }
  out.beams = engine.completions().at(r.id);
  expect_no_leaks(engine, cfg);
  return out;
}

void expect_same_as_host(const EngineRequest& r, const std::vector<Completion>& got) {
  const auto want = host_beam_search(r.prompt, r.max_new_tokens, r.sampling.beam_width);
  ASSERT_EQ(got.size(), want.size()) << "beams";
  for (size_t k = 0; k < want.size(); ++k) {
    const std::vector<int> tokens(want[k].tokens.begin() + int64_t(r.prompt.size()), want[k].tokens.end());
    EXPECT_EQ(got[k].tokens, tokens) << "beam " << k << " (best first), width " << r.sampling.beam_width;
    EXPECT_NEAR(got[k].logprob, want[k].score, 1e-3) << "beam " << k << ", width " << r.sampling.beam_width;
    if (k > 0) EXPECT_GE(got[k - 1].logprob, got[k].logprob) << "beams are not best first at " << k;
  }
}

// A prompt ending mid-block (13 of 8: beams fork with a shared, partly filled tail) and
// one ending on a block edge (16 of 16).
TEST(Beam, MatchesAHostBeamSearchOnTheDensePath) {
  struct Case { int prompt_len, max_new, width, block_size; };
  for (const Case c : {Case{13, 6, 3, 8}, Case{16, 5, 4, 16}}) {
    SCOPED_TRACE("prompt " + std::to_string(c.prompt_len) + ", width " + std::to_string(c.width) +
                 ", block size " + std::to_string(c.block_size));
    const EngineRequest r = beam_request(0, random_tokens(c.prompt_len, 400 + uint64_t(c.prompt_len)), c.max_new, c.width);
    const BeamRun run = run_beams(config(c.block_size), r);
    expect_same_as_host(r, run.beams);
    EXPECT_GT(run.steps_with_sharing, 0) << "the beams never shared a block";
    EXPECT_GT(run.died_shared, 0) << "no beam died while its blocks were shared: the trap was not reached";
  }
}

// Width 1: the one best continuation each step is the argmax: greedy decoding.
TEST(Beam, WidthOneIsGreedy) {
  const std::vector<int> prompt = random_tokens(19, 410);
  const auto dense = pa::ch08::generate_dense(tiny_model(), {prompt}, {7});
  const BeamRun run = run_beams(config(16), beam_request(0, prompt, 7, 1));
  ASSERT_EQ(run.beams.size(), 1u);
  EXPECT_EQ(run.beams[0].tokens, dense[0].tokens);
  double logprob = 0;
  for (size_t i = 0; i < dense[0].tokens.size(); ++i)
    logprob += pa::ch08::log_softmax(dense[0].logits[i].data(), tiny_model().config().vocab_size)[size_t(dense[0].tokens[i])];
  EXPECT_NEAR(run.beams[0].logprob, logprob, 1e-3);
  EXPECT_EQ(run.died, 0);
}

}  // namespace
