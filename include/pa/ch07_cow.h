// Chapter 7: copy-on-write and sharing.
//
// Sequences that share a prefix (parallel samples of one prompt, beams, requests with a
// common system prompt) can share the prefix's blocks instead of holding copies. Each
// block has a reference count: fork() adds the child as one more owner of every block of
// the parent; release() drops the owner and frees a block when its count reaches zero.
// A shared block is never written: appending to a sequence whose tail block is shared and
// not full first copies that block (copy-on-write) and writes into the copy.
// The manager is one of chapter 3's SlotManagers: chapter 3's build_batch makes its steps.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "pa/ch02_paged.h"
#include "pa/ch03_block_table.h"

namespace pa::ch07 {

struct BlockCopy {
  int src, dst;  // copy physical block src into physical block dst (K and V, every layer)
};

// ANCHOR: manager
class SharedBlockManager : public ch03::SlotManager {
 public:
  SharedBlockManager(int num_blocks, int block_size);
  virtual ~SharedBlockManager() = default;

  void add_sequence(int seq_id);  // an empty sequence; throws if seq_id is live
  // child (a new id) shares every block of parent: same list, same length, counts + 1.
  void fork(int parent, int child);
  // As chapter 3's append_slots, with copy-on-write of a shared, non-full tail block
  // first (recorded for take_copies). Throws ch02::OutOfBlocks, changing nothing, if the
  // copy plus the new blocks do not fit.
  std::vector<int64_t> append_slots(int seq_id, int n) override;
  // Drops the sequence's ownership of each block (in list order); a block whose count
  // reaches zero is given back (drop_block).
  void release(int seq_id);
  // The copies that must run (ch07::copy_blocks) before this step's writes; clears them.
  std::vector<BlockCopy> take_copies();

  // True when append_slots(seq_id, n) must first copy the tail block: n > 0, the tail is
  // partly filled and another sequence holds it.
  bool needs_copy(int seq_id, int n) const;
  // Blocks append_slots(seq_id, n) takes: the new ones, plus one for a copy.
  int blocks_needed(int seq_id, int n) const override;
  // A step's blocks, exactly: of the owners of one shared tail that append in the step, all
  // but the last copy it (each copy leaves one owner fewer), so a beam forked twice copies
  // its tail twice, not three times.
  int step_blocks(const std::vector<int>& seq_ids, const std::vector<int>& new_tokens) const override;
  int num_free() const override { return allocator_.num_free(); }

  bool has_sequence(int seq_id) const { return seqs_.count(seq_id) != 0; }
  const std::vector<int>& block_list(int seq_id) const override;
  int length(int seq_id) const override;
  int refcount(int block) const { return refcount_.at(size_t(block)); }
  int block_size() const override { return block_size_; }
  int num_blocks() const override { return allocator_.num_blocks(); }
  const ch02::BlockAllocator& allocator() const { return allocator_; }

 protected:
  // Where blocks come from and where they go when their last owner leaves. Here: chapter
  // 2's allocator. Chapter 8 overrides them (and num_free) to keep freed blocks cached, so
  // use them, not the allocator, in your code.
  virtual int take_block() { return allocator_.allocate(); }
  virtual void drop_block(int block) { allocator_.free(block); }

  struct Sequence {
    int length = 0;
    std::vector<int> blocks;
  };
  Sequence& find(int seq_id, const char* what);
  const Sequence& find(int seq_id, const char* what) const;
  int block_size_;
  std::vector<int> refcount_;  // owners of each block; 0 = free
  std::unordered_map<int, Sequence> seqs_;
  std::vector<BlockCopy> pending_;

 private:
  ch02::BlockAllocator allocator_;
};
// ANCHOR_END: manager

// ANCHOR: copy_blocks
// Copies each (src, dst) block of every layer's K and V pool in one launch.
// k_pools[l], v_pools[l]: device pointers to layer l's pools (chapter 2's layouts).
// The copies run in parallel, so they must be independent: throws pa::Error for a block
// id out of range, src == dst, two copies into one block, or a block that is both a
// destination and a source (take the copies after every step, before the next).
template <typename T>
void copy_blocks(const std::vector<T*>& k_pools, const std::vector<T*>& v_pools,
                 const ch02::PoolShape& s, const std::vector<BlockCopy>& copies,
                 cudaStream_t stream = nullptr);
// ANCHOR_END: copy_blocks

}  // namespace pa::ch07
