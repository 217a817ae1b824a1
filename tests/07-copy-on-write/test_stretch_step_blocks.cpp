// Chapter 7, stretch exercise: SharedBlockManager::step_blocks, the exact number of blocks a
// whole step's appends take (new blocks plus copy-on-write copies). The oracle is the
// manager itself: a copy of it runs the step's append_slots one by one, and the blocks it
// loses are what step_blocks must say.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pa/ch03_block_table.h"
#include "pa/ch07_cow.h"

namespace {

using pa::ch07::SharedBlockManager;

// What the step really takes: the appends, run on a copy.
int blocks_taken(const SharedBlockManager& m, const std::vector<int>& ids, const std::vector<int>& n) {
  SharedBlockManager copy = m;
  const int before = copy.num_free();
  for (size_t i = 0; i < ids.size(); ++i) copy.append_slots(ids[i], n[i]);
  return before - copy.num_free();
}

// The step as a failure prints it: each sequence, its length, its tail and the tail's owners.
std::string describe(const SharedBlockManager& m, const std::vector<int>& ids, const std::vector<int>& n) {
  std::ostringstream os;
  os << "step (block_size " << m.block_size() << "):";
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto& blocks = m.block_list(ids[i]);
    os << "\n  seq " << ids[i] << " appends " << n[i] << " to length " << m.length(ids[i]);
    if (!blocks.empty())
      os << ", tail block " << blocks.back() << " (" << m.refcount(blocks.back()) << " owners"
         << (m.length(ids[i]) % m.block_size() ? ", partly filled)" : ", full)");
  }
  return os.str();
}

// One partly filled block (5 of 8 tokens) held by three sequences: 0, and its forks 1 and 2.
SharedBlockManager three_owners() {
  SharedBlockManager m(16, 8);
  m.add_sequence(0);
  m.append_slots(0, 5);
  m.fork(0, 1);
  m.fork(0, 2);
  return m;
}

TEST(StretchStepBlocks, OfTheOwnersOfASharedTailThatAppendAllButTheLastCopyIt) {
  const SharedBlockManager m = three_owners();
  EXPECT_EQ(m.step_blocks({0, 1, 2}, {1, 1, 1}), 2)
      << "three owners of one partly filled tail append one token each: the first two copy it, "
         "the last writes in place (2 copies, not 3, not 1)";
  EXPECT_EQ(m.step_blocks({0, 1}, {1, 1}), 2)
      << "two of its three owners append: both copy (sequence 2 still holds the block)";
  EXPECT_EQ(m.step_blocks({0, 1, 2}, {1, 0, 1}), 2)
      << "owners 0 and 2 append, owner 1 appends nothing: 2 copies (1 still holds it)";
  EXPECT_EQ(m.step_blocks({2}, {3}), 1) << "one owner of three appends: one copy";
  EXPECT_EQ(m.step_blocks({0, 1, 2}, {0, 0, 0}), 0) << "nobody appends: nothing";
  EXPECT_EQ(m.step_blocks({0, 1, 2}, {4, 4, 4}), 2 + 3)
      << "each reaches position 8 (a new block each, 3) and the tail is copied twice";
  EXPECT_EQ(m.step_blocks({0, 1, 2}, {3, 3, 3}), 2)
      << "each fills its tail exactly (positions 5..7): 2 copies, no new block";
}

TEST(StretchStepBlocks, TailsOfDifferentGroupsAreCountedApart) {
  SharedBlockManager m(32, 8);
  m.add_sequence(0);
  m.append_slots(0, 3);
  m.fork(0, 1);  // tail A: owners 0, 1
  m.add_sequence(5);
  m.append_slots(5, 11);
  m.fork(5, 6);
  m.fork(5, 7);  // tail B: owners 5, 6, 7
  EXPECT_EQ(m.step_blocks({0, 5, 1, 6, 7}, {1, 1, 1, 1, 1}), 1 + 2)
      << describe(m, {0, 5, 1, 6, 7}, {1, 1, 1, 1, 1})
      << "\n  tail A (2 owners, both append): 1 copy; tail B (3 owners, all append): 2 copies";
  EXPECT_EQ(m.step_blocks({6, 0}, {1, 1}), 2) << "one owner of each tail appends: one copy each";

  SharedBlockManager f(16, 8);
  f.add_sequence(0);
  f.append_slots(0, 8);  // exactly one full block
  f.fork(0, 1);
  EXPECT_EQ(f.step_blocks({0, 1}, {1, 1}), 2)
      << "a full shared tail: each owner's next token goes to a new block of its own (2), and no copy";
  EXPECT_EQ(f.step_blocks({0, 1}, {9, 1}), 3) << "seq 0 takes 2 new blocks (positions 8..16), seq 1 one";
}

TEST(StretchStepBlocks, ChangesNothing) {
  SharedBlockManager m = three_owners();
  const int free_before = m.num_free();
  const int tail = m.block_list(0).back();
  (void)m.step_blocks({0, 1, 2}, {1, 1, 1});
  (void)m.step_blocks({0, 1, 2}, {20, 1, 3});
  EXPECT_EQ(m.num_free(), free_before) << "step_blocks took blocks from the pool";
  EXPECT_EQ(m.refcount(tail), 3) << "step_blocks changed the shared tail's owner count";
  EXPECT_TRUE(m.take_copies().empty()) << "step_blocks recorded copies";
  EXPECT_EQ(m.step_blocks({0, 1, 2}, {1, 1, 1}), 2) << "a second call gives a different count";
}

// build_batch takes what step_blocks says, and refuses a step only when it does not fit.
TEST(StretchStepBlocks, BuildBatchAdmitsAStepThatFitsExactly) {
  SharedBlockManager m(4, 8);
  m.add_sequence(0);
  m.append_slots(0, 5);
  m.fork(0, 1);
  m.fork(0, 2);  // 1 block used, 3 free; the step needs 2
  m.add_sequence(3);
  m.append_slots(3, 8);  // 2 used, 2 free
  ASSERT_EQ(m.num_free(), 2);
  EXPECT_NO_THROW(pa::ch03::build_batch(m, {0, 1, 2}, {1, 1, 1}))
      << "the step needs 2 blocks (2 copies) and 2 are free: counting 3 copies refuses it";
  EXPECT_EQ(m.num_free(), 0) << "build_batch took " << 2 - m.num_free() << " blocks, step_blocks said 2";
}

// Random forks, appends and releases; at each step a random subset of the live sequences,
// in random order, appends 0..2 blocks' worth of tokens. step_blocks must equal what the
// appends take when they run.
TEST(StretchStepBlocks, EqualsWhatTheAppendsTakeUnderRandomForks) {
  for (int bs : {8, 16}) {
    std::mt19937 rng(700 + bs);
    SharedBlockManager m(16384, bs);
    std::vector<int> live;
    int next_id = 0;
    int checked = 0;
    for (int op = 0; op < 600; ++op) {
      const int r = int(rng() % 10);
      if (live.empty() || r == 0) {
        m.add_sequence(next_id);
        m.append_slots(next_id, int(rng() % (3 * bs)));
        live.push_back(next_id++);
      } else if (r <= 3 && live.size() < 24) {
        const int parent = live[rng() % live.size()];
        m.fork(parent, next_id);
        live.push_back(next_id++);
      } else if (r == 4 && live.size() > 2) {
        const size_t k = rng() % live.size();
        m.release(live[k]);
        live.erase(live.begin() + long(k));
      } else {
        std::vector<int> ids = live;
        std::shuffle(ids.begin(), ids.end(), rng);
        ids.resize(1 + rng() % ids.size());
        std::vector<int> n(ids.size());
        for (int& x : n) x = int(rng() % 4 == 0 ? rng() % (2 * bs + 1) : rng() % 3);
        const int want = blocks_taken(m, ids, n);
        const int got = m.step_blocks(ids, n);
        ASSERT_EQ(got, want) << describe(m, ids, n) << "\n  the appends, run in this order, take " << want
                             << " blocks; step_blocks says " << got << " (block_size " << bs << ", operation "
                             << op << ")";
        ++checked;
        if (rng() % 2) {  // run the step for real, so tails get copied and owners change
          pa::ch03::build_batch(m, ids, n);
          m.take_copies();
        }
      }
    }
    EXPECT_GT(checked, 200) << "the random walk checked too few steps";
  }
}

}  // namespace
