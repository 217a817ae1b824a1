// Chapter 10: what one launch of the varlen kernel passes to every thread block.
#pragma once

#include "tc_block.cuh"  // chapter 9: CacheElem, MmaType
#include "pa/ch10_varlen.h"

namespace pa::ch10 {

using ch09::CacheElem;
using ch09::MmaType;

constexpr unsigned kFullMask = 0xffffffffu;

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
  int* counters;                               // split tiles' tickets (left at zero)
  const float *k_scale, *v_scale;              // e4m3 only (device pointers); nullptr means 1
  float scale;
  VarlenShape s;
};

}  // namespace pa::ch10
