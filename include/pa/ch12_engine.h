// Chapter 12: hybrid models. Part 3, in the engine: chapter 8's TinyModel with a layer
// pattern (ModelConfig::windows, sinks), attended through one step attention that plans
// each layer group with its own block tables, and a serving loop on the hybrid manager.
//
// HybridStepAttention plans one group per attention type: a full group without sinks is
// chapter 10's kernel as it is (VarlenAttention), a sliding group (or a full one with sinks)
// is this chapter's WindowAttention. HybridEngine is chapter 8's serving loop cut down to
// what the hybrid manager changes: continuous batching, chunked prefill, greedy decoding,
// preemption (recompute or swap) and prefix caching by the per-type rule, with each layer
// group's block tables and slots from HybridBlockManager (forks, beams and sampling stay in
// chapter 8's Engine).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "pa/ch08_engine.h"
#include "pa/ch08_model.h"
#include "pa/ch10_varlen.h"
#include "pa/ch12_hybrid.h"
#include "pa/ch12_window.h"

namespace pa::ch12 {

// ANCHOR: hybrid_step_attention
// TinyModel::set_step_attention(std::make_shared<ch12::HybridStepAttention>()): plan() takes
// each group's metadata and StepCache::windows / sinks; run(g, ...) attends a layer of group
// g. A full group without sinks plans chapter 10's kernel unchanged; any other group plans
// WindowAttention (a full group with sinks: a window as wide as the step's longest context).
class HybridStepAttention : public ch08::StepAttention {
 public:
  using ch08::StepAttention::plan;
  using ch08::StepAttention::run;
  void plan(const std::vector<ch03::BatchMetadata>& groups, const ch08::StepCache& cache) override;
  void run(int group, void* out, const void* q, const void* k_pool, const void* v_pool, float scale,
           cudaStream_t stream) override;
  int steps_planned() const { return steps_; }
  bool windowed(int group) const { return groups_.at(size_t(group))->windowed; }

 private:
  struct Group {
    bool windowed = false;
    ch10::VarlenAttention full;
    WindowAttention window;
    DeviceBuffer<int> block_table, seq_lens, query_start_loc;
  };
  std::vector<std::unique_ptr<Group>> groups_;
  int num_groups_ = 0;
  DType dtype_ = DType::fp16;
  int steps_ = 0;
};
// ANCHOR_END: hybrid_step_attention

// ANCHOR: model_groups
// The manager's layer groups for a model (ModelConfig::group_windows, in that order): a
// window > 0 is a sliding group if free_windows, else a full group that keeps every block
// (the same model and the same attention, without the saving).
std::vector<LayerGroup> model_layer_groups(const ch08::ModelConfig& c, bool free_windows = true);
// ANCHOR_END: model_groups

struct HybridEngineConfig {
  int num_blocks = 64;  // the KV budget, block 0 (the null block) included
  int block_size = 16;
  int max_num_seqs = 32;
  int max_tokens_per_step = 256;
  int max_seq_len = 256;
  bool free_windows = true;   // false: sliding layers keep every block (the baseline)
  bool record_logits = false;
  // Preemption: swap copies the victim's live blocks (every group's non-null entries) to
  // host memory and restore() brings them back; recompute, or a host without room, drops them.
  ch08::Preemption preemption = ch08::Preemption::recompute;
  int num_swap_blocks = 0;  // host blocks for swapped-out sequences
  // Prefix caching (the manager's, stretch exercise 4): a request starts from the longest
  // prefix of its tokens that every group can serve from the cache (a sliding group: the
  // last window's blocks), and each step registers the full blocks it computed.
  bool prefix_caching = false;
};

struct HybridStepReport {
  int step = 0, num_tokens = 0, running = 0, waiting = 0, finished = 0, preempted = 0;
  // Blocks in some table after the step's appends, before the step's dead blocks go back:
  // the most the step holds.
  int blocks_held = 0;
  // Requests swapped in or admitted this step that compute nothing in it (their next token
  // did not fit after all): never more than 0, as in chapter 8's StepReport.
  int idle_admissions = 0;
  // Per running sequence: (tokens computed before the step, new tokens this step; 0 when
  // not scheduled). What a prediction of blocks_held needs, apart from the manager.
  std::vector<std::pair<int, int>> seqs;
};

struct HybridEngineStats {
  int steps = 0, finished = 0, peak_running = 0, preemptions = 0, peak_blocks_held = 0;
  int swap_outs = 0, swap_ins = 0, recomputes = 0;
  int64_t computed_tokens = 0, generated_tokens = 0;
  int64_t prefix_hit_tokens = 0;  // tokens requests took from the prefix cache, not computed
};

// ANCHOR: hybrid_engine
class HybridEngine {
 public:
  // The model needs a step attention that takes windows (HybridStepAttention) and a
  // 16-bit cache. Throws for a pool or limits the manager refuses.
  HybridEngine(ch08::TinyModel& model, const HybridEngineConfig& cfg);
  // Greedy, one sequence per request (sampling is refused); prompt + output within
  // max_seq_len and within the pool.
  void add_request(const ch08::EngineRequest& r);
  HybridStepReport step();
  bool done() const;
  void run(const std::function<void(const HybridStepReport&)>& on_step = {});

  const std::map<int, std::vector<int>>& outputs() const { return outputs_; }
  const std::map<int, std::vector<std::vector<float>>>& logits() const { return logits_; }
  const HybridEngineStats& stats() const { return stats_; }
  // How many times request `id` was preempted so far (swapped out or dropped for recompute).
  int preemptions_of(int id) const;
  const HybridBlockManager& blocks() const { return *blocks_; }
  ch08::PagedKV& kv() { return kv_; }

 private:
  struct Req {
    int id = 0, seq = -1, prompt_len = 0, max_new_tokens = 0, arrival_step = 0;
    std::vector<int> tokens;  // prompt, then the generated tokens
    int num_computed = 0;
    int preemptions = 0;
    std::vector<std::vector<int>> host_blocks;  // swapped out: per group, per entry (-1: null)
  };
  void preempt(Req& victim);
  void swap_in(Req& r);
  std::vector<void*> host_pools(std::vector<std::vector<uint8_t>>& host);
  ch08::TinyModel& model_;
  HybridEngineConfig cfg_;
  std::unique_ptr<HybridBlockManager> blocks_;
  ch08::PagedKV kv_;
  std::map<int, std::unique_ptr<Req>> reqs_;
  std::vector<Req*> pending_;  // by arrival step
  std::deque<Req*> waiting_, swapped_;
  std::vector<std::vector<uint8_t>> host_k_, host_v_;  // swap space, per pool
  std::unique_ptr<ch02::BlockAllocator> host_alloc_;
  std::vector<Req*> running_;  // admission order
  std::map<int, std::vector<int>> outputs_;
  std::map<int, std::vector<std::vector<float>>> logits_;
  HybridEngineStats stats_;
  int now_ = 0, next_seq_ = 0;
};
// ANCHOR_END: hybrid_engine

// ANCHOR: predicted_blocks
// The closed form, apart from the manager: the blocks one sequence holds in a group of
// window w (0: full) when it has c computed tokens and n new ones this step, after the
// step's appends (the dead blocks of position c already gone):
//   full:    ceil((c + n) / bs)
//   sliding: ceil((c + n) / bs) - floor(max(0, c - w + 1) / bs)
// Summed over the model's groups (free_windows false: every group full).
int predicted_blocks(const std::vector<int>& group_windows, bool free_windows, int block_size, int computed,
                     int new_tokens);
// The most predicted_blocks(c, 1) over the one-token steps c = 0 .. last: what a sequence
// holds at its peak when it computes one token a step. A step holds more than the blocks
// between steps (restore_blocks): the block of its new token, and the window's left edge
// before the step moves it. add_request refuses a request whose peak over every step it
// can take (last = prompt + max_new_tokens - 2: the last output token is chosen, never
// computed) is beyond the pool; such a request could never be served, alone or not.
int peak_blocks(const std::vector<int>& group_windows, bool free_windows, int block_size, int last);
// ANCHOR_END: predicted_blocks

}  // namespace pa::ch12
