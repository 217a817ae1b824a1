// Your exercise file. (Generated from solutions/04-paged-attention-v1/attend_block.cuh; instructors regenerate with tools/make_skeletons.py.)
// Chapter 4, exercise 1 of 2: the device building blocks of paged attention. Chapter 5's
// partitioned kernel uses the same ones, so v1 and v2 compute exactly alike.
#pragma once

#include <cmath>

#include "pa/ch02_paged.h"
#include "pa/dtype.h"

namespace pa::ch04 {

constexpr int kWarps = 4;  // warps per thread block
constexpr unsigned kFullMask = 0xffffffffu;

// What one warp has seen so far: running max m, running sum l of exp(score - m), and
// acc = sum of exp(score - m) * v. Lane l holds output rows l, l + 32, ... in acc.
template <int kRows>
struct WarpState {
  float m, l;
  float acc[kRows];
};

// ANCHOR: attend_block
// One warp attends over one KV block of `valid` tokens (1..BS; the rest of the block is
// unused and may hold anything, NaN included).
//   k_blk: this block's K for our KV head, [D / x][BS][x];  v_blk: its V, [D][BS]
//   q_s:   the query, scaled, in shared memory;             p_s: BS floats of scratch
// Lanes form groups of G = 32 / BS; group o takes token o of the block, and its lanes
// share the token's 16-byte K chunks, so each load instruction reads whole chunks of
// neighbouring tokens.
template <typename T, int D, int BS>
__device__ void attend_kv_block(const T* __restrict__ k_blk, const T* __restrict__ v_blk,
                                int valid, const float* q_s, float* p_s,
                                WarpState<(D + 31) / 32>& st) {
  constexpr int x = ch02::pack_x<T>();
  constexpr int G = 32 / BS;  // lanes per token
  constexpr int kChunks = D / x;
  constexpr int kRows = (D + 31) / 32;
  const int lane = threadIdx.x % 32;
  const int o = lane / G, g = lane % G;  // token of the block, lane within its group

  // TODO(ch04): 1. The score of token o: the lanes of its group split its kChunks chunks
  //   (chunk c is the 16 bytes at k_blk + (c * BS + o) * x: load it as one uint4), dot
  //   them with q_s, then add the group's partial sums with __shfl_xor_sync over offsets
  //   G/2, ..., 1. Tokens o >= valid get score -INFINITY.
  //   2. Online softmax over the block: the block's max over the warp, m_new = max(st.m,
  //   block max), p = exp(score - m_new) (0 for o >= valid), rescale st.l and st.acc by
  //   exp(st.m - m_new), add the sum of p over the tokens (count each token once: only
  //   lane g == 0 of a group contributes). Write p to p_s[o] for the V step; __syncwarp().
  //   3. V: lane owns rows d = lane + 32 r; row d of the block is BS contiguous values at
  //   v_blk + d * BS (load x at a time as uint4); add p_s[t] * v for t < valid only
  //   (0 * NaN is NaN: unused slots must be skipped, not multiplied by zero).
  //   Finish with __syncwarp() so that p_s may be overwritten by the next block.
  // (your code here)
}
// ANCHOR_END: attend_block

// ANCHOR: merge_warps
// Merges the kWarps warps' states of a thread block (the same rescaling as chapter 1).
// Afterwards warp 0 holds the block's result: st.m, st.l, and st.acc[r] = output row
// lane + 32 r, already divided by st.l. A warp that saw no token has m = -inf: weight 0.
// No token at all (L == 0) gives zeros; a NaN (a poisoned slot was read) stays NaN.
template <int kRows>
__device__ void merge_warps(WarpState<kRows>& st) {
  __shared__ float s_m[kWarps], s_l[kWarps], s_acc[kWarps][kRows * 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    s_m[warp] = st.m;
    s_l[warp] = st.l;
  }
  for (int r = 0; r < kRows; ++r) s_acc[warp][lane + 32 * r] = st.acc[r];
  __syncthreads();
  if (warp != 0) return;
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, s_m[w]);
  float weight[kWarps], L = 0.f;
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = s_m[w] == -INFINITY ? 0.f : expf(s_m[w] - M);
    L += s_l[w] * weight[w];
  }
  for (int r = 0; r < kRows; ++r) {
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total += s_acc[w][lane + 32 * r] * weight[w];
    st.acc[r] = L == 0.f ? 0.f : total / L;  // not L > 0: that would turn a NaN into 0
  }
  st.m = M;
  st.l = L;
}
// ANCHOR_END: merge_warps

}  // namespace pa::ch04
