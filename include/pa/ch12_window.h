// Chapter 12: hybrid models. Part 2, the kernel: chapter 10's varlen kernel with a sliding
// window, attention sinks and a logit soft-cap (the allocator is part 1: ch12_hybrid.h).
//
// A sliding-window layer's row at position p sees the keys [p - window + 1, p] of its
// sequence (the window's keys that exist, its own included); a full layer's sees [0, p]. Its
// block table may name the null block (ch12::kNullBlock, block 0) for every block that no
// row of the step can see any more: the manager gave it back. The kernel never reads it.
//
// Attention sinks (gpt-oss): a learned logit per query head that joins the softmax's
// denominator as one more "key" and contributes no value, so a row can put weight nowhere:
//   out = sum_k exp(s_k - m) v_k / (exp(sink_h - m) + sum_k exp(s_k - m)).
// The logit soft-cap (Gemma 2): every score s = scale * q.k becomes cap * tanh(s / cap)
// before the mask and the softmax.
//
// The chapter supplies chapter 10's kernel a mask policy (solutions/12-hybrid-models/
// window_mask.cuh): one kernel with options, not a copy. The planner prices only the keys
// a tile's windows see (make_plan's window), and the kernel skips the stages left of them.
#pragma once

#include <vector>

#include "pa/ch10_varlen.h"

namespace pa::ch12 {

// ANCHOR: window_options
struct WindowOptions {
  int window = 0;            // > 0: the keys a row sees, its own included
  std::vector<float> sinks;  // one logit per query head (Hq), in the scaled scores' units
                             // (natural log); empty: no sinks
  float softcap = 0.f;       // > 0: Gemma 2's cap on the scaled scores; 0: none
};
// ANCHOR_END: window_options

// Throws pa::Error naming the problem: "window must be positive, got W"; "sinks: one per
// query head: expected Hq logits, got N"; a soft-cap that is negative or not finite; a
// sink that is not finite.
void check_options(const ch10::VarlenShape& s, const WindowOptions& opt);

// chapter 10's check_metadata, and: every table entry that a row of the step can see (from
// the block of its sequence's first new token's first key on) is not the null block:
// "sequence b: block table entry j is the null block, but position P of it is in the window".
void check_window_metadata(const ch10::VarlenShape& s, const std::vector<int>& block_table,
                           const std::vector<int>& seq_lens, const std::vector<int>& query_start_loc,
                           int window);

// ANCHOR: window_attention
// Plan once per step, run once per sliding layer (as chapter 10's VarlenAttention): plan()
// checks the options and, given the host block table, the null entries; plans with the
// window (make_plan(..., window)) and uploads the sinks.
class WindowAttention {
 public:
  void plan(const ch10::VarlenShape& s, DType dtype, const std::vector<int>& block_table,
            const std::vector<int>& seq_lens, const std::vector<int>& query_start_loc,
            const WindowOptions& opt, int chunk_tokens = 0, int grid = 0,
            cudaStream_t stream = nullptr);
  // A plan made elsewhere (tests: a plan without the window, whose items start at key 0 --
  // the kernel must still skip what no row sees). The options are checked as in plan();
  // query_start_loc as for chapter 10's use_plan.
  void use_plan(const ch10::VarlenShape& s, DType dtype, const ch10::Plan& plan,
                const WindowOptions& opt, cudaStream_t stream = nullptr,
                const std::vector<int>& query_start_loc = {});

  // out, q [num_tokens, Hq, D]; the pools in chapter 2's layouts (half or bf16); block_table,
  // seq_lens, query_start_loc on the device, holding what plan() was given.
  template <typename T>
  void run(T* out, const T* q, const T* k_pool, const T* v_pool, const int* block_table,
           const int* seq_lens, const int* query_start_loc, float scale,
           cudaStream_t stream = nullptr);

  const ch10::Plan& host_plan() const { return runner_.host_plan(); }
  void poison_workspace() { runner_.poison_workspace(); }

 private:
  ch10::VarlenAttention runner_;
  WindowOptions opt_;
  DeviceBuffer<float> sinks_;
};
// ANCHOR_END: window_attention

}  // namespace pa::ch12
