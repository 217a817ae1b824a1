// Chapter 8's traps of forked sequences (issue 13). Parallel samples (n > 1) share their
// prompt's blocks and copy a partly filled tail block only at their first divergent
// write; a sample's tokens depend on its seed, its sample index and its position only,
// never on the batch around it; preempted groups come back token-exact; the prefix cache
// never evicts a block that a fork still holds; bad sampling requests are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <set>

#include "compare.h"
#include "serving_helpers.h"

namespace {

using pa::ch08::Completion;
using pa::ch08::Engine;
using pa::ch08::EngineConfig;
using pa::ch08::EngineRequest;
using pa::ch08::Preemption;
using pa::ch08::StepReport;
using pa::test::blocks_consistent;
using pa::test::concat;
using pa::test::dense_logits;
using pa::test::expect_no_leaks;
using pa::test::live_sequences;
using pa::test::random_tokens;
using pa::test::run_checked;
using pa::test::tiny_model;

EngineConfig roomy(int block_size = 16) {
  EngineConfig cfg;
  cfg.block_size = block_size;
  cfg.num_blocks = 64 * 16 / block_size;
  cfg.max_seq_len = 64;
  return cfg;
}

EngineRequest request(int id, std::vector<int> prompt, int max_new, int n, float temperature,
                      uint64_t seed = 0, int arrival = 0) {
  EngineRequest r{id, std::move(prompt), max_new, arrival, {}};
  r.sampling.n = n;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

EngineRequest beam_request(int id, std::vector<int> prompt, int max_new, int width, int arrival = 0) {
  EngineRequest r{id, std::move(prompt), max_new, arrival, {}};
  r.sampling.beam_width = width;
  return r;
}

std::string name(Preemption p) { return p == Preemption::swap ? "swap" : "recompute"; }

// Every completion of every request: equal tokens, logprobs within 1e-3.
void expect_same_completions(const std::map<int, std::vector<Completion>>& got,
                             const std::map<int, std::vector<Completion>>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what << ": requests finished";
  for (const auto& [id, w] : want) {
    const auto& g = got.at(id);
    ASSERT_EQ(g.size(), w.size()) << what << ": request " << id << " completions";
    for (size_t k = 0; k < w.size(); ++k) {
      EXPECT_EQ(g[k].tokens, w[k].tokens) << what << ": request " << id << ", sample/beam " << k;
      EXPECT_NEAR(g[k].logprob, w[k].logprob, 1e-3) << what << ": request " << id << ", sample/beam " << k;
    }
  }
}

// Each sample against the dense path, by teacher forcing. A sample's token i is drawn by
// sample_token(logits, vocab, sampling, sample k, position P + i): a deterministic
// function of the logits that the paged path computed after prompt + tokens 0..i-1 of
// that very sample. The dense path (no paging, no sharing, no copy-on-write) fed the
// same tokens gives those logits (within rounding), so drawing again from the dense
// logits must give the same token, and the summed log-softmax of the chosen tokens must
// equal the completion's logprob. A sample that read a sibling's K/V (a missed or wrong
// copy-on-write, a block freed under it) was drawn from other logits and fails here.
// (Greedy n = 1 on prompt + sample would not do: sampled tokens are not argmax tokens.)
void expect_samples_match_dense(const EngineRequest& r, const std::vector<Completion>& got) {
  const int vocab = tiny_model().config().vocab_size, P = int(r.prompt.size());
  ASSERT_EQ(got.size(), size_t(r.sampling.n)) << "request " << r.id;
  std::vector<std::vector<int>> seqs;
  for (const Completion& c : got) seqs.push_back(concat(r.prompt, c.tokens));
  const auto dense = dense_logits(seqs);
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].tokens.size(), size_t(r.max_new_tokens)) << "request " << r.id << ", sample " << k;
    double logprob = 0;
    for (int i = 0; i < r.max_new_tokens; ++i) {
      const std::vector<float>& row = dense[k][size_t(P - 1 + i)];
      const int want = pa::ch08::sample_token(row.data(), vocab, r.sampling, int(k), P + i);
      ASSERT_EQ(got[k].tokens[size_t(i)], want)
          << "request " << r.id << ", sample " << k << ", generated token " << i
          << ": the dense path's logits draw another token";
      logprob += pa::ch08::log_softmax(row.data(), vocab)[size_t(want)];
    }
    EXPECT_NEAR(got[k].logprob, logprob, 1e-3) << "request " << r.id << ", sample " << k;
  }
}

// Steps the engine to the end (blocks_consistent after every step) and counts, per
// request, how often it was preempted. Which request a sequence belongs to: the requests
// added in order start as sequences 0, 1, 2, ... (first_ids[i] = request of sequence i);
// a fork shares its parent's first (full) prompt block when it appears. A request that
// had live sequences and has none, unfinished, was preempted.
std::map<int, int> run_counting_preemptions(Engine& engine, const std::vector<int>& first_ids) {
  std::map<int, int> owner, preempted;
  for (size_t i = 0; i < first_ids.size(); ++i) owner[int(i)] = first_ids[i];
  std::set<int> was_live;
  while (!engine.done()) {
    const StepReport rep = engine.step();
    const auto live = live_sequences(engine.blocks());
    const auto ok = blocks_consistent(engine.blocks(), live);
    EXPECT_TRUE(ok) << "after step " << rep.step;
    if (!ok) break;
    for (int id : live) {
      if (owner.count(id) || engine.blocks().block_list(id).empty()) continue;
      for (const auto& [known, req] : owner)
        if (engine.blocks().has_sequence(known) && !engine.blocks().block_list(known).empty() &&
            engine.blocks().block_list(known).front() == engine.blocks().block_list(id).front()) {
          owner[id] = req;
          break;
        }
    }
    std::set<int> live_reqs;
    for (int id : live) {
      EXPECT_TRUE(owner.count(id)) << "sequence " << id << " after step " << rep.step << ": whose fork?";
      if (owner.count(id)) live_reqs.insert(owner[id]);
    }
    for (int req : was_live)
      if (!live_reqs.count(req) && !engine.completions().count(req)) ++preempted[req];
    was_live = live_reqs;
  }
  return preempted;
}

// n greedy samples are n copies of the greedy output: of the same prompt alone with n = 1,
// and of the dense reference.
TEST(Fork, GreedySamplesAllEqualTheGreedyOutput) {
  const std::vector<int> prompt = random_tokens(21, 301);
  const auto dense = pa::ch08::generate_dense(tiny_model(), {prompt}, {6});
  Engine alone(tiny_model(), roomy());
  alone.add_request(request(0, prompt, 6, 1, 0.f));
  alone.run();
  EXPECT_EQ(alone.outputs().at(0), dense[0].tokens) << "n = 1";

  Engine engine(tiny_model(), roomy());
  const EngineRequest r = request(0, prompt, 6, 4, 0.f);
  engine.add_request(r);
  run_checked(engine);
  const auto& c = engine.completions().at(0);
  ASSERT_EQ(c.size(), 4u);
  for (size_t k = 0; k < c.size(); ++k) {
    EXPECT_EQ(c[k].tokens, dense[0].tokens) << "sample " << k;
    EXPECT_NEAR(c[k].logprob, c[0].logprob, 1e-9) << "sample " << k;
  }
  EXPECT_EQ(engine.outputs().at(0), dense[0].tokens);
  EXPECT_EQ(engine.stats().forks, 3);
  expect_samples_match_dense(r, c);
  expect_no_leaks(engine, roomy());
}

// The first write after the fork. A prompt that ends on a block edge leaves its last
// block full: each sample starts a fresh block and nothing is copied. A prompt that ends
// mid-block leaves a shared, partly filled tail: the first n - 1 samples to write copy it
// (copy-on-write), the last one writes in place. Checked through the step reports.
void expect_fork_copies(int prompt_len, int want_copies) {
  const int bs = 16, n = 4;
  const EngineRequest r = request(0, random_tokens(prompt_len, 310 + uint64_t(prompt_len)), 3, n, 1.f, 77);
  Engine engine(tiny_model(), roomy(bs));
  engine.add_request(r);
  const std::vector<StepReport> reps = run_checked(engine);
  const std::string at = "prompt of " + std::to_string(prompt_len) + " tokens";
  ASSERT_GE(reps.size(), 3u) << at;
  const int full = prompt_len / bs, tail = (prompt_len + bs - 1) / bs;
  EXPECT_EQ(reps[0].copies, 0) << at << ", step 0 (the prefill)";
  EXPECT_EQ(reps[0].blocks_in_use, tail) << at << ", step 0";
  // Step 1: every sample writes its first token at position prompt_len.
  EXPECT_EQ(reps[1].running, n) << at << ", step 1";
  EXPECT_EQ(reps[1].copies, want_copies) << at << ", step 1 (the first write after the fork)";
  EXPECT_EQ(reps[1].blocks_in_use, full + n) << at << ", step 1: shared full blocks + one own block each";
  EXPECT_EQ(reps[1].blocks_unshared, n * (full + 1)) << at << ", step 1";
  for (size_t s = 2; s < reps.size(); ++s) EXPECT_EQ(reps[s].copies, 0) << at << ", step " << s;
  EXPECT_EQ(engine.stats().cow_copies, want_copies) << at;
  EXPECT_EQ(engine.stats().forks, n - 1) << at;
  // The last step writes token prompt_len + 1 (the third one is never fed back).
  EXPECT_EQ(engine.stats().peak_blocks_unshared, n * ((prompt_len + 2 + bs - 1) / bs)) << at;
  expect_samples_match_dense(r, engine.completions().at(0));
  expect_no_leaks(engine, roomy(bs));
}

TEST(Fork, AtABlockEdgeNothingIsCopied) {
  expect_fork_copies(32, 0);
  expect_fork_copies(16, 0);
}

TEST(Fork, MidBlockTheFirstWriteCopiesTheTailNMinus1Times) {
  expect_fork_copies(24, 3);
  expect_fork_copies(15, 3);  // block_size - 1: no full block is shared
  expect_fork_copies(17, 3);  // block_size + 1
}

// Sampled tokens are seeded by (seed, sample, position): the same request draws the same
// tokens run after run, alone or in a batch, with its prompt cut into chunks, and after a
// preemption (swap or recompute). If not, the engine's seeding depends on the batch.
TEST(Fork, SampledRunsAreReproducibleAndIndependentOfTheBatch) {
  const EngineRequest r = request(7, random_tokens(19, 320), 8, 3, 1.f, 1234, 1);
  const std::vector<EngineRequest> others = {
      request(1, random_tokens(30, 321), 14, 1, 0.f, 0, 0),
      request(2, random_tokens(9, 322), 10, 2, 0.8f, 9, 2),
  };
  auto run = [&](EngineConfig cfg, bool with_others, std::map<int, int>* preempted = nullptr) {
    Engine engine(tiny_model(), cfg);
    engine.add_request(r);
    if (with_others)
      for (const auto& o : others) engine.add_request(o);
    const auto counts = run_counting_preemptions(engine, {r.id, others[0].id, others[1].id});
    if (preempted) *preempted = counts;
    expect_no_leaks(engine, cfg);
    return engine.completions().at(r.id);
  };
  const std::vector<Completion> want = run(roomy(), false);
  ASSERT_EQ(want.size(), 3u);
  EXPECT_FALSE(want[0].tokens == want[1].tokens && want[1].tokens == want[2].tokens)
      << "three samples at temperature 1 are all equal: the sample index does not seed the draws";
  expect_samples_match_dense(r, want);
  expect_same_completions({{r.id, run(roomy(), false)}}, {{r.id, want}}, "alone, run again");
  expect_same_completions({{r.id, run(roomy(), true)}}, {{r.id, want}}, "with other requests");
  EngineConfig chunked = roomy();
  chunked.max_tokens_per_step = 5;
  expect_same_completions({{r.id, run(chunked, true)}}, {{r.id, want}}, "chunked prefill, 5 tokens per step");
  for (Preemption p : {Preemption::swap, Preemption::recompute}) {
    EngineConfig tight = roomy();
    tight.num_blocks = 6;
    tight.preemption = p;
    tight.num_swap_blocks = 16;
    std::map<int, int> preempted;
    expect_same_completions({{r.id, run(tight, true, &preempted)}}, {{r.id, want}}, "preemption by " + name(p));
    EXPECT_GT(preempted[r.id], 0) << name(p) << ": the sampled request was meant to be preempted";
  }
}

// Groups of sequences preempted as a whole: n = 4 greedy samples and a beam search of
// width 3, beside a single sequence, in a pool too small for all three. Swap and
// recompute give every sample and beam of the unconstrained run, and leak nothing.
TEST(Fork, PreemptedGroupsAreTokenExact) {
  const std::vector<EngineRequest> reqs = {
      request(0, random_tokens(20, 330), 16, 1, 0.f, 0, 0),
      request(1, random_tokens(13, 331), 10, 4, 0.f, 0, 1),
      beam_request(2, random_tokens(11, 332), 8, 3, 2),
  };
  auto run = [&](const EngineConfig& cfg, std::map<int, int>* preempted) {
    Engine engine(tiny_model(), cfg);
    for (const auto& r : reqs) engine.add_request(r);
    *preempted = run_counting_preemptions(engine, {0, 1, 2});
    expect_no_leaks(engine, cfg);
    return engine.completions();
  };
  std::map<int, int> none;
  const auto want = run(roomy(8), &none);
  EXPECT_TRUE(none.empty()) << "the roomy run preempted";
  const auto greedy = pa::ch08::generate_dense(tiny_model(), {reqs[1].prompt}, {10});
  for (const auto& c : want.at(1)) EXPECT_EQ(c.tokens, greedy[0].tokens) << "n = 4 greedy samples";
  for (Preemption p : {Preemption::swap, Preemption::recompute}) {
    EngineConfig cfg = roomy(8);
    cfg.num_blocks = 12;
    cfg.preemption = p;
    cfg.num_swap_blocks = 64;
    std::map<int, int> preempted;
    expect_same_completions(run(cfg, &preempted), want, name(p));
    EXPECT_GT(preempted[1], 0) << name(p) << ": the n = 4 group was meant to be preempted";
    EXPECT_GT(preempted[2], 0) << name(p) << ": the beam group was meant to be preempted";
  }
}

// A group whose samples share a long prompt fits the pool only because they share it
// (add_request counts the shared prompt blocks once): n = 4 greedy samples of a 32-token
// prompt in blocks of 8 hold 4 shared + 4 own blocks, 20 if nothing were shared. Request
// 0 (arriving first) grows until the group is preempted; when request 0 is done, the
// group must come back (not "scheduler stuck") and finish with the unconstrained tokens.
void expect_group_comes_back(Preemption p, int other_new_tokens) {
  const std::vector<EngineRequest> reqs = {
      request(0, random_tokens(30, 340), other_new_tokens, 1, 0.f, 0, 0),
      request(1, random_tokens(32, 341), 8, 4, 0.f, 0, 1),
  };
  Engine ref(tiny_model(), roomy(8));
  for (const auto& r : reqs) ref.add_request(r);
  ref.run();
  EngineConfig cfg = roomy(8);
  cfg.num_blocks = 10;
  cfg.preemption = p;
  cfg.num_swap_blocks = 32;
  Engine engine(tiny_model(), cfg);
  for (const auto& r : reqs) engine.add_request(r);
  const std::string error = pa::test::error_of([&] { run_checked(engine); });
  ASSERT_EQ(error, "(no error)") << name(p);
  EXPECT_GT(engine.stats().preemptions, 0) << name(p);
  if (p == Preemption::swap) EXPECT_GT(engine.stats().swap_outs, 0);
  expect_same_completions(engine.completions(), ref.completions(), name(p));
  expect_no_leaks(engine, cfg);
}

// Recompute: the prompt blocks stay cached (request 0 holds at most 6 of the 10 blocks,
// so it never evicts them); readmitting the group takes them from the cache, and it must
// count each of them once, not once per sample (4 x (1 + 4) = 20 > 10 blocks: stuck).
TEST(Fork, RecomputeCountsTheGroupsCachedPromptOnce) { expect_group_comes_back(Preemption::recompute, 16); }

// A group that fits only by sharing: if swap_in gave every sequence fresh blocks of its
// own, it would come back unshared, 4 x 5 = 20 blocks, never free in a pool of 10, and the
// scheduler would stop ("scheduler stuck ... 1 swapped"). swap_out copies a shared block
// once and swap_in shares it again.
TEST(Fork, SwapKeepsTheGroupsSharing) { expect_group_comes_back(Preemption::swap, 16); }

// Request 0 grows to 7 blocks and evicts part of the group's cached prompt; if the
// recomputed samples each computed their own copy of it (4 x 2 own + 3 cached > 10) the
// scheduler would stop ("scheduler stuck ... 1 waiting"). The leader recomputes the
// shared prompt and the parked samples rejoin it, cached or not.
TEST(Fork, RecomputeSharesThePromptAgainAfterItWasEvicted) { expect_group_comes_back(Preemption::recompute, 24); }

// The prefix cache against forks. Request W's four prompt blocks are cached and nobody
// owns them; a forked group (samples, or beams that die along the way) then holds its own
// two cached prompt blocks; a third request arrives and the pool has fewer free blocks
// than it and the group's copies take, so the cache must evict: W's blocks go (deepest
// first), the group's never do (they are owned, whatever dead siblings released). W asked
// again recomputes what was evicted and gets its old tokens.
TEST(Fork, CachedBlocksAForkHoldsAreNeverEvicted) {
  const std::vector<int> pw = random_tokens(66, 350), pf = random_tokens(36, 351), pg = random_tokens(50, 352);
  const auto dense = pa::ch08::generate_dense(tiny_model(), {pw, pf, pg}, {4, 10, 6});
  for (bool beams : {false, true}) {
    const std::string what = beams ? "beam search" : "n = 3 samples";
    EngineConfig cfg = roomy();
    cfg.max_seq_len = 80;
    cfg.num_blocks = 12;  // W: 4 cached; the group: 2 shared + 3 own; the third request: 4
    Engine engine(tiny_model(), cfg);
    engine.add_request(request(0, pw, 4, 1, 0.f));
    engine.run();
    ASSERT_EQ(engine.blocks().num_evictable(), 4) << what;
    const int t0 = engine.stats().steps;
    engine.add_request(beams ? beam_request(1, pf, 10, 3, t0) : request(1, pf, 10, 3, 0.f, 0, t0));
    engine.add_request(request(2, pg, 6, 1, 0.f, 0, t0 + 2));
    std::vector<int> held;  // the group's cached prompt blocks
    int checked = 0;
    int64_t evictions_while_held = 0;
    while (!engine.done()) {
      const int64_t evictions = engine.blocks().evictions();
      const StepReport rep = engine.step();
      const auto live = live_sequences(engine.blocks());
      ASSERT_TRUE(blocks_consistent(engine.blocks(), live)) << what << ", after step " << rep.step;
      if (engine.completions().count(1)) continue;
      if (held.empty()) held = engine.blocks().match_prefix(pf, 35);
      if (held.empty()) continue;
      ASSERT_EQ(held.size(), 2u) << what;
      EXPECT_EQ(engine.blocks().match_prefix(pf, 35), held)
          << what << ", after step " << rep.step << ": the group's cached prompt blocks were evicted";
      for (int b : held) EXPECT_GE(engine.blocks().refcount(b), 1) << what << ", block " << b << ", step " << rep.step;
      evictions_while_held += engine.blocks().evictions() - evictions;
      ++checked;
    }
    EXPECT_GT(checked, 5) << what;
    EXPECT_GE(evictions_while_held, 1) << what << ": the pool was meant to evict while the group held its prompt";
    EXPECT_EQ(engine.stats().preemptions, 0) << what << ": eviction alone was meant to make room";
    if (!beams)
      for (const auto& c : engine.completions().at(1)) EXPECT_EQ(c.tokens, dense[1].tokens) << what;
    EXPECT_EQ(engine.outputs().at(2), dense[2].tokens) << what;
    const int64_t cached_before = engine.stats().cached_prompt_tokens;
    engine.add_request(request(3, pw, 4, 1, 0.f));
    engine.run();
    EXPECT_LT(engine.stats().cached_prompt_tokens - cached_before, 64) << what << ": W's prefix was evicted";
    EXPECT_EQ(engine.outputs().at(3), dense[0].tokens) << what;
    EXPECT_EQ(engine.outputs().at(3), engine.outputs().at(0)) << what;
    expect_no_leaks(engine, cfg);
  }
}

// Bad sampling requests: a clear pa::Error, never a silent single sequence or a crash.
TEST(ForkErrors, BadSamplingRequestsAreRefused) {
  using pa::test::error_of;
  Engine engine(tiny_model(), roomy());
  auto add = [&](const EngineRequest& r) { return error_of([&] { engine.add_request(r); }); };
  const std::vector<int> prompt = random_tokens(20, 360);
  const std::string n0 = add(request(0, prompt, 4, 0, 0.f));
  EXPECT_NE(n0, "(no error)") << "n = 0";
  EXPECT_TRUE(std::regex_search(n0, std::regex("(^|[^A-Za-z_])n([^A-Za-z_]|$)"))) << "does not name n: " << n0;
  const std::string negative_beams = add(beam_request(0, prompt, 4, -1));
  EXPECT_TRUE(pa::test::contains_text(negative_beams, "beam_width")) << negative_beams;
  EngineConfig few = roomy();
  few.max_num_seqs = 3;
  Engine small(tiny_model(), few);
  EXPECT_TRUE(pa::test::contains_text(error_of([&] { small.add_request(beam_request(0, prompt, 4, 4)); }), "4 sequences (n or beam_width) are more than max_num_seqs 3"));
  EXPECT_TRUE(pa::test::contains_text(error_of([&] { small.add_request(request(0, prompt, 4, 5, 1.f)); }), "5 sequences (n or beam_width) are more than max_num_seqs 3"));
  EngineConfig pool = roomy();
  pool.num_blocks = 8;  // prompt 20 + 20 new: 1 shared block + 2 own per sequence
  Engine tiny_pool(tiny_model(), pool);
  EXPECT_TRUE(pa::test::contains_text(error_of([&] { tiny_pool.add_request(beam_request(0, prompt, 20, 4)); }), "needs up to 9 blocks (1 shared prompt blocks + 4 sequences x 2), the whole pool has 8"));
  EXPECT_EQ(error_of([&] { tiny_pool.add_request(beam_request(0, prompt, 20, 3)); }), "(no error)");
  EngineConfig dense = roomy();
  dense.dense = true;
  Engine dense_engine(tiny_model(), dense);
  EXPECT_TRUE(pa::test::contains_text(error_of([&] { dense_engine.add_request(request(0, prompt, 4, 2, 1.f)); }), "the dense policy reserves whole sequences and cannot fork (n or beam_width 2)"));
  EXPECT_TRUE(pa::test::contains_text(error_of([&] { dense_engine.add_request(beam_request(1, prompt, 4, 2)); }), "cannot fork (n or beam_width 2)"));
  EXPECT_EQ(error_of([&] { dense_engine.add_request(request(2, prompt, 4, 1, 1.f)); }), "(no error)");
}

}  // namespace
