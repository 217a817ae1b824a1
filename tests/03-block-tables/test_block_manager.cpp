// Chapter 3: the block manager, replayed against the reference model and checked for its
// invariants under random interleavings.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "compare.h"
#include "golden.h"
#include "pa/ch03_block_table.h"

namespace {

using pa::ch03::BlockManager;
using pa::test::GoldenCase;

// Replays a reference script: every slot, every error and the free count after every
// operation must match the reference model exactly.
void replay(const GoldenCase& c) {
  BlockManager m(int(c.param_int("num_blocks")), int(c.param_int("block_size")));
  const auto kind = c.get<int>("op_kind"), seq = c.get<int>("op_seq"), n = c.get<int>("op_n");
  const auto expect_error = c.get<int>("expect_error"), num_free = c.get<int>("expect_num_free");
  const auto slots = c.get<int64_t>("expect_slots");
  size_t next_slot = 0;
  for (size_t i = 0; i < kind.size(); ++i) {
    SCOPED_TRACE("operation " + std::to_string(i) + " (kind " + std::to_string(kind[i]) +
                 ", sequence " + std::to_string(seq[i]) + ", n " + std::to_string(n[i]) + ")");
    if (kind[i] == 0) m.add_sequence(seq[i]);
    if (kind[i] == 2) m.release(seq[i]);
    if (kind[i] == 1) {
      const int before = m.length(seq[i]);
      if (expect_error[i]) {
        ASSERT_THROW(m.append_slots(seq[i], n[i]), pa::ch02::OutOfBlocks);
        ASSERT_EQ(m.length(seq[i]), before) << "a failed append changed the sequence";
      } else {
        const auto got = m.append_slots(seq[i], n[i]);
        ASSERT_EQ(got.size(), size_t(n[i]));
        for (int64_t s : got) ASSERT_EQ(s, slots[next_slot++]);
      }
    }
    ASSERT_EQ(m.allocator().num_free(), num_free[i]);
  }
  EXPECT_EQ(next_slot, slots.size());
  EXPECT_EQ(m.allocator().high_water(), c.get<int>("expect_high_water")[0]);
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

class ScriptGolden : public ::testing::TestWithParam<std::string> {};
TEST_P(ScriptGolden, ReplayMatchesReferenceModel) {
  replay(GoldenCase(pa::test::golden_dir("ch03") + "/" + GetParam()));
}
INSTANTIATE_TEST_SUITE_P(Ch03, ScriptGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch03", "script_")),
                         [](const auto& info) { return info.param; });

// ---- Edge lengths: a block is allocated exactly when the tail block is full -------------
TEST(BlockManager, AllocatesOnlyOnOverflowAtEdgeLengths) {
  for (int bs : {8, 16, 32}) {
    for (int prompt : {0, 1, bs - 1, bs, bs + 1}) {
      SCOPED_TRACE("block_size " + std::to_string(bs) + ", prompt " + std::to_string(prompt));
      BlockManager m(16, bs);
      m.add_sequence(7);
      m.append_slots(7, prompt);
      EXPECT_EQ(int(m.block_list(7).size()), (prompt + bs - 1) / bs);
      for (int step = 0; step < 2 * bs + 1; ++step) {
        const int len = m.length(7), used = m.allocator().num_used();
        const auto slots = m.append_slots(7, 1);  // one decode step
        const bool full_before = len % bs == 0;
        ASSERT_EQ(m.allocator().num_used(), used + (full_before ? 1 : 0)) << "length " << len;
        ASSERT_EQ(slots[0], int64_t(m.block_list(7)[len / bs]) * bs + len % bs);
      }
    }
  }
}

// ---- Random interleavings of add, append and release, checked against a model ---------
TEST(BlockManager, InvariantsHoldUnderRandomInterleavings) {
  for (int bs : {8, 16, 32}) {
    std::mt19937 rng(100 + bs);
    const int num_blocks = 40;
    BlockManager m(num_blocks, bs);
    std::map<int, int> lengths;                 // the model: live sequence -> length
    std::map<int, std::vector<int64_t>> slots;  // every slot handed to each sequence
    int next_id = 0;
    for (int step = 0; step < 5000; ++step) {
      const int op = rng() % 10;
      if (op == 0 || lengths.empty()) {
        m.add_sequence(next_id);
        lengths[next_id++] = 0;
      } else if (op == 1) {
        auto it = std::next(lengths.begin(), rng() % lengths.size());
        const std::vector<int> blocks = m.block_list(it->first);
        const int free_before = m.allocator().num_free();
        m.release(it->first);
        // Every block comes back exactly once.
        ASSERT_EQ(m.allocator().num_free(), free_before + int(blocks.size()));
        for (int b : blocks) ASSERT_FALSE(m.allocator().is_allocated(b));
        slots.erase(it->first);
        lengths.erase(it);
      } else {
        auto it = std::next(lengths.begin(), rng() % lengths.size());
        const int n = op == 2 ? int(rng() % (3 * bs + 2)) : 1;  // prefill or decode
        try {
          const auto got = m.append_slots(it->first, n);
          it->second += n;
          slots[it->first].insert(slots[it->first].end(), got.begin(), got.end());
        } catch (const pa::ch02::OutOfBlocks&) {
          ASSERT_EQ(m.length(it->first), it->second) << "a failed append changed the length";
        }
      }
      // context_len equals written positions; blocks = ceil(len / bs); no block is shared;
      // the allocator's count matches the blocks held; every slot lies in an owned block.
      std::set<int> owned;
      int held = 0;
      for (const auto& [id, len] : lengths) {
        ASSERT_EQ(m.length(id), len);
        const auto& blocks = m.block_list(id);
        ASSERT_EQ(int(blocks.size()), (len + bs - 1) / bs);
        for (int b : blocks) ASSERT_TRUE(owned.insert(b).second) << "block " << b << " is shared";
        held += int(blocks.size());
        for (size_t p = 0; p < slots[id].size(); ++p)
          ASSERT_EQ(slots[id][p], int64_t(blocks[p / bs]) * bs + int64_t(p % bs));
      }
      ASSERT_EQ(m.allocator().num_used(), held);
    }
    for (const auto& [id, len] : lengths) m.release(id);
    EXPECT_EQ(m.allocator().num_free(), num_blocks) << "blocks leaked after releasing everything";
  }
}

TEST(BlockManager, BadCallsAreRefusedClearly) {
  BlockManager m(4, 16);
  m.add_sequence(1);
  auto err = [](const std::function<void()>& f) { return pa::test::error_of(f); };
  EXPECT_NE(err([&] { m.add_sequence(1); }).find("already exists"), std::string::npos);
  EXPECT_NE(err([&] { m.append_slots(2, 1); }).find("unknown sequence 2"), std::string::npos);
  EXPECT_NE(err([&] { m.append_slots(1, -3); }).find("negative token count -3"), std::string::npos);
  EXPECT_NE(err([&] { m.release(9); }).find("unknown sequence 9"), std::string::npos);
  EXPECT_NE(err([&] { m.append_slots(1, 65); }).find("needs 5 more blocks, only 4 are free"),
            std::string::npos);
  EXPECT_EQ(m.length(1), 0);
  EXPECT_THROW(BlockManager(4, 12), pa::Error);
}

}  // namespace
