// Chapter 10's planner, exactly: what make_plan must return, not only what any valid plan
// has (test_plan.cpp). Two exercises live here, chunk_for and the dealing, and a wrong
// answer to either still makes a valid, roughly balanced plan; these tests say which
// number is wrong.
//   ChunkFor.*    hand-worked chunk sizes (item_cost(t, 4 rows) = 1.125 t + 192);
//   Dealing.*     hand-worked dealings: longest first, least-loaded block, ties to the lower;
//   Ch10/PlanGolden.*  the exact plans of small batches, from the NumPy planner written from
//                 the contract (reference/pa_ref/planner.py, golden_ch10_plan.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "golden.h"
#include "item_text.h"
#include "pa/ch10_varlen.h"

namespace {

using pa::ch10::chunk_for;
using pa::ch10::item_cost;
using pa::ch10::make_plan;
using pa::ch10::Plan;
using pa::ch10::VarlenShape;
using pa::ch10::WorkItem;

// A batch's shape for the planner: head size and block size do not change a plan.
VarlenShape plan_shape(int hq, int hkv, const std::vector<int>& seq_lens, const std::vector<int>& qsl) {
  const int bs = 16;
  int longest = 1;
  for (int n : seq_lens) longest = std::max(longest, n);
  const int width = (longest + bs - 1) / bs;
  return VarlenShape{int(seq_lens.size()), qsl.back(), hq, hkv, 128, bs,
                     width * std::max(1, int(seq_lens.size())), width};
}

using pa::test::item_text;

std::tuple<int, int, int, int, int, int, int, int, int, int> key(const WorkItem& w) {
  return {w.seq, w.kv_head, w.row0, w.kv_begin, w.kv_end, w.split, w.num_splits, w.partial_base,
          w.counter, w.by_warp};
}

// ---- chunk_for, by hand --------------------------------------------------------------------

// item_cost(t, rows) = t (1 + rows / 32) + 192: a 4-row tile pays 1.125 a token, 64 rows 3.
TEST(ChunkFor, IsTheTokensTheFairShareBuysRoundedUpToTheKvTile) {
  struct Case {
    int rows;
    double target;
    int want;
    const char* why;
  };
  const Case cases[] = {
      {4, 192 + 1.125 * 1000, 1024,
       "1000 tokens cost exactly the target once the item's start (192) is paid; 1000 rounded "
       "UP to a multiple of 64 is 1024 (without the start: 1170 tokens, 1216; rounded down: 960)"},
      {4, 192 + 1.125 * 1024, 1024,
       "1024 tokens fit exactly: already a multiple of 64, it stays 1024 (not 1088)"},
      {4, 192 + 1.125 * 1000.5, 1024, "1000.5 tokens: 1000 whole ones, then rounded up: 1024"},
      {4, 192 + 1.125 * 1024.5, 1024,
       "1024.5 tokens: 1024 whole ones (the largest whole number that fits, not 1025), already "
       "a multiple of 64: 1024 (a ceiling first gives 1025, then 1088)"},
      {64, 192 + 3.0 * 700, 704, "a 64-row tile pays 3 a token: 700 tokens, rounded up to 704"},
      {32, 192 + 2.0 * 1300, 1344, "32 rows pay 2 a token: 1300 tokens, rounded up to 1344"},
      {4, 192 + 1.125 * 96, 256, "96 tokens are under the 256-token minimum: 256 (not 128)"},
      {4, 192 + 1.125 * 256, 256, "exactly the minimum: 256 (not 320)"},
      {4, 100, 256, "a fair share below the start cost itself: the minimum, 256"},
      {8, 0, 256, "a step of no cost: the minimum, 256"},
  };
  for (const Case& c : cases) {
    const int got = chunk_for(c.rows, c.target);
    if (got != c.want)
      ADD_FAILURE() << "chunk_for(rows " << c.rows << ", target_cost " << c.target << ") = " << got
                    << ", want " << c.want << ": " << c.why << ". (An item of t tokens costs "
                    << "item_cost(t, " << c.rows << ") = " << item_cost(0, c.rows) << " + t * "
                    << item_cost(1, c.rows) - item_cost(0, c.rows) << ".)";
  }
}

// ---- the dealing, by hand ------------------------------------------------------------------

// The sequences of the items each thread block runs, in its order: "block 0: [1, 2]".
std::string blocks_text(const Plan& p) {
  std::ostringstream os;
  for (int c = 0; c < p.grid; ++c) {
    os << (c ? "; " : "") << "block " << c << ": [";
    for (int i = p.cta_start[size_t(c)]; i < p.cta_start[size_t(c) + 1]; ++i)
      os << (i > p.cta_start[size_t(c)] ? ", " : "") << "seq " << p.items[size_t(i)].seq << " head "
         << p.items[size_t(i)].kv_head;
    os << "]";
  }
  return os.str();
}

// Forced chunks of 4096 tokens: one item per (decode, KV head), so that only the dealing
// decides the plan. Items are (sequence, kv_head) pairs; want[c] lists block c's in order.
void expect_dealt(int hq, int hkv, const std::vector<int>& lens, int grid,
                  const std::vector<std::vector<std::pair<int, int>>>& want, const char* why) {
  std::vector<int> qsl{0};
  for (size_t b = 0; b < lens.size(); ++b) qsl.push_back(qsl.back() + 1);
  const Plan p = make_plan(plan_shape(hq, hkv, lens, qsl), lens, qsl, grid, 4096);
  Plan w;  // the wanted plan, for the message
  w.grid = grid;
  w.cta_start = {0};
  for (const auto& block : want) {
    for (const auto& [seq, head] : block) {
      WorkItem item{};
      item.seq = seq;
      item.kv_head = head;
      w.items.push_back(item);
    }
    w.cta_start.push_back(int(w.items.size()));
  }
  bool same = p.cta_start == w.cta_start && p.items.size() == w.items.size();
  for (size_t i = 0; same && i < p.items.size(); ++i)
    same = p.items[i].seq == w.items[i].seq && p.items[i].kv_head == w.items[i].kv_head;
  std::ostringstream lens_text;
  for (size_t b = 0; b < lens.size(); ++b) lens_text << (b ? ", " : "") << lens[b];
  if (!same)
    ADD_FAILURE() << "decodes of lengths [" << lens_text.str() << "] (" << hkv
                    << " KV heads, one item each) on " << grid << " thread blocks:\n  want "
                    << blocks_text(w) << "\n  got  " << blocks_text(p) << "\n  " << why;
}

TEST(Dealing, LongestFirstToTheLeastLoadedBlockTiesToTheLower) {
  // Costs 300 300 200 100 50 (plus the start): 300 -> block 0, 300 -> 1, 200 -> 0 (a tie
  // of loads), 100 -> 1 (300 < 500), 50 -> 1 (400 < 500).
  expect_dealt(1, 1, {100, 300, 200, 300, 50}, 2, {{{1, 0}, {2, 0}}, {{3, 0}, {0, 0}, {4, 0}}},
               "longest item first (equal ones in the order made), each to the block with the "
               "least cost so far, the lower index among equals");
  // Four equal items on three idle blocks: 0, 1, 2, then block 0 again.
  expect_dealt(1, 1, {64, 64, 64, 64}, 3, {{{0, 0}, {3, 0}}, {{1, 0}}, {{2, 0}}},
               "equal loads: the lowest index first, so a tie never depends on the heap");
  // Two KV heads: items (seq, head) in the order made, seq 0's heads first.
  // Costs 754.5 (500 tokens x 1.125 + 192) and 237 (40 tokens).
  expect_dealt(8, 2, {40, 500, 40}, 3, {{{1, 0}}, {{1, 1}}, {{0, 0}, {0, 1}, {2, 0}, {2, 1}}},
               "the long decode's two heads take blocks 0 and 1; the four short items all go "
               "to block 2, whose load stays under 754.5 until the last (948), in the order made");
}

// ---- the exact plans of small batches -------------------------------------------------------

class PlanGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(PlanGolden, MatchesTheReferencePlanner) {
  const pa::test::GoldenCase g(pa::test::golden_dir("ch10") + "/" + GetParam());
  const std::vector<int> seq_lens = g.get<int>("seq_lens"), qsl = g.get<int>("query_start_loc");
  const int hq = int(g.param_int("num_q_heads")), hkv = int(g.param_int("num_kv_heads"));
  const int grid = int(g.param_int("grid")), forced = int(g.param_int("chunk_tokens"));
  const std::vector<int> flat = g.get<int>("items"), cta = g.get<int>("cta_start");
  const std::vector<int> tiles = g.get<int>("tiles");
  const double target = g.get<double>("target_cost")[0];
  std::vector<WorkItem> want;
  for (size_t i = 0; i + 10 <= flat.size(); i += 10)
    want.push_back({flat[i], flat[i + 1], flat[i + 2], flat[i + 3], flat[i + 4], flat[i + 5],
                    flat[i + 6], flat[i + 7], flat[i + 8], flat[i + 9]});
  std::ostringstream batch;
  for (size_t b = 0; b < seq_lens.size(); ++b)
    batch << (b ? ", " : "") << "(len " << seq_lens[b] << ", new " << qsl[b + 1] - qsl[b] << ")";
  const std::string what = GetParam() + ": " + g.param("note") + "\n  batch [" + batch.str() +
                           "], Hq " + std::to_string(hq) + ", Hkv " + std::to_string(hkv) +
                           ", grid " + std::to_string(grid) +
                           (forced ? ", forced chunk_tokens " + std::to_string(forced) : "");

  const Plan p = make_plan(plan_shape(hq, hkv, seq_lens, qsl), seq_lens, qsl, grid, forced);
  EXPECT_NEAR(p.target_cost, target, 1e-9 * target) << "target_cost: the step's cost / grid; " << what;
  EXPECT_EQ(p.chunk_tokens, int(g.param_int("plan_chunk_tokens"))) << what;

  // 1. The items, whatever block runs them: the tiles and the chunks they are cut into.
  std::map<std::pair<int, int>, std::vector<WorkItem>> want_tiles, got_tiles;  // (seq, row0)
  for (const WorkItem& w : want) want_tiles[{w.seq, w.row0}].push_back(w);
  for (const WorkItem& w : p.items) got_tiles[{w.seq, w.row0}].push_back(w);
  bool same_items = true;
  for (size_t t = 0; t + 5 <= tiles.size(); t += 5) {
    const int seq = tiles[t], row0 = tiles[t + 1], rows = tiles[t + 2], kv_needed = tiles[t + 3];
    auto& wi = want_tiles[{seq, row0}];
    auto& gi = got_tiles[{seq, row0}];
    auto by_key = [](const WorkItem& a, const WorkItem& b) { return key(a) < key(b); };
    std::sort(wi.begin(), wi.end(), by_key);
    std::sort(gi.begin(), gi.end(), by_key);
    bool same = wi.size() == gi.size();
    for (size_t i = 0; same && i < wi.size(); ++i) same = key(wi[i]) == key(gi[i]);
    if (same) continue;
    same_items = false;
    auto chunks = [](const std::vector<WorkItem>& v) {
      std::ostringstream os;
      os << (v.empty() ? 0 : v[0].num_splits) << " chunk(s) per KV head of "
         << (v.empty() ? 0 : v[0].kv_end - v[0].kv_begin) << " tokens";
      return os.str();
    };
    std::string first;
    for (size_t i = 0; i < std::max(wi.size(), gi.size()) && first.empty(); ++i)
      if (i >= wi.size() || i >= gi.size() || key(wi[i]) != key(gi[i]))
        first = "\n    first difference: want " + (i < wi.size() ? item_text(wi[i]) : "nothing") +
                "\n                      got  " + (i < gi.size() ? item_text(gi[i]) : "nothing");
    ADD_FAILURE() << "the tile of sequence " << seq << ", rows " << row0 << ".." << row0 + rows - 1
                  << " (" << rows << " rows, kv_needed " << kv_needed << "): want "
                  << chunks(wi) << ", got " << chunks(gi) << first
                  << "\n    (the fair share target_cost is " << target << "; chunk_for(" << rows
                  << ", target_cost) = " << chunk_for(rows, target)
                  << " from your chunk_for: the plan cuts the tile by it)\n  " << what;
  }
  EXPECT_EQ(p.num_counters, int(g.param_int("num_counters"))) << what;
  EXPECT_EQ(p.partial_rows, g.param_int("partial_rows")) << what;
  if (!same_items) return;  // the dealing of other items says nothing more

  // 2. The same items: who runs which, in what order.
  ASSERT_EQ(p.cta_start.size(), cta.size()) << "cta_start has grid + 1 entries; " << what;
  int shown = 0, differ = 0;
  std::ostringstream blocks;
  for (int c = 0; c < grid; ++c) {
    const std::vector<WorkItem> w(want.begin() + cta[size_t(c)], want.begin() + cta[size_t(c) + 1]);
    const std::vector<WorkItem> got(p.items.begin() + p.cta_start[size_t(c)],
                                    p.items.begin() + p.cta_start[size_t(c) + 1]);
    bool same = w.size() == got.size();
    for (size_t i = 0; same && i < w.size(); ++i) same = key(w[i]) == key(got[i]);
    if (same) continue;
    ++differ;
    if (shown++ >= 3) continue;
    auto cost = [&](const std::vector<WorkItem>& v) {
      double total = 0;
      for (const WorkItem& x : v) {
        const int n = qsl[size_t(x.seq) + 1] - qsl[size_t(x.seq)];
        total += item_cost(x.kv_end - x.kv_begin, pa::ch10::tile_rows(n, hq / hkv, x.row0), x.by_warp);
      }
      return total;
    };
    blocks << "\n  thread block " << c << ": want " << w.size() << " item(s), cost " << cost(w);
    for (const WorkItem& x : w) blocks << "\n      " << item_text(x);
    blocks << "\n    got " << got.size() << " item(s), cost " << cost(got);
    for (const WorkItem& x : got) blocks << "\n      " << item_text(x);
  }
  if (differ)
    ADD_FAILURE() << "the right items, dealt otherwise: " << differ << " of " << grid
                  << " thread blocks run other items (or in another order) than the dealing's "
                     "rule gives: longest first, each to the least-loaded block, ties to the "
                     "lower index"
                  << blocks.str() << (shown > 3 ? "\n  ..." : "") << "\n  " << what;
}

INSTANTIATE_TEST_SUITE_P(Ch10, PlanGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch10", "plan_")),
                         [](const auto& info) { return info.param; });

}  // namespace
