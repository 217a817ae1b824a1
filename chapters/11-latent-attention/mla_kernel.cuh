// Your exercise file. (Generated from solutions/11-latent-attention/mla_kernel.cuh; instructors regenerate with tools/make_skeletons.py.)
// Chapter 11, exercises 3 and 4 of 4 (the scores; P V) and the stretch exercise (the merge of
// split tiles): the absorbed MLA decode kernel. Chapter 10's varlen kernel, wider: one
// thread block runs the work items chapter 10's planner dealt it, one after another; an item
// is a tile of 64 query rows (row i * h_q + h: new token i, head h) of one sequence over a
// chunk of its latent rows.
// Each KV row is loaded once into shared memory (cp.async, a ring of stages) and serves
// every row of the tile -- every head, every new token -- for both products:
//
//   S = Q K^T    K is the whole 576-wide row [c_kv | k_rope]      36 k-steps of mma.sync
//   P = softmax  online, per row, in base 2; causal and chunk-end masks
//   O += P V     V is the first 512 columns of the SAME rows        the output stays latent
//
// ANCHOR: design
// The width is what changes the design. A 64-row tile's fp32 output is 64 x 512: at
// chapter 10's four warps (16 rows each) that is 256 registers a thread for O alone, past
// the 255 a thread may have. So eight warps, as 4 row groups x 2 column halves: warp w owns
// rows 16 (w % 4) .. + 15 and output columns 256 (w / 4) .. + 255 -- 128 accumulators a
// thread. The two warps of a row group need the same P, so they split the scores instead:
// each computes its rows' scores for 16 of the stage's 32 tokens (full 576-wide dot
// products) and puts them in shared memory (S, fp32); after a barrier both read the full
// 16 x 32 block and run the same online softmax (the same inputs in the same order: the
// same m and l in both, no exchange needed).
// Shared memory (fp16/bf16): the tile's queries, 64 rows; a ring of 3 stages of 32 latent
// rows; S. Rows are padded from 576 to 584 elements (1,168 bytes = 292 words, 4 mod 32):
// the 8 rows an mma fragment reads at once fall in different banks. Queries live in shared
// memory, not registers: 16 rows x 576 of A fragments would be 144 registers a thread,
// beside the 128 of O.
// ANCHOR_END: design
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "reduce_partitions.cuh"  // chapter 5: merge_partitions
#include "pa/async_copy.h"
#include "pa/ch11_mla.h"
#include "pa/fast_math.h"
#include "pa/mma.h"

namespace pa::ch11 {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 3;                         // ring depth
constexpr int kSmemRow = kRowWidth + 8;            // a row in shared memory: 576 + 8 of padding
constexpr int kSRow = kStageTokens + 4;            // a row of S (floats), padded
constexpr int kColsPerWarp = kLatentDim / 2;       // 256 output columns a warp
constexpr int kNTiles = kColsPerWarp / 8;          // 32 mma n-tiles of output a warp
constexpr int kKSteps = kRowWidth / 16;            // 36 k-steps of 16 in a score
constexpr int kRowChunks = kRowWidth / 8;          // 72 16-byte chunks in a row
constexpr size_t kQBytes = size_t(kTileRows) * kSmemRow * 2;           // 74,752
constexpr size_t kStageBytes = size_t(kStageTokens) * kSmemRow * 2;    // 37,376
constexpr size_t kRingBytes = kStages * kStageBytes;                   // 112,128
constexpr size_t kSBytes = size_t(kTileRows) * kSRow * sizeof(float);  // 9,216
constexpr size_t kSmemBytes = kQBytes + kRingBytes + kSBytes;          // 196,096
static_assert(kSmemBytes <= 227 * 1024, "one thread block fits an H100 SM's shared memory");

// Everything a launch passes to the kernel.
template <typename T>
struct MlaArgs {
  T* out;                    // [num_tokens, h_q, 512]
  const T* q;                // [num_tokens, h_q, 576]
  const T* latent_pool;      // [num_blocks, block_size, 576]
  const int *block_table, *seq_lens, *query_start_loc;
  const ch10::WorkItem* items;  // item k of thread block c at [k * gridDim.x + c]
  int rounds;                   // the most items of any thread block
  float *max_logits, *exp_sums, *partial_out;  // split tiles' partial results
  int* counters;                               // split tiles' tickets (left at zero)
  float scale;
  int num_q_heads, block_size, max_blocks_per_seq;
};

// Two 16-bit values of shared memory, adjacent: one register of an mma fragment.
template <typename T>
__device__ inline uint32_t load_pair(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
// Two 16-bit values from two places (a column of V: two rows apart), the first in the low bits.
template <typename T>
__device__ inline uint32_t gather_pair(const T* lo, const T* hi) {
  uint16_t a, b;
  std::memcpy(&a, lo, 2);
  std::memcpy(&b, hi, 2);
  return uint32_t(a) | (uint32_t(b) << 16);
}

// One work item (see ch10::WorkItem). Every thread of the block calls it with the same item.
template <typename T>
__device__ void attend_item(const MlaArgs<T>& a, const ch10::WorkItem& w, unsigned char* smem) {
  T* qs = reinterpret_cast<T*>(smem);                                      // [64][kSmemRow]
  T* ring = reinterpret_cast<T*>(smem + kQBytes);                          // [kStages][32][kSmemRow]
  float* ss = reinterpret_cast<float*>(smem + kQBytes + kRingBytes);       // [64][kSRow]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rg = warp % 4;    // row group: rows 16 rg .. 16 rg + 15 of the tile
  const int half = warp / 4;  // output columns 256 half ..; scores of tokens 16 half .. of a stage
  const int G = a.num_q_heads;
  const int q_start = a.query_start_loc[w.seq];
  const int n_new = a.query_start_loc[w.seq + 1] - q_start;
  const int seq_len = a.seq_lens[w.seq];
  const int rows = ch10::tile_rows(n_new, G, w.row0);

  // This lane's two rows of its group, g and g + 8: new token, head, and the position the
  // token sits at (chapter 10's row numbering); pos -1 for a row past the tile.
  int token[2], head[2], pos[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int local = 16 * rg + g + 8 * r, row = w.row0 + local;
    token[r] = row / G;
    head[r] = row % G;
    pos[r] = local < rows ? seq_len - n_new + token[r] : -1;
  }

  const int BS = a.block_size, bs_shift = 31 - __clz(BS);
  const int* table = a.block_table + int64_t(w.seq) * a.max_blocks_per_seq;
  const int num_stages = (w.kv_end - w.kv_begin + kStageTokens - 1) / kStageTokens;
  const uint4 zero{0u, 0u, 0u, 0u};

  __syncthreads();  // the previous item is done with shared memory
  // The tile's queries, whole rows (zeros past the tile): committed with stage 0's group.
  for (int i = threadIdx.x; i < kTileRows * kRowChunks; i += kThreads) {
    const int local = i / kRowChunks, c = i % kRowChunks;
    T* dst = qs + local * kSmemRow + c * 8;
    if (local < rows) {
      const int row = w.row0 + local;
      cp_async16(dst, a.q + (int64_t(q_start + row / G) * G + row % G) * kRowWidth + c * 8);
    } else {
      *reinterpret_cast<uint4*>(dst) = zero;
    }
  }
  // ANCHOR: load_stage
  // Stage st: latent rows kv_begin + 32 st .. of the chunk, whole (576 wide: K and V at once),
  // each row 72 copies of 16 bytes from its block's slot. Rows past the chunk's end are
  // zeroed (a read of shared memory nothing wrote is a bug, and 0 * NaN would be NaN). One
  // cp.async group per stage, also when there is nothing to copy.
  auto issue = [&](int st) {
    if (st < num_stages) {
      const int tok0 = w.kv_begin + st * kStageTokens;
      T* stage = ring + (st % kStages) * kStageTokens * kSmemRow;
      for (int i = threadIdx.x; i < kStageTokens * kRowChunks; i += kThreads) {
        const int tk = i / kRowChunks, c = i % kRowChunks, tok = tok0 + tk;
        T* dst = stage + tk * kSmemRow + c * 8;
        if (tok < w.kv_end) {
          const int64_t slot = int64_t(table[tok >> bs_shift]) * BS + (tok & (BS - 1));
          cp_async16(dst, a.latent_pool + slot * kRowWidth + c * 8);
        } else {
          *reinterpret_cast<uint4*>(dst) = zero;
        }
      }
    }
    cp_async_commit();
  };
  // ANCHOR_END: load_stage
  for (int st = 0; st < kStages - 1; ++st) issue(st);

  // The running state of the lane's two rows: max and exp-sum (base 2; this lane's share of
  // the sum, the row's four lanes are added at the end), and the output o[n][i]: row
  // g + 8 (i / 2), column 256 half + 8 n + 2 t + i % 2.
  float o[kNTiles][4];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[n][i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  const float scale_log2 = a.scale * 1.4426950408889634f;
  const T* q_rows = qs + (16 * rg + g) * kSmemRow;  // row g of the group; row g + 8 is 8 rows on
  float* s_rows = ss + (16 * rg) * kSRow;            // the group's 16 rows of S

  for (int st = 0; st < num_stages; ++st) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage st has landed; everyone is done with stage st - 1 and with S
    issue(st + kStages - 1);
    const int tok0 = w.kv_begin + st * kStageTokens;
    const T* kv = ring + (st % kStages) * kStageTokens * kSmemRow;

    // ANCHOR: scores
    // sc[j][i]: the score of row g + 8 (i / 2) of the group against the stage's latent row
    // 16 half + 8 j + 2 t + i % 2 (an mma accumulator's layout, include/pa/mma.h).
    float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    // TODO(ch11): on return, for j = 0, 1 and i = 0 .. 3, sc[j][i] is row g + 8 (i / 2) of this
    //   warp's row group (its absorbed query, q_rows: 576 values) dotted with the stage's
    //   latent row tk = 16 half + 8 j + 2 t + i % 2 (kv + tk * kSmemRow: 576 values), on the
    //   tensor cores (mma_16x8x16<T>), times scale_log2 -- or exactly -INFINITY if the row
    //   does not attend that key. The key sits at position kpos = tok0 + tk of the sequence;
    //   a row attends the keys of this item's chunk, [w.kv_begin, w.kv_end), at or before its
    //   own position pos[i / 2] (pos -1: none). Stage rows past the chunk's end hold zeros.
    //   (Shared memory rows are kSmemRow elements apart, kRowWidth of them used.)
    (void)tok0;
    (void)scale_log2;
    (void)q_rows;
    // ANCHOR_END: scores
    // To S, where the row group's other warp reads them too.
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) s_rows[(g + 8 * (i / 2)) * kSRow + 16 * half + 8 * j + 2 * t + i % 2] = sc[j][i];
    __syncthreads();  // S holds the stage's scores, both halves of every row group

    // ANCHOR: online_softmax
    // p[u][r][e]: row g + 8 r's probability for the stage's key 16 u + 2 t + e (e = 0, 1) and
    // 16 u + 2 t + 8 + (e - 2) (e = 2, 3): the A fragment of P for k-step u of O += P V.
    float p[2][2][4], corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float* srow = s_rows + (g + 8 * r) * kSRow;
      float mx = -INFINITY;
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) mx = fmaxf(mx, p[u][r][e] = srow[16 * u + 2 * t + 8 * (e / 2) + e % 2]);
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
      const float m_new = fmaxf(m_run[r], mx);
      const float base = m_new == -INFINITY ? 0.f : m_new;  // nothing seen yet: no -inf - -inf
      corr[r] = fast_exp2(m_run[r] - base);
      float sum = 0.f;
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) sum += (p[u][r][e] = fast_exp2(p[u][r][e] - base));
      l_run[r] = l_run[r] * corr[r] + sum;
      m_run[r] = m_new;
    }
#pragma unroll
    for (int n = 0; n < kNTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[n][i] *= corr[i / 2];
    // ANCHOR_END: online_softmax

    // ANCHOR: pv
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      // P as the A operand of k-step u (16 keys): rows g, g + 8; keys 2t, 2t+1 and 2t+8, 2t+9.
      const uint32_t af[4] = {pack2<T>(p[u][0][0], p[u][0][1]), pack2<T>(p[u][1][0], p[u][1][1]),
                              pack2<T>(p[u][0][2], p[u][0][3]), pack2<T>(p[u][1][2], p[u][1][3])};
      // TODO(ch11): on return, for every n < kNTiles, o[n] has grown by P V for this k-step on
      //   the tensor cores (mma_16x8x16<T>(o[n], af, b)): V is the latent part (the first
      //   kLatentDim columns) of the stage's rows 16 u .. 16 u + 15 -- the very rows the
      //   scores were taken against, already in shared memory at kv -- and o[n] covers this
      //   warp's output columns 256 half + 8 n .. + 7 (the accumulator layout of o above).
      //   Keys are the mma's k-index: key 16 u + k of the stage is row k of B.
      (void)af;
    }
    // ANCHOR_END: pv
  }
  cp_async_wait<0>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {  // the row's four lanes' exp-sums
    l_run[r] += __shfl_xor_sync(kFullMask, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(kFullMask, l_run[r], 2);
  }

  // ANCHOR: write_out
  if (w.num_splits == 1) {  // the whole KV of the tile: normalise and write the output
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (pos[r] < 0) continue;
      const float inv = l_run[r] == 0.f ? 0.f : 1.f / l_run[r];
      T* dst = a.out + (int64_t(q_start + token[r]) * G + head[r]) * kLatentDim + kColsPerWarp * half + 2 * t;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n)
        *reinterpret_cast<uint32_t*>(dst + 8 * n) = pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
    return;
  }
  // ANCHOR: split_merge
  // TODO(ch11, stretch): a chunk of a split tile (w.num_splits > 1): this item attended chunk
  //   w.split of its tile's KV, [w.kv_begin, w.kv_end). Once every chunk of the tile has run,
  //   each row of the tile (local row 0 .. rows - 1, row w.row0 + local of the sequence) holds
  //   in out what the path above would have written for the tile's whole KV. The chunks pass
  //   chapter 5's partial results through the workspace: local row `local` of chunk p at index
  //   w.partial_base + local * w.num_splits + p of a.max_logits (the chunk's max score,
  //   natural log), a.exp_sums (its exp-sum at that max) and a.partial_out (512 floats at
  //   index * 512: its output, normalised by its own exp-sum). This lane's state is the
  //   path above's (m_run[r] in base 2, l_run[r], o[n][2r + e] for its warp's 256 columns;
  //   pos[r] >= 0 for a row of the tile). a.counters[w.counter], the tile's ticket, is 0 before
  //   the launch and must be 0 after it. Exactly one chunk, the last to finish, merges, and
  //   it reads only partials the others made visible to the whole GPU first. Tests:
  //   StretchMlaSplit.*, on plans that split (the core tests plan on one thread block, where
  //   no tile is split).
  // (your code here)
  // ANCHOR_END: split_merge
  // ANCHOR_END: write_out
}

// ANCHOR: kernel
// Fixed grid (the plan's): thread block c runs items[k * grid + c] for k = 0, 1, ... until an
// empty place (seq -1). One thread block per SM (196 KB of shared memory).
template <typename T>
__global__ void __launch_bounds__(kThreads, 1) mla_decode_kernel(MlaArgs<T> a) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  for (int k = 0; k < a.rounds; ++k) {
    const ch10::WorkItem w = a.items[int64_t(k) * gridDim.x + blockIdx.x];
    if (w.seq < 0) break;
    attend_item<T>(a, w, smem);
  }
}
// ANCHOR_END: kernel

}  // namespace pa::ch11
