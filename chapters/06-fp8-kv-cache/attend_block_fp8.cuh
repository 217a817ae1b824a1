// Your exercise file. (Generated from solutions/06-fp8-kv-cache/attend_block_fp8.cuh; instructors regenerate with tools/make_skeletons.py.)
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
  // (your code here)
}
// ANCHOR_END: attend_block_fp8

}  // namespace pa::ch06
