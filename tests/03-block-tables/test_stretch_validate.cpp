// Chapter 3, stretch exercise: BatchMetadata::validate, the checked mode that refuses a
// step's metadata before a kernel reads it. Each test puts one entry exactly on a boundary
// (the last block a sequence reads, the table's capacity, the pool's last block and slot)
// and one just past it.
#include <gtest/gtest.h>

#include <string>

#include "compare.h"
#include "pa/ch03_block_table.h"

namespace {

using pa::ch03::BatchMetadata;
using pa::test::error_contains;

// Two sequences, block_size 8, a pool of 4 blocks, rows of 2: sequence 0 holds 16 tokens in
// blocks 0 and 1 (a full row), sequence 1 holds 5 tokens in block 2 (its second entry is
// padding, never read).
BatchMetadata good() {
  BatchMetadata md;
  md.num_seqs = 2;
  md.max_blocks_per_seq = 2;
  md.block_table = {0, 1, 2, -1};
  md.context_lens = {16, 5};
  return md;
}

// validate must accept md; the failure prints the message it threw.
::testing::AssertionResult accepted(const BatchMetadata& md, int num_blocks, int block_size) {
  try {
    md.validate(num_blocks, block_size);
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "validate refused metadata a kernel can read safely: " << e.what();
  }
}

TEST(StretchValidate, NamesTheBadEntry) {
  const BatchMetadata md = good();
  EXPECT_TRUE(accepted(md, 4, 8)) << "(a good batch: the padding entry -1 is never read)";
  auto bad = md;
  bad.block_table[2] = 4;
  EXPECT_TRUE(error_contains([&] { bad.validate(4, 8); }, "block_table[1][0] = 4 is not a block of the pool (0..3)"));
  bad = md;
  bad.context_lens[1] = 17;
  EXPECT_TRUE(error_contains([&] { bad.validate(4, 8); },
                             "context_len 17 of sequence 1 is beyond the table's capacity of 2 blocks x 8"));
  bad = md;
  bad.context_lens[0] = -2;
  EXPECT_TRUE(error_contains([&] { bad.validate(4, 8); }, "sequence 0 has a negative length -2"));
  bad = md;
  bad.context_lens[1] = 9;  // now reads the padding entry
  EXPECT_TRUE(error_contains([&] { bad.validate(4, 8); }, "block_table[1][1] = -1"))
      << "9 tokens of block_size 8 read 2 blocks: the second entry of row 1 is read";
  bad = md;
  bad.slot_mapping = {3, 32};
  EXPECT_TRUE(error_contains([&] { bad.validate(4, 8); }, "slot_mapping[1] = 32 is outside the pool"));
}

TEST(StretchValidate, ReadsExactlyTheBlocksThatHoldTokens) {
  BatchMetadata md = good();
  md.context_lens[1] = 8;  // exactly one full block: entry 1 is still padding
  EXPECT_TRUE(accepted(md, 4, 8)) << "(8 tokens of block_size 8 read one block, not two)";
  md.context_lens[1] = 0;
  md.block_table[2] = -1;  // an empty sequence reads no block at all
  EXPECT_TRUE(accepted(md, 4, 8)) << "(context_len 0 reads no entry of its row)";
  md.context_lens[1] = 1;
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); }, "block_table[1][0] = -1"))
      << "1 token reads the row's first entry";
  md = good();
  md.block_table[3] = 1000;  // padding may hold anything
  EXPECT_TRUE(accepted(md, 4, 8)) << "(an entry past the blocks a sequence reads is padding: 1000 is fine)";
  md.context_lens[1] = 16;
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); }, "block_table[1][1] = 1000 is not a block of the pool"));
}

TEST(StretchValidate, BlockIdsRunFromZeroToNumBlocksMinusOne) {
  BatchMetadata md = good();
  md.block_table = {0, 3, 2, -1};
  EXPECT_TRUE(accepted(md, 4, 8)) << "(block 3 is the last of a pool of 4)";
  md.block_table[1] = 4;
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); }, "block_table[0][1] = 4 is not a block of the pool (0..3)"));
  md.block_table[1] = -3;
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); }, "block_table[0][1] = -3 is not a block of the pool"));
}

TEST(StretchValidate, ALengthUpToTheTablesCapacityFits) {
  BatchMetadata md = good();
  md.block_table = {0, 1, 2, 3};
  md.context_lens = {16, 16};  // exactly 2 blocks x 8
  EXPECT_TRUE(accepted(md, 4, 8)) << "(16 tokens fill a row of 2 blocks x 8 exactly)";
  md.context_lens[0] = 17;
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); },
                             "context_len 17 of sequence 0 is beyond the table's capacity of 2 blocks x 8"));
  md.context_lens = {16, -1};
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); }, "sequence 1 has a negative length -1"));
}

TEST(StretchValidate, SlotsRunUpToTheLastSlotOfThePool) {
  BatchMetadata md = good();
  md.slot_mapping = {31, -1, 0};  // the pool's last slot; a padding token; the first slot
  EXPECT_TRUE(accepted(md, 4, 8)) << "(slot 31 is the last of 4 blocks x 8; -1 is a padding token)";
  md.slot_mapping = {0, 31, 32};
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); }, "slot_mapping[2] = 32 is outside the pool"));
}

TEST(StretchValidate, SizesComeFirst) {
  BatchMetadata md = good();
  md.num_seqs = 0;
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); }, "metadata: empty batch or table (0 x 2)"));
  md = good();
  md.block_table.pop_back();
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); }, "metadata: block_table has 3 entries, expected 2 x 2"));
  md = good();
  md.context_lens.pop_back();
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); }, "metadata: context_lens has 1 entries for 2 sequences"));
}

TEST(StretchValidate, QueryStartLocMustAddUp) {
  BatchMetadata md = good();
  md.query_start_loc = {0, 1, 2};
  EXPECT_TRUE(accepted(md, 4, 8)) << "(one new token each)";
  md.query_start_loc = {0, 1, 7};  // 6 new tokens for a sequence of 5
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); }, "sequence 1 has 6 new tokens but context_len 5"));
  md.query_start_loc = {1, 1, 2};
  EXPECT_TRUE(error_contains([&] { md.validate(4, 8); }, "query_start_loc[0] must be 0"));
}

// The pool's slots in 64 bits: 70,000,000 blocks x 32 = 2,240,000,000 slots, past 2^31; a
// bound computed in 32 bits wraps negative and refuses every slot (or accepts any).
TEST(StretchValidate, SlotBoundsAreComputedIn64Bits) {
  BatchMetadata md = good();
  md.slot_mapping = {(int64_t(1) << 31) + 5};
  EXPECT_TRUE(accepted(md, 70000000, 32)) << "(slot 2^31 + 5 is inside 70,000,000 blocks x 32)";
  md.slot_mapping = {int64_t(1) << 33};
  EXPECT_TRUE(error_contains([&] { md.validate(70000000, 32); }, "slot_mapping[0] = 8589934592 is outside the pool"))
      << "slot 2^33 is past 70,000,000 blocks x 32 = 2,240,000,000 slots";
}

}  // namespace
