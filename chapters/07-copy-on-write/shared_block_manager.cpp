// Your exercise file. (Generated from solutions/07-copy-on-write/shared_block_manager.cpp; instructors regenerate with tools/make_skeletons.py.)
// Chapter 7, exercises 1 to 4 of 5: reference-counted blocks with copy-on-write.
#include <algorithm>

#include "pa/ch07_cow.h"

namespace pa::ch07 {

SharedBlockManager::SharedBlockManager(int num_blocks, int block_size)
    : block_size_(block_size), refcount_(size_t(num_blocks), 0), allocator_(num_blocks) {
  PA_REQUIRE(block_size == 8 || block_size == 16 || block_size == 32,
             "block_size " << block_size << " is not supported (8, 16 or 32)");
}

SharedBlockManager::Sequence& SharedBlockManager::find(int seq_id, const char* what) {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), what << ": unknown sequence " << seq_id);
  return it->second;
}

const SharedBlockManager::Sequence& SharedBlockManager::find(int seq_id, const char* what) const {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), what << ": unknown sequence " << seq_id);
  return it->second;
}

void SharedBlockManager::add_sequence(int seq_id) {
  PA_REQUIRE(!has_sequence(seq_id), "add_sequence: sequence " << seq_id << " already exists");
  seqs_.emplace(seq_id, Sequence{});
}

const std::vector<int>& SharedBlockManager::block_list(int seq_id) const {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), "block_list: unknown sequence " << seq_id);
  return it->second.blocks;
}

int SharedBlockManager::length(int seq_id) const {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), "length: unknown sequence " << seq_id);
  return it->second.length;
}

std::vector<BlockCopy> SharedBlockManager::take_copies() {
  std::vector<BlockCopy> out;
  out.swap(pending_);
  return out;
}

// ANCHOR: fork
void SharedBlockManager::fork(int parent, int child) {
  const Sequence& p = find(parent, "fork");
  PA_REQUIRE(!has_sequence(child), "fork: sequence " << child << " already exists");
  // TODO(ch07): after fork(parent, child), the child has the parent's length and the same
  //   block list (the same physical blocks: no data is copied), and each of those blocks has
  //   one more owner (refcount_[b] + 1). The parent is unchanged.
  PA_TODO("ch07");
}
// ANCHOR_END: fork

// ANCHOR: needs_copy
bool SharedBlockManager::needs_copy(int seq_id, int n) const {
  const Sequence& seq = find(seq_id, "needs_copy");
  // TODO(ch07): true exactly when appending n more tokens to the sequence (positions length ..
  //   length + n - 1) would write into a block that another sequence also holds, so that
  //   append_slots must copy that block first; false otherwise. Nothing changes (const).
  PA_TODO("ch07");
}
// ANCHOR_END: needs_copy

int SharedBlockManager::blocks_needed(int seq_id, int n) const {
  const Sequence& seq = find(seq_id, "blocks_needed");
  const int64_t needed = (int64_t(seq.length) + n + block_size_ - 1) / block_size_;
  return int(std::max<int64_t>(0, needed - int64_t(seq.blocks.size()))) + (needs_copy(seq_id, n) ? 1 : 0);
}

int SharedBlockManager::step_blocks(const std::vector<int>& seq_ids, const std::vector<int>& new_tokens) const {
  PA_REQUIRE(seq_ids.size() == new_tokens.size(),
             "step_blocks: " << seq_ids.size() << " sequences but " << new_tokens.size() << " token counts");
  // TODO(ch07, stretch): return exactly the number of blocks the pool loses if
  //   append_slots(seq_ids[i], new_tokens[i]) ran for i = 0, 1, ... in this order: the new
  //   blocks plus the copy-on-write copies. A sequence writes into its shared tail in place
  //   (no copy) once every other owner of that block has copied it away in this step, so a
  //   tail held by k sequences of which j append costs min(j, k - 1) copies. Nothing changes
  //   (const); each seq_ids[i] is live and appears once. build_batch refuses the step when
  //   this exceeds num_free(), and takes exactly this many blocks otherwise. Checked by
  //   StretchStepBlocks.* (tests/07-copy-on-write/test_stretch_step_blocks.cpp).
  // Given for now: every copy counted (an upper bound; the stretch tests want the
  // exact count). Replace this line with your answer.
  return ch03::SlotManager::step_blocks(seq_ids, new_tokens);
}

// ANCHOR: append_slots
std::vector<int64_t> SharedBlockManager::append_slots(int seq_id, int n) {
  Sequence& seq = find(seq_id, "append_slots");
  PA_REQUIRE(n >= 0, "append_slots: negative token count " << n << " for sequence " << seq_id);
  const int bs = block_size_;
  // TODO(ch07): chapter 3's append_slots (n slots for positions length .. length + n - 1,
  //   blocks added as needed, OutOfBlocks changes nothing), plus copy-on-write: no returned
  //   slot may lie in a block that another sequence still holds. A tail block that is shared
  //   (refcount > 1) and partly filled is replaced by a fresh block (count 1), the old one
  //   loses one count, and {old, new} goes to pending_ (take_copies() hands it to whoever
  //   copies the data). New blocks start with count 1. Blocks come from take_block(), never
  //   from the allocator directly (chapter 8 overrides take_block to reuse cached blocks).
  PA_TODO("ch07");
}
// ANCHOR_END: append_slots

// ANCHOR: release
void SharedBlockManager::release(int seq_id) {
  Sequence& seq = find(seq_id, "release");
  // TODO(ch07): release(seq_id) drops the sequence's ownership of each of its blocks, in list
  //   order: a block whose count reaches zero is given back with drop_block(b) (first block
  //   first); a block another sequence still holds stays. Then the sequence is forgotten.
  PA_TODO("ch07");
}
// ANCHOR_END: release

}  // namespace pa::ch07
