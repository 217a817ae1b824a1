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
  // HINT(1): Three steps: the block's scores, the online-softmax update (chapter 1's, a block
  //   of tokens at a time), then the weighted sum of V. Layouts: k_blk is [D/x][BS][x] (chunk
  //   c of token o at (c * BS + o) * x) and v_blk is [D][BS] (row d holds the block's BS
  //   tokens side by side). Lanes come in groups of G = 32 / BS: group o owns token o.
  // HINT(2): Scores: lane g of group o sums q_s . k over chunks c = g, g + G, ... (one uint4
  //   load each), then __shfl_xor_sync over offsets G/2 .. 1 adds up the group. Softmax: the
  //   block max over the whole warp (xor offsets 16 .. 1), correction = exp(st.m - m_new), p
  //   = exp(score - m_new) (0 for o >= valid), and the sum of p over the warp counting each
  //   token once (only g == 0 adds). Put p in p_s[o] so that every lane can read every
  //   token's p. V: lane takes rows d = lane + 32 r < D and adds p_s[t] * v for t < valid,
  //   skipping the rest.
  // HINT(3): 1. The score of token o: the lanes of its group split its kChunks chunks
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
  // BEGIN SOLUTION
  float partial = 0.f;
  for (int c = g; c < kChunks; c += G) {
    const uint4 raw = *reinterpret_cast<const uint4*>(k_blk + (c * BS + o) * x);
    const T* k = reinterpret_cast<const T*>(&raw);
    for (int j = 0; j < x; ++j) partial += q_s[c * x + j] * to_float(k[j]);
  }
  for (int offset = G / 2; offset > 0; offset /= 2)
    partial += __shfl_xor_sync(kFullMask, partial, offset);
  const float score = o < valid ? partial : -INFINITY;

  float block_max = score;
  for (int offset = 16; offset > 0; offset /= 2)
    block_max = fmaxf(block_max, __shfl_xor_sync(kFullMask, block_max, offset));
  const float m_new = fmaxf(st.m, block_max);
  const float p = o < valid ? expf(score - m_new) : 0.f;
  float p_sum = g == 0 ? p : 0.f;
  for (int offset = 16; offset > 0; offset /= 2) p_sum += __shfl_xor_sync(kFullMask, p_sum, offset);
  const float correction = expf(st.m - m_new);  // 0 for the first block (st.m = -inf)
  st.l = st.l * correction + p_sum;
  st.m = m_new;
  if (g == 0) p_s[o] = p;
  __syncwarp();

  for (int r = 0; r < kRows; ++r) {
    const int d = lane + 32 * r;
    float sum = 0.f;
    if (d < D) {
      const T* row = v_blk + d * BS;
      for (int t0 = 0; t0 < BS; t0 += x) {
        const uint4 raw = *reinterpret_cast<const uint4*>(row + t0);
        const T* v = reinterpret_cast<const T*>(&raw);
        for (int j = 0; j < x; ++j)
          if (t0 + j < valid) sum += p_s[t0 + j] * to_float(v[j]);
      }
    }
    st.acc[r] = st.acc[r] * correction + sum;
  }
  __syncwarp();
  // END SOLUTION
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
