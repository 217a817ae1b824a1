// Your exercise file. (Generated from solutions/02-paged-kv/block_allocator.cpp; instructors regenerate with tools/make_skeletons.py.)
// Chapter 2, exercise 1 of 3: the block allocator, a free list with O(1) operations.
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
  // TODO(ch02): pop a block id off the free list (the back of free_), mark it allocated
  //   and update high_water_. With no free block, throw OutOfBlocks with a message that
  //   says how many blocks the pool has.
  PA_TODO("ch02");
}
// ANCHOR_END: allocate

// ANCHOR: free
void BlockAllocator::free(int block) {
  // TODO(ch02): return `block` to the free list. Refuse, with a pa::Error naming the
  //   block, an id outside [0, num_blocks) and a block that is not allocated (a double
  //   free): either would hand one block to two sequences later.
  PA_TODO("ch02");
}
// ANCHOR_END: free

}  // namespace pa::ch02
