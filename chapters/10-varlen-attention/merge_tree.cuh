// Chapter 10: the merge of a tile cut into more than kMergeFanout chunks, as a tree. The
// last of a group of 16 chunks to finish merges the group into the group's first slot;
// the last of 16 such groups merges those; the last group of the top level writes the
// rows. One merger for the whole tile would read every partial alone: MQA's 32 rows cut
// 128 ways is 2 MB through one SM, at the few loads a thread keeps in flight (NOTES.md,
// ch10 v15).
//
// Given code (not an exercise): a student's one-level merge (the stretch exercise at the
// end of attend_item) is correct for any number of chunks, only slower.
#pragma once

#include <cmath>
#include <cstdint>

#include "tc_block.cuh"  // chapter 9: pack2
#include "varlen_args.cuh"
#include "pa/ch10_varlen.h"

namespace pa::ch10 {

constexpr int kMergeFanout = 16;  // slots per merge

// Whether a tile merges in a tree: more chunks than one merge takes, and more rows than a
// decode tile's 8 (whose partials are small: one merge of them all is as fast), or more than
// 256 chunks of a decode tile. So a one-level merge keeps at most 64 x 16 or 8 x 256 weights
// (8 KB) in the ring.
__host__ __device__ inline bool merges_in_tree(int num_splits, int tile_rows) {
  return num_splits > kMergeFanout &&
         (tile_rows > kDecodeRows || num_splits > kMergeFanout * kMergeFanout);
}

// One merge: `count` slots of each of the tile's rows, `span` chunks apart from chunk
// `start` (chapter 5's log-sum-exp merge). top: the rows' outputs; otherwise the result
// replaces slot `start`, with the group's max and sum (a row that sees no key of the group
// gets sum 0 and output 0). Each row's weights go to shared memory (64 x 16 floats at most).
template <typename T, typename C, int D>
__device__ void merge_node(const VarlenArgs<T, C>& a, const WorkItem& w, int tile_rows, int start,
                           int count, int span, bool top, unsigned char* smem) {
  constexpr int kQuads = D / 4;
  const int S = w.num_splits, Hq = a.s.num_q_heads, G = Hq / a.s.num_kv_heads;
  float* weights = reinterpret_cast<float*>(smem);  // [row][count]
  auto slot = [&](int row, int k) { return w.partial_base + int64_t(row) * S + start + int64_t(k) * span; };
  // Each row's weights exp_sum_k * exp(max_k - M) / L, 8 slots' loads at a time.
  if (int(threadIdx.x) < tile_rows) {
    constexpr int kP = 8;
    const int64_t first = slot(threadIdx.x, 0);
    float M = -INFINITY, total = 0.f;
    for (int k0 = 0; k0 < count; k0 += kP)
#pragma unroll
      for (int k = 0; k < kP; ++k)
        if (k0 + k < count) M = fmaxf(M, a.max_logits[first + (k0 + k) * span]);
    float* wt = weights + threadIdx.x * count;
    for (int k0 = 0; k0 < count; k0 += kP) {
      float m[kP], e[kP];
#pragma unroll
      for (int k = 0; k < kP; ++k) {
        m[k] = k0 + k < count ? a.max_logits[first + (k0 + k) * span] : 0.f;
        e[k] = k0 + k < count ? a.exp_sums[first + (k0 + k) * span] : 0.f;
      }
#pragma unroll
      for (int k = 0; k < kP; ++k)  // e * 0, not 0, where M is -inf: a NaN sum stays NaN
        if (k0 + k < count) total += (wt[k0 + k] = e[k] * (M == -INFINITY ? 0.f : expf(m[k] - M)));
    }
    for (int k = 0; k < count; ++k) wt[k] = total == 0.f ? 0.f : wt[k] / total;
    if (!top) {
      a.max_logits[first] = M;
      a.exp_sums[first] = total;
    }
  }
  __syncthreads();
  // Each thread sums kBatch pieces of 4 outputs, kP slots at a time: kBatch x kP 16-byte
  // loads in flight (twice that spills: NOTES.md, v15).
  constexpr int kBatch = 4, kP = 4, kStride = kWarps * 32;
  const float4* parts = reinterpret_cast<const float4*>(a.partial_out);
  const int quads = tile_rows * kQuads;
  for (int i0 = threadIdx.x; i0 < quads; i0 += kBatch * kStride) {
    float4 sum[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) sum[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k0 = 0; k0 < count; k0 += kP) {
      float4 part[kBatch][kP];
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
#pragma unroll
        for (int k = 0; k < kP; ++k) {
          const int i = i0 + j * kStride;
          part[j][k] = i < quads && k0 + k < count ? parts[slot(i / kQuads, k0 + k) * kQuads + i % kQuads]
                                                   : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
#pragma unroll
        for (int k = 0; k < kP; ++k) {
          const int i = i0 + j * kStride;
          const float wt = i < quads && k0 + k < count ? weights[(i / kQuads) * count + k0 + k] : 0.f;
          sum[j].x += wt * part[j][k].x;
          sum[j].y += wt * part[j][k].y;
          sum[j].z += wt * part[j][k].z;
          sum[j].w += wt * part[j][k].w;
        }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * kStride, row = i / kQuads, q = i % kQuads;
      if (i >= quads) continue;
      if (top) {
        const int r = w.row0 + row;
        *reinterpret_cast<uint2*>(a.out + (int64_t(a.query_start_loc[w.seq] + r / G) * Hq + w.kv_head * G + r % G) * D +
                                  4 * q) = make_uint2(pack2<T>(sum[j].x, sum[j].y), pack2<T>(sum[j].z, sum[j].w));
      } else {
        reinterpret_cast<float4*>(a.partial_out)[slot(row, 0) * kQuads + q] = sum[j];
      }
    }
  }
  __syncthreads();  // the weights are free for the next level
}

// The tree, run by the kernel's loop after each chunk of such a tile (attend_item wrote its
// partials and set merge_later). Each level's group counts on a ticket; its last member
// merges. A group below the top counts in group_counters at its first chunk + level
// (groups of a level start 16 chunks apart at least, so no two share one); the top counts
// on the tile's counter. Called from the loop, not from attend_item, and inlined: inside
// attend_item it cost the main loop registers (spills), and a call a stack frame
// (NOTES.md, ch10 v15).
template <typename T, typename C, int D>
__device__ void merge_tree(const VarlenArgs<T, C>& a, const WorkItem& w, unsigned char* smem) {
  const int S = w.num_splits;
  const int n_new = a.query_start_loc[w.seq + 1] - a.query_start_loc[w.seq];
  const int tile_rows = ch10::tile_rows(n_new, a.s.num_q_heads / a.s.num_kv_heads, w.row0);
  for (int span = 1, level = 0;; span *= kMergeFanout, ++level) {
    const bool top = int64_t(span) * kMergeFanout >= S;
    const int group = top ? S : span * kMergeFanout;  // chunks a group of this level covers
    const int start = top ? 0 : w.split / group * group;
    const int end = S - start < group ? S : start + group;
    const int count = (end - start + span - 1) / span;
    if (count == 1) continue;  // a lone slot is its group's result already
    __threadfence();  // this block's writes, visible to the whole GPU before it counts
    __syncthreads();
    int* ticket = top ? a.counters + w.counter : a.group_counters + w.partial_base / kTileRows + start + level;
    bool last = false;
    if (threadIdx.x == 0) {
      last = atomicAdd(ticket, 1) == count - 1;
      if (last) *ticket = 0;  // ready for the next launch
    }
    if (!__syncthreads_or(last)) return;
    __threadfence();
    merge_node<T, C, D>(a, w, tile_rows, start, count, span, top, smem);
    if (top) return;
  }
}

}  // namespace pa::ch10
