// Chapter 10: the merge of a split tile of many chunks (merged_apart, below) in a kernel of
// its own, launched after the attention kernel and placed on the GPU before that one ends
// (a dependent launch, pa/dependent_launch.h). Each of the tile's rows is one thread block:
// 16 lanes for each 4-float piece of the row (8 at D 256), each lane merging every 16th
// chunk (online, as chapter 5's merge), then the lanes combined by shuffles. A tile's 2 MB
// of partials (MQA's 32 rows cut 128 ways) is read by 32 SMs at once, not by one block
// after the others (inside the kernel a merge was one block alone at about 20 GB/s, and any
// code added there moved the main loop's registers: NOTES.md, ch10 v16 to v18).
//
// Given code (not an exercise). A student's one-level merge still runs for every split tile
// (stretch exercise 5): it leaves the tile's ticket at 0, and this kernel merges only a tile
// whose chunks each counted once and left it at num_splits (the solution's), so it never
// hides a wrong merge.
#pragma once

#include <cmath>
#include <cstdint>

#include "tc_block.cuh"  // chapter 9: pack2
#include "pa/ch10_varlen.h"
#include "pa/dependent_launch.h"

namespace pa::ch10 {

constexpr int kOneLevelChunks = 256;  // a one-level merge keeps 8 x 256 weights (8 KB) at most
constexpr int kApartChunks = 16;      // a tile of at most this many chunks merges in the kernel

// Whether the solution leaves a split tile to merge_kernel: more than 16 chunks of more
// rows than a decode tile's 8 (MQA's decode of a long sequence), or more chunks than a
// one-level merge keeps weights for. A tile of fewer chunks merges inside the attention
// kernel, by its last chunk, while other blocks still stream: a block a row for thousands
// of small tiles cost more than it saved (a 512-token prefill chunk, 128 tiles of 2-3
// chunks: 35.4 -> 69.8 us; MQA's 8 chunks a tile: 42.9 -> 48.0 us; NOTES.md, ch10 v17).
__host__ __device__ inline bool merged_apart(int num_splits, int tile_rows) {
  return num_splits > kApartChunks && (tile_rows > kDecodeRows || num_splits > kOneLevelChunks);
}

template <typename T>
struct MergeArgs {
  T* out;
  const int* query_start_loc;
  const float *max_logits, *exp_sums, *partial_out;
  int* counters;        // the tiles' tickets: num_splits when every chunk left the merge here
  int* arrivals;        // one per tile, at partial_base / kTileRows: this kernel's rows (left at 0)
  const MergeRow* rows;  // one per thread block, the first *num_rows of them this plan's
  const int* num_rows;
  int num_q_heads, group;  // Hq, G
};

// merge_lanes<D>() lanes per 4-float piece, each keeping kMergeBatch chunks' loads in
// flight: 16 x 8 takes MQA's 128 chunks in one round trip; D 256 keeps 8 lanes (512 threads).
constexpr int kMergeBatch = 8;
template <int D>
__host__ __device__ constexpr int merge_lanes() { return D <= 128 ? 16 : 8; }

template <typename T, int D>
__global__ void __launch_bounds__(D / 4 * merge_lanes<D>()) merge_kernel(MergeArgs<T> a) {
  constexpr int kQuads = D / 4, kMergeLanes = merge_lanes<D>();
  if (int(blockIdx.x) >= *a.num_rows) return;  // a grid sized by an earlier, larger plan
  const MergeRow m = a.rows[blockIdx.x];
  const int lane = threadIdx.x % kMergeLanes, quad = threadIdx.x / kMergeLanes, S = m.num_splits;
  const int q_start = a.query_start_loc[m.seq];
  const int n_new = a.query_start_loc[m.seq + 1] - q_start;
  // Launched while the attention kernel still runs: nothing it writes is read before this.
  pa::wait_for_prior_grid();
  // The ticket, read by every block of the tile before the last of them resets it.
  if (a.counters[m.counter] != S) return;  // a tile the attention kernel merged itself
  if (m.row < tile_rows(n_new, a.group, m.row0)) {
    const int64_t first = m.partial_base + int64_t(m.row) * S;
    const float4* parts = reinterpret_cast<const float4*>(a.partial_out) + first * kQuads + quad;
    // Online over this lane's chunks lane, lane + 8, ...: the running max M, the sum L of
    // exp_sum * exp(max - M) and the output's weighted sum, rescaled when M grows.
    float M = -INFINITY, L = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k0 = lane; k0 < S; k0 += kMergeLanes * kMergeBatch) {
      float mx[kMergeBatch], ex[kMergeBatch];
      float4 p[kMergeBatch];
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i) {
        const int k = k0 + i * kMergeLanes;
        mx[i] = k < S ? a.max_logits[first + k] : -INFINITY;
        ex[i] = k < S ? a.exp_sums[first + k] : 0.f;
        p[i] = k < S ? parts[int64_t(k) * kQuads] : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      float M2 = M;
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i) M2 = fmaxf(M2, mx[i]);
      // e * 0, not 0, where the max is -inf: a NaN sum stays NaN (as chapter 5's merge).
      const float keep = M == -INFINITY ? 0.f : expf(M - M2);
      L *= keep;
      acc.x *= keep, acc.y *= keep, acc.z *= keep, acc.w *= keep;
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i) {
        const float wt = ex[i] * (M2 == -INFINITY ? 0.f : expf(mx[i] - M2));
        L += wt;
        acc.x += wt * p[i].x, acc.y += wt * p[i].y, acc.z += wt * p[i].z, acc.w += wt * p[i].w;
      }
      M = M2;
    }
    // The lanes of this piece (neighbours in the warp) agree on one max and add up.
    float Mall = M;
    for (int o = 1; o < kMergeLanes; o *= 2) Mall = fmaxf(Mall, __shfl_xor_sync(0xffffffffu, Mall, o));
    const float keep = M == -INFINITY ? 0.f : expf(M - Mall);
    L *= keep;
    acc.x *= keep, acc.y *= keep, acc.z *= keep, acc.w *= keep;
    for (int o = 1; o < kMergeLanes; o *= 2) {
      L += __shfl_xor_sync(0xffffffffu, L, o);
      acc.x += __shfl_xor_sync(0xffffffffu, acc.x, o);
      acc.y += __shfl_xor_sync(0xffffffffu, acc.y, o);
      acc.z += __shfl_xor_sync(0xffffffffu, acc.z, o);
      acc.w += __shfl_xor_sync(0xffffffffu, acc.w, o);
    }
    if (lane == 0) {  // a row that sees no key: L 0, output 0
      const float inv = L == 0.f ? 0.f : 1.f / L;
      const int r = m.row0 + m.row;
      T* dst = a.out + (int64_t(q_start + r / a.group) * a.num_q_heads + m.kv_head * a.group + r % a.group) * D;
      *reinterpret_cast<uint2*>(dst + 4 * quad) =
          make_uint2(pack2<T>(acc.x * inv, acc.y * inv), pack2<T>(acc.z * inv, acc.w * inv));
    }
  }
  // Every block of the tile has read the ticket; the last one back leaves both counts at 0.
  // An atomic orders only its own word: thread 0's fences order the block's reads of the
  // ticket (the barrier brings them to thread 0) before the reset, a release before the
  // arrival and an acquire after the last one. (One thread's fence after the barrier, not
  // every thread's before it: the ragged MQA case's tail is a microsecond shorter.)
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    int* arrived = a.arrivals + m.partial_base / kTileRows;
    if (atomicAdd(arrived, 1) == m.blocks - 1) {
      __threadfence();
      *arrived = 0;
      a.counters[m.counter] = 0;
    }
  }
}

}  // namespace pa::ch10
