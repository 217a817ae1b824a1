// Chapter 8 with a DSA model (chapter 14's lightning indexer): the indexer pool, a second
// paged cache per layer under the same block ids. Its layout and writer are the NumPy
// reference's (reference/pa_ref/dsa.py, golden cases indexer_*), and the engine carries its
// bytes wherever a block's K/V go: a fork shares them, copy-on-write copies them, a swap
// out and in restores them bit for bit, a prefix-cache hit reuses them.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <tuple>

#include "compare.h"
#include "golden.h"
#include "serving_helpers.h"

namespace {

using pa::DeviceBuffer;
using pa::ch08::Engine;
using pa::ch08::EngineConfig;
using pa::ch08::EngineRequest;
using pa::ch08::kIndexBytesPerToken;
using pa::ch08::kIndexHeadDim;
using pa::ch08::ModelConfig;
using pa::ch08::PagedKV;
using pa::ch08::Preemption;
using pa::ch08::TinyModel;
using pa::test::error_contains;
using pa::test::random_tokens;

ModelConfig dsa_config() {
  ModelConfig c;
  c.dsa = true;
  return c;
}

TinyModel& dsa_model() {
  static TinyModel model{dsa_config()};
  return model;
}

std::string hex(int byte) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", byte);
  return buf;
}

// Where byte `at` of a flat pool lies: "block b, offset o, key byte j" or "... scale byte j".
std::string where(int64_t at, int block_size) {
  const int64_t block_bytes = pa::ch08::indexer_block_bytes(block_size);
  const int64_t block = at / block_bytes, in = at % block_bytes;
  std::ostringstream os;
  os << "block " << block << ", ";
  if (in < int64_t(block_size) * kIndexHeadDim)
    os << "offset " << in / kIndexHeadDim << ", key byte " << in % kIndexHeadDim;
  else
    os << "offset " << (in - block_size * kIndexHeadDim) / 4 << ", scale byte " << (in - block_size * kIndexHeadDim) % 4;
  return os.str();
}

// ---- The layout and the writer, against the reference -------------------------------------

TEST(IndexerPool, OffsetsAreTheReferences) {
  // By hand, block_size 16 (2,112 bytes a block): block 3 starts at 6,336; its keys take
  // 2,048 bytes, then the scales.
  EXPECT_EQ(pa::ch08::indexer_block_bytes(16), 2112);
  EXPECT_EQ(pa::ch08::indexer_key_offset(3, 5, 16), 6336 + 5 * 128);
  EXPECT_EQ(pa::ch08::indexer_scale_offset(3, 5, 16), 6336 + 2048 + 5 * 4);
  // 64-bit: block 2^24 of 64-token blocks is 141 GB into the pool.
  EXPECT_EQ(pa::ch08::indexer_key_offset(int64_t(1) << 24, 63, 64), (int64_t(1) << 24) * 8448 + 63 * 128);
  for (const std::string& name : pa::test::golden_case_names("ch08", "indexer_")) {
    const pa::test::GoldenCase g(pa::test::golden_dir("ch08") + "/" + name);
    const int bs = int(g.param_int("block_size")), nb = int(g.param_int("num_blocks"));
    const auto keys = g.get<int64_t>("key_offsets"), scales = g.get<int64_t>("scale_offsets");
    ASSERT_EQ(keys.size(), size_t(nb) * bs) << name;
    for (int i = 0; i < nb * bs; ++i) {
      ASSERT_EQ(pa::ch08::indexer_key_offset(i / bs, i % bs, bs), keys[size_t(i)])
          << name << ": the key of block " << i / bs << ", offset " << i % bs << " (dsa.indexer_key_offset)";
      ASSERT_EQ(pa::ch08::indexer_scale_offset(i / bs, i % bs, bs), scales[size_t(i)])
          << name << ": the scale of block " << i / bs << ", offset " << i % bs << " (dsa.indexer_scale_offset)";
    }
  }
}

// reshape_and_cache_indexer writes the bytes dsa.reshape_and_cache_indexer does, into a
// 0xFF pool: every key byte, every scale, and nothing at the slots nobody wrote.
TEST(IndexerPool, WriterIsBitExactWithTheReference) {
  for (const std::string& name : pa::test::golden_case_names("ch08", "indexer_")) {
    const pa::test::GoldenCase g(pa::test::golden_dir("ch08") + "/" + name);
    const int bs = int(g.param_int("block_size")), nb = int(g.param_int("num_blocks"));
    const auto keys = g.get<float>("keys");
    const auto slots = g.get<int64_t>("slot_mapping");
    const auto want = g.get<uint8_t>("pool");
    const int n = int(slots.size());
    DeviceBuffer<float> d_keys(keys);
    DeviceBuffer<int64_t> d_slots(slots);
    DeviceBuffer<uint8_t> pool(size_t(nb) * size_t(pa::ch08::indexer_block_bytes(bs)));
    PA_CUDA_CHECK(cudaMemset(pool.get(), 0xFF, pool.bytes()));
    pa::ch08::reshape_and_cache_indexer(d_keys.get(), n, pool.get(), bs, d_slots.get());
    PA_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = pool.download();
    ASSERT_EQ(got.size(), want.size()) << name;
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i] && bad++ == 0) first = int64_t(i);
    EXPECT_EQ(bad, 0) << name << ": " << bad << " bytes differ; the first at byte " << first << " ("
                      << where(first, bs) << "): " << hex(first < 0 ? 0 : got[size_t(first)]) << ", the reference has "
                      << hex(first < 0 ? 0 : want[size_t(first)]);
  }
}

TEST(IndexerPool, OnlyADsaModelHasOneAndItStartsPoisoned) {
  const PagedKV kv(dsa_config(), 6, 8);
  ASSERT_EQ(kv.indexer_pools.size(), 2u) << "one indexer pool per layer";
  EXPECT_EQ(kv.index_block_bytes(), 8 * 132);
  for (const auto& p : kv.indexer_pools) {
    ASSERT_EQ(p.bytes(), size_t(6 * 8 * 132));
    const std::vector<uint8_t> bytes = p.download();
    for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], 0xFF) << "byte " << i << " (" << where(int64_t(i), 8) << ")";
  }
  EXPECT_TRUE(PagedKV(ModelConfig{}, 6, 8).indexer_pools.empty()) << "a model without DSA has no indexer pool";
  ModelConfig mla = dsa_config();
  mla.attention = pa::ch08::AttentionKind::mla;
  const PagedKV both(mla, 4, 16);
  EXPECT_EQ(both.latent_pools.size(), 2u);
  EXPECT_EQ(both.indexer_pools.size(), 2u) << "an MLA model with DSA: a latent and an indexer pool per layer";
  // What a token costs: the indexer adds 132 bytes a layer.
  EXPECT_EQ(dsa_config().kv_bytes_per_token(), ModelConfig{}.kv_bytes_per_token() + 2 * 132);
  EXPECT_EQ(mla.kv_bytes_per_token(), 2 * (576 * 4 + 132));
}

TEST(IndexerPool, BadConfigsAreRefused) {
  ModelConfig wide = dsa_config();
  wide.index_head_dim = 64;
  EXPECT_TRUE(error_contains([&] { PagedKV(wide, 4, 16); }, "index_head_dim must be 128"));
  EXPECT_TRUE(error_contains([&] { TinyModel m(wide); }, "got 64"));
  EXPECT_TRUE(error_contains([] { PagedKV(dsa_config(), 4, 6); }, "multiple of 4"));
  ModelConfig windowed = dsa_config();
  windowed.windows = {4, 0};
  EXPECT_TRUE(error_contains([&] { PagedKV(windowed, 4, 16); }, "no windows or sinks"));
  // A step on a cache without indexer pools, for a DSA model.
  PagedKV plain(ModelConfig{}, 4, 16);
  pa::ch08::StepInput in;
  in.tokens = {1};
  in.positions = {0};
  in.batch.num_seqs = 1;
  in.batch.max_blocks_per_seq = 1;
  in.batch.block_table = {0};
  in.batch.context_lens = {1};
  in.batch.slot_mapping = {0};
  in.batch.query_start_loc = {0, 1};
  in.logit_rows = {0};
  EXPECT_TRUE(error_contains([&] { dsa_model().forward_paged(in, plain); }, "indexer pool"));
}

// ---- The engine carries the pool ---------------------------------------------------------

using Row = std::array<uint8_t, kIndexBytesPerToken>;  // one token's key, then its scale

Row row_at(const std::vector<uint8_t>& pool, int64_t block, int offset, int bs) {
  Row r;
  std::copy_n(pool.begin() + pa::ch08::indexer_key_offset(block, offset, bs), kIndexHeadDim, r.begin());
  std::copy_n(pool.begin() + pa::ch08::indexer_scale_offset(block, offset, bs), 4, r.begin() + kIndexHeadDim);
  return r;
}

float scale_of(const Row& r) {
  float s;
  std::memcpy(&s, r.data() + kIndexHeadDim, 4);
  return s;
}

// An e4m3 byte's value (bias 7, 3 mantissa bits, no infinity; 0x7F and 0xFF are NaN).
double e4m3_value(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  if ((b & 0x7F) == 0x7F) return NAN;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return b & 0x80 ? -v : v;
}

// The reference: one prefill of `tokens` into a fresh cache, blocks 0, 1, ... in order.
// rows[layer][position].
std::vector<std::vector<Row>> reference_rows(const std::vector<int>& tokens, int bs) {
  const int n = int(tokens.size()), nb = (n + bs - 1) / bs;
  PagedKV kv(dsa_config(), nb, bs);
  pa::ch08::StepInput in;
  in.tokens = tokens;
  for (int p = 0; p < n; ++p) {
    in.positions.push_back(p);
    in.batch.slot_mapping.push_back(p);
  }
  in.batch.num_seqs = 1;
  in.batch.max_blocks_per_seq = nb;
  for (int b = 0; b < nb; ++b) in.batch.block_table.push_back(b);
  in.batch.context_lens = {n};
  in.batch.query_start_loc = {0, n};
  in.logit_rows = {n - 1};
  dsa_model().forward_paged(in, kv);
  std::vector<std::vector<Row>> rows;
  for (const auto& pool : kv.indexer_pools) {
    const std::vector<uint8_t> bytes = pool.download();
    rows.emplace_back();
    for (int p = 0; p < n; ++p) rows.back().push_back(row_at(bytes, p / bs, p % bs, bs));
  }
  return rows;
}

// Every step, the indexer rows of each sequence that holds blocks: positions 0 ..
// num_computed - 1, read through its block list from the engine's pools.
struct IndexerWatch {
  struct Seen {
    int step, request, seq_id;
    std::vector<int> tokens;               // the computed ones
    std::vector<int> blocks;               // its block list then
    std::vector<std::vector<Row>> rows;    // [layer][position]
  };
  int bs;
  std::vector<Seen> seen;

  void observe(const Engine& e, int step) {
    std::vector<std::vector<uint8_t>> pools;
    for (const auto& p : e.kv().indexer_pools) pools.push_back(p.download());
    for (const Engine::LiveSequence& s : e.live_sequences()) {
      Seen x{step, s.request, s.seq_id, {s.tokens.begin(), s.tokens.begin() + s.num_computed},
             e.blocks().block_list(s.seq_id), {}};
      for (const auto& pool : pools) {
        x.rows.emplace_back();
        for (int p = 0; p < s.num_computed; ++p) x.rows.back().push_back(row_at(pool, x.blocks[size_t(p / bs)], p % bs, bs));
      }
      seen.push_back(std::move(x));
    }
  }

  std::string who(const Seen& x, int p, int layer) const {
    std::ostringstream os;
    os << "step " << x.step << ", request " << x.request << ", sequence " << x.seq_id << ", position " << p
       << " (block " << x.blocks[size_t(p / bs)] << ", offset " << p % bs << "), layer " << layer;
    return os.str();
  }

  // A sequence's rows never change once written (no recompute): across a swap out and in,
  // a copy-on-write, a step that writes the block's next token.
  ::testing::AssertionResult stable() const {
    std::map<std::tuple<int, int, int>, std::pair<const Seen*, Row>> first;  // (seq, layer, position)
    for (const Seen& x : seen)
      for (size_t l = 0; l < x.rows.size(); ++l)
        for (size_t p = 0; p < x.rows[l].size(); ++p) {
          auto [it, fresh] = first.try_emplace({x.seq_id, int(l), int(p)}, &x, x.rows[l][p]);
          if (fresh || it->second.second == x.rows[l][p]) continue;
          size_t j = 0;
          while (it->second.second[j] == x.rows[l][p][j]) ++j;
          return ::testing::AssertionFailure()
                 << who(x, int(p), int(l)) << ": " << (j < kIndexHeadDim ? "key byte " : "scale byte ")
                 << (j < kIndexHeadDim ? j : j - kIndexHeadDim) << " is " << hex(x.rows[l][p][j]) << ", at step "
                 << it->second.first->step << " (block " << it->second.first->blocks[p / size_t(bs)] << ") it was "
                 << hex(it->second.second[j]) << ": the block's indexer bytes did not move with its K/V";
        }
    return ::testing::AssertionSuccess();
  }

  // Each row is the one a fresh prefill of the same tokens writes: layer 0 bit for bit (its
  // key depends on the token and position only), later layers within fp8's rounding (their
  // input went through decode and prefill kernels in other batches).
  ::testing::AssertionResult match_reference() const {
    std::vector<std::vector<int>> longest;  // token lists no other one extends
    for (const Seen& x : seen) {
      bool covered = false;
      for (auto& t : longest) {
        const size_t k = std::min(t.size(), x.tokens.size());
        if (!std::equal(t.begin(), t.begin() + k, x.tokens.begin())) continue;
        if (x.tokens.size() > t.size()) t = x.tokens;
        covered = true;
        break;
      }
      if (!covered && !x.tokens.empty()) longest.push_back(x.tokens);
    }
    std::vector<std::vector<std::vector<Row>>> refs;
    for (const auto& t : longest) refs.push_back(reference_rows(t, bs));
    for (const Seen& x : seen) {
      if (x.tokens.empty()) continue;
      size_t r = 0;  // the list that extends x's tokens
      while (r < longest.size() && !(longest[r].size() >= x.tokens.size() &&
                                     std::equal(x.tokens.begin(), x.tokens.end(), longest[r].begin())))
        ++r;
      if (r == longest.size()) return ::testing::AssertionFailure() << "(test) no reference for step " << x.step;
      for (size_t l = 0; l < x.rows.size(); ++l)
        for (size_t p = 0; p < x.rows[l].size(); ++p) {
          const Row &got = x.rows[l][p], &want = refs[r][l][p];
          if (l == 0) {
            if (got == want) continue;
            size_t j = 0;
            while (got[j] == want[j]) ++j;
            return ::testing::AssertionFailure()
                   << who(x, int(p), 0) << ": " << (j < kIndexHeadDim ? "key byte " : "scale byte ")
                   << (j < kIndexHeadDim ? j : j - kIndexHeadDim) << " is " << hex(got[j])
                   << ", a prefill of its tokens writes " << hex(want[j]) << (got[j] == 0xFF ? " (0xFF: never written)" : "");
          }
          const double s_got = scale_of(got), s_want = scale_of(want);
          if (!(std::fabs(s_got - s_want) <= 1e-3 * s_want))
            return ::testing::AssertionFailure() << who(x, int(p), int(l)) << ": scale " << s_got
                                                 << ", a prefill of its tokens writes " << s_want;
          for (int d = 0; d < kIndexHeadDim; ++d) {
            const double a = e4m3_value(got[size_t(d)]) * s_got, b = e4m3_value(want[size_t(d)]) * s_want;
            const double tol = std::fabs(b) / 8 + s_want * (1.0 / 512 + 0.05);  // one e4m3 step, and slack
            if (!(std::fabs(a - b) <= tol))
              return ::testing::AssertionFailure() << who(x, int(p), int(l)) << ": key value " << d << " is " << a
                                                   << ", a prefill of its tokens writes " << b << " (tolerance " << tol << ")";
          }
        }
    }
    return ::testing::AssertionSuccess();
  }
};

// Runs the requests on the DSA model, watching the indexer pool after every step.
IndexerWatch run_watched(const EngineConfig& cfg, const std::vector<EngineRequest>& requests,
                         pa::ch08::EngineStats* stats) {
  Engine engine(dsa_model(), cfg);
  for (const auto& r : requests) engine.add_request(r);
  IndexerWatch watch{cfg.block_size, {}};
  int step = 0;
  while (!engine.done()) {
    engine.step();
    watch.observe(engine, step++);
  }
  *stats = engine.stats();
  pa::test::expect_no_leaks(engine, cfg);
  return watch;
}

EngineRequest request(int id, std::vector<int> prompt, int max_new, int arrival = 0) {
  return EngineRequest{id, std::move(prompt), max_new, arrival, {}};
}

EngineConfig small(int num_blocks) {
  EngineConfig cfg;
  cfg.block_size = 8;
  cfg.num_blocks = num_blocks;
  cfg.max_seq_len = 64;
  cfg.max_tokens_per_step = 64;
  return cfg;
}

// Three samples of one prompt of 21 tokens: they share its blocks, and the half-full third
// block (5 tokens) is copied on write by the samples that append to it.
TEST(IndexerEngine, ForkSharesAndCopyOnWriteCopiesTheIndexerBytes) {
  EngineRequest r = request(0, random_tokens(21, 71), 6);
  r.sampling.n = 3;
  r.sampling.temperature = 1.f;
  r.sampling.seed = 5;
  pa::ch08::EngineStats stats;
  const IndexerWatch w = run_watched(small(32), {r}, &stats);
  ASSERT_EQ(stats.forks, 2);
  ASSERT_GE(stats.cow_copies, 2) << "the shared tail block must have been copied";
  EXPECT_TRUE(w.stable());
  EXPECT_TRUE(w.match_reference());
}

// A pool too small for four requests at once: the newest are swapped out to host memory
// and back into other blocks.
TEST(IndexerEngine, SwapOutAndInRestoresTheIndexerBytesBitForBit) {
  EngineConfig cfg = small(14);
  cfg.preemption = Preemption::swap;
  cfg.num_swap_blocks = 64;
  cfg.prefix_caching = false;
  std::vector<EngineRequest> rs;
  for (int i = 0; i < 4; ++i) rs.push_back(request(i, random_tokens(13 + 3 * i, 80 + uint64_t(i)), 14));
  pa::ch08::EngineStats stats;
  const IndexerWatch w = run_watched(cfg, rs, &stats);
  ASSERT_GT(stats.swap_outs, 0);
  ASSERT_GT(stats.swap_ins, 0);
  ASSERT_EQ(stats.recomputes, 0);
  EXPECT_TRUE(w.stable());
  EXPECT_TRUE(w.match_reference());
}

// Request 1 arrives once request 0's prompt is cached and starts with its first two blocks:
// it computes none of them, so their indexer rows are request 0's.
TEST(IndexerEngine, PrefixCacheHitReusesTheIndexerBytes) {
  const std::vector<int> shared = random_tokens(16, 90);
  const std::vector<EngineRequest> rs{request(0, pa::test::concat(shared, random_tokens(5, 91)), 4),
                                      request(1, pa::test::concat(shared, random_tokens(3, 92)), 4, 3)};
  pa::ch08::EngineStats stats;
  const IndexerWatch w = run_watched(small(32), rs, &stats);
  ASSERT_EQ(stats.cached_prompt_tokens, 16) << "request 1 must find request 0's two full blocks";
  EXPECT_TRUE(w.stable());
  EXPECT_TRUE(w.match_reference());
}

}  // namespace
