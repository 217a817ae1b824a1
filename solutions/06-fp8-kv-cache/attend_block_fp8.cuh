// Chapter 6, exercise 4 of 4: chapter 4's block step on an fp8 cache.
#pragma once

#include "attend_block.cuh"  // chapter 4: WarpState, merge_warps, kWarps
#include "fp8.cuh"
#include "pa/ch06_fp8.h"

namespace pa::ch06 {

using ch04::kFullMask;
using ch04::WarpState;

// ANCHOR: attend_block_fp8
// As ch04::attend_kv_block, with one-byte elements: a K chunk is 16 elements and a V row
// of BS tokens is BS bytes. The scales are folded in by the caller: q_s already holds
// q * scale * k_scale, and the caller multiplies the final output by v_scale, so the
// inner loops only convert.
template <int D, int BS>
__device__ void attend_kv_block_fp8(const uint8_t* __restrict__ k_blk,
                                    const uint8_t* __restrict__ v_blk, int valid,
                                    const float* q_s, float* p_s, WarpState<(D + 31) / 32>& st) {
  constexpr int G = 32 / BS;
  constexpr int kChunks = D / kFp8X;
  constexpr int kRows = (D + 31) / 32;
  constexpr int kRowBytes = BS < 16 ? BS : 16;  // V: one load covers this many tokens
  const int lane = threadIdx.x % 32;
  const int o = lane / G, g = lane % G;
  // TODO(ch06): what ch04::attend_kv_block does, on an e4m3 cache: st takes in the block's
  //   `valid` tokens (online softmax: st.m, st.l, st.acc rows lane + 32 r), and tokens >=
  //   valid add nothing, even when their bytes decode to NaN. The scales are already folded
  //   in (q_s holds q * scale * k_scale; the caller applies v_scale): convert and compute,
  //   nothing more. A K chunk is 16 one-byte elements (kFp8X); a V row is BS bytes.
  // HINT(1): Start from your chapter 4 attend_kv_block: score, online softmax and V are the
  //   same steps. Only the loads change: a 16-byte K chunk becomes 16 floats through
  //   e4m3x16_to_float, and a V row is read kRowBytes tokens at a time.
  // HINT(2): K: chunk c of token o is at k_blk + (c * BS + o) * kFp8X; lane g of group o
  //   takes chunks c = g, g + G, .... V: row d is v_blk + d * BS; for t0 = 0, kRowBytes, ...
  //   < BS convert one uint4 (16 tokens) with e4m3x16_to_float, or, when kRowBytes is 8 (BS =
  //   8), one uint2 with e4m3x8_to_float (`if constexpr`). The softmax step is chapter 4's,
  //   unchanged.
  // HINT(3): chapter 4's three steps (score, online softmax, V), converting with
  //   e4m3x16_to_float (K chunks; V loads of 16 tokens) and e4m3x8_to_float (V rows of
  //   8 tokens when BS = 8). Skip tokens >= valid in V: their bytes may be NaN.
  // BEGIN SOLUTION
  float partial = 0.f;
  for (int c = g; c < kChunks; c += G) {
    float k[kFp8X];
    e4m3x16_to_float(*reinterpret_cast<const uint4*>(k_blk + (c * BS + o) * kFp8X), k);
    for (int j = 0; j < kFp8X; ++j) partial += q_s[c * kFp8X + j] * k[j];
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
  const float correction = expf(st.m - m_new);
  st.l = st.l * correction + p_sum;
  st.m = m_new;
  if (g == 0) p_s[o] = p;
  __syncwarp();

  for (int r = 0; r < kRows; ++r) {
    const int d = lane + 32 * r;
    float sum = 0.f;
    if (d < D) {
      const uint8_t* row = v_blk + d * BS;
      for (int t0 = 0; t0 < BS; t0 += kRowBytes) {
        float v[16];
        if constexpr (kRowBytes == 16) e4m3x16_to_float(*reinterpret_cast<const uint4*>(row + t0), v);
        else e4m3x8_to_float(*reinterpret_cast<const uint2*>(row + t0), v);
        for (int j = 0; j < kRowBytes; ++j)
          if (t0 + j < valid) sum += p_s[t0 + j] * v[j];
      }
    }
    st.acc[r] = st.acc[r] * correction + sum;
  }
  __syncwarp();
  // END SOLUTION
}
// ANCHOR_END: attend_block_fp8

}  // namespace pa::ch06
