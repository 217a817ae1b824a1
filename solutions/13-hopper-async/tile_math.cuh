// Chapter 13: a consumer warpgroup's arithmetic between its wgmmas, given: Q into shared
// memory, the mask and the online softmax on S's accumulators (chapter 10's, in base 2), P
// into wgmma's A fragments, and the rows out.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "pa/dtype.h"
#include "pa/hopper.h"
#include "stage_pipeline.cuh"

namespace pa::ch13 {

// Q's 64 rows of warpgroup wg into shared memory, K-major with the 128-byte swizzle (as
// q_desc reads them), rows past the sequence's as zeros; then the proxy fence: wgmma reads
// them through the async proxy.
template <typename T, int D>
__device__ void load_q(const PrefillArgs<T>& a, const PrefillItem& it, unsigned char* q_s, int wg,
                       int n_new, int q_start, int t) {
  const int G = a.num_q_heads / a.num_kv_heads;
  const uint32_t base = smem_address(q_s);
  constexpr int kChunks = D / 8;  // 16-byte chunks of a row
  for (int i = t; i < 64 * kChunks; i += 128) {
    const int r = i / kChunks, c = i % kChunks;
    const int row = it.row0 + 64 * wg + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row < n_new * G) {
      const int64_t token = q_start + row / G, head = int64_t(it.kv_head) * G + row % G;
      v = reinterpret_cast<const uint4*>(a.q + (token * a.num_q_heads + head) * D)[c];
    }
    const uint32_t at = swizzle_address(base + q_chunk_offset(r, c), 128);
    *reinterpret_cast<uint4*>(q_s + (at - base)) = v;
  }
  fence_proxy_async();
}

template <typename T>
__device__ inline uint32_t pack_pair(float lo, float hi) {
  const T l = from_float<T>(lo), h = from_float<T>(hi);
  uint16_t bl, bh;
  memcpy(&bl, &l, 2);
  memcpy(&bh, &h, 2);
  return uint32_t(bl) | (uint32_t(bh) << 16);
}

// A thread's two rows (WgmmaAcc's rows for i % 4 < 2 and for i % 4 >= 2) and the online
// softmax state of each: m (base 2) and l (this thread's columns only, until the end).
struct RowState {
  int row[2], pos[2];
  float m[2], l[2];
};

// ANCHOR: softmax_step
// The mask (a key after the row's position: the slots past the sequence's end included) and
// the online softmax of one tile's scores, keys t0 .. t0 + N - 1: the row maxima over each
// row's 4 threads, and P = 2^(s - m) packed into the A fragments of O += P V (a[k][r] =
// pack(d[8 k + 2 r], d[8 k + 2 r + 1]): 16 keys a k-step). corr[j]: what O's row j must be
// multiplied by before this tile's P V adds to it (rescale(), once no wgmma owns O).
template <typename T, int N>
__device__ void softmax_step(WgmmaAcc<N>& sc, RowState& st, int t0, float scale_log2,
                             uint32_t (&p)[N / 16][4], float (&corr)[2]) {
  const int t = threadIdx.x % 128;
  float mx[2] = {st.m[0], st.m[1]};
#pragma unroll
  for (int i = 0; i < WgmmaAcc<N>::kRegs; ++i) {
    const int j = (i / 2) % 2, key = t0 + WgmmaAcc<N>::col(i, t);
    sc.d[i] = key <= st.pos[j] ? sc.d[i] * scale_log2 : -INFINITY;
    mx[j] = fmaxf(mx[j], sc.d[i]);
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 1));
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 2));
    corr[j] = mx[j] == -INFINITY ? 1.f : exp2f(st.m[j] - mx[j]);
    st.m[j] = mx[j];
    st.l[j] *= corr[j];
  }
#pragma unroll
  for (int i = 0; i < WgmmaAcc<N>::kRegs; i += 2) {
    const int j = (i / 2) % 2;
    const float e0 = st.m[j] == -INFINITY ? 0.f : exp2f(sc.d[i] - st.m[j]);
    const float e1 = st.m[j] == -INFINITY ? 0.f : exp2f(sc.d[i + 1] - st.m[j]);
    st.l[j] += e0 + e1;
    p[i / 8][(i % 8) / 2] = pack_pair<T>(e0, e1);
  }
}
// ANCHOR_END: softmax_step

// O's rows times corr (softmax_step's), the accumulators in ordinary registers again.
template <int D>
__device__ void rescale(WgmmaAcc<D>& o, const float (&corr)[2]) {
#pragma unroll
  for (int i = 0; i < WgmmaAcc<D>::kRegs; ++i) o.d[i] *= corr[(i / 2) % 2];
}

// O / l into the rows this tile has (each row's l summed over its 4 threads first).
template <typename T, int D>
__device__ void store_rows(const PrefillArgs<T>& a, const PrefillItem& it, WgmmaAcc<D>& o, RowState& st,
                           int n_new, int q_start) {
  const int t = threadIdx.x % 128, G = a.num_q_heads / a.num_kv_heads;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    st.l[j] += __shfl_xor_sync(0xffffffffu, st.l[j], 1);
    st.l[j] += __shfl_xor_sync(0xffffffffu, st.l[j], 2);
  }
#pragma unroll
  for (int i = 0; i < WgmmaAcc<D>::kRegs; i += 2) {
    const int j = (i / 2) % 2;
    if (st.row[j] >= n_new * G) continue;
    const int64_t token = q_start + st.row[j] / G, head = int64_t(it.kv_head) * G + st.row[j] % G;
    const float inv = 1.f / st.l[j];
    *reinterpret_cast<uint32_t*>(a.out + (token * a.num_q_heads + head) * D + WgmmaAcc<D>::col(i, t)) =
        pack_pair<T>(o.d[i] * inv, o.d[i + 1] * inv);
  }
}

}  // namespace pa::ch13
