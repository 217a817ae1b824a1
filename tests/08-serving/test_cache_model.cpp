// Chapter 8: the caching block manager (chapter 7's refcounts and copy-on-write, plus the
// prefix cache) against a simple model, under 3,000 seeded random operations: admissions
// that reuse cached prefixes, appends (some running out of blocks), forks, commits,
// releases and cache clears (issue 13).
//
// The model keeps each sequence's tokens and what each physical slot holds. Appends write
// their tokens into the slots append_slots returned, after applying take_copies() (the
// copy-on-write copies) to the slots; so reading every sequence through its block list
// must give back its tokens, whatever was shared, copied, evicted or reused meanwhile.
#include <gtest/gtest.h>

#include <sstream>

#include "serving_helpers.h"

namespace {

using pa::ch08::CachingBlockManager;
using pa::test::blocks_consistent;
using pa::test::concat;
using pa::test::random_tokens;

struct Snapshot {  // everything a failed append must leave as it was
  std::map<int, std::pair<int, std::vector<int>>> seqs;  // length, block list
  std::vector<int> refcounts;
  int free = 0, evictable = 0, cached = 0, allocator_free = 0;
  bool operator==(const Snapshot& o) const {
    return seqs == o.seqs && refcounts == o.refcounts && free == o.free && evictable == o.evictable &&
           cached == o.cached && allocator_free == o.allocator_free;
  }
};

void run_random_operations(int num_blocks, int bs, uint64_t seed, int num_ops) {
  CachingBlockManager m(num_blocks, bs);
  pa::SplitMix64 rng(seed);
  auto pick = [&](int n) { return int(rng.uniform_int(0, n - 1)); };
  const std::vector<std::vector<int>> systems = {random_tokens(2 * bs, seed + 1), random_tokens(3 * bs + 3, seed + 2),
                                                 random_tokens(bs, seed + 3)};
  std::map<int, std::vector<int>> live;                          // seq -> its tokens
  std::vector<int> slot(static_cast<size_t>(num_blocks) * bs, -1);            // physical slot -> token written there
  std::vector<std::vector<int>> written(static_cast<size_t>(num_blocks));     // block -> the prefix it was written for
  int next_id = 0;
  int hits = 0, forks = 0, copies = 0, out_of_blocks = 0, clears = 0, commits = 0;
  std::string where;

  auto snapshot = [&] {
    Snapshot s;
    for (const auto& [id, t] : live) s.seqs[id] = {m.length(id), m.block_list(id)};
    for (int b = 0; b < num_blocks; ++b) s.refcounts.push_back(m.refcount(b));
    s.free = m.num_free();
    s.evictable = m.num_evictable();
    s.cached = m.num_cached();
    s.allocator_free = m.allocator().num_free();
    return s;
  };
  auto random_live = [&] {
    auto it = live.begin();
    std::advance(it, pick(int(live.size())));
    return it->first;
  };
  // Appends `more` to sequence id: the copies first, then the writes. False: OutOfBlocks,
  // and then nothing changed.
  auto append = [&](int id, const std::vector<int>& more) -> bool {
    const Snapshot before = snapshot();
    std::vector<int64_t> slots;
    try {
      slots = m.append_slots(id, int(more.size()));
    } catch (const pa::ch02::OutOfBlocks&) {
      ++out_of_blocks;
      EXPECT_TRUE(snapshot() == before) << where << ": a failed append_slots changed the manager";
      EXPECT_TRUE(m.take_copies().empty()) << where << ": a failed append_slots left a copy to run";
      return false;
    }
    for (const pa::ch07::BlockCopy& c : m.take_copies()) {
      ++copies;
      const auto& list = m.block_list(id);
      EXPECT_EQ(m.refcount(c.dst), 1) << where << ": copy " << c.src << " -> " << c.dst;
      EXPECT_GE(m.refcount(c.src), 1) << where << ": copied from a block nobody holds any more";
      EXPECT_TRUE(std::find(list.begin(), list.end(), c.dst) != list.end()) << where << ": copy into a foreign block";
      std::copy_n(slot.begin() + int64_t(c.src) * bs, bs, slot.begin() + int64_t(c.dst) * bs);
      written[size_t(c.dst)] = written[size_t(c.src)];
    }
    std::vector<int>& t = live[id];
    for (size_t j = 0; j < more.size(); ++j) {
      const int b = int(slots[j] / bs);
      EXPECT_EQ(m.refcount(b), 1) << where << ": token " << t.size() << " written into block " << b
                                  << ", which " << m.refcount(b) << " sequences hold";
      t.push_back(more[j]);
      slot[size_t(slots[j])] = more[j];
      written[size_t(b)] = t;
    }
    return true;
  };

  for (int op = 0; op < num_ops; ++op) {
    const int kind = live.empty() ? 0 : pick(100);
    std::ostringstream os;
    os << "op " << op;
    where = os.str();
    if (kind < 20) {  // admit a prompt, sharing its cached prefix
      const std::vector<int> t = concat(systems[size_t(pick(3))], random_tokens(1 + pick(12), seed * 7919 + uint64_t(op)));
      const int max_tokens = int(t.size()) - pick(2);  // the engine's len - 1, or a full hit
      const std::vector<int> hit = m.match_prefix(t, max_tokens);
      const int id = next_id++;
      where += " (admit sequence " + std::to_string(id) + ")";
      ASSERT_LE(int(hit.size()) * bs, max_tokens) << where;
      for (size_t i = 0; i < hit.size(); ++i) {
        const auto& w = written[size_t(hit[i])];
        ASSERT_TRUE(w.size() >= (i + 1) * size_t(bs) && std::equal(t.begin(), t.begin() + int64_t(i + 1) * bs, w.begin()))
            << where << ": block " << hit[i] << " was hit as block " << i << " of a prefix it does not hold";
      }
      hits += int(hit.size());
      m.add_sequence(id, hit);
      live[id] = std::vector<int>(t.begin(), t.begin() + int64_t(hit.size()) * bs);
      if (append(id, std::vector<int>(t.begin() + int64_t(hit.size()) * bs, t.end()))) {
        m.commit(id, t, int(t.size()) - pick(2));
      } else {
        m.release(id);
        live.erase(id);
      }
    } else if (kind < 50) {  // append a few tokens
      const int id = random_live();
      where += " (append to sequence " + std::to_string(id) + ")";
      append(id, random_tokens(pick(6), seed * 104729 + uint64_t(op)));
    } else if (kind < 65) {  // fork
      const int parent = random_live(), child = next_id++;
      where += " (fork " + std::to_string(parent) + " -> " + std::to_string(child) + ")";
      m.fork(parent, child);
      live[child] = live[parent];
      ++forks;
    } else if (kind < 75) {  // commit what is computed (all of it, or a little less)
      const int id = random_live();
      where += " (commit sequence " + std::to_string(id) + ")";
      const auto& t = live[id];
      m.commit(id, t, std::max(0, int(t.size()) - pick(bs)));
      ++commits;
    } else if (kind < 98) {  // release
      const int id = random_live();
      where += " (release sequence " + std::to_string(id) + ")";
      m.release(id);
      live.erase(id);
    } else {
      where += " (clear_cache)";
      m.clear_cache();
      ++clears;
      ASSERT_EQ(m.num_evictable(), 0) << where;
    }

    // Every sequence reads back its tokens through its block list.
    for (const auto& [id, t] : live) {
      ASSERT_EQ(m.length(id), int(t.size())) << where << ": sequence " << id;
      const auto& list = m.block_list(id);
      ASSERT_EQ(list.size(), (t.size() + size_t(bs) - 1) / size_t(bs)) << where << ": sequence " << id;
      for (size_t p = 0; p < t.size(); ++p) {
        const int b = list[p / size_t(bs)];
        ASSERT_EQ(slot[size_t(b) * bs + p % size_t(bs)], t[p])
            << where << ": sequence " << id << ", token " << p << " (block " << b << ") reads another token";
      }
    }
    std::vector<int> ids;
    for (const auto& [id, t] : live) ids.push_back(id);
    ASSERT_TRUE(blocks_consistent(m, ids)) << where;
    ASSERT_LE(m.num_evictable(), m.num_cached()) << where;
    if (::testing::Test::HasFailure()) FAIL() << "stopped at " << where;
  }
  EXPECT_GT(hits, 100);
  EXPECT_GT(forks, 100);
  EXPECT_GT(copies, 50);
  EXPECT_GT(out_of_blocks, 10);
  EXPECT_GT(m.evictions(), 10);
  EXPECT_GT(clears, 10);
  EXPECT_GT(commits, 100);
  for (const auto& [id, t] : live) m.release(id);
  EXPECT_EQ(m.num_free(), num_blocks);
  m.clear_cache();
  EXPECT_EQ(m.allocator().num_free(), num_blocks);
  EXPECT_EQ(m.num_cached(), 0);
}

TEST(CacheModel, RandomOperationsWithForksKeepEveryInvariant) {
  run_random_operations(24, 8, 1, 3000);
  if (HasFailure()) return;
  run_random_operations(12, 16, 2, 3000);
}

}  // namespace
