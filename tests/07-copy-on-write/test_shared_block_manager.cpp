// Chapter 7: reference-counted blocks and copy-on-write, replayed against the reference
// model and checked for their invariants under random interleavings.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>

#include "compare.h"
#include "golden.h"
#include "pa/ch07_cow.h"

namespace {

using pa::ch07::SharedBlockManager;
using pa::test::GoldenCase;

enum Op { kAdd = 0, kAppend = 1, kRelease = 2, kFork = 3 };

// An operation as a failure names it: "append_slots(seq 3, 5)", "fork(seq 1 -> seq 4)".
std::string op_text(int kind, int seq, int n, int parent) {
  const std::string s = std::to_string(seq);
  switch (kind) {
    case kAdd: return "add_sequence(seq " + s + ")";
    case kAppend: return "append_slots(seq " + s + ", " + std::to_string(n) + ")";
    case kRelease: return "release(seq " + s + ")";
    case kFork: return "fork(seq " + std::to_string(parent) + " -> seq " + s + ")";
  }
  return "operation kind " + std::to_string(kind) + " (seq " + s + ")";
}

// Why a block that append_slots returns a slot in must have count 1.
std::string refcount_of_written(int64_t block) {
  return "block " + std::to_string(block) + " is written: its count must be 1 (0: a block no " +
         "sequence owns, its count never set; more than 1: a write into a shared block)";
}

class ScriptGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ScriptGolden, ReplayMatchesReferenceModel) {
  const GoldenCase c(pa::test::golden_dir("ch07") + "/" + GetParam());
  SharedBlockManager m(int(c.param_int("num_blocks")), int(c.param_int("block_size")));
  const auto kind = c.get<int>("op_kind"), seq = c.get<int>("op_seq"), n = c.get<int>("op_n"),
             parent = c.get<int>("op_parent"), error = c.get<int>("expect_error"),
             num_free = c.get<int>("expect_num_free"), copy_counts = c.get<int>("expect_copy_counts");
  const auto slots = c.get<int64_t>("expect_slots");
  const auto copies = c.get<int>("expect_copies");  // [K, 2]
  size_t next_slot = 0, next_copy = 0;
  for (size_t i = 0; i < kind.size(); ++i) {
    const std::string what = op_text(kind[i], seq[i], n[i], parent[i]);
    SCOPED_TRACE("operation " + std::to_string(i) + " of the script: " + what);
    try {
      if (kind[i] == kAdd) m.add_sequence(seq[i]);
      if (kind[i] == kRelease) m.release(seq[i]);
      if (kind[i] == kFork) m.fork(parent[i], seq[i]);
      if (kind[i] == kAppend) {
        if (error[i]) {
          const int before = m.length(seq[i]);
          ASSERT_THROW(m.append_slots(seq[i], n[i]), pa::ch02::OutOfBlocks);
          ASSERT_EQ(m.length(seq[i]), before);
        } else {
          for (int64_t s : m.append_slots(seq[i], n[i])) {
            const int64_t want = slots[next_slot++];
            ASSERT_EQ(s, want) << "slot (block * block_size + offset): got block " << s / m.block_size()
                               << ", want block " << want / m.block_size()
                               << ". A block other than the reference's: blocks come from the free list,"
                               << " in the order earlier releases gave them back (first block first)"
                               << " and copies took them";
            ASSERT_EQ(m.refcount(int(s / m.block_size())), 1) << refcount_of_written(s / m.block_size());
          }
        }
      }
    } catch (const std::exception& e) {
      FAIL() << what << " threw: " << e.what();
    }
    const auto made = m.take_copies();
    ASSERT_EQ(int(made.size()), copy_counts[i]);
    for (const auto& cp : made) {
      ASSERT_EQ(cp.src, copies[2 * next_copy]);
      ASSERT_EQ(cp.dst, copies[2 * next_copy + 1]);
      ++next_copy;
    }
    ASSERT_EQ(m.allocator().num_free(), num_free[i]);
  }
  EXPECT_EQ(next_slot, slots.size());
  EXPECT_EQ(2 * next_copy, copies.size());
  const auto refcounts = c.get<int>("final_refcounts");
  for (int b = 0; b < m.num_blocks(); ++b) EXPECT_EQ(m.refcount(b), refcounts[size_t(b)]) << "block " << b;
  const auto ids = c.get<int>("final_seq_ids"), lens = c.get<int>("final_lengths");
  const auto lists = c.get<int>("final_block_lists");
  const size_t width = ids.empty() ? 0 : lists.size() / ids.size();
  for (size_t s = 0; s < ids.size(); ++s) {
    ASSERT_EQ(m.length(ids[s]), lens[s]);
    std::vector<int> want;
    for (size_t j = 0; j < width && lists[s * width + j] >= 0; ++j) want.push_back(lists[s * width + j]);
    EXPECT_EQ(m.block_list(ids[s]), want) << "sequence " << ids[s];
  }
}

INSTANTIATE_TEST_SUITE_P(Ch07, ScriptGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch07", "script_")),
                         [](const auto& info) { return info.param; });

// Thousands of random fork / append / release steps against a model that copies on fork.
// Released ids are used again (by add_sequence and as fork children), so a release that
// leaves anything of the sequence behind shows up. A failure names the step and its
// operation.
TEST(SharedBlockManager, InvariantsHoldUnderRandomInterleavings) {
  for (int bs : {8, 16}) {
    std::mt19937 rng(50 + bs);
    SharedBlockManager m(64, bs);
    std::map<int, std::vector<int64_t>> logical;  // the model: each sequence's slots, unshared
    std::set<int> released;                       // ids released and not yet used again
    int next_id = 0, recycled = 0;
    // A released id again half of the time, else a new one.
    auto new_id = [&] {
      if (!released.empty() && rng() % 2 == 0) {
        const int id = *std::next(released.begin(), rng() % released.size());
        released.erase(id);
        ++recycled;
        return id;
      }
      return next_id++;
    };
    auto where = [&](int step, const std::string& what) {
      return "block_size " + std::to_string(bs) + ", step " + std::to_string(step) + ": " + what;
    };
    for (int step = 0; step < 6000; ++step) {
      const int op = int(rng() % 10);
      std::string what;  // the operation, as a failure names it
      try {
        if (logical.empty() || op == 0) {
          const int id = new_id();
          what = op_text(kAdd, id, 0, 0);
          SCOPED_TRACE(where(step, what));
          m.add_sequence(id);
          ASSERT_EQ(m.length(id), 0) << "a new sequence starts empty";
          ASSERT_TRUE(m.block_list(id).empty()) << "a new sequence holds no block";
          logical[id] = {};
        } else if (op == 1 && logical.size() < 12) {
          auto it = std::next(logical.begin(), rng() % logical.size());
          const int child = new_id();
          what = op_text(kFork, child, 0, it->first);
          SCOPED_TRACE(where(step, what));
          m.fork(it->first, child);
          ASSERT_EQ(m.block_list(child), m.block_list(it->first)) << "a child shares its parent's blocks";
          logical[child] = it->second;
        } else if (op == 2) {
          auto it = std::next(logical.begin(), rng() % logical.size());
          const int id = it->first;
          what = op_text(kRelease, id, 0, 0);
          SCOPED_TRACE(where(step, what));
          const std::vector<int> blocks = m.block_list(id);
          int last_owner = 0;  // blocks whose only owner this sequence is
          for (int b : blocks) last_owner += m.refcount(b) == 1;
          const int free_before = m.allocator().num_free();
          m.release(id);
          // The sequence is gone; the blocks only it held came back, the shared ones stay.
          ASSERT_FALSE(m.has_sequence(id)) << "a released sequence must be forgotten";
          ASSERT_EQ(m.allocator().num_free(), free_before + last_owner)
              << last_owner << " of its " << blocks.size() << " blocks had no other owner";
          logical.erase(it);
          released.insert(id);
        } else {
          auto it = std::next(logical.begin(), rng() % logical.size());
          const int n = op == 3 ? int(rng() % (2 * bs + 2)) : 1;
          what = op_text(kAppend, it->first, n, 0);
          SCOPED_TRACE(where(step, what));
          try {
            const auto got = m.append_slots(it->first, n);
            ASSERT_EQ(got.size(), size_t(n));
            for (int64_t s : got) ASSERT_EQ(m.refcount(int(s / bs)), 1) << refcount_of_written(s / bs);
            // Copy-on-write moved the tail: the model's slots of that block move with it.
            for (const auto& cp : m.take_copies())
              for (int64_t& s : it->second)
                if (s / bs == cp.src) s = int64_t(cp.dst) * bs + s % bs;
            it->second.insert(it->second.end(), got.begin(), got.end());
          } catch (const pa::ch02::OutOfBlocks&) {
            ASSERT_EQ(m.length(it->first), int(it->second.size())) << "a failed append changed the length";
            ASSERT_TRUE(m.take_copies().empty()) << "a failed append left a copy behind";
            what += " (out of blocks)";
          }
        }
      } catch (const std::exception& e) {
        FAIL() << where(step, what) << " threw: " << e.what();
      }
      SCOPED_TRACE(where(step, "after " + what));
      // Counts equal the owners; never negative; free exactly when unowned; every
      // sequence's list maps its positions to the slots the model expects; released
      // sequences stay gone.
      std::map<int, int> owners;
      for (const auto& [id, slots] : logical) {
        ASSERT_TRUE(m.has_sequence(id)) << "sequence " << id;
        const auto& blocks = m.block_list(id);
        ASSERT_EQ(m.length(id), int(slots.size())) << "sequence " << id;
        ASSERT_EQ(int(blocks.size()), (int(slots.size()) + bs - 1) / bs) << "sequence " << id;
        for (int b : blocks) ++owners[b];
        for (size_t p = 0; p < slots.size(); ++p)
          ASSERT_EQ(slots[p], int64_t(blocks[p / bs]) * bs + int64_t(p % bs))
              << "sequence " << id << ", position " << p;
      }
      for (int id : released) ASSERT_FALSE(m.has_sequence(id)) << "released sequence " << id;
      for (int b = 0; b < m.num_blocks(); ++b) {
        const int want = owners.count(b) ? owners[b] : 0;
        ASSERT_EQ(m.refcount(b), want) << "block " << b;
        ASSERT_EQ(m.allocator().is_allocated(b), want > 0) << "block " << b;
      }
    }
    EXPECT_GT(recycled, 50) << "the interleaving should use released ids again";
    for (const auto& [id, slots] : logical) m.release(id);
    EXPECT_EQ(m.allocator().num_free(), 64) << "every block must be freed exactly once";
  }
}

TEST(SharedBlockManager, BadCallsAreRefused) {
  SharedBlockManager m(4, 16);
  m.add_sequence(1);
  using pa::test::error_contains;
  EXPECT_TRUE(error_contains([&] { m.fork(2, 3); }, "unknown sequence 2"));
  EXPECT_TRUE(error_contains([&] { m.fork(1, 1); }, "already exists"));
  EXPECT_TRUE(error_contains([&] { m.append_slots(1, -1); }, "negative token count"));
}

}  // namespace

namespace {

// Chapter 8 builds its caching manager on this one by overriding take_block / drop_block:
// your code must get and give back blocks only through them.
class CountingManager : public pa::ch07::SharedBlockManager {
 public:
  using SharedBlockManager::SharedBlockManager;
  int taken = 0, dropped = 0;

 protected:
  int take_block() override {
    ++taken;
    return SharedBlockManager::take_block();
  }
  void drop_block(int b) override {
    ++dropped;
    SharedBlockManager::drop_block(b);
  }
};

TEST(Hooks, BlocksComeFromTakeBlockAndGoBackThroughDropBlock) {
  CountingManager m(16, 8);
  m.add_sequence(1);
  m.append_slots(1, 12);  // two blocks, the second half full
  ASSERT_EQ(m.taken, 2) << "append_slots must take its new blocks with take_block(), not from the allocator "
                           "(chapter 8 overrides take_block to reuse cached blocks)";
  m.fork(1, 2);
  m.append_slots(2, 1);  // copy-on-write of the shared tail: one more block
  ASSERT_EQ(m.taken, 3) << "the copy-on-write block must come from take_block() too";
  m.release(1);
  ASSERT_EQ(m.dropped, 1) << "release: the tail block only sequence 1 held must go back through drop_block(b)";
  m.release(2);
  EXPECT_EQ(m.dropped, 3) << "release: each block whose count reaches zero goes back through drop_block(b), once";
  EXPECT_EQ(m.allocator().num_free(), 16);
}

TEST(Hooks, BlocksNeededCountsTheCopy) {
  pa::ch07::SharedBlockManager m(16, 8);
  m.add_sequence(1);
  m.append_slots(1, 12);
  m.fork(1, 2);
  EXPECT_TRUE(m.needs_copy(2, 1)) << "a shared, half-full tail must be copied before a write";
  EXPECT_FALSE(m.needs_copy(2, 0)) << "no token, no write, no copy";
  EXPECT_EQ(m.blocks_needed(2, 1), 1) << "one block for the copy";
  EXPECT_EQ(m.blocks_needed(2, 5), 2) << "the copy, and a new block for positions 16..";
  m.append_slots(1, 4);  // sequence 1 fills its tail (copying it first), then shares nothing
  EXPECT_FALSE(m.needs_copy(2, 1)) << "the tail is no longer shared: sequence 1 copied it";
}

}  // namespace
