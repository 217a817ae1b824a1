// Your exercise file. (Generated from solutions/02-paged-kv/block_allocator.cpp; instructors regenerate with tools/make_skeletons.py.)
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
  PA_TODO("ch02");
}
// ANCHOR_END: allocate

// ANCHOR: free
void BlockAllocator::free(int block) {
  // TODO(ch02): free(block) makes an allocated block free again (the next allocate() returns
  //   it). It refuses, with a pa::Error and no change, an id outside [0, num_blocks), whose
  //   message contains "unknown block B", and a block that is not allocated (a double free),
  //   whose message contains "double free of block B" (B the id). O(1).
  PA_TODO("ch02");
}
// ANCHOR_END: free

}  // namespace pa::ch02
