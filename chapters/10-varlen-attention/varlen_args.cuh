// Chapter 10: what one launch of the varlen kernel passes to every thread block.
#pragma once

#include "tc_block.cuh"  // chapter 9: CacheElem, MmaType
#include "pa/ch10_varlen.h"

namespace pa::ch10 {

using ch09::CacheElem;
using ch09::MmaType;

constexpr unsigned kFullMask = 0xffffffffu;

// ANCHOR: mask_policy
// The mask as a policy: which keys a row sees, beyond the item's [kv_begin, kv_end). The
// kernel is a template over it; this default is chapter 10's causal mask, and every hook
// below is compile-time off, so the default kernel does no extra work per score. A later
// chapter supplies its own type with the same members (chapter 12: a sliding window,
// attention sinks and a logit soft-cap) and turns on what it needs:
//   kWindow   a row at position pos sees no key before first_key(pos) (never past pos; 0
//             or negative where the window reaches before the sequence's start): an item's
//             loads start at first_load(...), a warp masks a part of a stage key by key when
//             window_cuts(...) says a window hides some of it, and the mask hides, beyond
//             chapter 10's, every key with !sees(kpos, pos);
//   kSoftCap  every raw score q.k passes through cap_raw() before the mask (Gemma 2);
//   kSinks    fold_sink() adds a row's sink to its softmax state once (split 0 of the row).
// Decode tiles run on chapter 9's warps (decode_warps, which know a window) unless
// decode_warps_ok() is false (a soft-cap: they run on the general path). A policy with any
// hook on needs a plan without warp items (warp_item knows none).
struct CausalMask {
  static constexpr bool kWindow = false, kSoftCap = false, kSinks = false;
  __device__ int first_key(int) const { return 0; }
  // The first key the loads of an item whose tile's first row is at first_row_pos start at
  // (its keys are [kv_begin, kv_end); the kernel loads align-token pieces).
  __device__ int first_load(int /*first_row_pos*/, int kv_begin, int /*align*/) const { return kv_begin; }
  // Whether a window hides some of the keys [part_first, part_end) from some row of a warp
  // whose rows are at positions first_pos .. last_pos.
  __device__ bool window_cuts(int, int, int, int) const { return false; }
  __device__ bool sees(int, int) const { return true; }
  __device__ float cap_raw(float s) const { return s; }
  __device__ bool decode_warps_ok() const { return true; }
  // m2 (base 2), l and the output's correction factor of query head `head`'s row, in the
  // item's chunk `split`.
  __device__ void fold_sink(int, int, float&, float&, float& corr) const { corr = 1.f; }
};
// ANCHOR_END: mask_policy

// Everything a launch passes to the kernel. C is the cache element: T, or uint8_t (e4m3).
template <typename T, typename C>
struct VarlenArgs {
  T* out;
  const T* q;
  const C *k_pool, *v_pool;
  const int *block_table, *seq_lens, *query_start_loc;
  const WorkItem* items;  // item k of thread block c at [k * gridDim.x + c]
  const int* rounds;      // [1]: the most items of any thread block (in device memory, as
                          //   the items: a launch replayed from a CUDA graph reads the new plan)
  float *max_logits, *exp_sums, *partial_out;  // split tiles' partial results
  int* counters;  // split tiles' tickets (left at zero, or at num_splits for the merge kernel)
  const float *k_scale, *v_scale;              // e4m3 only (device pointers); nullptr means 1
  float scale;
  VarlenShape s;
};

}  // namespace pa::ch10
