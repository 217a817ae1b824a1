// The prefix pass on tensor cores (fp16 and bf16; given code, after the exercise's CUDA-core
// version). The CUDA-core pass does a group's arithmetic one row per warp with chapter 4's
// dot products, and writes a partial result per 64-token chunk: measured on the H100 it is
// bound by that arithmetic and by the partials, not by the prefix it reads once. Here:
//   grid (group, KV head, 512-token partition x 64-row block): each warp owns 16 query rows
//   of the group; the partition's K and V go through shared memory in 64-token stages;
//   S = Q K^T and O += P V are mma.sync m16n8k16 products (include/pa/mma.h); the rows keep
//   an online softmax across the stages (chapter 4's rescaling); one partial per partition.
#pragma once

#include <cstring>

#include "pa/mma.h"
#include "reduce_partitions.cuh"

namespace pa::ch08 {

// Two consecutive 16-bit values as one register.
template <typename T>
__device__ inline uint32_t load_pair(const T* p) {
  uint32_t r;
  std::memcpy(&r, p, 4);
  return r;
}

inline constexpr int kMmaRowsPerBlock = 64;  // 4 warps x 16 rows

// ANCHOR: prefix_mma
template <typename T, int D, int BS>
__global__ void __launch_bounds__(128)
cascade_prefix_mma_kernel(float* max_logits, float* exp_sums, float* partial_out, const T* q,
                          const T* k_pool, const T* v_pool, const int* block_table, CascadeView plan,
                          int row_blocks, int max_partitions, float scale, ch04::PagedAttentionShape s) {
  constexpr int kStage = D <= 128 ? 64 : 32;  // tokens per shared-memory stage
  constexpr int X = 16 / int(sizeof(T));      // the K layout's innermost run
  constexpr int kVecs = D * BS * int(sizeof(T)) / 16;
  const int group = blockIdx.x, kv_head = blockIdx.y;
  const int part = blockIdx.z / row_blocks, row_block = blockIdx.z % row_blocks;
  const int G = s.num_q_heads / s.num_kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int prefix_len = plan.group_prefix_len[group];
  const int begin = part * ch05::kPartitionSize, end = min(prefix_len, begin + ch05::kPartitionSize);
  const int* members = plan.members + plan.group_start[group];
  const int num_rows = (plan.group_start[group + 1] - plan.group_start[group]) * G;
  if (begin >= end || row_block * kMmaRowsPerBlock >= num_rows) return;  // the whole block
  PA_DYNAMIC_SHARED(T, k_s);
  T* v_s = k_s + kStage * D;

  // This warp's rows r0 .. r0 + 15 (rows past the group's are zeros, never written).
  const int r0 = row_block * kMmaRowsPerBlock + warp * 16;
  auto q_row = [&](int r) -> const T* {
    if (r >= num_rows) return nullptr;
    return q + (int64_t(members[r / G]) * s.num_q_heads + kv_head * G + r % G) * D;
  };
  const T* qa = q_row(r0 + g);
  const T* qb = q_row(r0 + g + 8);
  uint32_t qf[D / 16][4];  // Q as mma A fragments
  for (int ks = 0; ks < D / 16; ++ks) {
    const int d = 16 * ks + 2 * t;
    qf[ks][0] = qa ? load_pair(qa + d) : 0u;
    qf[ks][1] = qb ? load_pair(qb + d) : 0u;
    qf[ks][2] = qa ? load_pair(qa + d + 8) : 0u;
    qf[ks][3] = qb ? load_pair(qb + d + 8) : 0u;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8 (l: this lane's part)
  float o[D / 8][4];
  for (int nd = 0; nd < D / 8; ++nd)
    for (int i = 0; i < 4; ++i) o[nd][i] = 0.f;

  const int* table = block_table + int64_t(members[0]) * s.max_blocks_per_seq;
  const int64_t block_elems = int64_t(s.num_kv_heads) * D * BS;
  for (int stage = begin; stage < end; stage += kStage) {
    const int tokens = min(kStage, end - stage);  // whole blocks: the prefix is full blocks
    __syncthreads();  // the previous stage is read
    for (int i = threadIdx.x; i < kStage / BS * kVecs; i += blockDim.x) {
      const int blk = i / kVecs, piece = i % kVecs;
      uint4 kv[2] = {uint4{0, 0, 0, 0}, uint4{0, 0, 0, 0}};  // past the prefix: zeros (0 x NaN)
      if (blk * BS < tokens) {
        const int64_t at = int64_t(table[(stage + blk * BS) / BS]) * block_elems + int64_t(kv_head) * D * BS;
        kv[0] = reinterpret_cast<const uint4*>(k_pool + at)[piece];
        kv[1] = reinterpret_cast<const uint4*>(v_pool + at)[piece];
      }
      reinterpret_cast<uint4*>(k_s + blk * D * BS)[piece] = kv[0];
      reinterpret_cast<uint4*>(v_s + blk * D * BS)[piece] = kv[1];
    }
    __syncthreads();
    // S = Q K^T: 16 rows x kStage tokens; this lane holds rows g, g + 8 and tokens 8n + 2t, + 1.
    float sc[kStage / 8][4];
    for (int n = 0; n < kStage / 8; ++n) {
      for (int i = 0; i < 4; ++i) sc[n][i] = 0.f;
      const int tok = 8 * n + g, blk = tok / BS, tb = tok % BS;
      const T* kt = k_s + blk * D * BS + tb * X;  // token tok's dims d at kt[(d / X) * BS * X + d % X]
      for (int ks = 0; ks < D / 16; ++ks) {
        const int d = 16 * ks + 2 * t;
        const uint32_t b[2] = {load_pair(kt + (d / X) * BS * X + d % X),
                               load_pair(kt + ((d + 8) / X) * BS * X + (d + 8) % X)};
        mma_16x8x16<T>(sc[n], qf[ks], b);
      }
    }
    // The online softmax of chapter 4, per row; a row's four lanes (same g) share it.
    float mx[2] = {m[0], m[1]};
    for (int n = 0; n < kStage / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        const bool valid = 8 * n + 2 * t + (i & 1) < tokens;
        sc[n][i] = valid ? sc[n][i] * scale : -INFINITY;
        mx[i / 2] = fmaxf(mx[i / 2], sc[n][i]);
      }
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float alpha = m[h] == -INFINITY ? 0.f : __expf(m[h] - mx[h]);
      m[h] = mx[h];
      l[h] *= alpha;
      for (int nd = 0; nd < D / 8; ++nd) {
        o[nd][2 * h] *= alpha;
        o[nd][2 * h + 1] *= alpha;
      }
    }
    for (int n = 0; n < kStage / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        sc[n][i] = __expf(sc[n][i] - m[i / 2]);  // -inf: 0
        l[i / 2] += sc[n][i];
      }
    // O += P V: P (16 x kStage) from the S fragments, V (kStage x D) from shared memory.
    for (int kk = 0; kk < kStage / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(sc[2 * kk][0], sc[2 * kk][1]), pack2<T>(sc[2 * kk][2], sc[2 * kk][3]),
                             pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                             pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
      const int tok = 16 * kk + 2 * t;  // and tok + 1, tok + 8, tok + 9
      const T* v0 = v_s + (tok / BS) * D * BS + tok % BS;
      const T* v1 = v_s + ((tok + 8) / BS) * D * BS + (tok + 8) % BS;
      for (int nd = 0; nd < D / 8; ++nd) {
        const int d = 8 * nd + g;
        const uint32_t b[2] = {load_pair(v0 + d * BS), load_pair(v1 + d * BS)};
        mma_16x8x16<T>(o[nd], a, b);
      }
    }
  }
  // Each row's exp-sum is spread over its four lanes; then one partial per (row, partition).
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + g + 8 * h;
    if (r >= num_rows) continue;
    const int64_t at = ch05::partition_index(members[r / G], kv_head * G + r % G, part, s.num_q_heads, max_partitions);
    if (t == 0) {
      max_logits[at] = m[h];
      exp_sums[at] = l[h];
    }
    for (int nd = 0; nd < D / 8; ++nd) {
      partial_out[at * D + 8 * nd + 2 * t] = o[nd][2 * h] / l[h];
      partial_out[at * D + 8 * nd + 2 * t + 1] = o[nd][2 * h + 1] / l[h];
    }
  }
}
// ANCHOR_END: prefix_mma

}  // namespace pa::ch08
