// Chapter 7, exercises 1 to 3 of 4: reference-counted blocks with copy-on-write.
#include "pa/ch07_cow.h"

namespace pa::ch07 {

SharedBlockManager::SharedBlockManager(int num_blocks, int block_size)
    : block_size_(block_size), allocator_(num_blocks), refcount_(size_t(num_blocks), 0) {
  PA_REQUIRE(block_size == 8 || block_size == 16 || block_size == 32,
             "block_size " << block_size << " is not supported (8, 16 or 32)");
}

SharedBlockManager::Sequence& SharedBlockManager::find(int seq_id, const char* what) {
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
  // HINT(1): A Sequence is a plain struct (length, blocks): copying it copies the list.
  //   refcount_[b] counts the sequences that hold block b.
  // HINT(2): the child starts as a copy of the parent's length and block list, and
  //   becomes one more owner of every one of those blocks (no data is copied).
  //   In code: copy p into a new Sequence, ++refcount_[b] for each of its blocks, then
  //   seqs_.emplace(child, ...).
  // BEGIN SOLUTION
  // STUB: PA_TODO("ch07");
  Sequence c = p;
  for (int b : c.blocks) ++refcount_[size_t(b)];
  seqs_.emplace(child, std::move(c));
  // END SOLUTION
}
// ANCHOR_END: fork

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
  //   copies the data). New blocks start with count 1. The free-block check counts the copy's
  //   block too.
  // HINT(1): Start from your chapter 3 append_slots. First decide whether this call needs a
  //   copy: n > 0, the tail is shared and the sequence's length is not a multiple of the
  //   block size. The copy costs one more free block, so count it before the check.
  // HINT(2): cow = n > 0 && seq.length % bs != 0 && refcount_[seq.blocks.back()] > 1; missing
  //   = needed - blocks.size() + (cow ? 1 : 0); throw ch02::OutOfBlocks if missing >
  //   allocator_.num_free(). If cow: fresh = allocator_.allocate(), pending_.push_back({old,
  //   fresh}), --refcount_[old], refcount_[fresh] = 1, seq.blocks.back() = fresh. Then add
  //   the remaining blocks with count 1 and compute the slots as in chapter 3.
  // HINT(3): chapter 3's append_slots, plus copy-on-write. If n > 0 and the tail block
  //   is shared (refcount > 1) and not full (length % block_size != 0), the tail must be
  //   copied before anything is written: allocate a block, record {old, new} in pending_,
  //   drop one count of the old block, and put the new one (count 1) in its place. Count
  //   the copy in the free-block check that comes first, so a failure changes nothing.
  //   New blocks start with count 1. A shared tail that is full is left alone.
  // BEGIN SOLUTION
  // STUB: PA_TODO("ch07");
  const bool cow = n > 0 && seq.length % bs != 0 && refcount_[size_t(seq.blocks.back())] > 1;
  const int64_t needed = (int64_t(seq.length) + n + bs - 1) / bs;
  const int64_t missing = needed - int64_t(seq.blocks.size()) + (cow ? 1 : 0);
  if (missing > allocator_.num_free())
    throw ch02::OutOfBlocks("append_slots: sequence " + std::to_string(seq_id) + " needs " +
                            std::to_string(missing) + " more blocks, only " +
                            std::to_string(allocator_.num_free()) + " are free");
  if (cow) {
    const int old = seq.blocks.back(), fresh = allocator_.allocate();
    pending_.push_back({old, fresh});
    --refcount_[size_t(old)];
    refcount_[size_t(fresh)] = 1;
    seq.blocks.back() = fresh;
  }
  while (int64_t(seq.blocks.size()) < needed) {
    const int b = allocator_.allocate();
    refcount_[size_t(b)] = 1;
    seq.blocks.push_back(b);
  }
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int p = seq.length + i;
    slots[size_t(i)] = int64_t(seq.blocks[size_t(p / bs)]) * bs + p % bs;
  }
  seq.length += n;
  return slots;
  // END SOLUTION
}
// ANCHOR_END: append_slots

// ANCHOR: release
void SharedBlockManager::release(int seq_id) {
  Sequence& seq = find(seq_id, "release");
  // TODO(ch07): release(seq_id) drops the sequence's ownership of each of its blocks, in list
  //   order: a block whose count reaches zero goes back to the allocator (first block first);
  //   a block another sequence still holds stays allocated. Then the sequence is forgotten.
  // HINT(1): Chapter 3's release, except that only a block's last owner frees it.
  // HINT(2): drop one count of each block, in list order; free a block (chapter 2's
  //   allocator) when its count reaches zero. Then forget the sequence.
  // BEGIN SOLUTION
  // STUB: PA_TODO("ch07");
  for (int b : seq.blocks)
    if (--refcount_[size_t(b)] == 0) allocator_.free(b);
  seqs_.erase(seq_id);
  // END SOLUTION
}
// ANCHOR_END: release

}  // namespace pa::ch07
