// Chapter 8, exercise 2 of 4: the prefix cache, a block manager that remembers blocks.
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
    : ch07::SharedBlockManager(num_blocks, block_size),
      prefix_caching_(prefix_caching),
      meta_(size_t(num_blocks)),
      evict_key_(size_t(num_blocks)) {}

int CachingBlockManager::take_block() {
  if (SharedBlockManager::num_free() > 0) return SharedBlockManager::take_block();
  if (evictable_.empty()) throw ch02::OutOfBlocks("no free or evictable block is left");
  // Evict: forget the block's hash and reuse its memory.
  const int b = std::get<2>(*evictable_.begin());
  evictable_.erase(evictable_.begin());
  cached_.erase(meta_[size_t(b)].hash);
  meta_[size_t(b)] = Cached{};
  ++evictions_;
  return b;
}

void CachingBlockManager::drop_block(int block) {
  if (meta_[size_t(block)].hash == 0) return SharedBlockManager::drop_block(block);
  evict_key_[size_t(block)] = EvictKey{tick_, -meta_[size_t(block)].depth, block};
  evictable_.insert(evict_key_[size_t(block)]);
}

void CachingBlockManager::acquire(int block) {
  if (refcount_[size_t(block)] == 0) evictable_.erase(evict_key_[size_t(block)]);
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
  // HINT(1): Blocks are named by a chain hash: block i's hash is block_hash(hash of block i -
  //   1, its bs tokens), with kRootHash before block 0, so a hash names the whole prefix up
  //   to its block. cached_ maps a hash to a block id; meta_[id] keeps the parent hash and
  //   the tokens it was cached with.
  // HINT(2): parent = kRootHash; for i < full: h = block_hash(parent, tokens.data() + i * bs,
  //   bs); it = cached_.find(h); break if it is missing, or if meta_[it->second].parent !=
  //   parent, or its tokens differ from the block's (std::equal); else
  //   hit.push_back(it->second) and parent = h.
  // HINT(3): walk the full blocks i = 0, 1, ... < full: h = block_hash(parent, tokens of
  //   block i), with parent = kRootHash for block 0 and block i-1's hash after. Stop at
  //   the first block whose hash is not in cached_, or whose cached entry (meta_) does not
  //   hold the same parent hash and tokens (a collision). Otherwise append the block.
  // BEGIN SOLUTION
  uint64_t parent = kRootHash;
  for (int i = 0; i < full; ++i) {
    const int* blk = tokens.data() + int64_t(i) * bs;
    const uint64_t h = block_hash(parent, blk, bs);
    auto it = cached_.find(h);
    if (it == cached_.end()) break;
    const Cached& m = meta_[size_t(it->second)];
    if (m.parent != parent || !std::equal(m.tokens.begin(), m.tokens.end(), blk)) break;
    hit.push_back(it->second);
    parent = h;
  }
  // END SOLUTION
  return hit;
}
// ANCHOR_END: match_prefix

void CachingBlockManager::add_sequence(int seq_id, const std::vector<int>& prefix) {
  for (int b : prefix)
    PA_REQUIRE(b >= 0 && b < num_blocks() && (meta_[size_t(b)].hash != 0 || refcount_[size_t(b)] > 0),
               "add_sequence: block " << b << " is neither cached nor held by a sequence");
  SharedBlockManager::add_sequence(seq_id);
  Sequence& seq = find(seq_id, "add_sequence");
  std::vector<uint64_t>& hashes = hashes_[seq_id];
  for (int b : prefix) {
    acquire(b);
    seq.blocks.push_back(b);
    // The hashes of the leading cached blocks; commit() hashes the rest.
    if (hashes.size() + 1 == seq.blocks.size() && meta_[size_t(b)].hash != 0) hashes.push_back(meta_[size_t(b)].hash);
  }
  seq.length = int(prefix.size()) * block_size_;
}

void CachingBlockManager::fork(int parent, int child) {
  SharedBlockManager::fork(parent, child);
  hashes_[child] = hashes_[parent];
}

void CachingBlockManager::release(int seq_id) {
  ++tick_;  // blocks released now are evicted after those released before
  SharedBlockManager::release(seq_id);
  hashes_.erase(seq_id);
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
  const Sequence& seq = find(seq_id, "commit");
  if (!prefix_caching_) return;
  std::vector<uint64_t>& hashes = hashes_[seq_id];
  PA_REQUIRE(num_computed <= int(tokens.size()) && num_computed <= seq.length,
             "commit: " << num_computed << " computed tokens for a sequence of " << seq.length);
  const int bs = block_size_;
  // Only blocks whose every token's K/V is computed: a block is full at exactly bs tokens.
  for (int i = int(hashes.size()); i < num_computed / bs; ++i) {
    const uint64_t parent = i == 0 ? kRootHash : hashes[size_t(i) - 1];
    const int* blk = tokens.data() + int64_t(i) * bs;
    const uint64_t h = block_hash(parent, blk, bs);
    hashes.push_back(h);
    const int b = seq.blocks[size_t(i)];
    // The first block with this content stays the cached one; a duplicate stays private.
    if (cached_.count(h) == 0 && meta_[size_t(b)].hash == 0) {
      cached_[h] = b;
      meta_[size_t(b)] = Cached{h, parent, i, std::vector<int>(blk, blk + bs)};
    }
  }
}
// ANCHOR_END: commit

void CachingBlockManager::clear_cache() {
  for (const EvictKey& k : evictable_) {
    const int b = std::get<2>(k);
    cached_.erase(meta_[size_t(b)].hash);
    meta_[size_t(b)] = Cached{};
    SharedBlockManager::drop_block(b);
  }
  evictable_.clear();
}

void swap_blocks(const std::vector<void*>& src_k, const std::vector<void*>& src_v,
                 const std::vector<void*>& dst_k, const std::vector<void*>& dst_v,
                 const ch02::PoolShape& s, int elem_bytes, int src_blocks, int dst_blocks,
                 const std::vector<ch07::BlockCopy>& copies, cudaMemcpyKind kind) {
  PA_REQUIRE(src_k.size() == dst_k.size() && src_v.size() == dst_v.size() &&
                 (src_k.size() == src_v.size() || src_v.empty()),
             "swap_blocks: the two sides have different numbers of layers");
  const size_t block_bytes = size_t(s.num_kv_heads) * s.head_size * s.block_size * size_t(elem_bytes);
  for (const ch07::BlockCopy& c : copies)
    PA_REQUIRE(c.src >= 0 && c.src < src_blocks && c.dst >= 0 && c.dst < dst_blocks,
               "swap_blocks: copy " << c.src << " -> " << c.dst << " is outside the pools ("
                                    << src_blocks << " and " << dst_blocks << " blocks)");
  // A block is contiguous in both layouts (the block index is outermost): one copy each.
  auto at = [&](void* pool, int block) { return static_cast<uint8_t*>(pool) + size_t(block) * block_bytes; };
  for (size_t l = 0; l < src_k.size(); ++l)
    for (const ch07::BlockCopy& c : copies) {
      PA_CUDA_CHECK(cudaMemcpy(at(dst_k[l], c.dst), at(src_k[l], c.src), block_bytes, kind));
      if (!src_v.empty()) PA_CUDA_CHECK(cudaMemcpy(at(dst_v[l], c.dst), at(src_v[l], c.src), block_bytes, kind));
    }
}

void copy_pool_blocks(const std::vector<void*>& src, const std::vector<void*>& dst, int64_t block_bytes,
                      int src_blocks, int dst_blocks, const std::vector<ch07::BlockCopy>& copies,
                      cudaMemcpyKind kind) {
  PA_REQUIRE(src.size() == dst.size(), "copy_pool_blocks: " << src.size() << " source pools, " << dst.size()
                                                            << " destination pools");
  PA_REQUIRE(block_bytes >= 0, "copy_pool_blocks: block_bytes " << block_bytes << " is negative");
  if (src.empty()) return;
  for (const ch07::BlockCopy& c : copies)
    PA_REQUIRE(c.src >= 0 && c.src < src_blocks && c.dst >= 0 && c.dst < dst_blocks,
               "copy_pool_blocks: copy " << c.src << " -> " << c.dst << " is outside the pools (" << src_blocks
                                         << " and " << dst_blocks << " blocks)");
  for (size_t l = 0; l < src.size(); ++l)
    for (const ch07::BlockCopy& c : copies)
      PA_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(dst[l]) + c.dst * block_bytes,
                               static_cast<const uint8_t*>(src[l]) + c.src * block_bytes, size_t(block_bytes), kind));
}

}  // namespace pa::ch08
