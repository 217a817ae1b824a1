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

  // TODO(ch04): one warp (all 32 lanes call this together) adds the block's `valid` tokens
  //   (1..BS) to its online softmax: afterwards st.m = the max of the old st.m and the
  //   block's scores q_s . k_t, st.l = the sum of exp(score - st.m) over every token seen so
  //   far, and st.acc[r] = the sum of exp(score - st.m) * v_t[d] for row d = lane + 32 r.
  //   Tokens >= valid add nothing, even when their slots hold NaN. p_s (BS floats) is
  //   scratch, and is free again for the next call when the function returns.
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
  PA_SHARED_REGION(s_m), PA_SHARED_REGION(s_l), PA_SHARED_REGION(s_acc);
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
