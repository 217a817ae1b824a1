// Chapter 3, exercises 1 and 2 of 4: growing and releasing a sequence's block list.
#include <algorithm>

#include "pa/ch03_block_table.h"

namespace pa::ch03 {

BlockManager::BlockManager(int num_blocks, int block_size)
    : block_size_(block_size), allocator_(num_blocks) {
  PA_REQUIRE(block_size == 8 || block_size == 16 || block_size == 32,
             "block_size " << block_size << " is not supported (8, 16 or 32)");
}

BlockManager::Sequence& BlockManager::find(int seq_id, const char* what) {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), what << ": unknown sequence " << seq_id);
  return it->second;
}

void BlockManager::add_sequence(int seq_id) {
  PA_REQUIRE(!has_sequence(seq_id), "add_sequence: sequence " << seq_id << " already exists");
  seqs_.emplace(seq_id, Sequence{});
}

const std::vector<int>& BlockManager::block_list(int seq_id) const {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), "block_list: unknown sequence " << seq_id);
  return it->second.blocks;
}

int BlockManager::length(int seq_id) const {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), "length: unknown sequence " << seq_id);
  return it->second.length;
}

int BlockManager::blocks_needed(int seq_id, int n) const {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), "blocks_needed: unknown sequence " << seq_id);
  const int64_t needed = (int64_t(it->second.length) + n + block_size_ - 1) / block_size_;
  return int(std::max<int64_t>(0, needed - int64_t(it->second.blocks.size())));
}

// ANCHOR: append_slots
std::vector<int64_t> BlockManager::append_slots(int seq_id, int n) {
  Sequence& seq = find(seq_id, "append_slots");
  PA_REQUIRE(n >= 0, "append_slots: negative token count " << n << " for sequence " << seq_id);
  // TODO(ch03): append_slots(seq_id, n) makes room for n more tokens and returns their n
  //   slots, in order: position p (length <= p < length + n) lives in slot blocks[p /
  //   block_size] * block_size + p % block_size (64-bit). The block list grows by exactly the
  //   blocks needed to hold length + n tokens, allocated in order; the length grows by n. If
  //   the pool cannot supply them, throw ch02::OutOfBlocks and change nothing (no block
  //   taken, length unchanged); its message contains "needs M more blocks, only F are free"
  //   (M the blocks missing, F = allocator_.num_free()). n = 0 is allowed.
  // HINT(1): Check, then allocate: count the missing blocks before taking any.
  //   allocator_.num_free() says how many the pool can still give.
  // HINT(2): needed = ceil((length + n) / block_size) blocks in all, missing = needed -
  //   blocks.size(). If missing > allocator_.num_free(), throw ch02::OutOfBlocks with the
  //   message the TODO states. Otherwise push_back(allocator_.allocate()) missing times,
  //   compute the slots of positions seq.length + i, then seq.length += n.
  // HINT(3): make room for n tokens at positions length .. length + n - 1.
  //   1. Blocks needed in all: ceil((length + n) / block_size). If the allocator has fewer
  //      free blocks than the new ones needed, throw ch02::OutOfBlocks BEFORE allocating
  //      any (a failed call must change nothing).
  //   2. Allocate the missing blocks in order, appending them to seq.blocks.
  //   3. Position p lives in slot blocks[p / block_size] * block_size + p % block_size;
  //      return the n slots (64-bit) and add n to the length.
  // BEGIN SOLUTION
  // STUB: PA_TODO("ch03");
  const int64_t needed = (int64_t(seq.length) + n + block_size_ - 1) / block_size_;
  const int64_t missing = needed - int64_t(seq.blocks.size());
  if (missing > allocator_.num_free())
    throw ch02::OutOfBlocks("append_slots: sequence " + std::to_string(seq_id) + " needs " +
                            std::to_string(missing) + " more blocks, only " +
                            std::to_string(allocator_.num_free()) + " are free");
  for (int64_t i = 0; i < missing; ++i) seq.blocks.push_back(allocator_.allocate());
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int p = seq.length + i;
    slots[size_t(i)] = int64_t(seq.blocks[size_t(p / block_size_)]) * block_size_ + p % block_size_;
  }
  seq.length += n;
  return slots;
  // END SOLUTION
}
// ANCHOR_END: append_slots

// ANCHOR: release
void BlockManager::release(int seq_id) {
  Sequence& seq = find(seq_id, "release");
  // TODO(ch03): release(seq_id) gives every block of the sequence back to the allocator,
  //   first block first (the reference model frees in the same order, and the order decides
  //   which blocks later allocations get), and forgets the sequence (has_sequence(seq_id)
  //   becomes false).
  // HINT(1): The allocator (allocator_) takes the blocks back one by one; seqs_ maps an id to
  //   its Sequence. `seq` is a reference into seqs_: finish with it before you erase the
  //   entry.
  // HINT(2): free every block of the sequence, in list order (first block first: the
  //   order is part of the spec, the reference model frees the same way), then erase the
  //   sequence from seqs_.
  // BEGIN SOLUTION
  // STUB: PA_TODO("ch03");
  for (int block : seq.blocks) allocator_.free(block);
  seqs_.erase(seq_id);
  // END SOLUTION
}
// ANCHOR_END: release

}  // namespace pa::ch03
