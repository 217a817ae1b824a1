// Chapter 8: the serving loop. Preemption (swap and recompute) changes no token, the
// prefix cache's traps, no block leaks after a trace drains, bad requests are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "compare.h"
#include "serving_helpers.h"

namespace {

using pa::ch08::EngineConfig;
using pa::ch08::EngineRequest;
using pa::ch08::EngineStats;
using pa::ch08::Preemption;
using pa::test::concat;
using pa::test::random_tokens;
using pa::test::run_engine;
using pa::test::tiny_model;

// A small slice of the course's synthetic trace: lengths / 32 (prompts 1..32, outputs
// 1..16), two shared 16-token system prompts, two arrivals per step.
std::vector<EngineRequest> small_trace() {
  return pa::ch08::trace_workload(pa::synthetic_trace(pa::kDefaultTraceSeed, 10), 32, 128, 2, 16, 2);
}

EngineConfig roomy() {
  EngineConfig cfg;
  cfg.num_blocks = 64;
  cfg.max_seq_len = 64;
  return cfg;
}

EngineConfig tight(Preemption p) {
  EngineConfig cfg = roomy();
  cfg.num_blocks = 6;  // 96 slots for ten requests of up to 48 tokens
  cfg.preemption = p;
  cfg.num_swap_blocks = 16;
  return cfg;
}

// Anchors an engine run to the dense reference path (two requests keep it quick).
void expect_dense_tokens(const std::map<int, std::vector<int>>& out) {
  static const auto dense = [] {
    const auto reqs = small_trace();
    return pa::ch08::generate_dense(tiny_model(), {reqs[0].prompt, reqs[1].prompt},
                                    {reqs[0].max_new_tokens, reqs[1].max_new_tokens});
  }();
  EXPECT_EQ(out.at(0), dense[0].tokens) << "request 0 differs from the dense path";
  EXPECT_EQ(out.at(1), dense[1].tokens) << "request 1 differs from the dense path";
}

const std::map<int, std::vector<int>>& unpreempted_outputs() {
  static const auto outputs = [] {
    EngineStats st;
    auto out = run_engine(roomy(), small_trace(), &st);
    EXPECT_EQ(st.preemptions, 0);
    EXPECT_GT(st.cached_prompt_tokens, 0) << "the shared system prompts should hit the cache";
    expect_dense_tokens(out);
    return out;
  }();
  return outputs;
}

TEST(Trace, DrainsWithoutLeaksAndRequestsJoinMidFlight) {
  EngineConfig cfg = roomy();
  cfg.max_num_seqs = 4;
  pa::ch08::Engine engine(tiny_model(), cfg);
  for (const auto& r : small_trace()) engine.add_request(r);
  int max_running = 0, joined_while_running = 0, prev_running = 0;
  engine.run([&](const pa::ch08::StepReport& rep) {
    max_running = std::max(max_running, rep.running);
    EXPECT_LE(rep.running, cfg.max_num_seqs);
    if (prev_running > 0 && rep.running > prev_running - rep.finished) ++joined_while_running;
    prev_running = rep.running - rep.finished;
  });
  EXPECT_EQ(engine.stats().finished, 10);
  EXPECT_EQ(max_running, 4);
  EXPECT_GT(joined_while_running, 0) << "no request joined a running batch";
  EXPECT_EQ(engine.blocks().num_free(), cfg.num_blocks);
  engine.blocks().clear_cache();
  EXPECT_EQ(engine.blocks().allocator().num_free(), cfg.num_blocks);
  EXPECT_EQ(engine.outputs(), unpreempted_outputs()) << "max_num_seqs changed the tokens";
}

TEST(Preemption, SwapIsTokenExact) {
  EngineStats st;
  const auto out = run_engine(tight(Preemption::swap), small_trace(), &st);
  EXPECT_GT(st.swap_outs, 0) << "the pool was meant to run out";
  EXPECT_EQ(st.swap_ins, st.swap_outs);
  EXPECT_EQ(out, unpreempted_outputs());
}

TEST(Preemption, RecomputeIsTokenExact) {
  EngineStats st;
  const auto out = run_engine(tight(Preemption::recompute), small_trace(), &st);
  EXPECT_GT(st.recomputes, 0) << "the pool was meant to run out";
  EXPECT_EQ(st.swap_outs, 0);
  EXPECT_EQ(out, unpreempted_outputs());
}

TEST(Preemption, SwapFallsBackToRecomputeWithoutHostSpace) {
  EngineConfig cfg = tight(Preemption::swap);
  cfg.num_swap_blocks = 0;
  EngineStats st;
  const auto out = run_engine(cfg, small_trace(), &st);
  EXPECT_GT(st.recomputes, 0);
  EXPECT_EQ(out, unpreempted_outputs());
}

// The scheduler's order: a request preempted for recompute goes back to the FRONT of the
// waiting queue, ahead of requests that arrived after it. Four blocks: requests 0 and 1
// (16-token prompts, 40 new tokens, up to 4 blocks each) start together; at 33 tokens each
// needs a third block, so request 1, the newest, is preempted. Request 2 (arrived at step 1)
// waits behind it: request 1 comes back when request 0 is done, and request 2 after it.
TEST(Preemption, ARecomputedRequestGoesBackAheadOfLaterArrivals) {
  EngineConfig cfg;
  cfg.num_blocks = 4;
  cfg.block_size = 16;
  cfg.max_num_seqs = 2;
  cfg.max_seq_len = 64;
  cfg.preemption = Preemption::recompute;
  cfg.prefix_caching = false;
  pa::ch08::Engine engine(tiny_model(), cfg);
  engine.add_request({0, random_tokens(16, 101), 40, 0, {}});
  engine.add_request({1, random_tokens(16, 102), 40, 0, {}});
  engine.add_request({2, random_tokens(16, 103), 8, 1, {}});
  std::vector<int> finish_order;
  for (int step = 0; step < 1000 && !engine.done(); ++step) {
    engine.step();
    for (const auto& [id, tokens] : engine.outputs())
      if (std::find(finish_order.begin(), finish_order.end(), id) == finish_order.end()) finish_order.push_back(id);
  }
  ASSERT_TRUE(engine.done());
  ASSERT_GT(engine.stats().recomputes, 0) << "the pool was meant to run out";
  EXPECT_EQ(finish_order, (std::vector<int>{0, 1, 2}))
      << "the order the requests finished in: request 1, preempted for recompute while request 2 "
         "waited, goes back to the FRONT of waiting_, so it runs (and finishes) before request 2";
}

// Swapped-out requests come back first in, first out. Six blocks: requests 0, 1 and 2
// (16-token prompts, 40 new tokens) start together with two blocks each; at 33 tokens
// each needs a third, so request 2, the newest, is swapped out; at 49 tokens requests 0
// and 1 need a fourth, and request 1 is swapped out. When request 0 is done, request 2
// (out first) comes back first, and request 1 only when request 2 is done.
TEST(Preemption, SwappedRequestsComeBackInTheOrderTheyLeft) {
  EngineConfig cfg;
  cfg.num_blocks = 6;
  cfg.block_size = 16;
  cfg.max_num_seqs = 3;
  cfg.max_seq_len = 64;
  cfg.preemption = Preemption::swap;
  cfg.num_swap_blocks = 16;
  cfg.prefix_caching = false;
  pa::ch08::Engine engine(tiny_model(), cfg);
  for (int id = 0; id < 3; ++id) engine.add_request({id, random_tokens(16, 201 + uint64_t(id)), 40, 0, {}});
  std::vector<int> finish_order;
  for (int step = 0; step < 1000 && !engine.done(); ++step) {
    engine.step();
    for (const auto& [id, tokens] : engine.outputs())
      if (std::find(finish_order.begin(), finish_order.end(), id) == finish_order.end()) finish_order.push_back(id);
  }
  ASSERT_TRUE(engine.done());
  ASSERT_EQ(engine.stats().swap_outs, 2) << "requests 2 and then 1 were meant to be swapped out";
  EXPECT_EQ(finish_order, (std::vector<int>{0, 2, 1}))
      << "the order the requests finished in: request 2, swapped out before request 1, goes back to "
         "the GPU first (swapped_ is first in, first out: the back of swapped_ on the way out)";
}

// Trap 1: a prompt whose every block is cached. The last token must still be computed
// (its logits choose the first output token), so only blocks covering at most
// prompt_len - 1 tokens are taken from the cache.
TEST(PrefixCache, FullHitStillComputesTheLastToken) {
  for (int len : {32, 33}) {
    const std::vector<int> prompt = random_tokens(len, 7);
    pa::ch08::Engine engine(tiny_model(), roomy());
    engine.add_request({0, prompt, 5, 0});
    engine.run();
    EXPECT_EQ(engine.blocks().num_cached(), (len + 5 - 1) / 16);  // the full blocks fed back
    engine.add_request({1, prompt, 5, 0});
    engine.run();
    EXPECT_EQ(engine.stats().cached_prompt_tokens, len == 32 ? 16 : 32) << "prompt of " << len;
    EXPECT_EQ(engine.outputs().at(1), engine.outputs().at(0)) << "prompt of " << len;
    EXPECT_EQ(engine.blocks().num_free(), roomy().num_blocks);
  }
}

// Trap 2: preempting a sequence whose first blocks are shared with a running one. The
// shared blocks lose one owner and stay; both sequences' tokens are unchanged.
TEST(PrefixCache, PreemptingASequenceWithSharedBlocks) {
  const std::vector<int> system = random_tokens(32, 9);
  const std::vector<EngineRequest> reqs = {
      {0, concat(system, random_tokens(3, 10)), 28, 0},
      {1, concat(system, random_tokens(8, 11)), 28, 1},  // arrives after 0's prefix is cached
  };
  EngineConfig base = roomy();
  base.max_seq_len = 80;
  EngineStats roomy_stats;
  const auto want = run_engine(base, reqs, &roomy_stats);
  EXPECT_EQ(roomy_stats.cached_prompt_tokens, 32);
  for (Preemption p : {Preemption::swap, Preemption::recompute}) {
    EngineConfig cfg = base;
    cfg.num_blocks = 6;  // 0 needs 4 blocks, 1 needs 5, two are shared: 7 > 6
    cfg.preemption = p;
    EngineStats st;
    EXPECT_EQ(run_engine(cfg, reqs, &st), want) << (p == Preemption::swap ? "swap" : "recompute");
    EXPECT_GT(st.preemptions, 0);
    EXPECT_GE(st.cached_prompt_tokens, 32);
  }
}

// Trap 3: appends that land exactly on block boundaries. A block is registered when its
// last token's K/V is computed, not earlier; a sequence whose blocks are all full and
// cached gets a fresh block for its next token, never a write into a shared one.
TEST(PrefixCache, AppendAtExactBlockBoundaries) {
  const std::vector<int> prompt = random_tokens(16, 12);
  pa::ch08::Engine engine(tiny_model(), roomy());
  engine.add_request({0, prompt, 17, 0});
  engine.step();  // prefill of exactly one block: it is full and computed
  EXPECT_EQ(engine.blocks().num_cached(), 1);
  engine.run();
  // 16 prompt + 17 generated = 33 tokens, 32 of them fed back: exactly two full blocks.
  EXPECT_EQ(engine.blocks().num_cached(), 2);
  EXPECT_EQ(engine.blocks().num_evictable(), 2);
  // A prompt of those 33 tokens shares both blocks and computes only its last token.
  const std::vector<int> longer = concat(prompt, engine.outputs().at(0));
  engine.add_request({1, longer, 4, 0});
  engine.run();
  EXPECT_EQ(engine.stats().cached_prompt_tokens, 32);
  const auto dense = pa::ch08::generate_dense(tiny_model(), {longer}, {4});
  EXPECT_EQ(engine.outputs().at(1), dense[0].tokens);
}

// Evicted blocks: a cached block that nobody owns gives its memory to a new block when
// the pool is full; its hash is forgotten, so a later request with the old prefix
// recomputes it instead of reading another request's K/V.
TEST(PrefixCache, EvictedBlocksAreReusedCorrectly) {
  EngineConfig cfg = roomy();
  cfg.num_blocks = 4;
  const std::vector<int> a = random_tokens(40, 13), b = random_tokens(40, 14);
  pa::ch08::Engine engine(tiny_model(), cfg);
  engine.add_request({0, a, 6, 0});
  engine.run();
  EXPECT_EQ(engine.blocks().num_cached(), 2);
  engine.add_request({1, b, 20, 0});  // needs all 4 blocks: evicts both of a's
  engine.run();
  EXPECT_GE(engine.blocks().evictions(), 2);
  engine.add_request({2, a, 6, 0});
  engine.run();
  EXPECT_EQ(engine.outputs().at(2), engine.outputs().at(0));
  const auto dense = pa::ch08::generate_dense(tiny_model(), {b}, {20});
  EXPECT_EQ(engine.outputs().at(1), dense[0].tokens);
  EXPECT_EQ(engine.blocks().num_free(), cfg.num_blocks);
}

// Which block of a released chain goes first: the deepest. A prefix is found only through
// its first blocks, so evicting the root (block 0) would lose every block after it at once;
// evicting the last keeps a hit of two blocks.
TEST(PrefixCache, OneEvictionTakesTheChainsLastBlockNotItsRoot) {
  pa::ch08::CachingBlockManager m(3, 8);
  const std::vector<int> prompt = random_tokens(24, 16);
  m.add_sequence(0);
  m.append_slots(0, 24);
  m.commit(0, prompt, 24);
  const std::vector<int> chain = m.block_list(0);
  m.release(0);
  ASSERT_EQ(m.match_prefix(prompt, 24), chain) << "the three blocks are cached";
  m.add_sequence(1);
  m.append_slots(1, 1);  // the pool has no free block: one eviction
  EXPECT_EQ(m.evictions(), 1);
  EXPECT_EQ(m.block_list(1), std::vector<int>{chain[2]}) << "the chain's last (deepest) block is evicted first";
  EXPECT_EQ(m.match_prefix(prompt, 24), std::vector<int>(chain.begin(), chain.begin() + 2))
      << "one eviction must leave a hit of the chain's first two blocks";
}

TEST(PrefixCache, HashChainsTheParent) {
  const std::vector<int> t = random_tokens(16, 15);
  EXPECT_EQ(pa::ch08::block_hash(1, t.data(), 16), pa::ch08::block_hash(1, t.data(), 16));
  EXPECT_NE(pa::ch08::block_hash(1, t.data(), 16), pa::ch08::block_hash(2, t.data(), 16));
  pa::ch08::CachingBlockManager m(8, 16);
  m.add_sequence(0, {});
  const std::vector<int> two = concat(t, random_tokens(16, 16));
  m.append_slots(0, 32);
  m.commit(0, two, 31);  // the second block is one token short: not cached
  EXPECT_EQ(m.num_cached(), 1);
  m.commit(0, two, 32);
  EXPECT_EQ(m.num_cached(), 2);
  EXPECT_EQ(m.match_prefix(two, 32).size(), 2u);
  EXPECT_EQ(m.match_prefix(two, 31).size(), 1u);
  // The same second block after a different first block is a different block.
  const std::vector<int> other = concat(random_tokens(16, 17), std::vector<int>(two.begin() + 16, two.end()));
  EXPECT_EQ(m.match_prefix(other, 32).size(), 0u);
  m.release(0);
  EXPECT_EQ(m.num_evictable(), 2);
  EXPECT_EQ(m.num_free(), 8);
}

// A hash names a block, but only the tokens prove it: two different blocks of 8 tokens
// with the same chain hash (b's last two tokens were found by a search over 2^32 values
// that inverts the hash's last mixing step). The cached block a must not be handed out for b.
TEST(PrefixCache, ACollidingHashIsNoHit) {
  const std::vector<int> a = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int> b = {101, 102, 103, 104, 105, 106, -21330887, 1767631822};
  ASSERT_EQ(pa::ch08::block_hash(pa::ch08::kRootHash, a.data(), 8),
            pa::ch08::block_hash(pa::ch08::kRootHash, b.data(), 8))
      << "blocks a and b were chosen for their equal hashes (block_hash changed?)";
  pa::ch08::CachingBlockManager m(4, 8);
  m.add_sequence(0, {});
  m.append_slots(0, 8);
  m.commit(0, a, 8);
  ASSERT_EQ(m.num_cached(), 1);
  EXPECT_EQ(m.match_prefix(a, 8).size(), 1u) << "match_prefix: block a is cached";
  EXPECT_TRUE(m.match_prefix(b, 8).empty())
      << "match_prefix: block b has cached block a's hash but other tokens: a collision, no hit";
}

TEST(Engine, DenseAndPagedPoliciesGiveTheSameTokens) {
  EngineConfig dense = roomy();
  dense.num_blocks = 16;  // 256 slots: four 64-token slabs
  dense.dense = true;
  EngineConfig paged = roomy();
  paged.num_blocks = 16;
  EngineStats ds, ps;
  const auto a = run_engine(dense, small_trace(), &ds);
  const auto b = run_engine(paged, small_trace(), &ps);
  expect_dense_tokens(a);
  EXPECT_EQ(a, b);
  EXPECT_LE(ds.peak_running, 4);
  EXPECT_GT(ps.peak_running, ds.peak_running);
  EXPECT_LT(ps.steps, ds.steps);
  EXPECT_LT(ps.sum_allocated_slots - ps.sum_used_slots, ds.sum_allocated_slots - ds.sum_used_slots);
}

// Blocks of 8 and 32 tokens: other edges for the prefill chunks, the tables and the
// prefix cache; under pressure for 8 (more blocks, more preemption).
TEST(Engine, OtherBlockSizesGiveTheSameTokens) {
  for (int bs : {8, 32}) {
    EngineConfig cfg = roomy();
    cfg.block_size = bs;
    cfg.num_blocks = 64 * 16 / bs;
    if (bs == 8) {
      cfg.num_blocks = 12;  // 96 slots, as tight() for 16
      cfg.preemption = Preemption::swap;
    }
    EngineStats st;
    const auto out = run_engine(cfg, small_trace(), &st);
    expect_dense_tokens(out);
    EXPECT_EQ(out, unpreempted_outputs()) << "block size " << bs;
    if (bs == 8) EXPECT_GT(st.preemptions, 0);
  }
}

TEST(EngineErrors, BadRequestsAreRefused) {
  using pa::test::error_of;
  pa::ch08::Engine engine(tiny_model(), roomy());
  auto add = [&](EngineRequest r) { return error_of([&] { engine.add_request(r); }); };
  EXPECT_TRUE(pa::test::contains_text(add({0, {}, 4, 0}), "empty prompt"));
  EXPECT_TRUE(pa::test::contains_text(add({0, {1, 999}, 4, 0}), "token 999 is outside the vocabulary"));
  EXPECT_TRUE(pa::test::contains_text(add({0, random_tokens(60, 1), 8, 0}), "beyond max_seq_len 64"));
  EXPECT_TRUE(pa::test::contains_text(add({0, {1}, 0, 0}), "asks for 0 new tokens"));
  // Summed in 32 bits, 2 + INT_MAX wrapped to a negative total that passed every check.
  EXPECT_TRUE(pa::test::contains_text(add({5, {1, 2}, 2147483647, 0}),
                                      "request 5: prompt + output = 2 + 2147483647 = 2147483649 tokens is beyond "
                                      "max_seq_len 64"));
  EXPECT_EQ(add({0, {1}, 1, 0}), "(no error)");
  EXPECT_TRUE(pa::test::contains_text(add({0, {1}, 1, 0}), "already added"));
  EngineConfig small = roomy();
  small.num_blocks = 2;
  pa::ch08::Engine little(tiny_model(), small);
  EXPECT_TRUE(pa::test::contains_text(error_of([&] { little.add_request({0, random_tokens(40, 2), 1, 0}); }), "the whole pool has 2"));
  small.dense = true;
  EXPECT_TRUE(pa::test::contains_text(error_of([&] { pa::ch08::Engine e(tiny_model(), small); }), "dense policy reserves"));
}

}  // namespace

namespace {

// GPU only: the demo's workload at a larger size, under pressure, swap and recompute
// against a roomy run: token-exact and leak-free.
TEST(TraceLarge, PreemptionIsTokenExactOnABiggerTrace) {
  if (std::string(PA_BACKEND_NAME) != "cuda" && !std::getenv("PA_CH08_FORCE_LARGE"))
    GTEST_SKIP() << "a bigger trace: GPU only (PA_CH08_FORCE_LARGE=1 runs it here, slowly)";
  const auto reqs = pa::ch08::trace_workload(pa::synthetic_trace(pa::kDefaultTraceSeed, 64), 4, 128, 2, 32, 4);
  EngineConfig big;
  big.num_blocks = 2048;
  big.max_seq_len = 384;
  big.max_num_seqs = 64;
  big.max_tokens_per_step = 512;
  EngineStats st;
  const auto want = run_engine(big, reqs, &st);
  EXPECT_EQ(st.preemptions, 0);
  for (Preemption p : {Preemption::swap, Preemption::recompute}) {
    EngineConfig cfg = big;
    cfg.num_blocks = 80;
    cfg.preemption = p;
    EngineStats ps;
    EXPECT_EQ(run_engine(cfg, reqs, &ps), want);
    EXPECT_GT(ps.preemptions, 0);
  }
}

}  // namespace

namespace {

// The prefix cache's bookkeeping under random interleavings of admissions (with prefix
// hits), appends (some running out of blocks), and releases, against a model that
// remembers which prefix of tokens each physical block was written for. After every
// operation: counts equal owners, owned + free (or evictable) = all blocks, and every
// block a lookup returns really holds that prefix (so no evicted, reused block is hit).
TEST(PrefixCache, InvariantsHoldUnderRandomInterleavings) {
  for (int bs : {8, 16}) {
    const int num_blocks = 24;
    pa::ch08::CachingBlockManager m(num_blocks, bs);
    std::mt19937 rng(static_cast<unsigned>(bs));
    const std::vector<std::vector<int>> systems = {random_tokens(3 * bs, 31), random_tokens(2 * bs, 32),
                                                   random_tokens(bs + 3, 33)};
    std::map<int, std::vector<int>> live;                   // seq -> its tokens
    std::vector<std::vector<int>> written(static_cast<size_t>(num_blocks));  // block -> its prefix
    int next_id = 0, hits = 0, out_of_blocks = 0;
    auto write = [&](int id, const std::vector<int64_t>& slots, int first_pos) {
      for (size_t j = 0; j < slots.size(); ++j) {
        const int b = int(slots[j] / bs), pos = first_pos + int(j);
        ASSERT_EQ(m.refcount(b), 1) << "a write into a shared block";
        const auto& t = live[id];
        written[size_t(b)].assign(t.begin(), t.begin() + pos + 1);
      }
    };
    for (int op = 0; op < 3000; ++op) {
      const int kind = int(rng() % 3);
      if (kind == 0 || live.empty()) {  // admit a prompt, reusing its cached prefix
        std::vector<int> t = systems[rng() % systems.size()];
        t = concat(t, random_tokens(int(rng() % 20) + 1, uint64_t(op)));
        const auto hit = m.match_prefix(t, int(t.size()) - 1);
        for (size_t i = 0; i < hit.size(); ++i) {
          const auto& w = written[size_t(hit[i])];
          ASSERT_GE(w.size(), (i + 1) * size_t(bs));
          ASSERT_TRUE(std::equal(t.begin(), t.begin() + int64_t(i + 1) * bs, w.begin()))
              << "block " << hit[i] << " was hit for a prefix it does not hold";
        }
        hits += int(hit.size());
        const int id = next_id++;
        m.add_sequence(id, hit);
        live[id] = t;
        try {
          const int first = m.length(id);
          write(id, m.append_slots(id, int(t.size()) - first), first);
          m.commit(id, t, int(t.size()));
        } catch (const pa::ch02::OutOfBlocks&) {
          ++out_of_blocks;
          m.release(id);
          live.erase(id);
        }
      } else if (kind == 1) {  // append a few tokens to a live sequence
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        const int id = it->first, n = int(rng() % 5) + 1, before = m.length(id), free_before = m.num_free();
        const std::vector<int> more = random_tokens(n, uint64_t(op) + 7);
        try {
          const auto slots = m.append_slots(id, n);
          it->second = concat(it->second, more);
          write(id, slots, before);
          m.commit(id, it->second, int(it->second.size()));
        } catch (const pa::ch02::OutOfBlocks&) {
          ++out_of_blocks;
          ASSERT_EQ(m.length(id), before);
          ASSERT_EQ(m.num_free(), free_before);
        }
      } else {  // release
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        m.release(it->first);
        live.erase(it);
      }
      std::vector<int> owners(size_t(num_blocks), 0);
      for (const auto& [id, t] : live) {
        ASSERT_EQ(m.length(id), int(t.size()));
        for (int b : m.block_list(id)) ++owners[size_t(b)];
      }
      int owned = 0;
      for (int b = 0; b < num_blocks; ++b) {
        ASSERT_EQ(m.refcount(b), owners[size_t(b)]) << "block " << b << " after op " << op;
        owned += owners[size_t(b)] > 0;
      }
      ASSERT_EQ(owned + m.num_free(), num_blocks) << "after op " << op;
    }
    EXPECT_GT(hits, 100);
    EXPECT_GT(out_of_blocks, 10);
    EXPECT_GT(m.evictions(), 10);
    for (const auto& [id, t] : live) m.release(id);
    EXPECT_EQ(m.num_free(), num_blocks);
    m.clear_cache();
    EXPECT_EQ(m.allocator().num_free(), num_blocks);
    EXPECT_EQ(m.num_cached(), 0);
  }
}

}  // namespace
