// Your exercise file. (Generated from solutions/09-performance/gqa_block.cuh; instructors regenerate with tools/make_skeletons.py.)
// Chapter 9, exercise 2 (stretch): one warp attends over one KV block for a *group* of query
// heads at once. Chapter 4's warp did this for one head: with Hq/Hkv = 4 the same K/V
// bytes were fetched by four thread blocks. Here they are fetched once and used four times.
#pragma once

#include <cmath>
#include <cstdint>

#include "fp8.cuh"  // chapter 6's e4m3 conversions (from its solution)
#include "pa/ch02_paged.h"
#include "pa/dtype.h"

namespace pa::ch09 {

constexpr int kWarps = 4;  // warps per thread block
constexpr unsigned kFullMask = 0xffffffffu;

// ANCHOR: cache_elem
// What one 16-byte load of the cache holds, widened to floats. C is the cache element:
// the model's dtype (half, bf16) or uint8_t for chapter 6's e4m3 bytes. The kernels are
// written once against this, so fp8 runs on exactly the same path.
template <typename C>
struct CacheElem {
  static constexpr int x = 16 / int(sizeof(C));  // elements per 16 bytes
  __device__ static void widen16(const uint4& raw, float* out) {
    const C* e = reinterpret_cast<const C*>(&raw);
    for (int j = 0; j < x; ++j) out[j] = to_float(e[j]);
  }
};
template <>
struct CacheElem<uint8_t> {
  static constexpr int x = 16;
  __device__ static void widen16(const uint4& raw, float* out) { ch06::e4m3x16_to_float(raw, out); }
};
// ANCHOR_END: cache_elem

// Row d of a block's V: the block's BS tokens of head dimension d, contiguous.
template <typename C, int BS>
__device__ inline void load_v_row(const C* row, float* v) {
  constexpr int x = CacheElem<C>::x;
  if constexpr (BS >= x) {
    for (int t0 = 0; t0 < BS; t0 += x)
      CacheElem<C>::widen16(*reinterpret_cast<const uint4*>(row + t0), v + t0);
  } else {  // an fp8 block of 8 tokens: an 8-byte row
    ch06::e4m3x8_to_float(*reinterpret_cast<const uint2*>(row), v);
  }
}

// ANCHOR: group_state
// What one warp has seen so far, for GQ query heads. The softmax bookkeeping is spread
// over the warp: lanes [h * 32/GQ, (h + 1) * 32/GQ) keep head h's running max m and
// exp-sum l. The output rows are not: every lane keeps rows lane, lane + 32, ... of
// every head, because every lane reads V rows that all GQ heads need.
template <int GQ, int D>
struct GroupState {
  static constexpr int kRows = (D + 31) / 32;
  float m, l;
  float acc[GQ][kRows];
};
// ANCHOR_END: group_state

// ANCHOR: attend_block_gqa
// One warp attends over one KV block of `valid` tokens (1..BS; unused slots may hold
// anything, NaN included) for GQ query heads.
//   k_blk: the block's K for our KV head, [D / x][BS][x];  v_blk: its V, [D][BS]
//          (global memory, or a copy in shared memory: the same layout)
//   q_s:   [GQ][D] queries, scaled, in shared memory;     s_s: [GQ][BS] floats of scratch
//   k_scale multiplies every score (an fp8 cache's K scale; 1 otherwise)
template <typename C, int D, int BS, int GQ>
__device__ void attend_block_gqa(const C* __restrict__ k_blk, const C* __restrict__ v_blk,
                                 int valid, float k_scale, const float* q_s, float* s_s,
                                 GroupState<GQ, D>& st) {
  constexpr int x = CacheElem<C>::x;
  constexpr int LT = 32 / BS;                         // lanes per token for the scores
  constexpr int kChunks = D / x;                      // 16-byte K chunks per token
  constexpr int kChunksPerLane = (kChunks + LT - 1) / LT;
  constexpr int LH = 32 / GQ;                         // lanes per head for the softmax
  constexpr int kRows = GroupState<GQ, D>::kRows;
  const int lane = threadIdx.x % 32;

  // TODO(ch09, stretch): chapter 4's attend_kv_block for the GQ query heads that share this KV head,
  //   reading each K chunk and V row once for all of them: afterwards head h's lanes (lane /
  //   LH == h) hold its st.m and st.l, and every lane holds st.acc[h][r] (row lane + 32 r)
  //   for every head, all updated with the block's `valid` tokens, scores multiplied by
  //   k_scale. Tokens >= valid add nothing, even when NaN. s_s ([GQ][BS] floats) is scratch,
  //   free again on return. Tests: StretchGqa.*, StretchGqaLong.* and StretchGqaFp8.* (the
  //   versions gqa, split and pipelined, and every version at block size 8).
  // (your code here)
}
// ANCHOR_END: attend_block_gqa

}  // namespace pa::ch09
