// Your exercise file. (Generated from solutions/13-hopper-async/stage_layout.cuh; instructors regenerate with tools/make_skeletons.py.)
// Chapter 13, exercise 1 of 3 (core): where a stage's bytes go. TMA writes the stage (a
// tensor map says how it walks the pool and how it swizzles), wgmma reads it (a matrix
// descriptor says where each 8-row group and each k-step is); the two must agree byte for byte.
//
// One thread block's shared memory: Q (128 rows), then kStages stages of K and V, then the
// barriers. A stage holds kTokens tokens of one KV head, its pages side by side:
//   K  [chunk][token][8 dims]: D / 8 chunks, each the stage's kTokens tokens of 16 bytes (as
//      a page stores them, [D / 8][BS][8], but with the stage's tokens together): the
//      K-major tile of S = Q K^T's B operand (n = token, k = dim) without a swizzle, its
//      8 x 16-byte core matrices each 128 contiguous bytes.
//   V  [page][d][BS tokens]: each page as the pool stores it, D rows of BS * 2 bytes: the
//      K-major tile of O += P V's B operand (n = d, k = token), swizzled by its row's bytes.
// Why not K token-major, one 128-byte swizzled row of 64 dims a token, as Q is? A token's 64
// dims are 8 chunks BS x 16 bytes apart in the pool, and a swizzled TMA box's inner extent
// must be the swizzle span: the GPU pads a shorter inner row to the span (measured on the
// H100: the 16-byte chunks landed 128 bytes apart), so no box gathers them into one row.
#pragma once

#include <cstdint>
#include <type_traits>

#include "pa/ch10_varlen.h"
#include "pa/ch13_hopper.h"
#include "pa/hopper.h"

namespace pa::ch13 {

// ANCHOR: tile_shape
template <int D>
struct TileShape {
  static constexpr int kTokens = D > 128 ? 64 : 128;  // KV tokens per stage
  // Stages in the ring: as many as fit beside Q in 227 KB (4 at D 64, 3 at D 128, 2 at D 256).
  static constexpr int kStages = D == 64 ? 4 : D == 128 ? 3 : 2;
  static constexpr int kQBytes = kCtaRows * D * 2;
  static constexpr int kKBytes = kTokens * D * 2;
  static constexpr int kVBytes = kTokens * D * 2;
  static constexpr int kStageBytes = kKBytes + kVBytes;
  static constexpr int kBarriers = 3 * kStages + 1;
  // 1,024 bytes of slack: the dynamic buffer is rounded up to a 128-byte swizzle's atom.
  static constexpr size_t kSmem = 1024 + kQBytes + size_t(kStages) * kStageBytes + 8 * kBarriers;
};
// ANCHOR_END: tile_shape

// ANCHOR: smem
// Where one thread block's shared memory goes.
template <int D>
struct Smem {
  using S = TileShape<D>;
  unsigned char* base;
  __device__ explicit Smem(unsigned char* raw) : base(smem_align(raw, 1024)) {}
  __device__ unsigned char* q(int wg) const { return base + wg * (S::kQBytes / 2); }
  __device__ unsigned char* k(int stage) const { return base + S::kQBytes + stage * S::kStageBytes; }
  __device__ unsigned char* v(int stage) const { return k(stage) + S::kKBytes; }
  // Where the TMA box of page p (0 .. kTokens / BS - 1) and 16-byte chunk c (dims 8 c ..
  // 8 c + 7) of K lands, and page p of V.
  __device__ unsigned char* k_box(int stage, int p, int c, int bs) const {
    return k(stage) + c * (S::kTokens * 16) + p * (bs * 16);
  }
  __device__ unsigned char* v_box(int stage, int p, int bs) const { return v(stage) + p * (bs * D * 2); }
  __device__ uint64_t* bar(int i) const {
    return reinterpret_cast<uint64_t*>(base + S::kQBytes + S::kStages * S::kStageBytes) + i;
  }
  __device__ uint64_t* k_full(int s) const { return bar(s); }
  __device__ uint64_t* v_full(int s) const { return bar(S::kStages + s); }
  __device__ uint64_t* empty(int s) const { return bar(2 * S::kStages + s); }
  __device__ uint64_t* patch() const { return bar(3 * S::kStages); }
};
// ANCHOR_END: smem

// Where 16-byte chunk c (dims 8 c .. 8 c + 7) of row r of a warpgroup's Q sits, before the
// 128-byte swizzle: slabs of 64 rows x 128 bytes (64 dims).
__host__ __device__ constexpr uint32_t q_chunk_offset(int r, int c) {
  return uint32_t((c / 8) * 64 * 128 + r * 128 + (c % 8) * 16);
}

// Q's descriptor at k-step ks (16 dims) of warpgroup wg's 64 rows, laid out by q_chunk_offset
// and swizzled by 128 bytes (load_q writes them so); each k-step 32 bytes further.
__device__ inline uint64_t q_desc(const unsigned char* q_s, int ks) {
  return wgmma_descriptor(q_s + (ks / 4) * (64 * 128) + (ks % 4) * 32, 16, 1024, WgmmaSwizzle::B128);
}

template <typename T>
TmaDtype tma_dtype() {
  return std::is_same<T, half>::value ? TmaDtype::F16 : TmaDtype::BF16;
}

// ANCHOR: layout_exercise
// TODO(ch13): the four functions below, so that TMA's writes and wgmma's reads agree.
//   k_map_spec: the tensor map over chapter 2's K pool ([block][kv head][D / 8][BS][8],
//     k_pool's elements) whose box at coordinates (0, 0, c, kv_head, block) brings chunk c
//     (dims 8 c .. 8 c + 7) of page `block`'s BS tokens, BS x 16 bytes, to Smem::k_box
//     (no swizzle). A block coordinate of s.num_blocks (past the pool) must bring zeros.
//     allocation_bytes: the pool's bytes.
//   v_map_spec: the map over the V pool ([block][kv head][D][BS]) whose box at (0, 0,
//     kv_head, block) brings one page as D rows of BS tokens, landing at Smem::v_box,
//     swizzled by the row's bytes (none for BS = 8, whose 16-byte rows need none).
//   k_desc: the descriptor of K's stage `stage` at k-step ks (dims 16 ks .. 16 ks + 15) for
//     S = Q K^T, n = the stage's kTokens tokens (q_desc above is Q's).
//   v_desc: the descriptor of V's stage `stage` at k-step ks (tokens 16 ks .. 16 ks + 15)
//     for O += P V, n = the D dims; for BS = 8 one k-step spans two pages.
//   include/pa/hopper/wgmma.h gives the canonical layouts (where element (r, k) of a K-major
//   tile sits for each swizzle) and wgmma_descriptor(tile, LBO, SBO, swizzle).
template <typename T>
TensorMapSpec k_map_spec(const T* k_pool, const ch10::VarlenShape& s) {
  PA_TODO("ch13");
}
template <typename T>
TensorMapSpec v_map_spec(const T* v_pool, const ch10::VarlenShape& s) {
  PA_TODO("ch13");
}
template <int D>
__device__ uint64_t k_desc(const Smem<D>& sm, int stage, int ks) {
  return 0;
}
template <int D>
__device__ uint64_t v_desc(const Smem<D>& sm, int stage, int ks, int bs) {
  return 0;
}
// ANCHOR_END: layout_exercise

}  // namespace pa::ch13
