// Chapter 8: the serving loop, built from the earlier chapters. Requests arrive over time;
// every step the scheduler picks the sequences that run, chapter 3's build_batch makes
// their block tables, context lengths, slot mapping and query_start_loc, chapter 7's
// copy_blocks runs the step's copy-on-write copies, the model runs once for all of them,
// and a finished sequence's blocks are freed at once.
//
//   continuous batching  a request joins as soon as its prompt's blocks are free and
//                        leaves the moment it is done; the batch changes every step
//   chunked prefill      a step computes at most max_tokens_per_step new tokens; a long
//                        prompt is computed over several steps
//   forks                n parallel samples share the prompt's blocks; a beam search forks
//                        and frees beams every step (chapter 7's reference counts)
//   preemption           when a running sequence needs a block and none is free, the
//                        most recently admitted request gives all its sequences' blocks
//                        back: swapped out to host memory (swap_blocks) or dropped and
//                        recomputed later
//   prefix caching       every full block computed is registered under hash(parent's
//                        hash, its tokens); a new prompt that starts with the same blocks
//                        shares them (reference counts, as in chapter 7); a cached block
//                        nobody owns stays cached until a new block needs its memory
//                        (least recently released first)
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <tuple>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "pa/ch02_paged.h"
#include "pa/ch07_cow.h"
#include "pa/ch08_model.h"
#include "pa/ch08_sampling.h"
#include "pa/trace.h"

namespace pa::ch08 {

// ANCHOR: hash
// The identity of a full block: its tokens and, through the parent's hash, everything
// before it. Equal hashes mean equal prefixes (the manager also compares the tokens, so
// that a 64-bit collision cannot hand out the wrong block).
uint64_t block_hash(uint64_t parent_hash, const int* tokens, int block_size);
inline constexpr uint64_t kRootHash = 0x8d2ac4f0e3b1ull;  // the parent of a first block
// ANCHOR_END: hash

// ANCHOR: manager
// Chapter 7's sharing manager (refcounts, fork, copy-on-write: your code), extended with
// a memory of full blocks. A block whose last owner leaves stays cached (evictable) if it
// is registered under a hash, and a new block is taken from the free list first, else from
// the least recently released cached block.
class CachingBlockManager : public ch07::SharedBlockManager {
 public:
  CachingBlockManager(int num_blocks, int block_size, bool prefix_caching = true);

  // The cached blocks that hold the longest prefix of `tokens` made of full blocks, and at
  // most max_tokens tokens long, in order. Takes nothing.
  std::vector<int> match_prefix(const std::vector<int>& tokens, int max_tokens) const;
  // Starts sequence seq_id owning `prefix`, full blocks that are cached or held by another
  // sequence (one more owner of each: an evictable block leaves the evictable set). Its
  // length becomes prefix.size() * block_size.
  void add_sequence(int seq_id, const std::vector<int>& prefix = {});
  // Chapter 7's fork; the child also inherits the parent's committed block hashes.
  void fork(int parent, int child);
  // Chapter 7's release (a cached block whose last owner leaves becomes evictable), and
  // the sequence's hashes are forgotten.
  void release(int seq_id);
  // Holds blocks for `tokens` tokens now (the dense policy's reservation); length unchanged.
  void reserve(int seq_id, int tokens);
  // Registers the sequence's full blocks whose tokens[0 .. num_computed) are computed.
  void commit(int seq_id, const std::vector<int>& tokens, int num_computed);
  // Frees every evictable block (forgetting its hash).
  void clear_cache();

  int num_free() const override {  // free + evictable: what a step can take
    return SharedBlockManager::num_free() + int(evictable_.size());
  }
  int num_evictable() const { return int(evictable_.size()); }
  int num_cached() const { return int(cached_.size()); }
  int64_t evictions() const { return evictions_; }

 protected:
  int take_block() override;          // a free block, else evicts the oldest evictable one
  void drop_block(int block) override;  // cached: evictable; otherwise free

 private:
  struct Cached {
    uint64_t hash = 0, parent = 0;  // hash 0: not cached
    int depth = 0;                  // the block's index in its sequence
    std::vector<int> tokens;
  };
  // Eviction order: released earlier first; within one release, the deepest block first
  // (a prefix is only found through its first blocks, so they go last).
  using EvictKey = std::tuple<int64_t, int, int>;  // (release tick, -depth, block)
  void acquire(int block);
  bool prefix_caching_;
  std::unordered_map<uint64_t, int> cached_;  // hash -> block
  std::vector<Cached> meta_;                  // per block
  std::set<EvictKey> evictable_;
  std::vector<EvictKey> evict_key_;           // per block, while evictable
  std::unordered_map<int, std::vector<uint64_t>> hashes_;  // committed block hashes per sequence
  int64_t tick_ = 0, evictions_ = 0;
};
// ANCHOR_END: manager

// ANCHOR: swap_blocks
// Copies whole blocks (K and V, every layer) from one set of pools to another of the same
// shape: device to host to swap a sequence out, host to device to bring it back. No V
// pools (src_v and dst_v empty): MLA's latent pools, one per layer, in src_k and dst_k.
void swap_blocks(const std::vector<void*>& src_k, const std::vector<void*>& src_v,
                 const std::vector<void*>& dst_k, const std::vector<void*>& dst_v,
                 const ch02::PoolShape& s, int elem_bytes, int src_blocks, int dst_blocks,
                 const std::vector<ch07::BlockCopy>& copies, cudaMemcpyKind kind);
// ANCHOR_END: swap_blocks

// The same for pools of whole blocks of bytes that are not K/V, one per layer (a DSA model's
// indexer pools): block c.src of src[l] to block c.dst of dst[l], block_bytes each.
void copy_pool_blocks(const std::vector<void*>& src, const std::vector<void*>& dst, int64_t block_bytes,
                      int src_blocks, int dst_blocks, const std::vector<ch07::BlockCopy>& copies,
                      cudaMemcpyKind kind);

enum class Preemption { swap, recompute };

// ANCHOR: engine_config
struct EngineConfig {
  int num_blocks = 64;             // the KV budget: blocks of block_size tokens (every layer)
  int block_size = 16;
  int max_num_seqs = 32;           // most sequences in one step
  int max_tokens_per_step = 256;   // new tokens per step (chunked prefill)
  int max_seq_len = 256;           // prompt + output of any request
  Preemption preemption = Preemption::recompute;
  int num_swap_blocks = 256;       // host blocks for swapped-out sequences
  bool prefix_caching = true;
  bool dense = false;              // chapter 1's policy: reserve max_seq_len slots per request
  bool record_logits = false;      // keep the logits of every generated token (tests)
  bool cuda_graphs = false;        // GPU: decode-only steps replay CUDA graphs (TinyModel)
  bool cascade = false;            // decode rows sharing a prefix: cascade attention (no graphs then)
};
// ANCHOR_END: engine_config

struct EngineRequest {
  int id;
  std::vector<int> prompt;
  int max_new_tokens;
  int arrival_step = 0;     // the step at which it arrives
  SamplingParams sampling;  // greedy, one sequence, unless it says otherwise
};

// One finished sequence of a request: a sample (n > 1) or a beam.
struct Completion {
  std::vector<int> tokens;  // the generated tokens
  double logprob = 0;       // their summed log-probability under the model (beam score)
};

struct StepReport {
  int step = 0, num_tokens = 0;  // the step's index and new tokens computed
  int running = 0;   // sequences holding KV blocks (scheduled or not this step)
  int waiting = 0;   // requests not admitted yet (still to arrive, queued, or preempted for recompute)
  int swapped = 0;   // requests swapped out to host memory
  int finished = 0;  // requests that finished in this step
  int64_t allocated_slots = 0;  // KV slots held by sequences (reserved or in blocks; shared ones per holder)
  int64_t used_slots = 0;       // slots holding a computed or scheduled token
  int blocks_in_use = 0;        // distinct blocks owned by running sequences
  int blocks_unshared = 0;      // what they would own if nothing were shared: sum of their block lists
  int copies = 0;               // copy-on-write block copies run before this step
  // Requests swapped in or admitted this step that compute nothing in it: their next token
  // did not fit after all. The admission checks count it, so never more than 0 (a request
  // that comes back only to be preempted again moves blocks for nothing).
  int idle_admissions = 0;
};

struct EngineStats {
  int steps = 0, finished = 0, peak_running = 0;
  int preemptions = 0, swap_outs = 0, swap_ins = 0, recomputes = 0;
  int forks = 0;                // sequences started by fork (samples after the first, new beams)
  int64_t cow_copies = 0;       // blocks copied by copy-on-write
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0, computed_tokens = 0, generated_tokens = 0;
  int64_t sum_allocated_slots = 0, sum_used_slots = 0, peak_wasted_slots = 0;
  int peak_blocks_in_use = 0, peak_blocks_unshared = 0;
  int graph_steps = 0;          // steps replayed from a CUDA graph
  int idle_admissions = 0;      // StepReport::idle_admissions, summed
  int64_t sum_blocks_in_use = 0, sum_blocks_unshared = 0;
};

class Engine {
 public:
  Engine(TinyModel& model, const EngineConfig& cfg);
  ~Engine();
  // Checks the request (ids unique, tokens in the vocabulary, prompt non-empty, prompt +
  // output within max_seq_len, the sampling parameters, and that the pool and max_num_seqs
  // can hold all of its sequences) and queues it.
  void add_request(const EngineRequest& r);
  StepReport step();  // one scheduling decision and one forward pass
  bool done() const;
  // Steps until every request is finished; calls on_step after each step.
  void run(const std::function<void(const StepReport&)>& on_step = {});

  // Per request: the first sample, or the best beam.
  const std::map<int, std::vector<int>>& outputs() const { return outputs_; }
  // Per request: every sample in sample order, or every beam best first.
  const std::map<int, std::vector<Completion>>& completions() const { return completions_; }
  // Per request with one greedy or sampled sequence (record_logits): the logits of each token.
  const std::map<int, std::vector<std::vector<float>>>& logits() const { return logits_; }
  const EngineStats& stats() const { return stats_; }
  // How many times request `id` was preempted so far (swapped out or dropped for recompute).
  int preemptions_of(int id) const;
  const CachingBlockManager& blocks() const { return blocks_; }
  CachingBlockManager& blocks() { return blocks_; }
  int host_blocks_free() const { return host_alloc_.num_free(); }
  // What the cache holds now (tests): the pools, and each sequence that holds GPU blocks
  // (blocks().block_list(seq_id)) with its tokens, the first num_computed of them cached.
  const PagedKV& kv() const { return kv_; }
  struct LiveSequence {
    int request = 0, seq_id = 0;
    std::vector<int> tokens;
    int num_computed = 0;
  };
  std::vector<LiveSequence> live_sequences() const;

 private:
  struct Seq;
  struct Group;
  struct Scheduled;
  void preempt(Group& victim);
  void swap_out(Group& group);
  void copy_blocks(const std::vector<ch07::BlockCopy>& copies);
  std::vector<void*> host_pools(std::vector<std::vector<uint8_t>>& host);
  int swap_in_blocks(const Group& group) const;
  void swap_in(Group& group);
  int shared_prefix_blocks(const Group& group) const;
  void rejoin(Group& group);
  void on_logits(Seq& s, const float* row);
  void step_beams(Group& g);
  void append_token(Seq& s, int token, const float* row);
  Seq& fork(Seq& parent);
  void finish_seq(Seq& s);
  void report_blocks(StepReport& rep);
  TinyModel& model_;
  EngineConfig cfg_;
  CachingBlockManager blocks_;
  PagedKV kv_;
  std::vector<std::vector<uint8_t>> host_k_, host_v_;  // swap space, per layer
  std::vector<std::vector<uint8_t>> host_index_;       // DSA: the indexer pools' swap space
  ch02::BlockAllocator host_alloc_;
  std::vector<Group*> pending_;                // not arrived yet, by arrival step
  std::deque<Group*> waiting_, swapped_;
  std::vector<Group*> running_;                // admission order, oldest first
  std::map<int, std::unique_ptr<Group>> groups_;  // by request id
  std::map<int, std::unique_ptr<Seq>> seqs_;      // by sequence id (the block manager's)
  int next_seq_id_ = 0;
  std::map<int, std::vector<int>> outputs_;
  std::map<int, std::vector<Completion>> completions_;
  std::map<int, std::vector<std::vector<float>>> logits_;
  EngineStats stats_;
  int now_ = 0;
};

// ANCHOR: workload
// The built-in workload: chapter 1's synthetic trace, lengths divided by `shrink`
// (at least 1), prompts that start with one of `num_prefixes` shared "system prompts" of
// prefix_len tokens, and `per_step` arrivals per step.
std::vector<EngineRequest> trace_workload(const std::vector<Request>& trace, int shrink,
                                          int vocab_size, int num_prefixes, int prefix_len,
                                          int per_step, uint64_t seed = 8);
// ANCHOR_END: workload

}  // namespace pa::ch08
