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
  // HINT(1): Chapter 4's three steps (scores, online softmax, V), each for GQ heads: the
  //   score step makes GQ dot products per K chunk, the softmax step splits the warp by head
  //   (LH = 32 / GQ lanes per head) and works on the scores in s_s, and the V step updates GQ
  //   accumulators per row.
  // HINT(2): Scores: lane = o * LT + g takes chunks c = g, g + LT, ... < kChunks of token o,
  //   widens each with CacheElem<C>::widen16 and adds q_s[h * D + c * x + j] * k[j] to
  //   part[h]; xor-shuffle each part[h] over offsets LT/2 .. 1; g == 0 writes part[h] *
  //   k_scale to s_s[h * BS + o]. Softmax: head = lane / LH, sub = lane % LH; the max over t
  //   = sub, sub + LH, ... < valid, then over the head's lanes (xor LH/2 .. 1); p written
  //   back into s_s (0 for t >= valid). V: corr[h] = __shfl_sync(kFullMask, correction, h *
  //   LH); load_v_row, zero v[t] for t >= valid.
  // HINT(3): 1. Scores. As in chapter 4, lanes form groups of LT = 32 / BS; group o
  //   takes token o and its lanes split the token's kChunks 16-byte chunks (chunk c at
  //   k_blk + (c * BS + o) * x; CacheElem<C>::widen16 turns one into x floats). The
  //   difference: each chunk is dotted with all GQ queries (q_s + h * D), into GQ partial
  //   sums, each summed over the group with __shfl_xor_sync. Lane g == 0 of the group
  //   writes k_scale * score of head h to s_s[h * BS + o]; then __syncwarp().
  //   2. Online softmax, one head per LH = 32 / GQ lanes: lane sub = lane % LH of head
  //   lane / LH takes tokens t = sub, sub + LH, ... < valid. Max over the head's lanes
  //   (xor offsets LH/2 .. 1), m_new, correction = exp(st.m - m_new), p = exp(s - m_new)
  //   written back over the score (0 for t >= valid), the sum of p, then st.l and st.m.
  //   __syncwarp().
  //   3. V. Every lane needs every head's correction: __shfl_sync it from lane h * LH.
  //   Lane takes rows d = lane + 32 r < D; row d is BS values at v_blk + d * BS
  //   (load_v_row). Zero the values of tokens t >= valid (0 * NaN is NaN), then for every
  //   head acc[h][r] = acc[h][r] * correction[h] + sum_t s_s[h * BS + t] * v[t].
  //   Finish with __syncwarp() so that s_s may be overwritten by the next block.
  // BEGIN SOLUTION(ch09, stretch)
  const int o = lane / LT, g = lane % LT;
  float part[GQ];
  for (int h = 0; h < GQ; ++h) part[h] = 0.f;
#pragma unroll
  for (int i = 0; i < kChunksPerLane; ++i) {
    const int c = g + i * LT;
    if (kChunks % LT != 0 && c >= kChunks) break;
    float k[x];
    CacheElem<C>::widen16(*reinterpret_cast<const uint4*>(k_blk + (c * BS + o) * x), k);
    for (int h = 0; h < GQ; ++h)
      for (int j = 0; j < x; ++j) part[h] += q_s[h * D + c * x + j] * k[j];
  }
  for (int h = 0; h < GQ; ++h) {
    for (int offset = LT / 2; offset > 0; offset /= 2)
      part[h] += __shfl_xor_sync(kFullMask, part[h], offset);
    if (g == 0) s_s[h * BS + o] = part[h] * k_scale;
  }
  __syncwarp();

  const int head = lane / LH, sub = lane % LH;
  float* s_row = s_s + head * BS;
  float block_max = -INFINITY;
  for (int t = sub; t < valid; t += LH) block_max = fmaxf(block_max, s_row[t]);
  for (int offset = LH / 2; offset > 0; offset /= 2)
    block_max = fmaxf(block_max, __shfl_xor_sync(kFullMask, block_max, offset));
  const float m_new = fmaxf(st.m, block_max);
  const float correction = expf(st.m - m_new);  // 0 for the first block (st.m = -inf)
  float p_sum = 0.f;
  for (int t = sub; t < BS; t += LH) {
    const float p = t < valid ? expf(s_row[t] - m_new) : 0.f;
    s_row[t] = p;
    p_sum += p;
  }
  for (int offset = LH / 2; offset > 0; offset /= 2)
    p_sum += __shfl_xor_sync(kFullMask, p_sum, offset);
  st.l = st.l * correction + p_sum;
  st.m = m_new;
  __syncwarp();

  float corr[GQ];
  for (int h = 0; h < GQ; ++h) corr[h] = __shfl_sync(kFullMask, correction, h * LH);
  for (int r = 0; r < kRows; ++r) {
    const int d = lane + 32 * r;
    if (D % 32 != 0 && d >= D) break;
    float v[BS];
    load_v_row<C, BS>(v_blk + d * BS, v);
    for (int t = 0; t < BS; ++t) v[t] = t < valid ? v[t] : 0.f;
    for (int h = 0; h < GQ; ++h) {
      float sum = 0.f;
      for (int t = 0; t < BS; ++t) sum += s_s[h * BS + t] * v[t];
      st.acc[h][r] = st.acc[h][r] * corr[h] + sum;
    }
  }
  __syncwarp();
  // END SOLUTION
}
// ANCHOR_END: attend_block_gqa

}  // namespace pa::ch09
