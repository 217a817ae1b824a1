// Your exercise file. (Generated from solutions/08-serving/block_manager.cpp; instructors regenerate with tools/make_skeletons.py.)
// Chapter 8, exercise 2 of 3: the prefix cache, a block manager that remembers blocks.
#include <algorithm>

#include "pa/ch08_engine.h"

namespace pa::ch08 {

uint64_t block_hash(uint64_t parent_hash, const int* tokens, int block_size) {
  uint64_t h = parent_hash ^ 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < block_size; ++i) {
    h ^= uint64_t(uint32_t(tokens[i])) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64's mixer
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
  }
  return h == 0 ? 1 : h;  // 0 marks "not cached"
}

CachingBlockManager::CachingBlockManager(int num_blocks, int block_size, bool prefix_caching)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      allocator_(num_blocks),
      refcount_(size_t(num_blocks), 0),
      meta_(size_t(num_blocks)),
      lru_pos_(size_t(num_blocks)),
      in_lru_(size_t(num_blocks), false) {
  PA_REQUIRE(block_size == 8 || block_size == 16 || block_size == 32,
             "block_size " << block_size << " is not supported (8, 16 or 32)");
}

CachingBlockManager::Sequence& CachingBlockManager::find(int seq_id, const char* what) {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), what << ": unknown sequence " << seq_id);
  return it->second;
}

const std::vector<int>& CachingBlockManager::block_list(int seq_id) const {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), "block_list: unknown sequence " << seq_id);
  return it->second.blocks;
}

int CachingBlockManager::length(int seq_id) const {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), "length: unknown sequence " << seq_id);
  return it->second.length;
}

int CachingBlockManager::take_block() {
  if (allocator_.num_free() > 0) return allocator_.allocate();
  if (lru_.empty()) throw ch02::OutOfBlocks("no free or evictable block is left");
  // Evict the least recently used cached block: forget its hash, reuse its memory.
  const int b = lru_.front();
  lru_.pop_front();
  in_lru_[size_t(b)] = false;
  cached_.erase(meta_[size_t(b)].hash);
  meta_[size_t(b)] = Cached{};
  ++evictions_;
  return b;
}

void CachingBlockManager::acquire(int block) {
  if (in_lru_[size_t(block)]) {
    lru_.erase(lru_pos_[size_t(block)]);
    in_lru_[size_t(block)] = false;
  }
  ++refcount_[size_t(block)];
}

// ANCHOR: match_prefix
std::vector<int> CachingBlockManager::match_prefix(const std::vector<int>& tokens,
                                                   int max_tokens) const {
  std::vector<int> hit;
  if (!prefix_caching_) return hit;
  const int bs = block_size_;
  const int full = std::min(int(tokens.size()), max_tokens) / bs;  // whole blocks only
  // TODO(ch08): hit = the physical blocks of the longest run of leading full blocks of
  //   `tokens` (at most `full` blocks) that are already cached, in order. A cached block
  //   matches only if its whole chain does: the same tokens and the same parent (the hash of
  //   everything before it), so a hash collision never gives a hit. Nothing changes (the
  //   function is const).
  // (your code here)
  return hit;
}
// ANCHOR_END: match_prefix

void CachingBlockManager::add_sequence(int seq_id, const std::vector<int>& prefix) {
  PA_REQUIRE(!has_sequence(seq_id), "add_sequence: sequence " << seq_id << " already exists");
  Sequence seq;
  for (int b : prefix) {
    PA_REQUIRE(b >= 0 && b < num_blocks() && meta_[size_t(b)].hash != 0,
               "add_sequence: block " << b << " is not a cached block");
    acquire(b);
    seq.blocks.push_back(b);
    seq.hashes.push_back(meta_[size_t(b)].hash);
  }
  seq.length = int(prefix.size()) * block_size_;
  seqs_.emplace(seq_id, std::move(seq));
}

int CachingBlockManager::blocks_needed(int seq_id, int n) const {
  auto it = seqs_.find(seq_id);
  PA_REQUIRE(it != seqs_.end(), "blocks_needed: unknown sequence " << seq_id);
  const int64_t needed = (int64_t(it->second.length) + n + block_size_ - 1) / block_size_;
  return int(std::max<int64_t>(0, needed - int64_t(it->second.blocks.size())));
}

std::vector<int64_t> CachingBlockManager::append_slots(int seq_id, int n) {
  Sequence& seq = find(seq_id, "append_slots");
  PA_REQUIRE(n >= 0, "append_slots: negative token count " << n);
  const int missing = blocks_needed(seq_id, n);
  if (missing > num_free())
    throw ch02::OutOfBlocks("append_slots: sequence " + std::to_string(seq_id) + " needs " +
                            std::to_string(missing) + " more blocks, only " +
                            std::to_string(num_free()) + " are free or evictable");
  // The tail block is never shared: shared blocks are full, cached blocks, and a full
  // tail gets a fresh block for the next token (the exact-boundary case).
  for (int i = 0; i < missing; ++i) {
    const int b = take_block();
    refcount_[size_t(b)] = 1;
    seq.blocks.push_back(b);
  }
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int p = seq.length + i;
    slots[size_t(i)] = int64_t(seq.blocks[size_t(p / block_size_)]) * block_size_ + p % block_size_;
  }
  seq.length += n;
  return slots;
}

void CachingBlockManager::reserve(int seq_id, int tokens) {
  Sequence& seq = find(seq_id, "reserve");
  const int needed = (tokens + block_size_ - 1) / block_size_ - int(seq.blocks.size());
  if (needed > num_free())
    throw ch02::OutOfBlocks("reserve: " + std::to_string(needed) + " blocks needed, " +
                            std::to_string(num_free()) + " free");
  for (int i = 0; i < needed; ++i) {
    const int b = take_block();
    refcount_[size_t(b)] = 1;
    seq.blocks.push_back(b);
  }
}

// ANCHOR: commit
void CachingBlockManager::commit(int seq_id, const std::vector<int>& tokens, int num_computed) {
  Sequence& seq = find(seq_id, "commit");
  if (!prefix_caching_) return;
  PA_REQUIRE(num_computed <= int(tokens.size()) && num_computed <= seq.length,
             "commit: " << num_computed << " computed tokens for a sequence of " << seq.length);
  const int bs = block_size_;
  // Only blocks whose every token's K/V is computed: a block is full at exactly bs tokens.
  for (int i = int(seq.hashes.size()); i < num_computed / bs; ++i) {
    const uint64_t parent = i == 0 ? kRootHash : seq.hashes[size_t(i) - 1];
    const int* blk = tokens.data() + int64_t(i) * bs;
    const uint64_t h = block_hash(parent, blk, bs);
    seq.hashes.push_back(h);
    const int b = seq.blocks[size_t(i)];
    // The first block with this content stays the cached one; a duplicate stays private.
    if (cached_.count(h) == 0 && meta_[size_t(b)].hash == 0) {
      cached_[h] = b;
      meta_[size_t(b)] = Cached{h, parent, std::vector<int>(blk, blk + bs)};
    }
  }
}
// ANCHOR_END: commit

void CachingBlockManager::release(int seq_id) {
  Sequence& seq = find(seq_id, "release");
  // Last block first: the deepest blocks of a prefix are the first to be evicted.
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it) {
    const int b = *it;
    PA_REQUIRE(refcount_[size_t(b)] > 0, "release: block " << b << " has no owner");
    if (--refcount_[size_t(b)] > 0) continue;
    if (meta_[size_t(b)].hash != 0) {
      lru_pos_[size_t(b)] = lru_.insert(lru_.end(), b);
      in_lru_[size_t(b)] = true;
    } else {
      allocator_.free(b);
    }
  }
  seqs_.erase(seq_id);
}

void CachingBlockManager::clear_cache() {
  for (int b : lru_) {
    in_lru_[size_t(b)] = false;
    cached_.erase(meta_[size_t(b)].hash);
    meta_[size_t(b)] = Cached{};
    allocator_.free(b);
  }
  lru_.clear();
}

void swap_blocks(const std::vector<float*>& src_k, const std::vector<float*>& src_v,
                 const std::vector<float*>& dst_k, const std::vector<float*>& dst_v,
                 const ch02::PoolShape& s, int src_blocks, int dst_blocks,
                 const std::vector<ch07::BlockCopy>& copies, cudaMemcpyKind kind) {
  PA_REQUIRE(src_k.size() == dst_k.size() && src_v.size() == dst_v.size() &&
                 src_k.size() == src_v.size(),
             "swap_blocks: the two sides have different numbers of layers");
  const size_t per_block = size_t(s.num_kv_heads) * s.head_size * s.block_size;
  for (const ch07::BlockCopy& c : copies)
    PA_REQUIRE(c.src >= 0 && c.src < src_blocks && c.dst >= 0 && c.dst < dst_blocks,
               "swap_blocks: copy " << c.src << " -> " << c.dst << " is outside the pools ("
                                    << src_blocks << " and " << dst_blocks << " blocks)");
  // A block is contiguous in both layouts (the block index is outermost): one copy each.
  for (size_t l = 0; l < src_k.size(); ++l)
    for (const ch07::BlockCopy& c : copies) {
      PA_CUDA_CHECK(cudaMemcpy(dst_k[l] + size_t(c.dst) * per_block, src_k[l] + size_t(c.src) * per_block,
                               per_block * sizeof(float), kind));
      PA_CUDA_CHECK(cudaMemcpy(dst_v[l] + size_t(c.dst) * per_block, src_v[l] + size_t(c.src) * per_block,
                               per_block * sizeof(float), kind));
    }
}

}  // namespace pa::ch08
