// Your exercise file. (Generated from solutions/03-block-tables/block_manager.cpp; instructors regenerate with tools/make_skeletons.py.)
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
  PA_TODO("ch03");
}
// ANCHOR_END: append_slots

// ANCHOR: release
void BlockManager::release(int seq_id) {
  Sequence& seq = find(seq_id, "release");
  // TODO(ch03): release(seq_id) gives every block of the sequence back to the allocator,
  //   first block first (the reference model frees in the same order, and the order decides
  //   which blocks later allocations get), and forgets the sequence (has_sequence(seq_id)
  //   becomes false).
  PA_TODO("ch03");
}
// ANCHOR_END: release

}  // namespace pa::ch03
