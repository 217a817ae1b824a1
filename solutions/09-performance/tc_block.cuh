// Chapter 9: the same attention over a KV block, on the tensor cores. With GQ query heads
// per KV head, the scores of 16 tokens x 8 heads are one matrix product (K x Q^T), and so
// is the output update (V^T x P^T): two mma.sync per 16 dimensions instead of hundreds of
// fused multiply-adds per lane. The CUDA-core version (gqa_block.cuh) stays as the
// reference point; the numbers are in the book.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gqa_block.cuh"
#include "pa/mma.h"

namespace pa::ch09 {

// ANCHOR: mma_type
// The 16-bit type the tensor cores multiply in: the cache's own dtype, or fp16 for an
// e4m3 cache (every e4m3 value is exact in fp16).
template <typename C>
struct MmaType {
  using type = C;
};
template <>
struct MmaType<uint8_t> {
  using type = half;
};
// ANCHOR_END: mma_type

// Two e4m3 bytes (the lower first) to two fp16 values in one register.
__device__ inline uint32_t e4m3x2_to_half2_bits(uint16_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// One 16-byte chunk of the cache as x / 2 registers of two MmaType values each.
template <typename C>
__device__ inline void chunk_to_pairs(const uint4& raw, uint32_t* pairs) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (sizeof(C) == 2) {
    for (int i = 0; i < 4; ++i) pairs[i] = words[i];
  } else {
    for (int i = 0; i < 4; ++i) {
      pairs[2 * i] = e4m3x2_to_half2_bits(uint16_t(words[i] & 0xffffu));
      pairs[2 * i + 1] = e4m3x2_to_half2_bits(uint16_t(words[i] >> 16));
    }
  }
}

// Four consecutive tokens of one V row as two registers (tokens 0,1 and 2,3).
template <typename C>
__device__ inline void four_to_pairs(const C* p, uint32_t* pairs) {
  if constexpr (sizeof(C) == 2) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    pairs[0] = raw.x;
    pairs[1] = raw.y;
  } else {
    const uint32_t raw = *reinterpret_cast<const uint32_t*>(p);
    pairs[0] = e4m3x2_to_half2_bits(uint16_t(raw & 0xffffu));
    pairs[1] = e4m3x2_to_half2_bits(uint16_t(raw >> 16));
  }
}

// ANCHOR: tc_state
// A warp's running state on the tensor-core path. With g = lane / 4 and t = lane % 4, a
// lane tracks heads 2t and 2t + 1 (m, l) and holds their output at dimensions
// 16 M + g and 16 M + g + 8: o[M][i] is head 2t + i % 2, dimension 16 M + g + 8 (i / 2).
template <int D>
struct TcState {
  float m[2], l[2];
  float o[D / 16][4];
};
// ANCHOR_END: tc_state

// ANCHOR: attend_tile_tc
// One warp attends over 16 tokens [t0, t0 + 16) of a KV block (BS = 16 or 32) for up to
// 8 query heads. q_frag: this lane's query registers (head g, chunks 4 m + t), loaded once
// per thread block; p_s: the warp's [8][16] scratch of MmaType values. kLow (chapter 12's
// sliding window): the tokens before `low` are hidden too (at least one of the 16 is not).
template <typename C, int D, int BS, bool kLow = false>
__device__ void attend_tile_tc(const C* __restrict__ k_blk, const C* __restrict__ v_blk, int t0,
                               int valid, float score_scale, const uint32_t* q_frag, uint16_t* p_s,
                               TcState<D>& st, int low = 0) {
  using E = typename MmaType<C>::type;
  constexpr int x = CacheElem<C>::x, kChunks = D / x, kGroups = (kChunks + 3) / 4;
  constexpr int kPairs = x / 2;  // registers per chunk
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  // S = K Q^T: rows are tokens t0 + g (+8), columns heads. Lane t's chunk 4m + t gives
  // the k-indices 2t.. of kPairs / 2 products; the query registers use the same order.
  float s[4] = {0.f, 0.f, 0.f, 0.f};
  for (int m = 0; m < kGroups; ++m) {
    const int j = 4 * m + t;
    uint32_t lo[kPairs], hi[kPairs];
    if (kChunks % 4 == 0 || j < kChunks) {
      chunk_to_pairs<C>(*reinterpret_cast<const uint4*>(k_blk + (j * BS + t0 + g) * x), lo);
      chunk_to_pairs<C>(*reinterpret_cast<const uint4*>(k_blk + (j * BS + t0 + g + 8) * x), hi);
    } else {
      for (int p = 0; p < kPairs; ++p) lo[p] = hi[p] = 0u;
    }
    for (int u = 0; u < kPairs / 2; ++u) {
      const uint32_t a[4] = {lo[2 * u], hi[2 * u], lo[2 * u + 1], hi[2 * u + 1]};
      const uint32_t b[2] = {q_frag[m * kPairs + 2 * u], q_frag[m * kPairs + 2 * u + 1]};
      mma_16x8x16<E>(s, a, b);
    }
  }

  // Online softmax for heads 2t, 2t+1 over the tile's tokens (lanes with the same t).
  float p[4], corr[2];
  for (int i = 0; i < 4; ++i) {
    const int token = t0 + g + 8 * (i / 2);
    s[i] = token < valid && (!kLow || token >= low) ? s[i] * score_scale : -INFINITY;  // select: K may be NaN there
  }
  for (int j = 0; j < 2; ++j) {
    float mx = fmaxf(s[j], s[2 + j]);
    for (int offset = 4; offset < 32; offset *= 2) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, offset));
    const float m_new = fmaxf(st.m[j], mx);
    corr[j] = expf(st.m[j] - m_new);
    p[j] = expf(s[j] - m_new);
    p[2 + j] = expf(s[2 + j] - m_new);
    float sum = p[j] + p[2 + j];
    for (int offset = 4; offset < 32; offset *= 2) sum += __shfl_xor_sync(kFullMask, sum, offset);
    st.l[j] = st.l[j] * corr[j] + sum;
    st.m[j] = m_new;
  }
  // P to shared memory as [head][token], the layout the second product reads.
  const E p_e[4] = {from_float<E>(p[0]), from_float<E>(p[1]), from_float<E>(p[2]), from_float<E>(p[3])};
  for (int i = 0; i < 4; ++i)
    std::memcpy(&p_s[(2 * t + i % 2) * 16 + g + 8 * (i / 2)], &p_e[i], 2);
  __syncwarp();

  // O^T += V^T P^T: rows are dimensions 16 M + g (+8), k-indices tokens 4t .. 4t+3.
  const uint2 pb = *reinterpret_cast<const uint2*>(p_s + g * 16 + 4 * t);
  const uint32_t b[2] = {pb.x, pb.y};
  uint32_t keep[2];  // zero the V values of tokens past the end (0 * NaN is NaN)
  for (int h = 0; h < 2; ++h) {
    const int token = t0 + 4 * t + 2 * h;
    keep[h] = (token < valid ? 0x0000ffffu : 0u) | (token + 1 < valid ? 0xffff0000u : 0u);
  }
  for (int M = 0; M < D / 16; ++M) {
    uint32_t r0[2], r1[2];
    four_to_pairs<C>(v_blk + (16 * M + g) * BS + t0 + 4 * t, r0);
    four_to_pairs<C>(v_blk + (16 * M + g + 8) * BS + t0 + 4 * t, r1);
    const uint32_t a[4] = {r0[0] & keep[0], r1[0] & keep[0], r0[1] & keep[1], r1[1] & keep[1]};
    for (int i = 0; i < 4; ++i) st.o[M][i] *= corr[i % 2];
    mma_16x8x16<E>(st.o[M], a, b);
  }
  __syncwarp();  // p_s is rewritten by the next tile
}
// ANCHOR_END: attend_tile_tc

}  // namespace pa::ch09
