// Your exercise file. (Generated from solutions/13-hopper-async/stage_pipeline.cuh; instructors regenerate with tools/make_skeletons.py.)
// Chapter 13, exercise 2 of 3 (core): the producer's side of the barrier pipeline.
//
// Three mbarriers per stage: k_full and v_full (one arrival each: the producer's, plus the
// bytes its copies bring), and empty (one arrival per consumer warpgroup once its wgmmas have
// read the stage). Each use of a stage is one phase of each barrier: the n-th KV tile goes to
// stage n % kStages, and is that stage's phase n / kStages.
#pragma once

#include <cstdint>

#include "pa/dtype.h"
#include "pa/hopper.h"
#include "stage_layout.cuh"

namespace pa::ch13 {

template <typename T>
struct PrefillArgs {
  T* out;
  const T* q;
  const int *block_table, *seq_lens, *query_start_loc;
  const PrefillItem* items;
  float scale_log2;  // softmax scale x log2(e): the scores are exponentiated in base 2
  int num_q_heads, num_kv_heads, max_blocks_per_seq, num_blocks;
  int block_size;  // BS: 8, 16 or 32 tokens a page
};

// The D / 8 TMA boxes (one a 16-byte chunk of the page's tokens) of one K page into stage
// `stage`, page p of the stage, completing on k_full(stage), shared by the warp's lanes (every
// lane calls it): 128 boxes a stage are too many for one lane to issue. block: the pool's
// block (s.num_blocks: past the pool, zeros).
template <int D>
__device__ void load_k_page(const TensorMap& k_map, const Smem<D>& sm, int stage, int p, int bs,
                            int kv_head, int block, int lane) {
  for (int c = lane; c < D / 8; c += 32)
    tma_load_5d(sm.k_box(stage, p, c, bs), k_map, 0, 0, c, kv_head, block, sm.k_full(stage));
}

// Zeroes tokens [first, BS) of each of the D rows of one V page in shared memory (BS * 2-byte
// rows, swizzled as TMA wrote them).
template <typename T, int D>
__device__ void zero_page_tail(unsigned char* page, int bs, int first, int lane) {
  const uint32_t base = smem_address(page);
  const uint32_t row_bytes = uint32_t(bs) * 2, swizzle = row_bytes >= 32 ? row_bytes : 0;
  for (int i = lane; i < D * (bs - first); i += 32) {
    const int d = i / (bs - first), t = first + i % (bs - first);
    const uint32_t at = swizzle_address(base + uint32_t(d) * row_bytes + uint32_t(t) * 2, swizzle);
    *reinterpret_cast<T*>(page + (at - base)) = from_float<T>(0.f);
  }
}

// ANCHOR: tail_page
// The V page that holds the sequence's last token and slots past it (whatever the pool had
// there: NaN in the tests, and P = 0 times NaN is NaN) was loaded onto the patch barrier.
// The warp waits for it (phase patch_phase), zeroes the slots past the end, makes its writes
// visible to the async proxy (wgmma reads through it), and then makes the one arrival
// v_full(stage) still waits for. Returns the patch barrier's next phase.
template <typename T, int D>
__device__ unsigned finish_tail_page(const Smem<D>& sm, int stage, int p, int bs, int seq_len,
                                     unsigned patch_phase, int lane) {
  mbarrier_wait_parity(sm.patch(), patch_phase);
  zero_page_tail<T, D>(sm.v_box(stage, p, bs), bs, seq_len % bs, lane);
  fence_proxy_async();
  __syncwarp();
  if (lane == 0) mbarrier_arrive(sm.v_full(stage));
  return patch_phase ^ 1;
}
// ANCHOR_END: tail_page

// ANCHOR: producer
template <typename T, int D>
__device__ void produce(const TensorMap& k_map, const TensorMap& v_map, const PrefillArgs<T>& a,
                        const PrefillItem& it, const Smem<D>& sm, int seq_len, int lane) {
  using S = TileShape<D>;
  const int BS = a.block_size, pages = S::kTokens / BS;
  const uint32_t page_bytes = uint32_t(BS) * D * 2;  // of a K page, and of a V page
  const int tiles = (it.kv_end + S::kTokens - 1) / S::kTokens;
  const int* table = a.block_table + int64_t(it.seq) * a.max_blocks_per_seq;
  unsigned patch_phase = 0;
  for (int n = 0; n < tiles; ++n) {
    const int stage = n % S::kStages;
    const int first_page = n * pages;  // the tile's first page of the sequence
    // The page (of the tile's) that holds the sequence's last token and slots past it; -1 if
    // the tile has none.
    const int tail = seq_len % BS && seq_len / BS - first_page < pages ? seq_len / BS - first_page : -1;
    // TODO(ch13): fill stage `stage` with the tile's `pages` pages of K and of V, the whole
    //   warp calling (lane 0 announces bytes and issues V's copies, every lane calls
    //   load_k_page, every lane waits), without overwriting a stage a consumer still reads:
    //   - only once both consumer warpgroups have released the stage's previous use (empty);
    //     its first use waits for nothing;
    //   - k_full(stage) completes its phase when every K byte of the tile has landed, v_full
    //     when every V byte has, and the tail page (if any) was finished by
    //     finish_tail_page, which makes v_full's producer arrival itself: a tail page's
    //     copy completes on sm.patch(), not on v_full;
    //   - page first_page + p's K (load_k_page) and V (one tma_load_4d at (0, 0, kv_head,
    //     block) into sm.v_box) come from table[first_page + p]; a page that starts at or past
    //     seq_len has no table entry: load it from block a.num_blocks, past the pool, which
    //     TMA fills with zeros.
    //   Keep patch_phase for finish_tail_page.
    (void)k_map, (void)v_map, (void)table, (void)page_bytes, (void)tail, (void)first_page;
    (void)patch_phase, (void)lane;
  }
}
// ANCHOR_END: producer

}  // namespace pa::ch13
