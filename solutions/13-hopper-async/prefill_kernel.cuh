// Chapter 13: the warp-specialized prefill kernel (TMA + mbarrier + wgmma).
//
//   producer warp    for each KV tile: wait until its stage is free (`empty`), announce the
//                    bytes (expect_tx) and issue one TMA per page and 64 dims of K, one per
//                    page of V; they complete on `k_full` and `v_full`.
//   consumer WG c    rows 64 c .. 64 c + 63 of the tile. Q once into shared memory. Then for
//                    each KV tile: wait `k_full`, S = Q K^T (wgmma, one group), the mask and
//                    the online softmax in registers, P into A fragments, wait `v_full`,
//                    O += P V (wgmma from registers), wait, release the stage (`empty`).
// Shared memory: Q (128 rows), then kStages stages of K and V, then the barriers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "pa/ch13_hopper.h"
#include "pa/dtype.h"
#include "pa/fast_math.h"
#include "pa/hopper.h"

namespace pa::ch13 {

// ANCHOR: tile_shape
template <int D>
struct TileShape {
  static constexpr int kTokens = D > 128 ? 64 : 128;  // KV tokens per stage
  static constexpr int kStages = 2;
  static constexpr int kSlabs = D / 64;                // 128-byte (64-dim) slabs of a row
  static constexpr int kQBytes = kCtaRows * D * 2;
  static constexpr int kKBytes = kTokens * D * 2;      // K: [slab][token][64 dims], 128B swizzle
  static constexpr int kVBytes = kTokens * D * 2;      // V: [page][d][block_size tokens]
  static constexpr int kStageBytes = kKBytes + kVBytes;
  static constexpr int kBarriers = 3 * kStages + 1;
  // 1,024 bytes of slack: the dynamic buffer is rounded up to a 128-byte swizzle's atom.
  static constexpr size_t kSmem = 1024 + kQBytes + size_t(kStages) * kStageBytes + 8 * kBarriers;
};
// ANCHOR_END: tile_shape

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

// Where one thread block's shared memory goes.
template <int D>
struct Smem {
  using S = TileShape<D>;
  unsigned char* base;
  __device__ explicit Smem(unsigned char* raw) : base(smem_align(raw, 1024)) {}
  __device__ unsigned char* q(int wg) const { return base + wg * (S::kQBytes / 2); }
  __device__ unsigned char* k(int stage) const { return base + S::kQBytes + stage * S::kStageBytes; }
  __device__ unsigned char* v(int stage) const { return k(stage) + S::kKBytes; }
  __device__ uint64_t* bar(int i) const {
    return reinterpret_cast<uint64_t*>(base + S::kQBytes + S::kStages * S::kStageBytes) + i;
  }
  __device__ uint64_t* k_full(int s) const { return bar(s); }
  __device__ uint64_t* v_full(int s) const { return bar(S::kStages + s); }
  __device__ uint64_t* empty(int s) const { return bar(2 * S::kStages + s); }
  __device__ uint64_t* patch() const { return bar(3 * S::kStages); }
};

// ---- The producer -------------------------------------------------------------------------

// Zeroes tokens [first, BS) of each of the D rows of one V page in shared memory (BS * 2-byte
// rows, swizzled as TMA wrote them): the slots past the sequence's end, which hold whatever
// the pool had (NaN in the tests), and P = 0 times NaN is NaN.
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

// ANCHOR: producer
template <typename T, int D>
__device__ void produce(const TensorMap& k_map, const TensorMap& v_map, const PrefillArgs<T>& a,
                        const PrefillItem& it, const Smem<D>& sm, int seq_len, int lane) {
  using S = TileShape<D>;
  const int BS = a.block_size, kPages = S::kTokens / BS;
  const uint32_t kPageBytes = uint32_t(BS) * D * 2;  // of K, and of V
  const int tiles = (it.kv_end + S::kTokens - 1) / S::kTokens;
  const int* table = a.block_table + int64_t(it.seq) * a.max_blocks_per_seq;
  unsigned patch_phase = 0;
  for (int n = 0; n < tiles; ++n) {
    const int s = n % S::kStages;
    mbarrier_wait_parity(sm.empty(s), ((n / S::kStages) & 1) ^ 1);
    const int first_page = n * kPages;
    // The page holding the sequence's last token, when it also holds slots past it.
    const int tail_page = seq_len % BS ? seq_len / BS - first_page : -1;
    const bool tail = tail_page >= 0 && tail_page < kPages;
    if (lane == 0) {
      mbarrier_arrive_expect_tx(sm.k_full(s), kPages * kPageBytes);
      if (tail)
        mbarrier_expect_tx(sm.v_full(s), (kPages - 1) * kPageBytes);
      else
        mbarrier_arrive_expect_tx(sm.v_full(s), kPages * kPageBytes);
      for (int p = 0; p < kPages; ++p) {
        // A page past the sequence's end: a block coordinate past the pool's, so that TMA
        // fills it with zeros (the table has no entry for it).
        const int page = first_page + p;
        const int block = page * BS < seq_len ? table[page] : a.num_blocks;
        for (int slab = 0; slab < S::kSlabs; ++slab)
          tma_load_5d(sm.k(s) + slab * (S::kTokens * 128) + p * (BS * 128), k_map, 0, 8 * slab, 0,
                      it.kv_head, block, sm.k_full(s));
        if (p == tail_page) mbarrier_arrive_expect_tx(sm.patch(), kPageBytes);
        tma_load_4d(sm.v(s) + p * kPageBytes, v_map, 0, 0, it.kv_head, block,
                    p == tail_page ? sm.patch() : sm.v_full(s));
      }
    }
    if (tail) {
      // The tail page lands on its own barrier; the warp zeroes its slots past the end, makes
      // its writes visible to wgmma (the async proxy), and only then arrives on v_full.
      mbarrier_wait_parity(sm.patch(), patch_phase);
      patch_phase ^= 1;
      zero_page_tail<T, D>(sm.v(s) + tail_page * kPageBytes, BS, seq_len % BS, lane);
      fence_proxy_async();
      __syncwarp();
      if (lane == 0) mbarrier_arrive(sm.v_full(s));
    }
  }
}
// ANCHOR_END: producer

// ---- The consumers ------------------------------------------------------------------------

// Q's 64 rows of warpgroup wg into shared memory, K-major with the 128-byte swizzle (as a
// TMA box of 64 dims would put them), rows past the sequence's as zeros; then the proxy
// fence, since wgmma reads them through the async proxy.
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
    const uint32_t at =
        swizzle_address(base + uint32_t((c / 8) * 64 * 128 + r * 128 + (c % 8) * 16), 128);
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

// ANCHOR: consumer
template <typename T, int D>
__device__ void consume(const PrefillArgs<T>& a, const PrefillItem& it, const Smem<D>& sm, int wg,
                        int seq_len, int n_new, int q_start) {
  using S = TileShape<D>;
  constexpr int kTok = S::kTokens;
  const int t = threadIdx.x % 128;  // the thread's index in its warpgroup
  const int G = a.num_q_heads / a.num_kv_heads;
  load_q<T, D>(a, it, sm.q(wg), wg, n_new, q_start, t);
  named_barrier_sync(1 + wg, 128);

  // The thread's two rows (WgmmaAcc's row(i, t) for i % 4 < 2 and >= 2) and their positions.
  int row[2], pos[2];
  #pragma unroll
  for (int j = 0; j < 2; ++j) {
    row[j] = it.row0 + 64 * wg + 16 * (t / 32) + (t % 32) / 4 + 8 * j;
    const int token = row[j] / G < n_new ? row[j] / G : n_new - 1;
    pos[j] = seq_len - n_new + token;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  WgmmaAcc<D> o;
  #pragma unroll
  for (float& x : o.d) x = 0.f;

  const unsigned char* q_s = sm.q(wg);
  const int tiles = (it.kv_end + kTok - 1) / kTok;
  for (int n = 0; n < tiles; ++n) {
    const int s = n % S::kStages;
    const unsigned phase = (n / S::kStages) & 1;

    // S = Q K^T: D / 16 k-steps of 16 dims, 32 bytes into a slab's swizzled rows.
    mbarrier_wait_parity(sm.k_full(s), phase);
    WgmmaAcc<kTok> sc;
    wgmma_fence();
    #pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const int slab = ks / 4, off = (ks % 4) * 32;
      const uint64_t qd = wgmma_descriptor(q_s + slab * (64 * 128) + off, 16, 1024, WgmmaSwizzle::B128);
      const uint64_t kd =
          wgmma_descriptor(sm.k(s) + slab * (kTok * 128) + off, 16, 1024, WgmmaSwizzle::B128);
      wgmma_mma_async<T>(sc, qd, kd, ks > 0);
    }
    wgmma_commit_group();
    wgmma_wait_group<0>(sc);

    // The mask (a key past the row's position, the slots past the sequence's end included),
    // then the online softmax in base 2: each row's 4 threads share its maximum and rescale.
    const int t0 = n * kTok;
    float mx[2] = {m[0], m[1]};
    #pragma unroll
    for (int i = 0; i < WgmmaAcc<kTok>::kRegs; ++i) {
      const int j = (i / 2) % 2, key = t0 + WgmmaAcc<kTok>::col(i, t);
      sc.d[i] = key <= pos[j] ? sc.d[i] * a.scale_log2 : -INFINITY;
      mx[j] = fmaxf(mx[j], sc.d[i]);
    }
    float corr[2];
    #pragma unroll
    for (int j = 0; j < 2; ++j) {
      mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 1));
      mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 2));
      corr[j] = mx[j] == -INFINITY ? 1.f : exp2f(m[j] - mx[j]);
      m[j] = mx[j];
      l[j] *= corr[j];
    }
    #pragma unroll
    for (int i = 0; i < WgmmaAcc<D>::kRegs; ++i) o.d[i] *= corr[(i / 2) % 2];
    uint32_t p[kTok / 16][4];
    #pragma unroll
    for (int i = 0; i < WgmmaAcc<kTok>::kRegs; i += 2) {
      const int j = (i / 2) % 2;
      const float e0 = m[j] == -INFINITY ? 0.f : exp2f(sc.d[i] - m[j]);
      const float e1 = m[j] == -INFINITY ? 0.f : exp2f(sc.d[i + 1] - m[j]);
      l[j] += e0 + e1;
      p[i / 8][(i % 8) / 2] = pack_pair<T>(e0, e1);  // A's fragment: a[r] = d[8 k + 2 r, + 1]
    }

    // O += P V: one k-step of 16 tokens at a time, from V's pages (BS * 2-byte rows).
    mbarrier_wait_parity(sm.v_full(s), phase);
    wgmma_fence();
    const int BS = a.block_size;
    #pragma unroll
    for (int ks = 0; ks < kTok / 16; ++ks) {
      uint64_t vd;
      if (BS >= 16) {  // rows of BS * 2 bytes, swizzled by as many: 8 rows (d) an atom
        const int page = ks * 16 / BS, off = (ks * 16 % BS) * 2;
        vd = wgmma_descriptor(sm.v(s) + page * (BS * D * 2) + off, 16, 8 * BS * 2,
                              static_cast<WgmmaSwizzle>(BS * 2));
      } else {  // two 8-token pages: core matrices of 8 d x 16 bytes, the pages LBO apart
        vd = wgmma_descriptor(sm.v(s) + 2 * ks * (BS * D * 2), BS * D * 2, 128, WgmmaSwizzle::None);
      }
      wgmma_mma_async_rs<T>(o, p[ks], vd);
    }
    wgmma_commit_group();
    wgmma_wait_group<0>(o);
    if (t == 0) mbarrier_arrive(sm.empty(s));  // both operands read: the stage is free
  }

  // The row sums (each thread summed its own columns), then O / l into the rows this tile has.
  #pragma unroll
  for (int j = 0; j < 2; ++j) {
    l[j] += __shfl_xor_sync(0xffffffffu, l[j], 1);
    l[j] += __shfl_xor_sync(0xffffffffu, l[j], 2);
  }
  #pragma unroll
  for (int i = 0; i < WgmmaAcc<D>::kRegs; i += 2) {
    const int j = (i / 2) % 2;
    if (row[j] >= n_new * G) continue;
    const int64_t token = q_start + row[j] / G, head = int64_t(it.kv_head) * G + row[j] % G;
    const float inv = 1.f / l[j];
    *reinterpret_cast<uint32_t*>(a.out + (token * a.num_q_heads + head) * D + WgmmaAcc<D>::col(i, t)) =
        pack_pair<T>(o.d[i] * inv, o.d[i + 1] * inv);
  }
}
// ANCHOR_END: consumer

template <typename T, int D>
__global__ void __launch_bounds__(384, 1)
    prefill_kernel(const __grid_constant__ TensorMap k_map, const __grid_constant__ TensorMap v_map,
                   PrefillArgs<T> a) {
  using S = TileShape<D>;
  PA_DYNAMIC_SHARED(unsigned char, raw);
  const Smem<D> sm(raw);
  const PrefillItem it = a.items[blockIdx.x];
  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      mbarrier_init(sm.k_full(s), 1);
      mbarrier_init(sm.v_full(s), 1);
      mbarrier_init(sm.empty(s), 2);  // one arrival per consumer warpgroup
    }
    mbarrier_init(sm.patch(), 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  const int seq_len = a.seq_lens[it.seq], q_start = a.query_start_loc[it.seq];
  const int n_new = a.query_start_loc[it.seq + 1] - q_start;
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    setmaxnreg_dec<40>();  // the producer needs few registers: the consumers take them
    if (threadIdx.x < 32) produce<T, D>(k_map, v_map, a, it, sm, seq_len, threadIdx.x);
  } else {
    setmaxnreg_inc<232>();
    consume<T, D>(a, it, sm, wg - 1, seq_len, n_new, q_start);
  }
}

}  // namespace pa::ch13
