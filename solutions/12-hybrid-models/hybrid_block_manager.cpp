// Chapter 12: the hybrid block manager. One pool, one GroupBlockManager (chapter 7's
// sharing manager) per layer group, driven together. Given code: your parts are
// sliding_window.cpp (free_dead_blocks) and step_blocks.cpp, which append_slots asks.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "pa/ch12_hybrid.h"

namespace pa::ch12 {

namespace {
std::vector<LayerGroup> checked(const std::vector<LayerGroup>& groups) {
  PA_REQUIRE(!groups.empty(), "HybridBlockManager: no layer groups");
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].kind == Attention::full)
      PA_REQUIRE(groups[g].window == 0, "layer group " << g << " is full attention but has a window of "
                                                       << groups[g].window
                                                       << " (a window needs Attention::sliding)");
    else
      PA_REQUIRE(groups[g].window > 0,
                 "layer group " << g << ": window must be positive, got " << groups[g].window);
  }
  return groups;
}
int checked_pool(int num_blocks) {
  PA_REQUIRE(num_blocks >= 2,
             "HybridBlockManager: num_blocks must be at least 2 (block 0 is the null block), got " << num_blocks);
  return num_blocks;
}
}  // namespace

HybridBlockManager::HybridBlockManager(int num_blocks, int block_size, const std::vector<LayerGroup>& groups,
                                       bool prefix_caching)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      pool_(checked_pool(num_blocks)),
      cached_(groups.size()),
      meta_(size_t(num_blocks)),
      evict_tick_(size_t(num_blocks), 0) {
  const std::vector<LayerGroup> ok = checked(groups);
  const int null_block = pool_.allocate();  // a fresh pool hands out block 0 first: reserved
  PA_REQUIRE(null_block == kNullBlock, "HybridBlockManager: the pool handed out block " << null_block
                                                                                         << " first, not 0");
  for (const LayerGroup& g : ok) groups_.push_back(std::make_unique<GroupBlockManager>(*this, g));
}

const GroupBlockManager& HybridBlockManager::group(int g) const {
  PA_REQUIRE(g >= 0 && g < num_groups(), "group: no layer group " << g << " (there are " << num_groups() << ")");
  return *groups_[size_t(g)];
}

int HybridBlockManager::length(int seq_id) const {
  PA_REQUIRE(has_sequence(seq_id), "length: unknown sequence " << seq_id);
  return groups_[0]->length(seq_id);
}

void HybridBlockManager::add_sequence(int seq_id) {
  PA_REQUIRE(!has_sequence(seq_id), "add_sequence: sequence " << seq_id << " already exists");
  for (auto& g : groups_) g->add_sequence(seq_id);
}

void HybridBlockManager::fork(int parent, int child) {
  PA_REQUIRE(has_sequence(parent), "fork: unknown sequence " << parent);
  PA_REQUIRE(!has_sequence(child), "fork: sequence " << child << " already exists");
  for (auto& g : groups_) g->fork(parent, child);
  if (hashes_.count(parent)) hashes_[child] = hashes_[parent];
}

void HybridBlockManager::release(int seq_id) {
  PA_REQUIRE(has_sequence(seq_id), "release: unknown sequence " << seq_id);
  ++tick_;  // blocks given back now are evicted after those given back before
  for (auto& g : groups_) g->release(seq_id);
  hashes_.erase(seq_id);
}

HybridBlockManager::GroupTable HybridBlockManager::block_table(int g, const std::vector<int>& seq_ids,
                                                               int max_blocks_per_seq) const {
  const GroupBlockManager& m = group(g);
  GroupTable out;
  for (int s : seq_ids) {
    PA_REQUIRE(has_sequence(s), "block_table: unknown sequence " << s);
    out.max_blocks_per_seq = std::max(out.max_blocks_per_seq, int(m.block_list(s).size()));
  }
  if (max_blocks_per_seq > 0) {
    for (int s : seq_ids)
      PA_REQUIRE(int(m.block_list(s).size()) <= max_blocks_per_seq,
                 "block_table: sequence " << s << " has " << m.block_list(s).size()
                                          << " blocks, more than max_blocks_per_seq " << max_blocks_per_seq);
    out.max_blocks_per_seq = max_blocks_per_seq;
  }
  out.block_table.assign(seq_ids.size() * size_t(out.max_blocks_per_seq), ch03::kPaddingBlock);
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    const std::vector<int>& blocks = m.block_list(seq_ids[i]);
    std::copy(blocks.begin(), blocks.end(), out.block_table.begin() + int64_t(i) * out.max_blocks_per_seq);
  }
  return out;
}

int HybridBlockManager::restore_blocks(int length) const {
  PA_REQUIRE(length >= 0, "restore: negative length " << length);
  const int total = (length + block_size_ - 1) / block_size_;
  int need = 0;
  for (const auto& g : groups_)
    need += total - std::min(first_needed_block(g->layer_group(), length, block_size_), total);
  return need;
}

void HybridBlockManager::restore(int seq_id, int length) {
  PA_REQUIRE(!has_sequence(seq_id), "restore: sequence " << seq_id << " already exists");
  const int need = restore_blocks(length);
  if (need > num_free())
    throw ch02::OutOfBlocks("restore: sequence " + std::to_string(seq_id) + " needs " + std::to_string(need) +
                            " blocks, only " + std::to_string(num_free()) + " are free");
  const int total = (length + block_size_ - 1) / block_size_;
  for (auto& g : groups_) {
    const int dead = std::min(first_needed_block(g->layer_group(), length, block_size_), total);
    std::vector<int> table(size_t(dead), kNullBlock);
    while (int(table.size()) < total) table.push_back(take_pool_block());
    g->add_with(seq_id, table, length);
  }
}

// ---- The pool, with the prefix cache's evictable blocks --------------------------------

int HybridBlockManager::take_pool_block() {
  if (pool_.num_free() > 0) return pool_.allocate();
  if (evictable_.empty()) throw ch02::OutOfBlocks("no free or evictable block is left");
  const int b = evictable_.begin()->second;  // the least recently given back
  evictable_.erase(evictable_.begin());
  cached_[size_t(meta_[size_t(b)].group)].erase(meta_[size_t(b)].hash);
  meta_[size_t(b)] = Cached{};
  return b;
}

void HybridBlockManager::drop_pool_block(int block) {
  if (meta_[size_t(block)].hash == 0) return pool_.free(block);
  evict_tick_[size_t(block)] = ++tick_;
  evictable_.insert({tick_, block});
}

void HybridBlockManager::unevict(int block) { evictable_.erase({evict_tick_[size_t(block)], block}); }

// ---- Prefix caching ------------------------------------------------------------------------

namespace {
// A block's identity: its tokens and, through the parent's hash, everything before them.
uint64_t chain_hash(uint64_t parent, const int* tokens, int n) {
  uint64_t h = parent ^ 0x243F6A8885A308D3ull;
  for (int i = 0; i < n; ++i) {
    h = (h ^ uint64_t(uint32_t(tokens[i]))) * 0x100000001B3ull;
    h ^= h >> 29;
  }
  return h == 0 ? 1 : h;  // 0 marks "not cached"
}
constexpr uint64_t kRoot = 0x13198A2E03707344ull;
}  // namespace

std::vector<uint64_t> HybridBlockManager::chain(const std::vector<int>& tokens, int num_blocks) const {
  std::vector<uint64_t> out;
  uint64_t parent = kRoot;
  for (int i = 0; i < num_blocks; ++i) {
    parent = chain_hash(parent, tokens.data() + int64_t(i) * block_size_, block_size_);
    out.push_back(parent);
  }
  return out;
}

// The block of group g cached as block i of this chain, or -1. Compares the parent and the
// tokens too, so that a hash collision never gives a hit.
int HybridBlockManager::cached_block(int g, int i, const std::vector<uint64_t>& hashes,
                                     const std::vector<int>& tokens) const {
  auto it = cached_[size_t(g)].find(hashes[size_t(i)]);
  if (it == cached_[size_t(g)].end()) return -1;
  const Cached& m = meta_[size_t(it->second)];
  const uint64_t parent = i == 0 ? kRoot : hashes[size_t(i) - 1];
  const int* blk = tokens.data() + int64_t(i) * block_size_;
  if (m.parent != parent || !std::equal(m.tokens.begin(), m.tokens.end(), blk)) return -1;
  return it->second;
}

int HybridBlockManager::match_prefix(const std::vector<int>& tokens, int max_tokens) const {
  if (!prefix_caching_) return 0;
  const int n = std::min(int(tokens.size()), max_tokens) / block_size_;
  const std::vector<uint64_t> hashes = chain(tokens, n);
  std::vector<std::vector<bool>> cached(groups_.size(), std::vector<bool>(size_t(n)));
  std::vector<LayerGroup> kinds;
  for (size_t g = 0; g < groups_.size(); ++g) {
    kinds.push_back(groups_[g]->layer_group());
    for (int i = 0; i < n; ++i) cached[g][size_t(i)] = cached_block(int(g), i, hashes, tokens) >= 0;
  }
  return prefix_hit_blocks(kinds, cached, block_size_, n) * block_size_;
}

void HybridBlockManager::add_sequence(int seq_id, const std::vector<int>& tokens, int hit_tokens) {
  PA_REQUIRE(!has_sequence(seq_id), "add_sequence: sequence " << seq_id << " already exists");
  PA_REQUIRE(hit_tokens >= 0 && hit_tokens % block_size_ == 0 && hit_tokens <= int(tokens.size()),
             "add_sequence: a hit of " << hit_tokens << " tokens is not whole blocks of the "
                                       << tokens.size() << " tokens given");
  PA_REQUIRE(hit_tokens == 0 || prefix_caching_, "add_sequence: a hit of " << hit_tokens
                                                                             << " tokens, but prefix caching is off");
  const int n = hit_tokens / block_size_;
  const std::vector<uint64_t> hashes = chain(tokens, n);
  std::vector<std::vector<int>> tables(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {  // every check before any change
    const int dead = first_needed_block(groups_[g]->layer_group(), hit_tokens, block_size_);
    for (int i = 0; i < n; ++i) {
      const int b = i < dead ? kNullBlock : cached_block(int(g), i, hashes, tokens);
      PA_REQUIRE(b >= 0, "add_sequence: block " << i << " of the prefix is not cached in layer group " << g
                                                << " (take hit_tokens from match_prefix)");
      tables[g].push_back(b);
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g]->add_with(seq_id, tables[g], hit_tokens);
  hashes_[seq_id] = hashes;
}

void HybridBlockManager::commit(int seq_id, const std::vector<int>& tokens, int num_computed) {
  PA_REQUIRE(has_sequence(seq_id), "commit: unknown sequence " << seq_id);
  if (!prefix_caching_) return;
  PA_REQUIRE(num_computed <= int(tokens.size()) && num_computed <= length(seq_id),
             "commit: " << num_computed << " computed tokens for a sequence of " << length(seq_id));
  std::vector<uint64_t>& hashes = hashes_[seq_id];
  for (int i = int(hashes.size()); i < num_computed / block_size_; ++i) {
    const uint64_t parent = i == 0 ? kRoot : hashes[size_t(i) - 1];
    const int* blk = tokens.data() + int64_t(i) * block_size_;
    const uint64_t h = chain_hash(parent, blk, block_size_);
    hashes.push_back(h);
    for (size_t g = 0; g < groups_.size(); ++g) {
      const int b = groups_[g]->block_list(seq_id)[size_t(i)];
      // The first block with this content stays the cached one; a duplicate stays private.
      if (b == kNullBlock || cached_[g].count(h) || meta_[size_t(b)].hash != 0) continue;
      cached_[g][h] = b;
      meta_[size_t(b)] = Cached{h, parent, int(g), std::vector<int>(blk, blk + block_size_)};
    }
  }
}

int HybridBlockManager::free_dead_blocks(int seq_id) {
  PA_REQUIRE(has_sequence(seq_id), "free_dead_blocks: unknown sequence " << seq_id);
  int freed = 0;
  for (auto& g : groups_) freed += g->free_dead_blocks(seq_id);
  return freed;
}

std::vector<ch07::BlockCopy> HybridBlockManager::take_copies(int g) {
  group(g);  // checks g
  return groups_[size_t(g)]->take_copies();
}

int HybridBlockManager::blocks_needed(int seq_id, int n) const {
  PA_REQUIRE(has_sequence(seq_id), "blocks_needed: unknown sequence " << seq_id);
  int total = 0;
  for (const auto& g : groups_) total += g->blocks_needed(seq_id, n);
  return total;
}

// ANCHOR: append_slots
std::vector<std::vector<int64_t>> HybridBlockManager::append_slots(int seq_id, int n) {
  PA_REQUIRE(has_sequence(seq_id), "append_slots: unknown sequence " << seq_id);
  PA_REQUIRE(n >= 0, "append_slots: negative token count " << n << " for sequence " << seq_id);
  // This step's queries start at the current length: what they cannot see goes back first,
  // and the new blocks may reuse it. When the free blocks cover every block the append takes,
  // it fits; otherwise step_blocks (exercise 2) says what it needs after its windows' frees.
  const int takes = blocks_needed(seq_id, n);
  if (takes > num_free()) {
    const int need = step_blocks({seq_id}, {n});  // takes less what the windows give back
    if (need > num_free())
      throw ch02::OutOfBlocks("append_slots: sequence " + std::to_string(seq_id) + " needs " +
                              std::to_string(takes) + " more blocks, only " +
                              std::to_string(num_free() + takes - need) + " are free");
  }
  for (auto& g : groups_) g->free_dead_blocks(seq_id);
  std::vector<std::vector<int64_t>> slots;
  for (auto& g : groups_) slots.push_back(g->append_slots(seq_id, n));
  return slots;
}
// ANCHOR_END: append_slots

// step_blocks: step_blocks.cpp (exercise 2).

}  // namespace pa::ch12
