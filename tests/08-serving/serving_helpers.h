// Shared by chapter 8's tests: the tiny model, prompts, and engine runs.
#pragma once

#include <gtest/gtest.h>

#include <map>
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

}  // namespace pa::test
