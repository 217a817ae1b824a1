// Chapter 2: paged KV storage.
//
// Instead of one slab per sequence, K and V live in a pool of fixed-size blocks, each
// holding block_size tokens of every KV head. A sequence owns whichever blocks it was
// given, in any order; a token's place in the pool is its *slot*:
//   slot = block_id * block_size + offset_in_block
// The pool layouts are vLLM's, with x = 16 bytes / sizeof(element):
//   k_pool: [num_blocks, num_kv_heads, head_size / x, block_size, x]
//   v_pool: [num_blocks, num_kv_heads, head_size, block_size]
// K keeps x consecutive head elements of one token together (16 bytes: one vector load),
// and puts the block's tokens next to each other for each such 16-byte chunk.
#pragma once

#include <cstdint>
#include <vector>

#include "pa/backend.h"
#include "pa/check.h"
#include "pa/device_buffer.h"

namespace pa::ch02 {

// ANCHOR: pool_shape
struct PoolShape {
  int num_blocks;    // blocks in the pool (one pool per layer, for K and for V)
  int block_size;    // tokens per block: 8, 16 or 32
  int num_kv_heads;  // Hkv
  int head_size;     // D: 64, 80, 96, 112, 128 or 256
};

// Elements per 16-byte chunk of K: 8 for fp16/bf16, 4 for fp32.
template <typename T>
__host__ __device__ constexpr int pack_x() { return 16 / int(sizeof(T)); }
// ANCHOR_END: pool_shape

// Throws pa::Error for an unsupported block or head size, non-positive sizes, or a head
// size that is not a multiple of x.
void check_pool_shape(const PoolShape& s, int x);

// Elements in one pool (the K and V pools have the same number).
inline int64_t pool_elems(const PoolShape& s) {
  return int64_t(s.num_blocks) * s.num_kv_heads * s.head_size * s.block_size;
}

// A K pool and a V pool in device memory, every element poisoned with NaN to start.
template <typename T>
struct KVPool {
  explicit KVPool(const PoolShape& s);
  PoolShape shape;
  DeviceBuffer<T> k, v;
};

// Running out of blocks is an expected event for a server (it preempts or waits), so it
// has its own type that callers can catch.
struct OutOfBlocks : Error {
  using Error::Error;
};

// ANCHOR: allocator
// Hands out block ids from a free list in O(1). The order is part of the spec (the
// reference model makes the same choices): a LIFO stack that starts as 0, 1, 2, ... on
// top, so the most recently freed block is reused first.
class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks);
  int allocate();          // throws OutOfBlocks when none is free
  void free(int block);    // throws pa::Error on an unknown id or a double free
  int num_blocks() const { return int(allocated_.size()); }
  int num_free() const { return int(free_.size()); }
  int num_used() const { return num_blocks() - num_free(); }
  int high_water() const { return high_water_; }  // the most blocks ever in use at once
  bool is_allocated(int block) const;

 private:
  std::vector<int> free_;        // the free list, used as a stack
  std::vector<bool> allocated_;  // allocated_[b]: is block b handed out?
  int high_water_ = 0;
};
// ANCHOR_END: allocator

// Writes each new token's K and V into its slot:
//   k, v: [num_tokens, num_kv_heads, head_size]; slot_mapping: [num_tokens] (int64)
// slot_mapping[i] < 0 means padding: token i is skipped. Device pointers.
template <typename T>
void reshape_and_cache(const PoolShape& s, const T* k, const T* v, int num_tokens, T* k_pool,
                       T* v_pool, const int64_t* slot_mapping, cudaStream_t stream = nullptr);

// Paged to dense: copies each sequence's first context_lens[b] tokens into
//   k_dense, v_dense: [num_seqs, max_seq_len, num_kv_heads, head_size]
// (chapter 1's layout), reading token t from block block_table[b * max_blocks_per_seq +
// t / block_size]. Entries past a sequence's last block are padding and are never read;
// dense slots at or past context_lens[b] are left untouched. Device pointers; the block
// table must be valid (chapter 3's BatchMetadata::validate checks one on the host).
template <typename T>
void gather_kv(const PoolShape& s, const T* k_pool, const T* v_pool, const int* block_table,
               int max_blocks_per_seq, const int* context_lens, int num_seqs, int max_seq_len,
               T* k_dense, T* v_dense, cudaStream_t stream = nullptr);

// Dense to paged (chapter 2's stretch exercise, dense_to_paged.cu), gather_kv's inverse:
// writes each sequence's first context_lens[b] tokens of k_dense, v_dense ([num_seqs,
// max_seq_len, num_kv_heads, head_size]) into the pools, token t at offset t % block_size of
// block block_table[b * max_blocks_per_seq + t / block_size]. Nothing else in the pools
// changes. Device pointers; the same table conditions as gather_kv.
template <typename T>
void dense_to_paged(const PoolShape& s, const T* k_dense, const T* v_dense, int num_seqs,
                    int max_seq_len, const int* block_table, int max_blocks_per_seq,
                    const int* context_lens, T* k_pool, T* v_pool, cudaStream_t stream = nullptr);

}  // namespace pa::ch02
