// Chapter 10, exercises 3 and 4 of 4 (core), and the stretch exercise 5 (the split-tile merge
// at the end of attend_item): the varlen kernel. One thread block runs the work items
// the plan dealt it, one after another. An item is a tile of query rows (64; 8 for a
// decode) of one sequence and one KV head -- (new token, query head) pairs, row i * G + h --
// over a chunk of that sequence's KV. Warp w owns rows 16 w .. 16 w + 15 of the tile: one
// row tile of the tensor cores. The four warps stream the chunk's K and V together, 64
// tokens per stage (32 at D 256), through a ring of shared-memory stages filled by cp.async:
// every byte is loaded once and serves all the tile's rows -- all G query heads of the KV
// head, all the tile's new tokens.
//
//   S = Q K^T    Q (16 rows x 16 dims) in registers is the A operand; K from shared memory
//                the B operand (16 dims x 8 tokens).
//   P = softmax  online, per row, in base 2; the causal mask per row.
//   O += P V     P goes from S's accumulators straight into A registers: the token order
//                inside each 16-token half of a stage makes lane t hold tokens 4t .. 4t+3.
//
// A tile of at most 16 rows (a short verification) has the warps share its rows and split
// each stage's tokens. A decode item (one new token, at most 8 query heads)
// takes chapter 9's warps instead (decode_warps.cuh): each warp streams its own slots, with
// K Q^T on the tensor cores. All three end in the same merge and the same writes. A short
// decode tile can also be a warp item: one warp runs it alone, beside three others.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "decode_warps.cuh"       // decode items: chapter 9's warps
#include "merge_kernel.cuh"       // the merge of a split tile of many rows or chunks
#include "reduce_partitions.cuh"  // chapter 5: merge_partitions
#include "tc_block.cuh"           // chapter 9: MmaType, pack2, chunk_to_pairs, four_to_pairs
#include "varlen_args.cuh"
#include "pa/async_copy.h"
#include "pa/ch10_varlen.h"
#include "pa/dependent_launch.h"
#include "pa/fast_math.h"
#include "pa/mma.h"

namespace pa::ch10 {

// ANCHOR: stage_layout
// One pipeline stage in shared memory: kTokens tokens of K, then of V (64; 32 for a 16-bit
// cache at D 256, so that two stages fit beside two more thread blocks).
//   K: [chunk][kTokens] 16-byte chunks, as the pool stores K ([D / x][BS][x]): a warp's
//      copy of one chunk of 32 tokens writes 512 contiguous bytes. Token t of chunk c sits
//      at slot t ^ 2 (c % 4), so that the quarter-warp's reads (4 chunks of 2 tokens) fall
//      in eight different bank groups: one pass. The slot is written out where it is used,
//      the copies and the score loop, with c % 4 known there (warp % 4, t): one shared
//      function of (c, t) cost prefill 1-2.5% (NOTES.md, v9).
//   V: [half][D][16]: the stage's 16-token halves, each with its D rows of 16 tokens.
template <typename C, int D>
struct StageLayout {
  static constexpr int x = CacheElem<C>::x;  // cache elements per 16 bytes
  static constexpr int kTokens = (sizeof(C) == 2 && D > 128) ? kKvTile / 2 : kKvTile;
  static constexpr int kHalves = kTokens / 16;
  static constexpr int kChunks = D / x;      // 16-byte K chunks per token
  static constexpr int kKBytes = kChunks * kTokens * 16;
  static constexpr int kVBytes = D * kTokens * int(sizeof(C));
  static constexpr int kBytes = kKBytes + kVBytes;
};
// ANCHOR_END: stage_layout

// ANCHOR: stages
// Stages in the ring: as many as fit in 108 KB (two thread blocks per SM), 2 to 4.
template <typename C, int D>
__host__ __device__ constexpr int stages_for() {
  constexpr int n = 108 * 1024 / StageLayout<C, D>::kBytes;
  return n < 2 ? 2 : (n > 4 ? 4 : n);
}
// ANCHOR_END: stages

// Decode items' ring slots per warp (decode_warps.cuh), and the shared memory of the kernel:
// the larger of the two rings, then the warp items each warp ran (kWarps ints).
template <typename C, int D>
__host__ __device__ constexpr int decode_slots() {
#ifdef PA_CH10_DECODE_SLOTS  // benchmark experiments only
  return PA_CH10_DECODE_SLOTS;
#else
  return DecodeRing<C, D>::slots(stages_for<C, D>() * StageLayout<C, D>::kBytes);
#endif
}
template <typename C, int D>
__host__ __device__ constexpr size_t ring_bytes() {
  const size_t ring = size_t(stages_for<C, D>()) * StageLayout<C, D>::kBytes;
  const size_t decode = DecodeRing<C, D>::bytes(decode_slots<C, D>());
  return ring > decode ? ring : decode;
}
template <typename C, int D>
constexpr size_t smem_bytes() { return ring_bytes<C, D>() + kWarps * sizeof(int); }

constexpr int kNoRow = 0x7fffffff;  // the position of a row past the tile, for a minimum

// After the loop the ring holds the four warps' states when they split a tile's tokens
// (kStateStride, decode_warps.cuh).
template <int D>
inline constexpr int kWarpStatesBytes = 4 * (kWarps * 16 * kStateStride<D> + 2 * kWarps * 16);

// A tile of at most kSplitTokenRows rows splits its tokens among the warps. 16: an MQA
// decode's 32 rows run on two warps that each attend every token (the other two own no
// rows: kShortTiles), about 6% faster on the H200 than 32, where they went to pairs of
// warps sharing the tokens (NOTES.md, 2026-11-29).
constexpr int kSplitTokenRows = 16;

// One work item (see WorkItem). Every thread of the block calls it with the same item.
// Two ways to share the work among the four warps:
//   rows    a tile of more than kSplitTokenRows rows: warp w owns rows 16 w .. 16 w + 15 and
//           attends to every token of every stage;
//   tokens  a tile of at most kSplitTokenRows rows (short verifications): its one or two
//           groups of 16 rows have four or two warps each, which share out the 16-token
//           halves of every stage (one a warp; two consecutive ones a warp of a pair); the
//           states of a group's warps are merged at the end, as chapter 4's warps did.
// Mask: the mask policy (CausalMask in varlen_args.cuh: chapter 10's; chapter 12 supplies a
// sliding window, sinks and a soft-cap). kShortTiles: see varlen_kernel.
template <typename T, typename C, int D, int kStages, typename Mask = CausalMask, bool kShortTiles = false>
__device__ void attend_item(const VarlenArgs<T, C>& a, const WorkItem& w, unsigned char* smem,
                            const Mask& policy) {
  using L = StageLayout<C, D>;
  using E = typename MmaType<C>::type;  // what the tensor cores multiply: T, or fp16 for e4m3
  constexpr int x = L::x, kChunks = L::kChunks, kGroups = (kChunks + 3) / 4, kPairs = x / 2;
  static_assert(kStages * L::kBytes >= kWarpStatesBytes<D>, "the ring holds the warps' states");
  const VarlenShape& s = a.s;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int G = s.num_q_heads / s.num_kv_heads;
  const int q_start = a.query_start_loc[w.seq];
  const int n_new = a.query_start_loc[w.seq + 1] - q_start;
  const int seq_len = a.seq_lens[w.seq];
  const int tile_rows = ch10::tile_rows(n_new, G, w.row0);
  // At most kDecodeRows heads: chapter 9's warps (they know a window, but no soft-cap).
  const bool decode = decode_tile(n_new, G) && (!Mask::kSoftCap || policy.decode_warps_ok());
  const bool split_tokens = !decode && tile_rows <= kSplitTokenRows;
  // split_tokens over 16 rows (kSplitTokenRows 32): two row groups, warps 0 and 2 on rows
  // 0 .. 15, 1 and 3 on 16 .. 31 (flags, not counts: registers live through the loop cost
  // prefill).
  const bool pairs = tile_rows > 16;
  const int row_warp = decode ? 0 : split_tokens ? (pairs ? warp & 1 : 0) : warp;  // whose 16 rows

  // ANCHOR: row_of
  // This lane's two rows of the warp's 16: g and g + 8. Which new token and which query
  // head each one is, and the position that token sits at in its sequence.
  int token[2], head[2], pos[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = w.row0 + 16 * row_warp + g + 8 * r;
    // TODO(ch10): for row `row` of the sequence, numbered as include/pa/ch10_varlen.h numbers
    //   a sequence's query rows (above WorkItem): its new token (token[r]: 0 .. n_new - 1, its
    //   index among the sequence's new tokens), its query head (head[r]: one of w.kv_head's G
    //   heads) and the position of that token in the sequence (pos[r], as the header's batch
    //   layout places new tokens); pos[r] = -1 for a row past the sequence's n_new * G rows
    //   (such a row sees nothing and is never written).
    // HINT(1): Rows are numbered new token first, head second: row = token * G + h, where
    //   h is the head's index among the G query heads that share this KV head.
    // HINT(2): The n_new new tokens are the last n_new tokens of the sequence's seq_len:
    //   the first one sits at position seq_len - n_new.
    // HINT(3): token[r] = row / G; head[r] = w.kv_head * G + row % G; pos[r] = seq_len -
    //   n_new + token[r] when token[r] < n_new, else -1.
    // BEGIN SOLUTION
    // STUB: token[r] = 0;
    // STUB: head[r] = 0;
    // STUB: pos[r] = -1;
    token[r] = row / G;
    head[r] = w.kv_head * G + row % G;
    pos[r] = token[r] < n_new ? seq_len - n_new + token[r] : -1;
    // END SOLUTION
  }
  // ANCHOR_END: row_of
#pragma unroll
  for (int r = 0; r < 2; ++r)  // a decode tile has 8 rows: row g + 8 is the next tile's
    if (16 * row_warp + g + 8 * r >= tile_rows) pos[r] = -1;
  // The last position any row of this warp sees: tokens past it are skipped by the warp.
  int warp_last = max(pos[0], pos[1]);
  for (int offset = 16; offset > 0; offset /= 2)
    warp_last = max(warp_last, __shfl_xor_sync(kFullMask, warp_last, offset));

  const int BS = s.block_size;
  const int* table = a.block_table + int64_t(w.seq) * s.max_blocks_per_seq;
  const int64_t block_elems = int64_t(s.num_kv_heads) * D * BS;
  const int64_t head_offset = int64_t(w.kv_head) * D * BS;
  // The item's first key. A window skips the stages its tile's rows cannot see (the policy
  // says from where: a piece of 16 tokens, a block if smaller, is the unit of the loads), so
  // no block left of every row's window is ever read.
  int kv_begin = w.kv_begin;
  if constexpr (Mask::kWindow) {
    const int align = BS < 16 ? BS : 16;  // a V piece: 16 tokens, or a smaller block
    kv_begin = policy.first_load(seq_len - n_new + w.row0 / G, w.kv_begin, align);
  }
  const int num_tiles = (w.kv_end - kv_begin + L::kTokens - 1) / L::kTokens;  // <= 0: none
  auto stage_k = [&](int st) { return reinterpret_cast<uint4*>(smem + st * L::kBytes); };
  auto stage_v = [&](int st) { return reinterpret_cast<C*>(smem + st * L::kBytes + L::kKBytes); };

  // ANCHOR: load_tile
  // Block sizes are powers of two: a shift and a mask find a token's block and slot (an
  // integer division by a runtime BS is some twenty instructions).
  const int bs_shift = 31 - __clz(BS);
  constexpr int kKTokens = L::kTokens / 32;  // K tokens a lane copies per tile
  constexpr int kPieces = L::kTokens / x;    // V: 16-byte pieces (x tokens of one row) per row
  static_assert((kWarps * 32) % kPieces == 0, "a thread's V pieces share their tokens");
  constexpr int kRowStep = kWarps * 32 / kPieces;  // V rows between a thread's copies
  static_assert(kWarps % 4 == 0, "a warp's K chunks share their slot order (c % 4 == warp % 4)");
  // K: lane l copies tokens l + 32 i; warp w copies chunks w + kWarps k. One instruction
  // writes 512 contiguous bytes of one chunk, 4 shared-memory passes; copies into rows of
  // tokens took 32, and 11-18% of the general path's time (NOTES.md, v8).
  auto k_token = [&](int i) { return lane + 32 * i; };
  // The block-table entries of the next tile to issue, read one tile ahead so that their
  // latency hides behind a tile of math: K's tokens k_token(i), V's piece's first.
  int k_block[kKTokens], v_block;
  auto fetch = [&](int tile) {
    const int tok0 = kv_begin + tile * L::kTokens;
#pragma unroll
    for (int i = 0; i < kKTokens; ++i) {
      const int tok = tok0 + k_token(i);
      k_block[i] = tile < num_tiles && tok < w.kv_end ? table[tok >> bs_shift] : 0;
    }
    const int tok = tok0 + threadIdx.x % kPieces * x;
    v_block = tile < num_tiles && tok < w.kv_end ? table[tok >> bs_shift] : 0;
  };
  // Starts the copies of KV tile `tile` (tokens kv_begin + kTokens * tile ..; its table
  // entries fetched) into its stage, and commits one cp.async group -- also when there is
  // nothing to copy, so that "wait until at most kStages - 2 groups are pending" always
  // means "tile i has landed".
  auto issue = [&](int tile) {
    if (tile < num_tiles) {
      const int tok0 = kv_begin + tile * L::kTokens;
      const int st = tile % kStages;
      // Slots past the chunk's end are zeroed, not left as they were: the warps read whole
      // 16-token halves (and mask what they must not see), and a read of shared memory that
      // nothing wrote is a bug even when its value is thrown away (checked mode says so).
      const uint4 zero{0u, 0u, 0u, 0u};
#pragma unroll
      for (int i = 0; i < kKTokens; ++i) {  // K: one chunk of 32 tokens a warp instruction
        const int tk = k_token(i), tok = tok0 + tk;
        uint4* dst = stage_k(st) + (tk ^ 2 * (warp % 4));  // slot tk ^ 2 (c % 4); c % 4 == warp % 4
        if (tok < w.kv_end) {
          const C* src = a.k_pool + int64_t(k_block[i]) * block_elems + head_offset +
                         int64_t(tok & (BS - 1)) * x + int64_t(warp) * BS * x;
          // Chunks warp + kWarps k: a trip count known at compile time, so the loop unrolls whole.
#pragma unroll
          for (int k = 0; k < (kChunks + kWarps - 1) / kWarps; ++k)
            if (kChunks % kWarps == 0 || warp + kWarps * k < kChunks)
              cp_async16(dst + (warp + kWarps * k) * L::kTokens, src + int64_t(k) * kWarps * BS * x);
        } else {
          for (int c = warp; c < kChunks; c += kWarps) dst[c * L::kTokens] = zero;
        }
      }
      // V: a thread copies the same tokens, first .. first + x - 1, of every kRowStep-th row.
      const int first = threadIdx.x % kPieces * x, tok = tok0 + first;
      C* dst = stage_v(st) + (first / 16) * D * 16 + first % 16;  // row d at + 16 d
      if (tok < w.kv_end) {
        const int d0 = threadIdx.x / kPieces;  // rows d0 + kRowStep k: again a trip count known at compile time
        const C* src = a.v_pool + int64_t(v_block) * block_elems + head_offset + (tok & (BS - 1)) + int64_t(d0) * BS;
#pragma unroll
        for (int k = 0; k < (D + kRowStep - 1) / kRowStep; ++k)
          if (D % kRowStep == 0 || d0 + kRowStep * k < D)
            cp_async16(dst + (d0 + kRowStep * k) * 16, src + int64_t(k) * kRowStep * BS);
      } else {
        for (int d = threadIdx.x / kPieces; d < D; d += kRowStep)
          *reinterpret_cast<uint4*>(dst + d * 16) = zero;
      }
    }
    cp_async_commit();
  };
  // ANCHOR_END: load_tile

  // The running state of the lane's two rows: max and exp-sum (base 2), and the output
  // o[n][i]: row g + 8 (i / 2), dimension 8 n + 2t + i % 2.
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[n][i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  // Where the warps leave their states for the merge: o [warp][16 rows][kStateStride], m, l [warp][16].
  float* so = reinterpret_cast<float*>(smem);
  float* sm = so + kWarps * 16 * kStateStride<D>;
  float* sl = sm + kWarps * 16;

  __syncthreads();  // the previous item's warps are done with the ring
  if (decode) {
    decode_warps<T, C, D, decode_slots<C, D>(), Mask::kWindow>(a, w, q_start, tile_rows, smem, so, sm, sl,
        policy.first_key(seq_len - 1), policy.first_load(seq_len - 1, w.kv_begin, BS < 16 ? BS : 16));
  } else {
    for (int i = 0; i < kStages - 1; ++i) {  // the first tiles load while q does
      fetch(i);
      issue(i);
    }
    fetch(kStages - 1);

    // The queries as A fragments: qa[m][p][r] is pair p (dimensions 2p, 2p + 1) of K chunk
    // 4m + t of row g + 8r, in the tensor cores' type. Rows past the end hold zeros.
    uint32_t qa[kGroups][kPairs][2];
#pragma unroll
    for (int m = 0; m < kGroups; ++m) {
      const int j = 4 * m + t;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const bool ok = pos[r] >= 0 && j < kChunks;
        const T* src = a.q + (int64_t(q_start + token[r]) * s.num_q_heads + head[r]) * D + j * x;
#pragma unroll
        for (int part = 0; part < x / 8; ++part) {  // 8 query values per 16-byte load
          uint4 raw{0u, 0u, 0u, 0u};
          if (ok) raw = *reinterpret_cast<const uint4*>(src + part * 8);
          const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int p = 0; p < 4; ++p)
            qa[m][part * 4 + p][r] = ok ? pack2<E>(to_float(e[2 * p]), to_float(e[2 * p + 1])) : 0u;
        }
      }
    }

    const float scale_log2 = a.scale * (a.k_scale ? *a.k_scale : 1.f) * 1.4426950408889634f;
    // The first position any row of this warp sees (rows past the tile left out): a stage
    // whose tokens all lie at or before it, and before the chunk's end, needs no mask.
    int warp_first = min(pos[0] < 0 ? kNoRow : pos[0], pos[1] < 0 ? kNoRow : pos[1]);
    for (int offset = 16; offset > 0; offset /= 2)
      warp_first = min(warp_first, __shfl_xor_sync(kFullMask, warp_first, offset));
    // A warp past the tile's rows (warps 2 and 3 of an MQA decode's 32) then finds every
    // stage in need of the mask, and the mask no key for it: it skips every stage's mma.
    if constexpr (kShortTiles)
      if (warp_last < 0) warp_first = -1;

    // The warp attends to NH consecutive 16-token halves of a stage, from half h0. kMask:
    // some of their keys lie past the chunk's end or after a row's position, so every score
    // is checked; a stage wholly in every row's past (most of a long prefill) skips that.
    auto attend = [&](const uint4* ks, const C* vs, int tok0, int h0, auto nh, auto mask) {
      constexpr int NH = decltype(nh)::value;
      constexpr bool kMask = decltype(mask)::value;
      // Halves h0 .. h0 + live - 1 hold a key some row may see; the rest are skipped.
      const int first = tok0 + 16 * h0;
      const int live = kMask ? min(NH, (min(warp_last + 1, w.kv_end) - first + 15) / 16) : NH;
      if (live <= 0) return;

      // ANCHOR: scores
      // sc[q]: scores of n-tile q, whose column n is the token 16 (h0 + q / 2) + 2 (q % 2) +
      // 4 (n / 2) + n % 2 of the stage. Lane (g, t) loads that token for n = g; its
      // accumulators then hold rows g, g + 8 at columns 2t, 2t + 1: tokens 4t + 2 (q % 2) + {0, 1}.
      float sc[2 * NH][4];
#pragma unroll
      for (int q = 0; q < 2 * NH; ++q)
#pragma unroll
        for (int i = 0; i < 4; ++i) sc[q][i] = 0.f;
#pragma unroll
      for (int m = 0; m < kGroups; ++m) {
        const int j = 4 * m + t;  // this lane's K chunk: the same dimensions as qa[m]
#pragma unroll
        for (int q = 0; q < 2 * NH; ++q) {
          if (kMask && q / 2 >= live) break;
          const int tk = 16 * (h0 + q / 2) + 2 * (q % 2) + 4 * (g / 2) + g % 2;
          uint32_t kp[kPairs];
          if (kChunks % 4 == 0 || j < kChunks) {
            ch09::chunk_to_pairs<C>(ks[j * L::kTokens + (tk ^ 2 * t)], kp);  // j % 4 == t
          } else {
#pragma unroll
            for (int p = 0; p < kPairs; ++p) kp[p] = 0u;
          }
#pragma unroll
          for (int u = 0; u < kPairs / 2; ++u) {
            const uint32_t af[4] = {qa[m][2 * u][0], qa[m][2 * u][1], qa[m][2 * u + 1][0],
                                    qa[m][2 * u + 1][1]};
            const uint32_t bf[2] = {kp[2 * u], kp[2 * u + 1]};
            mma_16x8x16<E>(sc[q], af, bf);
          }
        }
      }
      // ANCHOR_END: scores
      if constexpr (Mask::kSoftCap) {  // the raw scores, capped before the mask
#pragma unroll
        for (int q = 0; q < 2 * NH; ++q)
#pragma unroll
          for (int i = 0; i < 4; ++i) sc[q][i] = policy.cap_raw(sc[q][i]);
      }

      // ANCHOR: online_softmax
      if (kMask) {
#pragma unroll
        for (int q = 0; q < 2 * NH; ++q)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int kpos = first + 16 * (q / 2) + 2 * (q % 2) + 4 * t + i % 2;  // the key's position
            // TODO(ch10): on return sc[q][i] is row g + 8 (i / 2)'s score for the key at position
            //   kpos, times scale_log2 (scores in base 2), if the row attends that key, and
            //   -INFINITY (exactly, whatever the stage's slot holds, NaN included) if it does not.
            //   Every row attends causally to this item's keys, [w.kv_begin, w.kv_end) of its
            //   sequence, and to no other key of the stage; a row with pos -1 attends none.
            // HINT(1): Two conditions, both on kpos: inside the item's chunk of the KV, and not
            //   in the row's future. (The stage may hold keys past the chunk's end: a chunk need
            //   not end on a stage boundary.)
            // HINT(2): Use a select (cond ? a : b), never a multiplication by 0 or 1: slots past
            //   the end may hold NaN, and 0 * NaN is NaN.
            // HINT(3): a key at or past the item's kv_end, or after the row's own position
            //   (causal), is hidden; a row with pos -1 sees nothing, and needs no test of its own:
            //   sc[q][i] = (kpos < w.kv_end && kpos <= pos[i / 2]) ? sc[q][i] * scale_log2
            //   : -INFINITY;
            // BEGIN SOLUTION
            // STUB: sc[q][i] = -INFINITY;
            sc[q][i] = kpos < w.kv_end && kpos <= pos[i / 2] ? sc[q][i] * scale_log2 : -INFINITY;
            // END SOLUTION
            if constexpr (Mask::kWindow)  // a later chapter's policy hides more keys (a window)
              if (!policy.sees(kpos, pos[i / 2])) sc[q][i] = -INFINITY;
          }
      }
      // Unmasked scores are scaled inside the exponent, exp2(s * scale - max): one FFMA each.
      const float f = kMask ? 1.f : scale_log2;
      float corr[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // a row's 4 lanes hold 2 NH of its 16 NH scores each
        float mx = -INFINITY;
#pragma unroll
        for (int q = 0; q < 2 * NH; ++q) mx = fmaxf(mx, fmaxf(sc[q][2 * r], sc[q][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
        const float m_new = fmaxf(m_run[r], mx * f);
        const float base = m_new == -INFINITY ? 0.f : m_new;  // nothing seen yet: no NaN from -inf - -inf
        corr[r] = fast_exp2(m_run[r] - base);
        float sum = 0.f;
#pragma unroll
        for (int q = 0; q < 2 * NH; ++q)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            sum += (sc[q][2 * r + e] = fast_exp2(fmaf(sc[q][2 * r + e], f, -base)));
        l_run[r] = l_run[r] * corr[r] + sum;  // this lane's share; the row's four are added at the end
        m_run[r] = m_new;
      }
      if (__any_sync(kFullMask, corr[0] != 1.f || corr[1] != 1.f)) {  // a row's max moved
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) o[n][i] *= corr[i / 2];
      }
      // ANCHOR_END: online_softmax

      // ANCHOR: pv
#pragma unroll
      for (int h = 0; h < NH; ++h) {
        if (kMask && h >= live) break;  // all of P is 0 there
        // P as the A operand: k-index 2t + e is token 4t + e, 2t + 8 + e is token 4t + 2 + e.
        const uint32_t af[4] = {pack2<E>(sc[2 * h][0], sc[2 * h][1]),
                                pack2<E>(sc[2 * h][2], sc[2 * h][3]),
                                pack2<E>(sc[2 * h + 1][0], sc[2 * h + 1][1]),
                                pack2<E>(sc[2 * h + 1][2], sc[2 * h + 1][3])};
        uint32_t keep[2] = {~0u, ~0u};  // zero V past the chunk's end: P is 0 there, but 0 * NaN is NaN
        if (kMask) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int kpos = first + 16 * h + 4 * t + 2 * e;
            keep[e] = (kpos < w.kv_end ? 0x0000ffffu : 0u) | (kpos + 1 < w.kv_end ? 0xffff0000u : 0u);
          }
        }
        const C* v_half = vs + (h0 + h) * D * 16 + 4 * t;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          uint32_t vp[2];
          ch09::four_to_pairs<C>(v_half + (8 * n + g) * 16, vp);
          const uint32_t bf[2] = {vp[0] & keep[0], vp[1] & keep[1]};
          mma_16x8x16<E>(o[n], af, bf);
        }
      }
      // ANCHOR_END: pv
    };
    // Does the warp's part of a stage (NH halves from h0) need the mask?
    auto needs_mask = [&](int tok0, int h0, int nh) {
      const int end = tok0 + 16 * (h0 + nh);  // one past its last key
      return end > w.kv_end || end - 1 > warp_first ||
             (Mask::kWindow && policy.window_cuts(tok0 + 16 * h0, end, warp_first, warp_last));
    };
    using Masked = std::true_type;
    using Plain = std::false_type;
    using OneHalf = std::integral_constant<int, 1>;
    using TwoHalves = std::integral_constant<int, 2>;
    using AllHalves = std::integral_constant<int, L::kHalves>;

    for (int tile = 0; tile < num_tiles; ++tile) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // tile's copies are visible; everyone is done with tile - 1's stage
      issue(tile + kStages - 1);
      fetch(tile + kStages);  // read now, used next round
      const int tok0 = kv_begin + tile * L::kTokens;
      const uint4* ks = stage_k(tile % kStages);
      const C* vs = stage_v(tile % kStages);
      if (split_tokens) {
        // One group of rows: half `warp` of the stage. Pairs of a 4-half stage: halves
        // 2 (warp / 2) and the next, in one call, so that the two halves' mma chains
        // interleave (the ragged MQA case 4% faster than two calls: NOTES.md, 2026-11-27);
        // of a 2-half stage (16-bit D 256), half warp / 2.
        constexpr bool kTwo = L::kHalves == 4;
        const int h0 = pairs ? (kTwo ? 2 * (warp / 2) : warp / 2) : warp;
        if (h0 < L::kHalves) {
          if (kTwo && pairs) {
            if (needs_mask(tok0, h0, 2)) attend(ks, vs, tok0, h0, TwoHalves{}, Masked{});
            else attend(ks, vs, tok0, h0, TwoHalves{}, Plain{});
          } else {
            if (needs_mask(tok0, h0, 1)) attend(ks, vs, tok0, h0, OneHalf{}, Masked{});
            else attend(ks, vs, tok0, h0, OneHalf{}, Plain{});
          }
        }
      } else if (needs_mask(tok0, 0, L::kHalves)) {
        attend(ks, vs, tok0, 0, AllHalves{}, Masked{});
      } else {
        attend(ks, vs, tok0, 0, AllHalves{}, Plain{});
      }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < 2; ++r) {  // the row's four lanes' exp-sums
      l_run[r] += __shfl_xor_sync(kFullMask, l_run[r], 1);
      l_run[r] += __shfl_xor_sync(kFullMask, l_run[r], 2);
    }
    if (split_tokens) {
      __syncthreads();  // every warp is done with the ring: it holds the states now
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = g + 8 * r;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<float2*>(so + (warp * 16 + row) * kStateStride<D> + 8 * n + 2 * t) =
              make_float2(o[n][2 * r], o[n][2 * r + 1]);
        if (t == 0) {
          sm[warp * 16 + row] = m_run[r];
          sl[warp * 16 + row] = l_run[r];
        }
      }
    }
  }
  // ANCHOR: merge_warps
  // Tokens split among the warps (decode items, small tiles): warp 0 takes over the states of
  // its row group's warps (all four, or 0 and 2 with pairs; warp 1 those of 1 and 3), as
  // chapter 4's merge did.
  if (decode || split_tokens) {
    __syncthreads();
    if (warp < (pairs ? 2 : 1)) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (pos[r] < 0) continue;  // no such row
        const int row = g + 8 * r;
        // Unrolled over every warp v, with a test for the group: f stays in registers
        // (indexed at run time, it would be a stack array).
        float M = -INFINITY;
#pragma unroll
        for (int v = 0; v < kWarps; ++v)
          if (!pairs || v % 2 == warp) M = fmaxf(M, sm[v * 16 + row]);
        const float base = M == -INFINITY ? 0.f : M;
        float l = 0.f, f[kWarps];
#pragma unroll
        for (int v = 0; v < kWarps; ++v)
          if (!pairs || v % 2 == warp) l += sl[v * 16 + row] * (f[v] = exp2f(sm[v * 16 + row] - base));
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          float2 sum = make_float2(0.f, 0.f);
#pragma unroll
          for (int v = 0; v < kWarps; ++v)
            if (!pairs || v % 2 == warp) {
              const float2 x =
                  *reinterpret_cast<const float2*>(so + (v * 16 + row) * kStateStride<D> + 8 * n + 2 * t);
              sum.x += x.x * f[v];
              sum.y += x.y * f[v];
            }
          o[n][2 * r] = sum.x;
          o[n][2 * r + 1] = sum.y;
        }
        m_run[r] = M;
        l_run[r] = l;
      }
    }
  }
  const bool writer = !(decode || split_tokens) || warp < (pairs ? 2 : 1);
  // ANCHOR_END: merge_warps
  if constexpr (Mask::kSinks) {  // the row's sink joins its softmax state, in one chunk only
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!writer || pos[r] < 0) continue;
      float corr = 1.f;
      policy.fold_sink(head[r], w.split, m_run[r], l_run[r], corr);
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][2 * r] *= corr;
        o[n][2 * r + 1] *= corr;
      }
    }
  }

  // ANCHOR: write_out
  const float v_scale = a.v_scale ? *a.v_scale : 1.f;
  const int Hq = s.num_q_heads;
  if (w.num_splits == 1) {  // the whole KV of the tile: normalise and write the output
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!writer || pos[r] < 0) continue;
      const float inv = l_run[r] == 0.f ? 0.f : v_scale / l_run[r];  // a NaN sum stays NaN
      T* dst = a.out + (int64_t(q_start + token[r]) * Hq + head[r]) * D + 2 * t;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<uint32_t*>(dst + 8 * n) =
            pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
    return;
  }
  // TODO(ch10, stretch): a chunk of a split tile (w.num_splits > 1): this item attended chunk
  //   w.split of its tile's KV, [w.kv_begin, w.kv_end). Once every chunk of the tile has run,
  //   each row of the tile that exists (local row 0 .. tile_rows - 1, row w.row0 + local of
  //   the sequence) holds in out what the whole-tile path above would have written there: the
  //   attention over the tile's whole KV. The chunks pass chapter 5's partial results through
  //   the workspace: local row `local` of chunk p at index w.partial_base + local *
  //   w.num_splits + p of a.max_logits (the chunk's max score, natural log), a.exp_sums (its
  //   exp-sum at that max) and a.partial_out (D floats at index * D: its output, normalised
  //   by its own exp-sum, times v_scale). This lane's state is the whole-tile path's (m_run[r]
  //   in base 2, l_run[r], o[n][2r + e]; `writer` and pos[r] >= 0 say which lanes hold a row).
  //   a.counters[w.counter], the tile's ticket, is 0 before the launch and must be 0 after it.
  //   Exactly one chunk, the last to finish, merges, and it reads only partials that the
  //   others made visible to the whole GPU first. Tests: StretchSplitTiles.*,
  //   StretchVarlenChunkEnds.*, StretchDecodeEquality.*, StretchFp8DecodeEquality.*,
  //   StretchVarlenLong.* (GPU).
  // HINT(1): Two halves. Every chunk writes its rows' partials; then a ticket picks the chunk
  //   that finished last, and that one merges all of them, row by row, with chapter 5's
  //   log-sum-exp merge (merge_partitions in reduce_partitions.cuh).
  // HINT(2): The partials: the writer lanes store, for each of their rows with pos[r] >= 0,
  //   the output o * (v_scale / l_run) (0 if l_run is 0), the max m_run converted from base 2
  //   to natural log (times ln 2; -inf stays -inf) and l_run. The ticket: __threadfence(),
  //   __syncthreads(), then thread 0 does atomicAdd(counter, 1), which returns the count
  //   BEFORE the add: the last chunk sees num_splits - 1, and resets the counter to 0.
  //   __syncthreads_or shares the answer; the others return, the last fences again.
  // HINT(3): 1. Partials: for r in 0, 1, skip !writer or pos[r] < 0; at = w.partial_base +
  //   (16 * row_warp + g + 8 r) * w.num_splits + w.split; inv = l_run[r] == 0 ? 0 : v_scale /
  //   l_run[r]; partial_out[at * D + 8 n + 2 t + e] = o[n][2 r + e] * inv for every n, e; lane
  //   t == 0 writes max_logits[at] = m_run[r] * 0.6931471805599453f and exp_sums[at] = l_run[r].
  //   2. Ticket: __threadfence(); __syncthreads(); thread 0: last = atomicAdd(a.counters +
  //   w.counter, 1) == w.num_splits - 1, and if last, a.counters[w.counter] = 0; if
  //   (!__syncthreads_or(last)) return; __threadfence().
  //   3. Merge (all threads): for i = threadIdx.x; i < tile_rows * D; i += kWarps * 32: row =
  //   w.row0 + i / D; out[(q_start + row / G) * Hq + w.kv_head * G + row % G) * D + i % D] =
  //   from_float<T>(ch05::merge_partitions(a.max_logits, a.exp_sums, a.partial_out,
  //   w.partial_base + (i / D) * w.num_splits, w.num_splits, D, i % D)). (The solution also
  //   keeps each row's weights in the ring, loads many partials at once, and merges a tile of
  //   many chunks in a kernel of its own, merge_kernel.cuh: faster, not needed.)
  // BEGIN SOLUTION(ch10, stretch)
  // One chunk of a split tile: chapter 5's partial results (natural-log max, exp-sum,
  // normalised output), rows [local row][split] so that a row's chunks are consecutive.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!writer || pos[r] < 0) continue;
    const int64_t at = w.partial_base + int64_t(16 * row_warp + g + 8 * r) * w.num_splits + w.split;
    const float inv = l_run[r] == 0.f ? 0.f : v_scale / l_run[r];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(a.partial_out + at * D + 8 * n + 2 * t) =
          make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    if (t == 0) {
      a.max_logits[at] = m_run[r] * 0.6931471805599453f;  // base 2 -> base e (-inf stays)
      a.exp_sums[at] = l_run[r];
    }
  }
  // A tile of many chunks (merged_apart): the merge kernel merges it after this launch,
  // many rows at once (merge_kernel.cuh). Each chunk counts once; the ticket then reads
  // num_splits, which tells that kernel the tile is its own.
  if (merged_apart(w.num_splits, tile_rows)) {
    if (threadIdx.x == 0) atomicAdd(a.counters + w.counter, 1);
    return;
  }
  // The last chunk of the tile to finish merges them all (chapter 9's ticket). The fence
  // makes this block's partials visible to the whole GPU before it counts.
  __threadfence();
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    last = atomicAdd(a.counters + w.counter, 1) == w.num_splits - 1;
    if (last) a.counters[w.counter] = 0;  // ready for the next launch
  }
  if (!__syncthreads_or(last)) return;
  __threadfence();
  // Chapter 5's merge, in two passes: each row's weights exp_sum_p * exp(max_p - M) / L once
  // (in the ring: at most 64 x 16 or 8 x 256 floats, merged_apart), then every output element is one weighted
  // sum of its row's partials.
  // The partials were written by other SMs and are read from L2: a load takes a microsecond
  // or so, and the merge is a chain of them unless many are in flight at once (as scalar
  // loads, one chunk at a time, a merge took tens of microseconds: NOTES.md, v6).
  const int S = w.num_splits;
  float* weights = reinterpret_cast<float*>(smem);  // [row][chunk]
  static_assert(kStages * L::kBytes >= 8 * 1024, "the ring holds a one-level merge's weights");
  {
    constexpr int kP = 8;  // chunks whose max and sum are loaded together
    for (int row = threadIdx.x; row < tile_rows; row += kWarps * 32) {
      const int64_t first = w.partial_base + int64_t(row) * S;
      float M = -INFINITY, total = 0.f;
      for (int p0 = 0; p0 < S; p0 += kP) {
        float m[kP];
#pragma unroll
        for (int k = 0; k < kP; ++k) m[k] = p0 + k < S ? a.max_logits[first + p0 + k] : -INFINITY;
#pragma unroll
        for (int k = 0; k < kP; ++k) M = fmaxf(M, m[k]);
      }
      for (int p0 = 0; p0 < S; p0 += kP) {
        float m[kP], e[kP];
#pragma unroll
        for (int k = 0; k < kP; ++k) {
          m[k] = p0 + k < S ? a.max_logits[first + p0 + k] : 0.f;
          e[k] = p0 + k < S ? a.exp_sums[first + p0 + k] : 0.f;
        }
#pragma unroll
        for (int k = 0; k < kP; ++k)
          if (p0 + k < S) total += (weights[row * S + p0 + k] = e[k] * expf(m[k] - M));
      }
      for (int p = 0; p < S; ++p) weights[row * S + p] /= total;
    }
    __syncthreads();
  }
  // Each thread sums kBatch pieces of 4 outputs at once, kP chunks at a time: kBatch x kP
  // 16-byte loads in flight together.
  auto merge_outputs = [&](auto batch, auto chunks) {
    constexpr int kBatch = decltype(batch)::value, kP = decltype(chunks)::value;
    constexpr int kStride = kWarps * 32, kQuads = D / 4;  // 4-float pieces per row
    const int quads = tile_rows * kQuads;
    for (int i0 = threadIdx.x; i0 < quads; i0 += kBatch * kStride) {
      float4 sum[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) sum[k] = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int p0 = 0; p0 < S; p0 += kP) {
        float4 part[kBatch][kP];
#pragma unroll
        for (int k = 0; k < kBatch; ++k)
#pragma unroll
          for (int u = 0; u < kP; ++u) {
            const int i = i0 + k * kStride;
            part[k][u] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (i < quads && p0 + u < S)
              part[k][u] = reinterpret_cast<const float4*>(a.partial_out)
                  [(w.partial_base + int64_t(i / kQuads) * S + p0 + u) * kQuads + i % kQuads];
          }
#pragma unroll
        for (int k = 0; k < kBatch; ++k)
#pragma unroll
          for (int u = 0; u < kP; ++u) {
            const int i = i0 + k * kStride;
            const float wt = i < quads && p0 + u < S ? weights[(i / kQuads) * S + p0 + u] : 0.f;
            sum[k].x += wt * part[k][u].x;
            sum[k].y += wt * part[k][u].y;
            sum[k].z += wt * part[k][u].z;
            sum[k].w += wt * part[k][u].w;
          }
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int i = i0 + k * kStride, row = w.row0 + i / kQuads;
        if (i < quads)
          *reinterpret_cast<uint2*>(a.out + (int64_t(q_start + row / G) * Hq + w.kv_head * G + row % G) * D +
                                    4 * (i % kQuads)) =
              make_uint2(pack2<T>(sum[k].x, sum[k].y), pack2<T>(sum[k].z, sum[k].w));
      }
    }
  };
  if (tile_rows > kDecodeRows) {
    merge_outputs(std::integral_constant<int, 4>{}, std::integral_constant<int, 4>{});
  } else {  // 8 rows: 2 pieces per thread, many chunks (a long decode)
    merge_outputs(std::integral_constant<int, 2>{}, std::integral_constant<int, 8>{});
  }
  // END SOLUTION
  // ANCHOR_END: write_out
}

// ANCHOR: kernel
// Fixed grid (the plan's). Thread block c runs its items, item k at items[k * grid + c]: its
// warp items first, warp w taking items w, w + 4, w + 8, ...; then its own, in order.
// Two thread blocks per SM, up to 255 registers a thread: a prefill tile keeps its loads in
// flight (NOTES.md, v4).
// Mask: the mask policy (CausalMask: chapter 10's). A policy with hooks on runs warp items
// as the block's own items (warp_item knows no policy).
// kShortTiles: the launch's rows-path tiles have at most 32 rows (MQA's decode), so warps 2
// and 3 skip their stages. A kernel of its own, not a branch: the prefill loop sits at the
// register limit, and any line added to it moves its allocation, by 1-2% of prefill's time
// for this one (NOTES.md, sessions 51 and 53).
template <typename T, typename C, int D, int kStages, typename Mask = CausalMask, bool kShortTiles = false>
__global__ void __launch_bounds__(kWarps * 32, 2) varlen_kernel(VarlenArgs<T, C> a, Mask mask) {
  constexpr bool kHooks = Mask::kWindow || Mask::kSoftCap || Mask::kSinks;
  // Every block of this one-wave grid is running: merge_kernel's blocks may be placed now,
  // to wait there for this kernel's end (dependent_launch.h).
  pa::let_dependents_start();
  PA_DYNAMIC_SHARED(unsigned char, smem);
  const int warp = threadIdx.x / 32, rounds = *a.rounds;
  auto item = [&](int k) { return a.items[int64_t(k) * gridDim.x + blockIdx.x]; };
  int k = warp, ran = 0;
  for (; k < rounds; k += kWarps, ++ran) {
    const WorkItem w = item(k);
    if (!w.by_warp || kHooks) break;
    warp_item<T, C, D, decode_slots<C, D>()>(a, w, smem);
  }
  // The block's own items follow its warp items: as many as the four warps ran.
  int* ran_by = reinterpret_cast<int*>(smem + ring_bytes<C, D>());  // past the rings
  if (threadIdx.x % 32 == 0) ran_by[warp] = ran;
  __syncthreads();
  int first = 0;
  for (int v = 0; v < kWarps; ++v) first += ran_by[v];
  // The count is read again per item, not kept: a register live across attend_item, at
  // 255, cost prefill 1-5% (NOTES.md, v5).
  for (k = first; k < *a.rounds; ++k) {
    const WorkItem w = item(k);
    if (w.seq < 0) break;  // an empty place: the block is done
    attend_item<T, C, D, kStages, Mask, kShortTiles>(a, w, smem, mask);
  }
}
// ANCHOR_END: kernel

}  // namespace pa::ch10
