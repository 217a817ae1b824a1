// Shared by chapter 8's tests: the tiny model, prompts, and engine runs.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "pa/ch08_engine.h"
#include "pa/trace.h"

namespace pa::test {

inline ch08::TinyModel& tiny_model() {
  static ch08::TinyModel model{ch08::ModelConfig{}};
  return model;
}

inline std::vector<int> random_tokens(int n, uint64_t seed, int vocab = 128) {
  SplitMix64 rng(seed);
  std::vector<int> t(static_cast<size_t>(n));
  for (int& e : t) e = int(rng.uniform_int(0, vocab - 1));
  return t;
}

inline std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs `requests` to completion; checks that nothing leaked.
inline std::map<int, std::vector<int>> run_engine(const ch08::EngineConfig& cfg,
                                                  const std::vector<ch08::EngineRequest>& requests,
                                                  ch08::EngineStats* stats = nullptr) {
  ch08::Engine engine(tiny_model(), cfg);
  for (const auto& r : requests) engine.add_request(r);
  engine.run();
  if (stats) *stats = engine.stats();
  const ch08::CachingBlockManager& bm = engine.blocks();
  EXPECT_EQ(bm.num_free(), cfg.num_blocks) << "blocks still owned after the trace drained";
  for (int b = 0; b < cfg.num_blocks; ++b) EXPECT_EQ(bm.refcount(b), 0) << "block " << b;
  EXPECT_EQ(engine.host_blocks_free(), std::max(cfg.num_swap_blocks, 1)) << "host swap blocks leaked";
  engine.blocks().clear_cache();
  EXPECT_EQ(engine.blocks().allocator().num_free(), cfg.num_blocks) << "cached blocks leaked";
  for (const auto& r : requests)
    EXPECT_EQ(engine.outputs().at(r.id).size(), size_t(r.max_new_tokens)) << "request " << r.id;
  return engine.outputs();
}

// Teacher forcing on the dense path (chapter 1's caches, no paging, no sharing): feeds
// every token of each sequence, all sequences side by side, one position per
// forward_dense call. out[b][t] = the logits after tokens 0..t of sequence b, i.e. the
// distribution that token t + 1 was drawn from.
inline std::vector<std::vector<std::vector<float>>> dense_logits(
    const std::vector<std::vector<int>>& seqs, ch08::TinyModel& model = tiny_model()) {
  const ch08::ModelConfig& c = model.config();
  const int B = int(seqs.size());
  int longest = 1;
  for (const auto& s : seqs) longest = std::max(longest, int(s.size()));
  std::vector<ch01::DenseKVCache<float>> caches;
  for (int l = 0; l < c.num_layers; ++l)
    caches.emplace_back(ch01::DenseShape{B, longest, c.num_q_heads, c.num_kv_heads, c.head_size});
  std::vector<std::vector<std::vector<float>>> out(static_cast<size_t>(B));
  for (int t = 0; t < longest; ++t) {
    std::vector<int> tokens(size_t(B), 0);
    std::vector<bool> active(size_t(B), false);
    for (int b = 0; b < B; ++b)
      if (t < int(seqs[size_t(b)].size())) {
        tokens[size_t(b)] = seqs[size_t(b)][size_t(t)];
        active[size_t(b)] = true;
      }
    const std::vector<float> logits = model.forward_dense(tokens, active, caches);
    for (int b = 0; b < B; ++b)
      if (active[size_t(b)])
        out[size_t(b)].emplace_back(logits.begin() + int64_t(b) * c.vocab_size,
                                    logits.begin() + int64_t(b + 1) * c.vocab_size);
  }
  return out;
}

// The sequences an engine's block manager holds now. The engine numbers its sequences
// 0, 1, 2, ... (forks included), so probing the ids up to max_id finds them all.
inline std::vector<int> live_sequences(const ch08::CachingBlockManager& bm, int max_id = 1024) {
  std::vector<int> live;
  for (int id = 0; id < max_id; ++id)
    if (bm.has_sequence(id)) live.push_back(id);
  return live;
}

// The sharing bookkeeping seen from outside: each block's refcount is the number of live
// sequences whose block list holds it (a block twice in one list counts twice: a bug);
// owned + num_free() = every block; num_free() = the allocator's free + the evictable
// ones. The message names the first block that is wrong and who holds it.
inline ::testing::AssertionResult blocks_consistent(const ch08::CachingBlockManager& bm,
                                                    const std::vector<int>& live) {
  const int nb = bm.num_blocks();
  std::vector<int> holders(static_cast<size_t>(nb), 0);
  std::vector<std::vector<int>> who(static_cast<size_t>(nb));
  for (int id : live) {
    const std::vector<int>& list = bm.block_list(id);
    const int want = (bm.length(id) + bm.block_size() - 1) / bm.block_size();
    if (int(list.size()) < want)
      return ::testing::AssertionFailure() << "sequence " << id << " has length " << bm.length(id)
                                           << " but only " << list.size() << " blocks";
    for (int b : list) {
      if (b < 0 || b >= nb) return ::testing::AssertionFailure() << "sequence " << id << " holds block " << b;
      ++holders[size_t(b)];
      who[size_t(b)].push_back(id);
    }
  }
  int owned = 0;
  for (int b = 0; b < nb; ++b) {
    if (bm.refcount(b) != holders[size_t(b)]) {
      std::ostringstream os;
      for (int id : who[size_t(b)]) os << " " << id;
      return ::testing::AssertionFailure() << "block " << b << " has refcount " << bm.refcount(b) << " but "
                                           << holders[size_t(b)] << " holders (sequences" << os.str() << ")";
    }
    owned += holders[size_t(b)] > 0 ? 1 : 0;
  }
  if (owned + bm.num_free() != nb)
    return ::testing::AssertionFailure() << owned << " owned blocks + " << bm.num_free() << " free != " << nb;
  if (bm.num_free() != bm.allocator().num_free() + bm.num_evictable())
    return ::testing::AssertionFailure() << "num_free " << bm.num_free() << " != allocator free "
                                         << bm.allocator().num_free() << " + evictable " << bm.num_evictable();
  return ::testing::AssertionSuccess();
}

// Steps `engine` to the end, checking blocks_consistent after every step; the message
// names the step. Returns the reports.
inline std::vector<ch08::StepReport> run_checked(ch08::Engine& engine, int max_id = 1024) {
  std::vector<ch08::StepReport> reps;
  while (!engine.done()) {
    reps.push_back(engine.step());
    const auto ok = blocks_consistent(engine.blocks(), live_sequences(engine.blocks(), max_id));
    EXPECT_TRUE(ok) << "after step " << reps.back().step;
    if (!ok) break;
  }
  return reps;
}

// After a drained run: every block free (or evictable), every host block back, and the
// cache empties to the allocator.
inline void expect_no_leaks(ch08::Engine& engine, const ch08::EngineConfig& cfg) {
  EXPECT_EQ(engine.blocks().num_free(), cfg.num_blocks) << "blocks still owned after the run";
  for (int b = 0; b < cfg.num_blocks; ++b) EXPECT_EQ(engine.blocks().refcount(b), 0) << "block " << b;
  EXPECT_EQ(engine.host_blocks_free(), std::max(cfg.num_swap_blocks, 1)) << "host swap blocks leaked";
  EXPECT_TRUE(live_sequences(engine.blocks()).empty()) << "sequences still live";
  engine.blocks().clear_cache();
  EXPECT_EQ(engine.blocks().allocator().num_free(), cfg.num_blocks) << "cached blocks leaked";
}

}  // namespace pa::test
