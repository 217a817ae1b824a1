// Chapter 12: the hybrid manager against a simple model, under thousands of random add /
// append / step / fork / free / release operations (released ids are used again). After
// every operation: no block that a current or future query can see was freed, every dead
// block was given back (none leaked), refcounts equal the owners, the null block is never
// handed out, free + held + null == pool, and step_blocks is exact. A failure prints the
// operations that led to it, by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "pa/ch12_hybrid.h"

namespace {

using pa::ch12::HybridBlockManager;
using pa::ch12::kNullBlock;
using pa::ch12::LayerGroup;

struct ModelSeq {
  int length = 0;
  int freed_at = 0;  // the length at the last freeing (append_slots' start, free_dead_blocks)
  std::vector<std::vector<int64_t>> slots;  // [group][position]: where each token is
};

// The model's own rule: a sliding group's entry j is dead once the query at position q (the
// length at the last freeing) cannot see it: all of its keys lie before q - window + 1.
int model_dead(const LayerGroup& g, int q, int bs, int size) {
  if (g.kind == pa::ch12::Attention::full) return 0;
  return std::min(std::max(0, q - g.window + 1) / bs, size);
}

std::string last_ops(const std::vector<std::string>& ops) {
  std::string s = "the operations so far (" + std::to_string(ops.size()) + ", the last 12 shown):";
  for (size_t i = ops.size() > 12 ? ops.size() - 12 : 0; i < ops.size(); ++i)
    s += "\n    " + std::to_string(i) + ": " + ops[i];
  return s;
}

void check_all(const HybridBlockManager& m, const std::vector<LayerGroup>& groups,
               const std::map<int, ModelSeq>& model, const std::set<int>& released) {
  const int bs = m.block_size();
  std::vector<std::map<int, int>> owners(groups.size());
  for (const auto& [id, s] : model) {
    ASSERT_TRUE(m.has_sequence(id)) << "sequence " << id << " is live";
    ASSERT_EQ(m.length(id), s.length) << "sequence " << id;
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto& table = m.block_list(int(g), id);
      const std::string where = "sequence " + std::to_string(id) + ", group " + std::to_string(g) + " (" +
                                (groups[g].kind == pa::ch12::Attention::full
                                     ? std::string("full")
                                     : "window " + std::to_string(groups[g].window)) +
                                "), " + std::to_string(s.length) + " tokens";
      ASSERT_EQ(int(table.size()), (s.length + bs - 1) / bs) << where << ": table entries (one per logical block)";
      const int dead = model_dead(groups[g], s.freed_at, bs, int(table.size()));
      for (int j = 0; j < int(table.size()); ++j) {
        const int b = table[size_t(j)];
        if (j < dead) {
          ASSERT_EQ(b, kNullBlock) << where << ": entry " << j << " (positions " << j * bs << ".." << j * bs + bs - 1
                                   << ") is dead since the freeing at " << s.freed_at
                                   << " tokens (no query from there on sees it) but still holds block " << b
                                   << ": a leaked block";
          continue;
        }
        ASSERT_NE(b, kNullBlock) << where << ": entry " << j << " (positions " << j * bs << ".." << j * bs + bs - 1
                                 << ") was freed, but the query at position " << s.freed_at
                                 << " still sees position "
                                 << std::max(j * bs, s.freed_at - (groups[g].kind == pa::ch12::Attention::full
                                                                       ? s.freed_at
                                                                       : groups[g].window - 1));
        ++owners[g][b];
        for (int p = j * bs; p < std::min(s.length, j * bs + bs); ++p)
          ASSERT_EQ(s.slots[g][size_t(p)], int64_t(b) * bs + p % bs)
              << where << ": position " << p << " is not where its token was written";
      }
    }
  }
  for (int id : released) ASSERT_FALSE(m.has_sequence(id)) << "released sequence " << id << " must be gone";
  int held = 0;
  for (int b = 0; b < m.num_blocks(); ++b) {
    int groups_holding = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      const int want = owners[g].count(b) ? owners[g][b] : 0;
      ASSERT_EQ(m.group(int(g)).refcount(b), want)
          << "block " << b << " in group " << g << ": refcount vs the tables that hold it"
          << (b == kNullBlock ? " (the null block is owned by nobody)" : "");
      groups_holding += want > 0;
    }
    ASSERT_LE(groups_holding, 1) << "block " << b << " is in the tables of two groups";
    if (b == kNullBlock) {
      ASSERT_TRUE(m.pool().is_allocated(b)) << "the null block must never be free";
      continue;
    }
    ASSERT_EQ(m.pool().is_allocated(b), groups_holding > 0)
        << "block " << b << (groups_holding ? " is in a table but free in the pool" : " is held by no table but not free (leaked)");
    held += groups_holding;
  }
  ASSERT_EQ(m.num_held(), held) << "blocks held";
  ASSERT_EQ(m.num_free() + held + 1, m.num_blocks()) << "free + held + the null block must be the whole pool";
}

// check_steps: also compare every step's step_blocks (exercise 2) with what its appends
// took. (Without it, step_blocks still runs: append_slots asks it when the pool is short.)
void run_random(bool check_steps) {
  int recycled = 0, out_of_blocks = 0, frees_to_null = 0, steps_checked = 0;
  for (int bs : {8, 16}) {
    // The window's edge inside a block, on a block edge, and a full group between them.
    const std::vector<LayerGroup> groups = {pa::ch12::sliding_group(bs / 2 + 3), pa::ch12::full_group(),
                                            pa::ch12::sliding_group(2 * bs)};
    const int num_blocks = 48;
    std::mt19937 rng(1200 + bs);
    HybridBlockManager m(num_blocks, bs, groups);
    std::map<int, ModelSeq> model;
    std::set<int> released;
    std::vector<std::string> ops;
    int next_id = 0;
    auto new_id = [&] {
      if (!released.empty() && rng() % 2 == 0) {
        const int id = *std::next(released.begin(), rng() % released.size());
        released.erase(id);
        ++recycled;
        return id;
      }
      return next_id++;
    };
    auto pick = [&] { return std::next(model.begin(), rng() % model.size())->first; };
    const int sizes[] = {0, 1, 1, 1, 2, bs - 1, bs, bs + 1, 2 * bs + 3};
    // One append, on the manager and the model; false when it ran out of blocks.
    auto append = [&](int id, int n) -> bool {
      ModelSeq& s = model[id];
      std::vector<std::vector<int64_t>> got;
      try {
        got = m.append_slots(id, n);
      } catch (const pa::ch02::OutOfBlocks&) {
        ++out_of_blocks;
        return false;
      }
      EXPECT_EQ(got.size(), groups.size()) << "slots for every group";
      s.freed_at = s.length;
      for (size_t g = 0; g < groups.size(); ++g) {
        for (const auto& cp : m.take_copies(int(g)))  // copy-on-write moved a tail
          for (int64_t& x : s.slots[g])
            if (x / bs == cp.src) x = int64_t(cp.dst) * bs + x % bs;
        for (int64_t x : got[g]) {
          EXPECT_NE(x / bs, kNullBlock) << "a slot in the null block was handed out (group " << g << ")";
          s.slots[g].push_back(x);
        }
      }
      s.length += n;
      return true;
    };
    // A refusal (pa::Error) inside an operation fails the test with the operations that led to it.
    try {
      for (int step = 0; step < 4000; ++step) {
        int op = int(rng() % 12);
        if (op >= 4 && m.num_free() < 16 && rng() % 3 == 0) op = 2;  // make room now and then
        std::string what;
        const int free_before = m.num_free();
        struct {
          bool checked;
          int planned, most, start;
          bool all;
        } plan = {false, 0, 0, 0, false};
        if (model.empty() || op == 0) {
          const int id = new_id();
          what = "add_sequence(seq " + std::to_string(id) + ")";
          ops.push_back(what);
          m.add_sequence(id);
          model[id] = ModelSeq{0, 0, std::vector<std::vector<int64_t>>(groups.size())};
        } else if (op == 1 && model.size() < 10) {
          const int parent = pick(), child = new_id();
          what = "fork(seq " + std::to_string(parent) + " -> seq " + std::to_string(child) + ")";
          ops.push_back(what);
          m.fork(parent, child);
          model[child] = model[parent];
        } else if (op == 2) {
          const int id = pick();
          what = "release(seq " + std::to_string(id) + ")";
          ops.push_back(what);
          m.release(id);
          model.erase(id);
          released.insert(id);
        } else if (op == 3) {
          const int id = pick();
          what = "free_dead_blocks(seq " + std::to_string(id) + ")";
          ops.push_back(what);
          m.free_dead_blocks(id);
          model[id].freed_at = model[id].length;
        } else if (op == 7) {
          // Swapped out and back: released, then restored at its length with fresh blocks for
          // what its queries can still see (the caller copies the K/V back).
          const int id = pick(), len = model[id].length;
          what = "swap out and in(seq " + std::to_string(id) + ", " + std::to_string(len) + " tokens)";
          ops.push_back(what);
          m.release(id);
          try {
            m.restore(id, len);
          } catch (const pa::ch02::OutOfBlocks&) {
            ops.back() += " (out of blocks: stays swapped out)";
            model.erase(id);
            released.insert(id);
          }
          if (model.count(id)) {
            ModelSeq& s = model[id];
            s.freed_at = len;
            for (size_t g = 0; g < groups.size(); ++g) {
              const auto& table = m.block_list(int(g), id);
              for (int p = 0; p < len; ++p)
                if (table[size_t(p / bs)] != kNullBlock) s.slots[g][size_t(p)] = int64_t(table[size_t(p / bs)]) * bs + p % bs;
            }
          }
        } else if (op <= 6) {
          // A step of several sequences: step_blocks must be exactly the free blocks it needs.
          std::vector<int> ids, ns;
          for (const auto& [id, s] : model)
            if (rng() % 2 == 0) {
              ids.push_back(id);
              ns.push_back(sizes[rng() % 9]);
            }
          if (ids.empty()) continue;
          what = "a step of";
          for (size_t i = 0; i < ids.size(); ++i)
            what += " append_slots(seq " + std::to_string(ids[i]) + ", " + std::to_string(ns[i]) + ")";
          ops.push_back(what);
          SCOPED_TRACE(last_ops(ops));
          const int planned = check_steps ? m.step_blocks(ids, ns) : 0, start = m.num_free();
          int most = 0;
          bool all = true;
          for (size_t i = 0; i < ids.size() && all; ++i) {
            all = append(ids[i], ns[i]);
            if (all) most = std::max(most, start - m.num_free());
          }
          // Checked after the state (below), so that a wrong state is named first.
          plan = {true, planned, most, start, all};
        } else {
          const int id = pick(), n = sizes[rng() % 9];
          what = "append_slots(seq " + std::to_string(id) + ", " + std::to_string(n) + ")";
          ops.push_back(what);
          SCOPED_TRACE(last_ops(ops));
          const int planned = check_steps ? m.step_blocks({id}, {n}) : 0, start = m.num_free();
          const bool ok = append(id, n);
          plan = {true, planned, ok ? std::max(0, start - m.num_free()) : -1, start, ok};
          if (!ok) ops.back() += " (out of blocks: nothing changes)";
        }
        frees_to_null += m.num_free() > free_before;
        SCOPED_TRACE(last_ops(ops));
        SCOPED_TRACE("block_size " + std::to_string(bs) + ", after operation " + std::to_string(ops.size() - 1) +
                     ": " + ops.back());
        check_all(m, groups, model, released);
        if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) return;
        if (check_steps && plan.checked) {
          if (plan.all) {
            ASSERT_EQ(plan.planned, plan.most) << "step_blocks said " << plan.planned << " free blocks, the step took at most "
                                               << plan.most << " beyond the " << plan.start << " free at its start";
            ++steps_checked;
          } else {
            ASSERT_GT(plan.planned, plan.start) << "step_blocks said " << plan.planned << " blocks would do, "
                                                << plan.start << " were free, and an append ran out";
          }
        }
      }
    } catch (const std::exception& e) {
      FAIL() << "block_size " << bs << ", operation " << int(ops.size()) - 1 << " (" << (ops.empty() ? "" : ops.back())
             << ") threw: " << e.what() << "\n" << last_ops(ops);
    }
    for (const auto& [id, s] : model) m.release(id);
    EXPECT_EQ(m.num_free(), num_blocks - 1) << "every block but the null one must be back";
  }
  EXPECT_GT(recycled, 50) << "released ids should be used again";
  EXPECT_GT(out_of_blocks, 20) << "the pool should run out sometimes";
  EXPECT_GT(frees_to_null, 50) << "operations that gave blocks back should be common";
  if (check_steps) EXPECT_GT(steps_checked, 200);
}

TEST(HybridRandom, ModelHoldsUnderRandomOperations) { run_random(false); }

TEST(StepBlocks, ExactUnderRandomOperations) { run_random(true); }

}  // namespace

namespace {

// With prefix caching: the model keeps what each pool slot holds (per group: the token id
// written there), so a hit that hands out the wrong block, or a cached block evicted while
// someone still reads it, shows as a visible position that holds another token.
TEST(StretchPrefixHit, RandomOperationsWithCachingKeepEveryVisibleToken) {
  const int bs = 8, num_blocks = 40;
  const std::vector<LayerGroup> groups = {pa::ch12::full_group(), pa::ch12::sliding_group(11)};
  HybridBlockManager m(num_blocks, bs, groups, /*prefix_caching=*/true);
  std::mt19937 rng(4242);
  struct Seq {
    std::vector<int> stream;  // its tokens, those to come included
    int length = 0, freed_at = 0;
  };
  std::map<int, Seq> model;
  std::vector<std::vector<int>> content(groups.size(), std::vector<int>(size_t(num_blocks) * bs, -1));
  std::vector<std::vector<int>> prompts;
  for (int f = 0; f < 3; ++f) {
    prompts.emplace_back();
    for (int i = 0; i < 40 + 8 * f; ++i) prompts.back().push_back(1000 * (f + 1) + i);
  }
  std::vector<std::string> ops;
  int next_id = 0, next_token = 1 << 20, hits = 0, hit_tokens = 0, evicting = 0;
  auto pick = [&] { return std::next(model.begin(), rng() % model.size())->first; };
  for (int step = 0; step < 3000; ++step) {
    int op = int(rng() % 10);
    if (op >= 4 && m.num_free() < 10 && rng() % 2) op = 2;
    if (model.empty()) op = 0;
    if (op == 0) {
      const int id = next_id++, f = int(rng() % prompts.size());
      const int hit = m.match_prefix(prompts[size_t(f)], int(prompts[size_t(f)].size()) - 1);
      ops.push_back("add_sequence(seq " + std::to_string(id) + ", prompt " + std::to_string(f) + ", hit " +
                    std::to_string(hit) + ")");
      m.add_sequence(id, prompts[size_t(f)], hit);
      model[id] = Seq{prompts[size_t(f)], hit, hit};
      hits += hit > 0;
      hit_tokens += hit;
    } else if (op == 1 && model.size() < 8) {
      const int parent = pick(), child = next_id++;
      ops.push_back("fork(seq " + std::to_string(parent) + " -> seq " + std::to_string(child) + ")");
      m.fork(parent, child);
      Seq c = model[parent];
      c.stream.resize(size_t(c.length));  // the child's own tokens from here on
      model[child] = c;
    } else if (op == 2) {
      const int id = pick();
      ops.push_back("release(seq " + std::to_string(id) + ")");
      m.release(id);
      model.erase(id);
    } else if (op == 3) {
      const int id = pick();
      ops.push_back("free_dead_blocks(seq " + std::to_string(id) + ")");
      m.free_dead_blocks(id);
      model[id].freed_at = model[id].length;
    } else {
      const int id = pick(), n = int(rng() % (2 * bs + 2));
      Seq& s = model[id];
      ops.push_back("append_slots(seq " + std::to_string(id) + ", " + std::to_string(n) + ") and commit");
      std::vector<std::vector<int64_t>> got;
      const int evictable_before = m.num_evictable(), pool_free_before = m.pool().num_free();
      try {
        got = m.append_slots(id, n);
        if (m.num_evictable() < evictable_before && pool_free_before == 0) ++evicting;
      } catch (const pa::ch02::OutOfBlocks&) {
        ops.back() += " (out of blocks)";
        got.clear();
      }
      if (!got.empty()) {
        for (size_t g = 0; g < groups.size(); ++g)
          for (const auto& cp : m.take_copies(int(g)))
            for (int o = 0; o < bs; ++o)
              content[g][size_t(cp.dst) * bs + o] = content[g][size_t(cp.src) * bs + o];
        while (int(s.stream.size()) < s.length + n) s.stream.push_back(next_token++);
        for (size_t g = 0; g < groups.size(); ++g)
          for (int i = 0; i < n; ++i) content[g][size_t(got[g][size_t(i)])] = s.stream[size_t(s.length + i)];
        s.freed_at = s.length;
        s.length += n;
        m.commit(id, s.stream, s.length);
      }
    }
    SCOPED_TRACE(last_ops(ops));
    std::vector<std::map<int, int>> owners(groups.size());
    for (const auto& [id, s] : model)
      for (size_t g = 0; g < groups.size(); ++g) {
        const auto& table = m.block_list(int(g), id);
        ASSERT_EQ(int(table.size()), (s.length + bs - 1) / bs) << "sequence " << id << ", group " << g;
        const int dead = model_dead(groups[g], s.freed_at, bs, int(table.size()));
        for (int j = 0; j < int(table.size()); ++j) {
          const int b = table[size_t(j)];
          ASSERT_EQ(b == kNullBlock, j < dead) << "sequence " << id << ", group " << g << ", entry " << j
                                               << " (dead: the first " << dead << ")";
          if (b == kNullBlock) continue;
          ++owners[g][b];
          for (int p = j * bs; p < std::min(s.length, j * bs + bs); ++p)
            ASSERT_EQ(content[g][size_t(b) * bs + p % bs], s.stream[size_t(p)])
                << "sequence " << id << ", group " << g << ": position " << p << " (block " << b
                << ") holds another token: a wrong hit, or a block evicted or reused while still seen";
        }
      }
    int held = 0, unowned_allocated = 0;
    for (int b = 1; b < num_blocks; ++b) {
      int holding = 0;
      for (size_t g = 0; g < groups.size(); ++g) {
        const int want = owners[g].count(b) ? owners[g][b] : 0;
        ASSERT_EQ(m.group(int(g)).refcount(b), want) << "block " << b << " in group " << g;
        holding += want > 0;
      }
      ASSERT_LE(holding, 1) << "block " << b << " is in two groups' tables";
      held += holding;
      if (!holding && m.pool().is_allocated(b)) ++unowned_allocated;
    }
    ASSERT_EQ(m.num_held(), held);
    ASSERT_EQ(m.num_evictable(), unowned_allocated) << "the cache's evictable blocks are the allocated, unowned ones";
  }
  EXPECT_GT(hits, 30) << "prompts should hit the cache";
  EXPECT_GT(hit_tokens, 30 * 40);
  EXPECT_GT(evicting, 20) << "appends should evict cached blocks when the pool has no free one";
}

}  // namespace
