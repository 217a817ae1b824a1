// Your exercise file. (Generated from solutions/10-varlen-attention/plan.cpp; instructors regenerate with tools/make_skeletons.py.)
// Chapter 10, exercises 1 and 2 of 4: the planner. On the host, once per engine step, it turns the
// batch's lengths into work items of similar cost and deals them to a fixed grid of one GPU
// wave, so that one 32K sequence beside sixty short ones keeps every SM busy to the end.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>

#include "pa/ch10_varlen.h"

namespace pa::ch10 {

// ANCHOR: item_cost
// Streaming a KV token costs the same for any number of rows (decode is bound by memory);
// the tensor-core work grows with the rows once the tile has more than one warp's worth.
// The fixed part is the item's start: loading its queries, filling the pipeline, a chain of
// dependent loads worth about 192 tokens of streaming on the H100 (64 priced it too low:
// NOTES.md, 2026-11-25). A warp item's start costs a quarter of that: a block's four warps
// start theirs side by side.
constexpr double kItemStart = 192.0;
double item_cost(int kv_tokens, int rows, bool by_warp) {
  return kv_tokens * (1.0 + rows / 32.0) + (by_warp ? kItemStart / 4 : kItemStart);
}
// ANCHOR_END: item_cost

namespace {

constexpr int kMinChunk = 256;  // tokens: a shorter chunk costs more in its fixed part and merge

struct Tile {
  int seq, row0, rows, kv_needed;
  bool by_warp;  // a warp item: whole, run by one warp
  int kv_first;  // its first key: 0, or with a window the first row's first, rounded down to 16
  int kv() const { return kv_needed - kv_first; }  // the keys the tile's items cover
};

int round_up(int n, int m) { return (n + m - 1) / m * m; }

// The work, by item_cost, of the plan's busiest thread block.
double busiest_block(const Plan& plan, const std::vector<int>& query_start_loc, int G) {
  double busiest = 0;
  for (int c = 0; c < plan.grid; ++c) {
    double load = 0;
    for (int i = plan.cta_start[size_t(c)]; i < plan.cta_start[size_t(c) + 1]; ++i) {
      const WorkItem& w = plan.items[size_t(i)];
      const int n = query_start_loc[size_t(w.seq) + 1] - query_start_loc[size_t(w.seq)];
      load += item_cost(w.kv_end - w.kv_begin, tile_rows(n, G, w.row0), w.by_warp);
    }
    busiest = std::max(busiest, load);
  }
  return busiest;
}

}  // namespace

// ANCHOR: chunking
// The chunk a tile of `rows` rows is cut into, in tokens: about one thread block's fair share
// of the whole step's cost (target_cost), never below kMinChunk, a multiple of kKvTile.
int chunk_for(int rows, double target_cost) {
  // TODO(ch10): return the chunk length, in tokens, for a tile of `rows` rows when one thread
  //   block's fair share of the step is target_cost (>= 0): the smallest multiple of kKvTile
  //   that is at least kMinChunk and at least the largest whole number of tokens whose
  //   item_cost(tokens, rows) -- the item's start included -- is at most target_cost (if not
  //   even 0 tokens fit, kMinChunk). ChunkFor's tests check exact values.
  PA_TODO("ch10");
}
// ANCHOR_END: chunking

// ANCHOR: make_plan
Plan make_plan(const VarlenShape& s, const std::vector<int>& seq_lens,
               const std::vector<int>& query_start_loc, int grid, int chunk_tokens, int window) {
  check_metadata(s, {}, seq_lens, query_start_loc);
  PA_REQUIRE(grid >= 1, "make_plan: grid must be at least 1 thread block, got " << grid);
  PA_REQUIRE(chunk_tokens >= 0 || chunk_tokens == kWholeTiles,
             "make_plan: chunk_tokens must be >= 0 (or kWholeTiles), got " << chunk_tokens);
  PA_REQUIRE(window >= 0, "make_plan: window must be >= 0 (0: none), got " << window);
  const int G = s.num_q_heads / s.num_kv_heads;

  // Row tiles: each sequence's n_b * G rows, 64 at a time (8 for a decode tile). A tile's last row
  // decides how much of the KV it needs (causal: earlier rows need less, and mask the rest).
  // ANCHOR: warp_items
  // A decode tile of at most kWarpItemTokens is a warp item: one warp runs it whole. On the
  // whole block each warp would get two 16-token slots or fewer, and the item's start and the
  // merge of the four warps would cost more than its KV (NOTES.md, v5).
  std::vector<Tile> tiles;
  double total = 0;
  for (int b = 0; b < s.num_seqs; ++b) {
    const int n = query_start_loc[size_t(b) + 1] - query_start_loc[size_t(b)];
    for (int row0 = 0; row0 < n * G; row0 += tile_size(n, G)) {
      const int rows = tile_rows(n, G, row0);
      const int last_token = (row0 + rows - 1) / G;
      const int kv_needed = seq_lens[size_t(b)] - n + last_token + 1;
      // A window: the tile's keys start at its first row's first key (rounded down to 16
      // tokens, a multiple of any block's V piece), and no warp items (chapter 12's policy).
      const int first_pos = seq_lens[size_t(b)] - n + row0 / G;
      const int kv_first = window > 0 ? std::max(0, first_pos - window + 1) / 16 * 16 : 0;
      const bool by_warp = chunk_tokens <= 0 && window == 0 && decode_tile(n, G) &&
                           kv_needed <= kWarpItemTokens;
      tiles.push_back({b, row0, rows, kv_needed, by_warp, kv_first});
      total += item_cost(kv_needed - kv_first, rows, by_warp) * s.num_kv_heads;
    }
  }
  // ANCHOR_END: warp_items
  const double target_cost = total / grid;

  // ANCHOR: whole_tiles
  // Tiles of about equal cost, no more than the wave holds, are cut into the same number of
  // chunks, grid / tiles of them: one item per thread block, as chapter 9's grid is (one
  // chunk each -- whole tiles -- when they fill half the wave or more). Cut into fair shares,
  // they would leave some blocks two items, and an item's start (a chain of dependent loads)
  // costs more than item_cost says (NOTES.md: the chunk search, v3 under ncu). Warp items
  // are whole and left out of the comparison.
  double whole_items = 0, block_total = 0, longest = 0;
  for (const Tile& tile : tiles)
    if (!tile.by_warp) {
      whole_items += s.num_kv_heads;
      block_total += item_cost(tile.kv(), tile.rows) * s.num_kv_heads;
      longest = std::max(longest, item_cost(tile.kv(), tile.rows));
    }
  const bool equal = chunk_tokens == 0 && whole_items > 0 && whole_items <= grid &&
                     longest <= 1.25 * block_total / whole_items;
  // ANCHOR_END: whole_tiles

  // Chunks per tile. Equal tiles get grid / tiles each; the others their fair shares rounded
  // up, or up only past a quarter share (a chunk of a quarter share would cost a whole
  // item's start). Where the two roundings differ both are dealt, and the plan whose busiest
  // thread block has less work is kept.
  std::vector<int> cuts_up(tiles.size(), 1), cuts_near(tiles.size(), 1);
  for (size_t i = 0; i < tiles.size() && chunk_tokens == 0; ++i) {
    if (tiles[i].by_warp) continue;
    const double shares = double(tiles[i].kv()) / chunk_for(tiles[i].rows, target_cost);
    cuts_up[i] = equal ? std::max(1, int(grid / whole_items)) : std::max(1, int(std::ceil(shares)));
    cuts_near[i] = equal ? cuts_up[i] : std::max(1, int(std::ceil(shares - 0.25)));
  }

  auto cut_and_deal = [&](const std::vector<int>& cuts) {
    Plan plan;
    plan.grid = grid;
    plan.chunk_tokens = chunk_tokens > 0 ? round_up(chunk_tokens, kKvTile) : 0;
    plan.target_cost = target_cost;
    // Items: every (tile, KV head) cut into chunks (even ones, unless forced). A tile of more
    // than one chunk gets a ticket counter and kTileRows partial rows per chunk in the workspace.
    std::vector<double> item_costs;
    for (size_t t = 0; t < tiles.size(); ++t) {
      const Tile& tile = tiles[t];
      const int even = round_up((std::max(tile.kv(), 1) + cuts[t] - 1) / cuts[t], kKvTile);
      const int chunk = plan.chunk_tokens > 0 ? plan.chunk_tokens : std::max(kMinChunk, even);
      const int splits = (tile.kv() + chunk - 1) / chunk;
      for (int h = 0; h < s.num_kv_heads; ++h) {
        const int counter = splits > 1 ? plan.num_counters++ : -1;
        const int64_t base = plan.partial_rows;
        if (splits > 1) plan.partial_rows += int64_t(kTileRows) * splits;
        PA_REQUIRE(base <= INT32_MAX, "make_plan: the step needs more than 2^31 partial rows");
        for (int p = 0; p < splits; ++p) {
          const int begin = tile.kv_first + p * chunk;
          const int end = std::min(tile.kv_needed, tile.kv_first + (p + 1) * chunk);
          plan.items.push_back({tile.seq, h, tile.row0, begin, end, p, splits, int(base), counter,
                                int(tile.by_warp)});
          item_costs.push_back(item_cost(end - begin, tile.rows, tile.by_warp));
        }
      }
    }

    // ANCHOR: balance
    // Dealing: longest item first, each to the thread block with the least work so far (LPT,
    // within 4/3 of the best possible makespan). Ties go to the lower index: deterministic.
    std::vector<int> order(plan.items.size());
    std::iota(order.begin(), order.end(), 0);
    // TODO(ch10): plan.items (in the order made; item i costs item_costs[i]) are dealt to the
    //   plan.grid thread blocks by the longest-processing-time rule (LPT: the chapter's page,
    //   the glossary). On return plan.items holds every item exactly once, grouped by block:
    //   block c runs plan.items[cta_start[c]] .. plan.items[cta_start[c + 1] - 1], and
    //   plan.cta_start has grid + 1 entries, from 0 to the item count. The tests compare the
    //   plan item by item with the reference planner, so these are requirements too: items of
    //   equal cost are taken in the order made; a choice between equally loaded blocks goes to
    //   the lower index; a block lists its items in the order it received them.
    PA_TODO("ch10");
    // ANCHOR_END: balance
    // Each block runs its warp items first, then its own (the kernel's order).
    for (int c = 0; c < grid; ++c)
      std::stable_partition(plan.items.begin() + plan.cta_start[size_t(c)],
                            plan.items.begin() + plan.cta_start[size_t(c) + 1],
                            [](const WorkItem& w) { return w.by_warp != 0; });
    return plan;
  };
  Plan plan = cut_and_deal(cuts_up);
  if (cuts_near != cuts_up) {
    Plan other = cut_and_deal(cuts_near);
    if (busiest_block(other, query_start_loc, G) < busiest_block(plan, query_start_loc, G))
      plan = std::move(other);
  }
  return plan;
}
// ANCHOR_END: make_plan

}  // namespace pa::ch10
