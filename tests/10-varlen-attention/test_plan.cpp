// Chapter 10's planner, a pure host function: every row tile of every sequence and KV head
// is covered by chunks that are contiguous, disjoint and reach exactly what its last row
// sees; split tiles get their own counter and workspace rows; the items are dealt to the
// grid in order and about evenly by cost.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <tuple>

#include "item_text.h"
#include "pa/ch10_varlen.h"

namespace {

using pa::ch10::kKvTile;
using pa::ch10::kTileRows;
using pa::ch10::make_plan;
using pa::ch10::Plan;
using pa::ch10::VarlenShape;
using pa::ch10::WorkItem;

// The batch: seq_lens and query_start_loc from (prefix, new tokens) pairs.
struct Batch {
  VarlenShape shape;
  std::vector<int> seq_lens, qsl;
};

Batch batch_of(int hq, int hkv, const std::vector<std::pair<int, int>>& prefix_new,
               int block_size = 16, int head_size = 128) {
  Batch b;
  b.qsl = {0};
  int longest = 0;
  for (const auto& [prefix, n] : prefix_new) {
    b.seq_lens.push_back(prefix + n);
    b.qsl.push_back(b.qsl.back() + n);
    longest = std::max(longest, prefix + n);
  }
  const int width = std::max(1, (longest + block_size - 1) / block_size);
  b.shape = VarlenShape{int(prefix_new.size()), b.qsl.back(), hq, hkv, head_size, block_size,
                        width * int(prefix_new.size()), width};
  return b;
}

using pa::test::item_text;

using pa::ch10::decode_tile;
using pa::ch10::tile_rows;
using pa::ch10::tile_size;

// Every property a plan must have, whatever its chunking and dealing.
::testing::AssertionResult valid_plan(const Batch& b, const Plan& p, int grid, int forced_chunk) {
  const VarlenShape& s = b.shape;
  const int G = s.num_q_heads / s.num_kv_heads;
  auto fail = [](const std::string& what) { return ::testing::AssertionFailure() << what; };
  if (p.grid != grid) return fail("grid " + std::to_string(p.grid) + ", want " + std::to_string(grid));
  if (p.cta_start.size() != size_t(grid) + 1 || p.cta_start.front() != 0 ||
      p.cta_start.back() != int(p.items.size()))
    return fail("cta_start must have grid + 1 entries, start at 0 and end at items.size() = " +
                std::to_string(p.items.size()));
  for (int c = 0; c < grid; ++c) {
    if (p.cta_start[size_t(c)] > p.cta_start[size_t(c) + 1])
      return fail("cta_start decreases at thread block " + std::to_string(c));
    // The kernel runs a block's warp items, then its own: no warp item after one of its own.
    for (int i = p.cta_start[size_t(c)] + 1; i < p.cta_start[size_t(c) + 1]; ++i)
      if (!p.items[size_t(i) - 1].by_warp && p.items[size_t(i)].by_warp)
        return fail("thread block " + std::to_string(c) + " has a warp item after an item of its "
                    "own (the kernel would run it on the whole block): " + item_text(p.items[size_t(i)]));
  }
  if (forced_chunk && p.chunk_tokens != (forced_chunk + kKvTile - 1) / kKvTile * kKvTile)
    return fail("forced chunk_tokens " + std::to_string(forced_chunk) + " became " +
                std::to_string(p.chunk_tokens) + ", want it rounded up to a multiple of " +
                std::to_string(kKvTile));

  // Group the items by tile: (seq, kv_head, row0).
  std::map<std::tuple<int, int, int>, std::vector<WorkItem>> tiles;
  for (const WorkItem& w : p.items) {
    if (w.seq < 0 || w.seq >= s.num_seqs || w.kv_head < 0 || w.kv_head >= s.num_kv_heads)
      return fail("item out of the batch: " + item_text(w));
    tiles[{w.seq, w.kv_head, w.row0}].push_back(w);
  }
  size_t expected_tiles = 0;
  std::set<int> counters;
  std::vector<std::pair<int64_t, int64_t>> partial_ranges;
  for (int seq = 0; seq < s.num_seqs; ++seq) {
    const int n = b.qsl[size_t(seq) + 1] - b.qsl[size_t(seq)];
    for (int h = 0; h < s.num_kv_heads; ++h)
      for (int row0 = 0; row0 < n * G; row0 += tile_size(n, G)) {
        ++expected_tiles;
        auto it = tiles.find({seq, h, row0});
        const std::string where = "sequence " + std::to_string(seq) + ", kv_head " +
                                  std::to_string(h) + ", row0 " + std::to_string(row0);
        if (it == tiles.end()) return fail("no item covers the tile at " + where);
        std::vector<WorkItem> items = it->second;
        std::sort(items.begin(), items.end(),
                  [](const WorkItem& a, const WorkItem& c) { return a.split < c.split; });
        const int last_token = (row0 + tile_rows(n, G, row0) - 1) / G;
        const int kv_needed = b.seq_lens[size_t(seq)] - n + last_token + 1;
        const int splits = int(items.size());
        int chunk = 0;
        for (int i = 0; i < splits; ++i) {
          const WorkItem& w = items[size_t(i)];
          const std::string item = " at " + where + ": " + item_text(w);
          if (w.split != i || w.num_splits != splits)
            return fail("splits must be 0.." + std::to_string(splits - 1) + ", each once, with num_splits " +
                        std::to_string(splits) + item);
          if (w.kv_begin != (i ? items[size_t(i) - 1].kv_end : 0))
            return fail("chunks must be contiguous, from 0" + item);
          if (w.kv_end <= w.kv_begin) return fail("an empty chunk" + item);
          if (w.kv_begin % kKvTile) return fail("kv_begin is not a multiple of kKvTile" + item);
          if (i == 0) chunk = w.kv_end - w.kv_begin;
          if (w.kv_begin != i * chunk || (i + 1 < splits && w.kv_end - w.kv_begin != chunk))
            return fail("chunks of one tile must all be chunk_tokens long but the last" + item);
          if (forced_chunk && w.kv_begin != i * p.chunk_tokens)
            return fail("kv_begin must be split * chunk_tokens" + item);
          if (splits > 1) {
            if (w.counter < 0 || w.counter >= p.num_counters || w.counter != items[0].counter)
              return fail("a split tile's items share one counter in [0, num_counters)" + item);
            if (w.partial_base != items[0].partial_base)
              return fail("a split tile's items share one partial_base" + item);
          } else if (w.counter != -1) {
            return fail("an unsplit tile has counter -1" + item);
          }
          if (w.by_warp && (!decode_tile(n, G) || splits != 1))
            return fail("a warp item is a whole decode tile (one new token, G <= 8, one chunk)" + item);
          if (w.by_warp != items[0].by_warp) return fail("a tile is run by warps or by blocks, not both" + item);
        }
        if (items.back().kv_end != kv_needed)
          return fail("the chunks of the tile at " + where + " end at " +
                      std::to_string(items.back().kv_end) + ", want kv_needed = seq_len - n_b + " +
                      "last token of the tile + 1 = " + std::to_string(kv_needed));
        if (splits > 1) {
          if (!counters.insert(items[0].counter).second)
            return fail("two split tiles share counter " + std::to_string(items[0].counter));
          partial_ranges.push_back({items[0].partial_base,
                                    items[0].partial_base + int64_t(splits) * kTileRows});
        }
      }
  }
  if (tiles.size() != expected_tiles)
    return fail("items for " + std::to_string(tiles.size()) + " tiles, the batch has " +
                std::to_string(expected_tiles) + " (a tile of a sequence without new tokens, or "
                "a row0 that is not a multiple of its tile size past the last row?)");
  if (int(counters.size()) != p.num_counters)
    return fail("num_counters " + std::to_string(p.num_counters) + ", but " +
                std::to_string(counters.size()) + " split tiles");
  std::sort(partial_ranges.begin(), partial_ranges.end());
  for (size_t i = 0; i < partial_ranges.size(); ++i) {
    if (partial_ranges[i].first < 0 || partial_ranges[i].second > p.partial_rows)
      return fail("a split tile's partial rows [" + std::to_string(partial_ranges[i].first) + ", " +
                  std::to_string(partial_ranges[i].second) + ") leave [0, partial_rows = " +
                  std::to_string(p.partial_rows) + ")");
    if (i && partial_ranges[i].first < partial_ranges[i - 1].second)
      return fail("two split tiles' partial rows overlap at " + std::to_string(partial_ranges[i].first));
  }
  return ::testing::AssertionSuccess();
}

// The cost each thread block of the plan gets, by item_cost.
std::vector<double> cta_costs(const Batch& b, const Plan& p) {
  const int G = b.shape.num_q_heads / b.shape.num_kv_heads;
  std::vector<double> cost(size_t(p.grid), 0.0);
  for (int c = 0; c < p.grid; ++c)
    for (int i = p.cta_start[size_t(c)]; i < p.cta_start[size_t(c) + 1]; ++i) {
      const WorkItem& w = p.items[size_t(i)];
      const int n = b.qsl[size_t(w.seq) + 1] - b.qsl[size_t(w.seq)];
      cost[size_t(c)] += pa::ch10::item_cost(w.kv_end - w.kv_begin, tile_rows(n, G, w.row0), w.by_warp);
    }
  return cost;
}

int split_items(const Plan& p) {
  return int(std::count_if(p.items.begin(), p.items.end(),
                           [](const WorkItem& w) { return w.num_splits > 1; }));
}

TEST(Planner, CoversEveryTileWithContiguousChunks) {
  const std::vector<Batch> batches = {
      batch_of(8, 2, {{0, 1}, {14, 1}, {99, 1}}),                       // decodes
      batch_of(8, 2, {{14, 2}, {30, 3}, {47, 5}, {60, 8}}),             // spec-decode
      batch_of(4, 2, {{0, 20}, {37, 150}, {300, 45}}),                  // chunked prefill
      batch_of(4, 2, {{7, 0}, {40, 1}, {25, 0}, {17, 30}, {0, 0}}),     // idle sequences
      batch_of(8, 2, {{50, 40}}),                                       // 160 rows: 3 tiles
      batch_of(6, 2, {{10, 30}, {3, 1}}),                               // G = 3: tiles split a token
      batch_of(16, 1, {{40, 1}, {20, 4}, {0, 1}, {9, 7}}),              // MQA, 16 rows a token
      batch_of(32, 8, {{4000, 1}, {100, 1000}, {0, 0}, {5000, 3}}, 32), // long
  };
  for (size_t i = 0; i < batches.size(); ++i) {
    const Batch& b = batches[i];
    for (int grid : {1, 3, 7, 32, 132}) {
      for (int chunk : {0, 32, 40, 64, 96, 512}) {
        const Plan p = make_plan(b.shape, b.seq_lens, b.qsl, grid, chunk);
        EXPECT_TRUE(valid_plan(b, p, grid, chunk))
            << "batch " << i << ", grid " << grid << ", chunk_tokens " << chunk;
      }
      // kWholeTiles (the core tests' plans): the same tiles, none cut, warp items as with 0.
      const Plan whole = make_plan(b.shape, b.seq_lens, b.qsl, grid, pa::ch10::kWholeTiles);
      EXPECT_TRUE(valid_plan(b, whole, grid, 0)) << "batch " << i << ", grid " << grid << ", kWholeTiles";
      EXPECT_EQ(split_items(whole), 0) << "batch " << i << ", grid " << grid << ", kWholeTiles";
      const Plan planner = make_plan(b.shape, b.seq_lens, b.qsl, grid, 0);
      auto warp_items = [](const Plan& p) {
        return std::count_if(p.items.begin(), p.items.end(), [](const WorkItem& w) { return w.by_warp; });
      };
      EXPECT_EQ(warp_items(whole), warp_items(planner)) << "batch " << i << ", grid " << grid;
    }
  }
}

TEST(Planner, ForcedChunksSplitLongTilesAndRoundUpToTheKvTile) {
  const Batch b = batch_of(4, 2, {{100, 1}, {0, 20}});
  const Plan p = make_plan(b.shape, b.seq_lens, b.qsl, 4, 40);  // rounded up to 64
  ASSERT_TRUE(valid_plan(b, p, 4, 40));
  EXPECT_EQ(p.chunk_tokens, 64);
  // Sequence 0 (101 tokens) in chunks of 64: 2 per KV head; sequence 1 (20 tokens): 1.
  int seq0 = 0;
  for (const WorkItem& w : p.items)
    if (w.seq == 0) {
      ++seq0;
      EXPECT_EQ(w.num_splits, 2) << item_text(w);
    } else {
      EXPECT_EQ(w.num_splits, 1) << item_text(w);
    }
  EXPECT_EQ(seq0, 4);
  EXPECT_EQ(p.num_counters, 2);
  EXPECT_EQ(p.partial_rows, 2 * 2 * kTileRows);
}

TEST(Planner, IsDeterministic) {
  const Batch b = batch_of(32, 8, {{32767, 1}, {255, 1}, {100, 300}, {0, 64}});
  const Plan p = make_plan(b.shape, b.seq_lens, b.qsl, 132);
  const Plan q = make_plan(b.shape, b.seq_lens, b.qsl, 132);
  ASSERT_EQ(p.items.size(), q.items.size());
  EXPECT_EQ(p.cta_start, q.cta_start);
  for (size_t i = 0; i < p.items.size(); ++i)
    EXPECT_EQ(item_text(p.items[i]), item_text(q.items[i])) << "item " << i;
}

// One 32K sequence beside 63 short decodes: splitting the long one lets every thread block
// finish at about the same time.
TEST(Planner, BalancesOneLongSequenceAmongShortDecodes) {
  std::vector<std::pair<int, int>> seqs = {{32767, 1}};
  for (int i = 0; i < 63; ++i) seqs.push_back({255, 1});
  const Batch b = batch_of(32, 8, seqs);
  const int grid = 528;  // 132 SMs x 4
  const Plan p = make_plan(b.shape, b.seq_lens, b.qsl, grid);
  ASSERT_TRUE(valid_plan(b, p, grid, 0));
  const std::vector<double> cost = cta_costs(b, p);
  const double total = std::accumulate(cost.begin(), cost.end(), 0.0);
  const double worst = *std::max_element(cost.begin(), cost.end());
  EXPECT_LE(worst, 1.5 * total / grid)
      << "the busiest thread block has " << worst << " of a total " << total << " over " << grid
      << " (fair share " << total / grid << "), " << p.items.size() << " items";
  // The long sequence is split; the short decodes are not.
  for (const WorkItem& w : p.items)
    EXPECT_EQ(w.num_splits > 1, w.seq == 0) << item_text(w);
  EXPECT_EQ(p.num_counters, b.shape.num_kv_heads);
  // Without splits, the whole 32K context would sit on 8 thread blocks.
  EXPECT_GT(split_items(p), 8 * 4);
}

TEST(Planner, DoesNotSplitWhatAlreadyFillsTheGrid) {
  // Short decodes: nothing to gain from a split.
  const Batch few = batch_of(8, 2, {{99, 1}, {200, 1}, {15, 1}});
  Plan p = make_plan(few.shape, few.seq_lens, few.qsl, 132);
  ASSERT_TRUE(valid_plan(few, p, 132, 0));
  EXPECT_EQ(split_items(p), 0);
  EXPECT_EQ(p.num_counters, 0);
  EXPECT_EQ(p.partial_rows, 0);
  EXPECT_EQ(p.items.size(), 6u);
  // Many equal decodes (64 x 8 tiles of 4096 tokens) already fill 132 thread blocks.
  std::vector<std::pair<int, int>> seqs(64, {4095, 1});
  const Batch many = batch_of(32, 8, seqs);
  p = make_plan(many.shape, many.seq_lens, many.qsl, 132);
  ASSERT_TRUE(valid_plan(many, p, 132, 0));
  EXPECT_EQ(split_items(p), 0);
  EXPECT_EQ(p.items.size(), 64u * 8);
  // One long decode on an idle GPU is split to fill it.
  const Batch one = batch_of(8, 1, {{32767, 1}});
  p = make_plan(one.shape, one.seq_lens, one.qsl, 132);
  ASSERT_TRUE(valid_plan(one, p, 132, 0));
  EXPECT_GE(p.items.size(), 32u);
  EXPECT_LE(p.items.size(), 2u * 132);
}

// 256 equal decode tiles (32 sequences x 8 KV heads of 4096 tokens) fill two thirds of a
// 396-block wave: they stay whole, one per thread block, as chapter 9's grid has them. On a
// wave twice as large they are split to fill it; unequal tiles are split to balance them.
TEST(Planner, KeepsEqualTilesWholeWhenTheyFillHalfTheWave) {
  std::vector<std::pair<int, int>> seqs(32, {4095, 1});
  const Batch equal = batch_of(32, 8, seqs);
  Plan p = make_plan(equal.shape, equal.seq_lens, equal.qsl, 396);
  ASSERT_TRUE(valid_plan(equal, p, 396, 0));
  EXPECT_EQ(split_items(p), 0) << "equal tiles over half the wave were split";
  EXPECT_EQ(p.items.size(), 256u);
  p = make_plan(equal.shape, equal.seq_lens, equal.qsl, 792);
  ASSERT_TRUE(valid_plan(equal, p, 792, 0));
  EXPECT_GT(split_items(p), 0) << "256 tiles on a wave of 792 leave two thirds of it idle";
  seqs[0] = {16383, 1};  // one tile four times as long as the others
  const Batch unequal = batch_of(32, 8, seqs);
  p = make_plan(unequal.shape, unequal.seq_lens, unequal.qsl, 396);
  ASSERT_TRUE(valid_plan(unequal, p, 396, 0));
  EXPECT_GT(split_items(p), 0) << "a long tile among short ones must be split";
}

TEST(Planner, CutsFewEqualTilesToFillTheWave) {
  // 8 sequences of 32K: 64 equal tiles for a wave of 264. Cut in fair shares rounded up they
  // made 5 chunks each (320 items: 56 blocks ran two); even cuts of grid / tiles make 4.
  const Batch b = batch_of(32, 8, std::vector<std::pair<int, int>>(8, {32767, 1}));
  const Plan p = make_plan(b.shape, b.seq_lens, b.qsl, 264);
  ASSERT_TRUE(valid_plan(b, p, 264, 0));
  EXPECT_EQ(p.items.size(), 256u) << "64 equal tiles on 264 blocks: 4 even chunks each";
  for (int c = 0; c < p.grid; ++c)
    EXPECT_LE(p.cta_start[size_t(c) + 1] - p.cta_start[size_t(c)], 1) << "block " << c << " runs two items";
}

TEST(Planner, RoundsFairSharesToTheLessBusyPlan) {
  // 16 x 16K among 16 short decodes: a long tile is 2.06 fair shares. Rounded up, 3 chunks
  // each (384 long items for 264 blocks); rounded down past a quarter share, 2 (256 items,
  // one per block).
  std::vector<std::pair<int, int>> seqs(16, {16383, 1});
  for (int i = 0; i < 16; ++i) seqs.push_back({127, 1});
  const Batch b = batch_of(32, 8, seqs);
  const Plan p = make_plan(b.shape, b.seq_lens, b.qsl, 264);
  ASSERT_TRUE(valid_plan(b, p, 264, 0));
  for (const WorkItem& w : p.items)
    if (w.seq < 16) EXPECT_EQ(w.num_splits, 2) << item_text(w);
  const std::vector<double> cost = cta_costs(b, p);
  const double total = std::accumulate(cost.begin(), cost.end(), 0.0);
  const double worst = *std::max_element(cost.begin(), cost.end());
  EXPECT_LE(worst, 1.1 * total / p.grid) << "the busiest block has " << worst << " of a fair share "
                                         << total / p.grid;
}

int warp_items(const Plan& p) {
  return int(std::count_if(p.items.begin(), p.items.end(), [](const WorkItem& w) { return w.by_warp; }));
}

// Decode tiles of at most kWarpItemTokens (128) run on one warp each, four side by side per
// thread block; longer ones, and tiles of more than one new token, on the whole block.
TEST(Planner, RunsShortDecodeTilesOnWarps) {
  // 64 x 32 tokens (the short standard shape): 512 tiles of 32 tokens on 264 blocks, all
  // warp items, no block with more than two of them.
  const Batch shorts = batch_of(32, 8, std::vector<std::pair<int, int>>(64, {31, 1}));
  Plan p = make_plan(shorts.shape, shorts.seq_lens, shorts.qsl, 264);
  ASSERT_TRUE(valid_plan(shorts, p, 264, 0));
  EXPECT_EQ(warp_items(p), 512) << "32-token decode tiles are run by the thread block";
  for (int c = 0; c < p.grid; ++c)
    EXPECT_LE(p.cta_start[size_t(c) + 1] - p.cta_start[size_t(c)], 2) << "block " << c;
  // 32 x 4096 (a long standard shape): whole tiles, one per block, on the whole block.
  const Batch longs = batch_of(32, 8, std::vector<std::pair<int, int>>(32, {4095, 1}));
  p = make_plan(longs.shape, longs.seq_lens, longs.qsl, 264);
  ASSERT_TRUE(valid_plan(longs, p, 264, 0));
  EXPECT_EQ(warp_items(p), 0) << "4096-token tiles that fill the wave were given to one warp";
  // 16 x 16K beside 16 x 128: the long tiles split over blocks, the short ones on warps.
  std::vector<std::pair<int, int>> seqs(16, {16383, 1});
  for (int i = 0; i < 16; ++i) seqs.push_back({127, 1});
  const Batch ragged = batch_of(32, 8, seqs);
  p = make_plan(ragged.shape, ragged.seq_lens, ragged.qsl, 264);
  ASSERT_TRUE(valid_plan(ragged, p, 264, 0));
  for (const WorkItem& w : p.items) EXPECT_EQ(w.by_warp, w.seq >= 16) << item_text(w);
  // 129 tokens: on the whole block.
  const Batch past = batch_of(32, 8, std::vector<std::pair<int, int>>(64, {128, 1}));
  p = make_plan(past.shape, past.seq_lens, past.qsl, 264);
  ASSERT_TRUE(valid_plan(past, p, 264, 0));
  EXPECT_EQ(warp_items(p), 0) << "decode tiles over kWarpItemTokens were given to one warp";
  // Verifications (4 new tokens) and forced chunks never make warp items.
  const Batch spec = batch_of(32, 8, std::vector<std::pair<int, int>>(8, {28, 4}));
  p = make_plan(spec.shape, spec.seq_lens, spec.qsl, 264);
  ASSERT_TRUE(valid_plan(spec, p, 264, 0));
  EXPECT_EQ(warp_items(p), 0);
  p = make_plan(shorts.shape, shorts.seq_lens, shorts.qsl, 264, 64);
  ASSERT_TRUE(valid_plan(shorts, p, 264, 64));
  EXPECT_EQ(warp_items(p), 0) << "a forced chunk size gave warp items";
}

// A decode of more than 8 query heads per KV head is one tile of its G rows, not G / 8 tiles
// of 8 that each read the KV again: MQA's 32 heads are one 32-row tile per sequence, run by
// the whole thread block however short.
TEST(Planner, MultiQueryDecodeIsOneTilePerSequence) {
  for (int len : {32, 4096}) {
    const Batch mqa = batch_of(32, 1, std::vector<std::pair<int, int>>(32, {len - 1, 1}));
    const Plan p = make_plan(mqa.shape, mqa.seq_lens, mqa.qsl, 264);
    ASSERT_TRUE(valid_plan(mqa, p, 264, 0));
    for (const WorkItem& w : p.items) {
      EXPECT_EQ(w.row0, 0) << "MQA decode cut into several row tiles: " << item_text(w);
      EXPECT_FALSE(w.by_warp) << "a 32-row tile on one warp: " << item_text(w);
    }
  }
  EXPECT_EQ(tile_size(1, 8), 8);
  EXPECT_EQ(tile_size(1, 16), 64);
  EXPECT_EQ(tile_rows(1, 32, 0), 32);
}

// The kernel whose idle warps skip their stages runs a batch only if no tile on the rows
// path is longer than 32 rows and one is longer than 16 (the rest runs the one kernel
// compiled as before: varlen_kernel's kShortTiles).
TEST(Planner, ShortTilesKernelOnlyWhereTheRowsPathTilesHave17To32Rows) {
  using pa::ch10::short_tiles;
  const auto decodes = [](int n, int tokens) { return std::vector<std::pair<int, int>>(n, {100, tokens}); };
  const Batch mqa = batch_of(32, 1, decodes(8, 1));
  EXPECT_TRUE(short_tiles(mqa.shape, mqa.qsl)) << "MQA decode: 32-row tiles";
  const Batch drafts = batch_of(32, 8, decodes(8, 8));
  EXPECT_TRUE(short_tiles(drafts.shape, drafts.qsl)) << "8 drafts at G 4: 32-row tiles";
  const Batch gqa = batch_of(32, 8, decodes(8, 1));
  EXPECT_FALSE(short_tiles(gqa.shape, gqa.qsl)) << "GQA decode: decode tiles, not the rows path";
  const Batch few = batch_of(32, 8, decodes(8, 4));
  EXPECT_FALSE(short_tiles(few.shape, few.qsl)) << "4 drafts at G 4: 16 rows, the split-tokens path";
  std::vector<std::pair<int, int>> mixed = decodes(8, 1);
  mixed.push_back({0, 64});
  const Batch chunk = batch_of(32, 1, mixed);
  EXPECT_FALSE(short_tiles(chunk.shape, chunk.qsl)) << "MQA decodes beside a prefill chunk's 64-row tiles";
  EXPECT_FALSE(short_tiles(mqa.shape, {})) << "no query_start_loc: the rows are unknown";
}

TEST(Planner, EmptyBatchHasNoItems) {
  const Batch b = batch_of(4, 2, {{10, 0}, {0, 0}});
  const Plan p = make_plan(b.shape, b.seq_lens, b.qsl, 8);
  EXPECT_TRUE(valid_plan(b, p, 8, 0));
  EXPECT_TRUE(p.items.empty());
}

TEST(Planner, ItemCostGrowsWithTokensAndRows) {
  using pa::ch10::item_cost;
  EXPECT_LT(item_cost(100, 4), item_cost(200, 4));
  EXPECT_LE(item_cost(100, 4), item_cost(100, 64));
  EXPECT_GT(item_cost(0, 1), 0.0) << "an item has a fixed cost: starting it is not free";
}

}  // namespace
