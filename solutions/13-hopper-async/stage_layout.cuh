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
// HINT(1): TMA writes a box densely, dimension 0 fastest; a swizzled box's inner extent must
//   be the swizzle span (encode_tensor_map refuses anything else). A swizzle works on shared
//   addresses, so it agrees wherever both sides start tiles on atoms. wgmma's SBO is the
//   distance between groups of 8 rows (n), LBO (without a swizzle) between 16-byte columns
//   of k.
// HINT(2): K's map walks the pool as it is stored: dims (8 elements, BS tokens, D / 8 chunks,
//   Hkv, blocks), box (8, BS, 1, 1, 1), no swizzle. In K's stage a chunk's kTokens tokens
//   are 16 bytes apart, chunks kTokens x 16 bytes apart, a k-step two chunks. V's map: dims
//   (BS, D, Hkv, blocks), box (BS, D, 1, 1). Swizzled K-major (V): SBO = 8 rows x the row's
//   bytes; a k-step moves the start 32 bytes along the row. V with BS = 8: no swizzle, 8-row
//   groups 128 bytes apart (SBO), the next page (the next 8 tokens of k) LBO = 8 x D x 2
//   bytes on.
// HINT(3): k_map_spec: rank 5, dims {8, BS, D/8, Hkv, num_blocks}, strides {16, BS*16,
//   D*BS*2, Hkv*D*BS*2}, box {8, BS, 1, 1, 1}, no swizzle. v_map_spec: rank 4, dims {BS, D,
//   Hkv, num_blocks}, strides {BS*2, D*BS*2, Hkv*D*BS*2}, box {BS, D, 1, 1}, swizzle BS*2
//   bytes (None for 8). k_desc: wgmma_descriptor(k(stage) + 2 ks * kTokens * 16, kTokens *
//   16, 128, None). v_desc, BS >= 16: page = 16 ks / BS, wgmma_descriptor(v_box(stage, page)
//   + (16 ks % BS) * 2, 16, 8 * BS * 2, swizzle BS * 2); BS = 8: wgmma_descriptor(
//   v_box(stage, 2 ks), BS * D * 2, 128, None).
// BEGIN SOLUTION
// STUB: template <typename T>
// STUB: TensorMapSpec k_map_spec(const T* k_pool, const ch10::VarlenShape& s) {
// STUB:   PA_TODO("ch13");
// STUB: }
// STUB: template <typename T>
// STUB: TensorMapSpec v_map_spec(const T* v_pool, const ch10::VarlenShape& s) {
// STUB:   PA_TODO("ch13");
// STUB: }
// STUB: template <int D>
// STUB: __device__ uint64_t k_desc(const Smem<D>& sm, int stage, int ks) {
// STUB:   return 0;
// STUB: }
// STUB: template <int D>
// STUB: __device__ uint64_t v_desc(const Smem<D>& sm, int stage, int ks, int bs) {
// STUB:   return 0;
// STUB: }
template <typename T>
TensorMapSpec k_map_spec(const T* k_pool, const ch10::VarlenShape& s) {
  const uint64_t bs = uint64_t(s.block_size), d = uint64_t(s.head_size), hkv = uint64_t(s.num_kv_heads);
  TensorMapSpec m;
  m.dtype = tma_dtype<T>();
  m.rank = 5;
  m.global = k_pool;
  const uint64_t dims[5] = {8, bs, d / 8, hkv, uint64_t(s.num_blocks)};
  const uint64_t strides[4] = {16, bs * 16, d * bs * 2, hkv * d * bs * 2};
  const uint32_t box[5] = {8, uint32_t(bs), 1, 1, 1};  // one chunk of one page's tokens
  for (int i = 0; i < 5; ++i) m.dims[i] = dims[i], m.box[i] = box[i];
  for (int i = 0; i < 4; ++i) m.strides[i] = strides[i];
  m.swizzle = TmaSwizzle::None;
  m.allocation_bytes = size_t(s.num_blocks) * hkv * d * bs * 2;
  return m;
}

template <typename T>
TensorMapSpec v_map_spec(const T* v_pool, const ch10::VarlenShape& s) {
  const uint64_t bs = uint64_t(s.block_size), d = uint64_t(s.head_size), hkv = uint64_t(s.num_kv_heads);
  TensorMapSpec m;
  m.dtype = tma_dtype<T>();
  m.rank = 4;
  m.global = v_pool;
  const uint64_t dims[4] = {bs, d, hkv, uint64_t(s.num_blocks)};
  const uint64_t strides[3] = {bs * 2, d * bs * 2, hkv * d * bs * 2};
  const uint32_t box[4] = {uint32_t(bs), uint32_t(d), 1, 1};
  for (int i = 0; i < 4; ++i) m.dims[i] = dims[i], m.box[i] = box[i];
  for (int i = 0; i < 3; ++i) m.strides[i] = strides[i];
  m.swizzle = bs == 8 ? TmaSwizzle::None : static_cast<TmaSwizzle>(bs * 2);
  m.allocation_bytes = size_t(s.num_blocks) * hkv * d * bs * 2;
  return m;
}

template <int D>
__device__ uint64_t k_desc(const Smem<D>& sm, int stage, int ks) {
  // Chunks 2 ks and 2 ks + 1: core matrices of 8 tokens x 16 bytes, the next chunk LBO on.
  constexpr uint32_t chunk_bytes = TileShape<D>::kTokens * 16;
  return wgmma_descriptor(sm.k(stage) + 2 * ks * chunk_bytes, chunk_bytes, 128, WgmmaSwizzle::None);
}

template <int D>
__device__ uint64_t v_desc(const Smem<D>& sm, int stage, int ks, int bs) {
  if (bs >= 16)  // rows of bs * 2 bytes, swizzled by as many: 8 rows (d) an atom
    return wgmma_descriptor(sm.v_box(stage, ks * 16 / bs, bs) + (ks * 16 % bs) * 2, 16, 8 * bs * 2,
                            static_cast<WgmmaSwizzle>(bs * 2));
  // Two 8-token pages: core matrices of 8 d x 16 bytes, the second page LBO further.
  return wgmma_descriptor(sm.v_box(stage, 2 * ks, bs), uint32_t(bs * D * 2), 128, WgmmaSwizzle::None);
}
// END SOLUTION
// ANCHOR_END: layout_exercise

}  // namespace pa::ch13
