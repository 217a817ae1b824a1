// Chapter 2: the block allocator.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "compare.h"
#include "pa/ch02_paged.h"

namespace {

using pa::ch02::BlockAllocator;
using pa::ch02::OutOfBlocks;

using pa::test::contains_text;
using pa::test::error_contains;

TEST(Allocator, HandsOutBlocksInTheSpecifiedLifoOrder) {
  BlockAllocator a(8);
  EXPECT_EQ(a.allocate(), 0);
  EXPECT_EQ(a.allocate(), 1);
  EXPECT_EQ(a.allocate(), 2);
  a.free(1);
  EXPECT_EQ(a.allocate(), 1);  // the most recently freed block comes back first
  a.free(2);
  a.free(0);
  EXPECT_EQ(a.allocate(), 0);
  EXPECT_EQ(a.allocate(), 2);
  EXPECT_EQ(a.allocate(), 3);
}

TEST(Allocator, StatsTrackUsedFreeAndHighWater) {
  BlockAllocator a(5);
  EXPECT_EQ(a.num_free(), 5);
  int b0 = a.allocate(), b1 = a.allocate(), b2 = a.allocate();
  EXPECT_EQ(a.num_used(), 3);
  EXPECT_EQ(a.num_free(), 2);
  a.free(b1);
  a.free(b0);
  EXPECT_EQ(a.num_used(), 1);
  EXPECT_EQ(a.high_water(), 3);
  EXPECT_TRUE(a.is_allocated(b2));
  EXPECT_FALSE(a.is_allocated(b0));
  a.allocate();  // 2 in use again: the mark stays at the peak, 3
  EXPECT_EQ(a.num_used(), 2);
  EXPECT_EQ(a.high_water(), 3) << "high_water() is the largest num_used() ever reached, not the current count";
}

TEST(Allocator, RunningOutIsACatchableErrorAndChangesNothing) {
  BlockAllocator a(3);
  for (int i = 0; i < 3; ++i) a.allocate();
  try {
    a.allocate();
    FAIL() << "a fourth block must not exist";
  } catch (const OutOfBlocks& e) {
    EXPECT_TRUE(contains_text(e.what(), "all 3 blocks are in use"));
  }
  EXPECT_EQ(a.num_used(), 3);
  a.free(2);
  EXPECT_EQ(a.allocate(), 2);
}

TEST(Allocator, DoubleFreeAndUnknownBlocksAreRefused) {
  BlockAllocator a(4);
  const int b = a.allocate();
  a.free(b);
  EXPECT_TRUE(error_contains([&] { a.free(b); }, "double free of block 0"));
  EXPECT_TRUE(error_contains([&] { a.free(4); }, "unknown block 4"));
  EXPECT_TRUE(error_contains([&] { a.free(-1); }, "unknown block -1"));
  EXPECT_TRUE(error_contains([&] { a.free(3); }, "double free of block 3"));
  EXPECT_EQ(a.num_free(), 4);  // refused calls changed nothing
  EXPECT_THROW(BlockAllocator(0), pa::Error);
}

// Random interleavings against a simple model: a set of the blocks handed out.
TEST(Allocator, RandomInterleavingsNeverHandOutABlockTwice) {
  std::mt19937 rng(3);
  BlockAllocator a(64);
  std::set<int> held;
  size_t peak = 0;
  for (int step = 0; step < 20000; ++step) {
    if (held.empty() || (rng() % 3 != 0 && int(held.size()) < 64)) {
      const int b = a.allocate();
      ASSERT_TRUE(b >= 0 && b < 64);
      ASSERT_TRUE(held.insert(b).second) << "block " << b << " handed out twice";
    } else {
      auto it = held.begin();
      std::advance(it, rng() % held.size());
      a.free(*it);
      held.erase(it);
    }
    peak = std::max(peak, held.size());
    ASSERT_EQ(a.num_used(), int(held.size()));
  }
  EXPECT_EQ(a.high_water(), int(peak));
}

}  // namespace
