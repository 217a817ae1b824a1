// Chapter 10: decode items. An item of one new token with at most kDecodeRows query heads
// (a decode, G <= 8) runs chapter 9's tensor-core math instead of the 64-row tile: S = K Q^T
// puts 16 tokens on the mma's rows and the 8 heads on its columns, so a group of 4 wastes
// half of the product, not three quarters; and each warp streams its own 16-token slots
// through its own cp.async ring, as chapter 9's warps do, with no barrier between the warps
// until the end of the item (NOTES.md, v3). A short decode tile is a warp item instead: one
// warp streams all of it and writes the output, beside three others (NOTES.md, v5).
#pragma once

#include <cstdint>

#include "decode_kernel.cuh"  // chapter 9: TensorCoreMath (attend_tile_tc over 16 tokens)
#include "varlen_args.cuh"
#include "pa/async_copy.h"

namespace pa::ch10 {

// ANCHOR: decode_ring
// One warp's ring: kSlots slots of 16 tokens, K as [chunk][16][x] and V as [D][16] (chapter
// 9's layouts for a 16-token block, whatever the pool's block size), then the warp's P
// scratch. Slots per warp: what fits in the general path's ring, 2 to 4.
template <typename C, int D>
struct DecodeRing {
  static constexpr int kSlotElems = 2 * 16 * D;
  static constexpr int kSlotBytes = kSlotElems * int(sizeof(C));
  static constexpr int kScratchBytes = 8 * 16 * 2;  // P: [8 heads][16 tokens] of 16 bits
  __host__ __device__ static constexpr int slots(int ring_bytes) {
    const int n = ring_bytes / (kWarps * kSlotBytes);
    return n < 2 ? 2 : (n > 4 ? 4 : n);
  }
  __host__ __device__ static constexpr int bytes(int slots) { return kWarps * (slots * kSlotBytes + kScratchBytes); }
};
// ANCHOR_END: decode_ring

// The warps' states after an item whose tokens they split: o [warp][16 rows][kStateStride],
// then m and l [warp][16 rows] (floats). A row is D floats and 8 of padding: D alone is a
// multiple of 32 banks, so the 8 rows g of a fragment would share banks; 8 more floats put
// rows g and g + 1 eight banks apart, and a warp's 8-byte accesses run at full width.
template <int D>
inline constexpr int kStateStride = D + 8;

// The tensor-core math of a decode item: chapter 9's, 16 tokens x 8 heads per mma.
template <typename T, typename C, int D>
using DecodeMath = ch09::TensorCoreMath<T, C, D, 16, kDecodeRows>;

// This warp, part `part` of the `parts` warps that share the item, attends to the item's
// 16-token slots part, part + parts, part + 2 parts, ... through its own ring, and leaves
// its state (chapter 9's TcState: m and l in base e) in st. kWindow (chapter 12): the row
// sees no key before first_key; the slots start at load_from (the policy's first_load: at or
// before first_key, on a 16-token piece), and the keys before first_key are hidden.
template <typename T, typename C, int D, int kSlots, bool kWindow = false>
__device__ void stream_slots(const VarlenArgs<T, C>& a, const WorkItem& w, int q_start, int rows,
                             int part, int parts, unsigned char* smem,
                             typename DecodeMath<T, C, D>::State& st, int first_key = 0,
                             int load_from = 0) {
  using Math = DecodeMath<T, C, D>;
  using R = DecodeRing<C, D>;
  constexpr int x = CacheElem<C>::x, kChunks = D / x;
  constexpr int kParts = 16 / x;  // 16-byte V pieces per 16-token row: 2 (16-bit) or 1 (e4m3)
  const VarlenShape& s = a.s;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  const int G = s.num_q_heads / s.num_kv_heads, BS = s.block_size;
  const int bs_shift = 31 - __clz(BS);  // BS is a power of two: a shift, not a division
  const int* table = a.block_table + int64_t(w.seq) * s.max_blocks_per_seq;
  const int64_t block_elems = int64_t(s.num_kv_heads) * D * BS;
  const int64_t head_offset = int64_t(w.kv_head) * D * BS;
  C* ring = reinterpret_cast<C*>(smem) + warp * kSlots * R::kSlotElems;
  float* scratch = reinterpret_cast<float*>(smem + kWarps * kSlots * R::kSlotBytes +
                                            warp * R::kScratchBytes);
  int kv_begin = w.kv_begin;
  if constexpr (kWindow) kv_begin = load_from;

  // ANCHOR: decode_issue
  // Lane copies K of token lane % 16 (chunks lane / 16, + 2, ...) and V piece lane % kParts
  // of rows lane / kParts, + 32 / kParts, ...: one block-table entry each per slot.
  const int count = max(0, ((w.kv_end - kv_begin + 15) / 16 - part + parts - 1) / parts);
  struct Entries {
    int k, v;  // the blocks of this lane's K token and of its V piece's first token
  };
  auto fetch = [&](int i) {
    const int tok0 = kv_begin + 16 * (part + parts * i);
    const int k_tok = tok0 + lane % 16, v_tok = tok0 + lane % kParts * x;
    return Entries{i < count && k_tok < w.kv_end ? table[k_tok >> bs_shift] : 0,
                   i < count && v_tok < w.kv_end ? table[v_tok >> bs_shift] : 0};
  };
  auto issue = [&](int i, Entries e) {
    if (i < count) {
      const int tok0 = kv_begin + 16 * (part + parts * i);
      C* slot = ring + i % kSlots * R::kSlotElems;
      const uint4 zero{0u, 0u, 0u, 0u};
      const int tok = tok0 + lane % 16;
      uint4* k_dst = reinterpret_cast<uint4*>(slot) + lane % 16;  // chunk j at + 16 j
      if (tok < w.kv_end) {
        const C* src = a.k_pool + int64_t(e.k) * block_elems + head_offset + int64_t(tok & (BS - 1)) * x;
        for (int j = lane / 16; j < kChunks; j += 2) cp_async16(k_dst + 16 * j, src + int64_t(j) * BS * x);
      } else {
        for (int j = lane / 16; j < kChunks; j += 2) k_dst[16 * j] = zero;
      }
      const int v_tok = tok0 + lane % kParts * x;  // the piece's first token
      C* v_dst = slot + 16 * D + lane % kParts * x;  // row d at + 16 d
      if (v_tok < w.kv_end) {  // tokens past kv_end in the piece are masked by the math
        const C* src = a.v_pool + int64_t(e.v) * block_elems + head_offset + (v_tok & (BS - 1));
        for (int d = lane / kParts; d < D; d += 32 / kParts) cp_async16(v_dst + 16 * d, src + int64_t(d) * BS);
      } else {
        for (int d = lane / kParts; d < D; d += 32 / kParts) *reinterpret_cast<uint4*>(v_dst + 16 * d) = zero;
      }
    }
    cp_async_commit();  // also when empty: "kSlots - 1 groups pending" means slot i landed
  };
  // ANCHOR_END: decode_issue

  // The table entries are read a slot ahead of their copies. A copy waits for its entry, and
  // a load written after a copy starts after it: the first slots' entries are all read
  // before their copies, not one latency after another (a 32-token item pays one, not two).
  Entries first[kSlots - 1];
#pragma unroll
  for (int i = 0; i < kSlots - 1; ++i) first[i] = fetch(i);
#pragma unroll
  for (int i = 0; i < kSlots - 1; ++i) issue(i, first[i]);  // the first slots load while q does
  Entries next = fetch(kSlots - 1);
  Math math;
  const T* q = a.q + (int64_t(q_start) * s.num_q_heads + w.kv_head * G + w.row0 + g) * D;
  math.setup(q, g < rows, a.scale * (a.k_scale ? *a.k_scale : 1.f), scratch, st);
  for (int i = 0; i < count; ++i) {
    issue(i + kSlots - 1, next);  // into the slot attended last round (attend ends in __syncwarp)
    next = fetch(i + kSlots);
    cp_async_wait<kSlots - 1>();
    __syncwarp();
    const C* slot = ring + i % kSlots * R::kSlotElems;
    const int tok0 = 16 * (part + parts * i);  // from kv_begin
    if constexpr (kWindow)
      math.attend_from(slot, slot + 16 * D, min(16, w.kv_end - kv_begin - tok0), first_key - kv_begin - tok0, st);
    else
      math.attend(slot, slot + 16 * D, min(16, w.kv_end - kv_begin - tok0), st);
  }
  cp_async_wait<0>();
}

// A decode item of the thread block: warp w takes slots w, w + 4, ... and leaves its state
// in the merge layout of the general path: o [warp][16 rows][kStateStride], m and l [warp][16 rows],
// m in base 2. The caller merges the four warps.
template <typename T, typename C, int D, int kSlots, bool kWindow = false>
__device__ void decode_warps(const VarlenArgs<T, C>& a, const WorkItem& w, int q_start,
                             int rows, unsigned char* smem, float* so, float* sm, float* sl,
                             int first = 0, int load_from = 0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  typename DecodeMath<T, C, D>::State st;
  stream_slots<T, C, D, kSlots, kWindow>(a, w, q_start, rows, warp, kWarps, smem, st, first, load_from);
  __syncthreads();  // every warp is done with its ring: the states go where the rings were
  DecodeMath<T, C, D>{}.store(st, so + warp * 16 * kStateStride<D>, sm + warp * 16, sl + warp * 16,
                              kStateStride<D>);
  __syncwarp();
  if (lane < rows) sm[warp * 16 + lane] *= 1.4426950408889634f;  // base e -> base 2
}

// ANCHOR: warp_item
// A warp item (WorkItem::by_warp): a short decode tile, whole, that one warp runs alone --
// every slot of it through the warp's own ring, then straight to the output: no barrier,
// no merge. The four warps of a thread block run four such items side by side.
template <typename T, typename C, int D, int kSlots>
__device__ void warp_item(const VarlenArgs<T, C>& a, const WorkItem& w, unsigned char* smem) {
  const VarlenShape& s = a.s;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int G = s.num_q_heads / s.num_kv_heads;
  const int q_start = a.query_start_loc[w.seq];  // a decode: its one new token
  const int rows = tile_rows(1, G, w.row0);
  typename DecodeMath<T, C, D>::State st;
  stream_slots<T, C, D, kSlots>(a, w, q_start, rows, 0, 1, smem, st);
  // Lane (g, t) holds heads 2t, 2t + 1 (j) at dimensions 16 M + g and 16 M + g + 8.
  const float v_scale = a.v_scale ? *a.v_scale : 1.f;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (2 * t + j >= rows) continue;
    const float inv = st.l[j] == 0.f ? 0.f : v_scale / st.l[j];  // a NaN sum stays NaN
    T* dst = a.out + (int64_t(q_start) * s.num_q_heads + w.kv_head * G + w.row0 + 2 * t + j) * D + g;
#pragma unroll
    for (int M = 0; M < D / 16; ++M) {
      dst[16 * M] = from_float<T>(st.o[M][j] * inv);
      dst[16 * M + 8] = from_float<T>(st.o[M][2 + j] * inv);
    }
  }
}
// ANCHOR_END: warp_item

}  // namespace pa::ch10
