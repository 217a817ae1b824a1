// Chapter 12: the hybrid block manager. One pool, one GroupBlockManager (chapter 7's
// sharing manager) per layer group, driven together. Given code: your part is
// sliding_window.cpp.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

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

HybridBlockManager::HybridBlockManager(int num_blocks, int block_size, const std::vector<LayerGroup>& groups)
    : block_size_(block_size), pool_(checked_pool(num_blocks)) {
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
}

void HybridBlockManager::release(int seq_id) {
  PA_REQUIRE(has_sequence(seq_id), "release: unknown sequence " << seq_id);
  for (auto& g : groups_) g->release(seq_id);
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
  // and the new blocks may reuse it.
  const int takes = blocks_needed(seq_id, n);
  int gives = 0;
  for (const auto& g : groups_) gives += g->dead_blocks_to_pool(seq_id);
  if (takes > num_free() + gives)
    throw ch02::OutOfBlocks("append_slots: sequence " + std::to_string(seq_id) + " needs " +
                            std::to_string(takes) + " more blocks, only " + std::to_string(num_free() + gives) +
                            " are free");
  for (auto& g : groups_) g->free_dead_blocks(seq_id);
  std::vector<std::vector<int64_t>> slots;
  for (auto& g : groups_) slots.push_back(g->append_slots(seq_id, n));
  return slots;
}
// ANCHOR_END: append_slots

// ANCHOR: step_blocks
int HybridBlockManager::step_blocks(const std::vector<int>& seq_ids, const std::vector<int>& new_tokens) const {
  PA_REQUIRE(seq_ids.size() == new_tokens.size(),
             "step_blocks: " << seq_ids.size() << " sequences but " << new_tokens.size() << " token counts");
  // Each append frees its dead blocks, then takes its new blocks and copies. Owners left
  // per block (per group) carry what earlier appends of the step changed: a block two
  // sequences hold goes back only when the second gives it up, and of the owners of one
  // shared tail that append, the last writes in place (chapter 7's rule).
  std::vector<std::unordered_map<int, int>> left(groups_.size());
  std::unordered_set<int> seen;
  int net = 0, most = 0;
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    const int s = seq_ids[i], n = new_tokens[i];
    PA_REQUIRE(has_sequence(s), "step_blocks: unknown sequence " << s);
    PA_REQUIRE(n >= 0, "step_blocks: negative token count " << n << " for sequence " << s);
    PA_REQUIRE(seen.insert(s).second, "step_blocks: sequence " << s << " appears twice in one step");
    for (size_t g = 0; g < groups_.size(); ++g) {
      const GroupBlockManager& m = *groups_[g];
      const std::vector<int>& blocks = m.block_list(s);
      const int len = m.length(s);
      auto owners = [&](int b) -> int& { return left[g].emplace(b, m.refcount(b)).first->second; };
      const int first = std::min(first_needed_block(m.layer_group(), len, block_size_), int(blocks.size()));
      for (int j = 0; j < first; ++j)
        if (blocks[size_t(j)] != kNullBlock && --owners(blocks[size_t(j)]) == 0) --net;
      const bool copy = m.needs_copy(s, n);
      net += m.blocks_needed(s, n) - (copy ? 1 : 0);
      if (copy && owners(blocks.back()) > 1) {
        --owners(blocks.back());
        ++net;
      }
    }
    most = std::max(most, net);
  }
  return most;
}
// ANCHOR_END: step_blocks

}  // namespace pa::ch12
