// Chapter 2, exercises 1 and 2 of 4: the block allocator, a free list with O(1) operations.
#include <algorithm>

#include "pa/ch02_paged.h"

namespace pa::ch02 {

BlockAllocator::BlockAllocator(int num_blocks) {
  PA_REQUIRE(num_blocks > 0, "BlockAllocator: num_blocks must be positive, got " << num_blocks);
  allocated_.assign(size_t(num_blocks), false);
  free_.reserve(size_t(num_blocks));
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 on top
}

bool BlockAllocator::is_allocated(int block) const {
  return block >= 0 && block < num_blocks() && allocated_[size_t(block)];
}

// ANCHOR: allocate
int BlockAllocator::allocate() {
  // TODO(ch02): allocate() returns a block id in [0, num_blocks) that was free and marks it
  //   allocated: num_used() grows by one and high_water() is the largest num_used() ever
  //   reached. The id is the back of free_ (a fresh allocator hands out 0, 1, 2, ...; a block
  //   just freed comes back first). With no free block it throws OutOfBlocks, changing
  //   nothing, with a message that contains "all N blocks are in use" (N = num_blocks()).
  //   O(1).
  // HINT(1): free_ is a stack of the free ids and allocated_ says which ids are out. Handle
  //   the empty case first, before touching anything.
  // HINT(2): if (free_.empty()) throw OutOfBlocks("out of KV-cache blocks: all " +
  //   std::to_string(num_blocks()) + " blocks are in use"); otherwise take free_.back(),
  //   pop_back(), set allocated_[block] = true and high_water_ = std::max(high_water_,
  //   num_used()).
  // HINT(3): pop a block id off the free list (the back of free_), mark it allocated
  //   and update high_water_. With no free block, throw OutOfBlocks with a message that
  //   says how many blocks the pool has.
  // BEGIN SOLUTION
  // STUB: PA_TODO("ch02");
  if (free_.empty())
    throw OutOfBlocks("out of KV-cache blocks: all " + std::to_string(num_blocks()) +
                      " blocks are in use");
  const int block = free_.back();
  free_.pop_back();
  allocated_[size_t(block)] = true;
  high_water_ = std::max(high_water_, num_used());
  return block;
  // END SOLUTION
}
// ANCHOR_END: allocate

// ANCHOR: free
void BlockAllocator::free(int block) {
  // TODO(ch02): free(block) makes an allocated block free again (the next allocate() returns
  //   it). It refuses, with a pa::Error and no change, an id outside [0, num_blocks), whose
  //   message contains "unknown block B", and a block that is not allocated (a double free),
  //   whose message contains "double free of block B" (B the id). O(1).
  // HINT(1): Check both conditions before changing anything. PA_REQUIRE(condition, message <<
  //   ...) of include/pa/check.h throws the pa::Error for you.
  // HINT(2): PA_REQUIRE(block >= 0 && block < num_blocks(), "free of unknown block " << block
  //   << ...); PA_REQUIRE(allocated_[size_t(block)], "double free of block " << block); then
  //   allocated_[block] = false and free_.push_back(block).
  // HINT(3): return `block` to the free list. Refuse, with a pa::Error naming the
  //   block, an id outside [0, num_blocks) and a block that is not allocated (a double
  //   free): either would hand one block to two sequences later.
  // BEGIN SOLUTION
  // STUB: PA_TODO("ch02");
  PA_REQUIRE(block >= 0 && block < num_blocks(),
             "free of unknown block " << block << " (the pool has " << num_blocks() << ")");
  PA_REQUIRE(allocated_[size_t(block)], "double free of block " << block);
  allocated_[size_t(block)] = false;
  free_.push_back(block);
  // END SOLUTION
}
// ANCHOR_END: free

}  // namespace pa::ch02
