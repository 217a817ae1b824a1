// Your exercise file. (Generated from solutions/11-latent-attention/mla_kernel.cuh; instructors regenerate with tools/make_skeletons.py.)
// Chapter 11, exercises 3 and 4 (the scores; P V) and stretch exercises 5 and 6 (an fp8
// stage's conversion; the merge of split tiles): the absorbed MLA decode kernel. Chapter 10's varlen kernel, wider: one
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
// the 255 a thread may have. So eight warps, as 2 row groups x 4 column quarters: warp w
// owns rows 32 (w / 4) .. + 31 (two 16-row mma tiles) and output columns 128 (w % 4) ..
// + 127 -- 128 accumulators a thread. The four warps of a row group need the same P, so
// they split the scores instead: each scores its 32 rows against 16 of the stage's 64 keys
// (full 576-wide dot products), and they agree on each row's max through shared memory
// (4 partial maxima a row); each then writes its part of P (16-bit) to shared memory, and
// after a barrier every warp reads all of its rows' P for O += P V.
// Where the time goes is shared memory, not the tensor cores: every mma operand is read
// from it. Two 16-row tiles a warp let one K or V fragment serve two mma; ldmatrix loads a
// whole fragment (four 8 x 8 matrices) in one instruction; 64-key stages halve the queries'
// reads per key. Shared memory: the tile's queries (64 rows x 576), a ring of 2 stages of
// 64 latent rows, P (64 x 64, 16-bit) and the partial maxima: 230,400 bytes. Rows are
// 1,152 bytes (72 chunks of 16), unpadded: chunk c of row r is stored at chunk
// c ^ (r % 8) of its row (swizzle), so the 8 rows an ldmatrix reads at once fall in
// different banks.
// ANCHOR_END: design
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "fp8.cuh"                // chapter 6: e4m3x8_to_float (the fp8 latent cache)
#include "pa/async_copy.h"
#include "pa/ch11_mla.h"
#include "pa/fast_math.h"
#include "pa/mma.h"

namespace pa::ch11 {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kStages = 2;                          // ring depth
constexpr int kQuarters = 4;                        // warps w % 4: 128 output columns each
constexpr int kColsPerWarp = kLatentDim / kQuarters;  // 128
constexpr int kNTiles = kColsPerWarp / 8;           // 16 mma n-tiles of output a warp
constexpr int kKSteps = kRowWidth / 16;             // 36 k-steps of 16 in a score
constexpr int kRowChunks = kRowWidth / 8;           // 72 16-byte chunks in a row
constexpr int kPChunks = 8;                         // a row of P: 64 keys' chunks (a 32-key stage uses 4)
static_assert(kRowChunks % 8 == 0 && kPChunks == 8, "the swizzle permutes chunks in groups of 8");

// ANCHOR: block_shapes
// Five shapes of thread block run this kernel (its template parameters RG, row groups, MT,
// 16-row mma tiles a row group, and KH, key halves; row group rg has the tile's rows
// 16 MT rg .. + 16 MT - 1, or with KH all of them):
//   RG = 2, MT = 2: the design above -- 8 warps, tiles of up to 64 rows, 64-key stages,
//           230,400 bytes of shared memory: one thread block an SM.
//   RG = 1, MT = 2: tiles of at most 32 rows (16 or 32 heads of one new token, 16 heads of
//           two) on 4 warps -- one row group, the same four column quarters -- with 32-key
//           stages, so each warp scores 8 keys a stage: 115,200 bytes, two blocks an SM.
//   RG = 1, MT = 1: the same block for tiles of at most 16 rows (8 or 16 heads of one new
//           token). O is 64 registers a thread, not 128, which leaves room to hold most of
//           the tile's queries in registers (kQReg: the A fragments of k-steps 0 .. 27, 112
//           registers), loaded once an item: a stage's scores then read K from shared
//           memory and the queries only for the last 8 k-steps.
//   RG = 2, MT = 1: the 8-warp block, 64-key stages, with one mma tile a row group and the
//           queries in registers, as the one above: tiles of at most 32 rows (16 heads of two
//           new tokens, 32 heads of one).
//   RG = 2, MT = 1, KH: the same 8-warp block for tiles of at most 16 rows, both row groups
//           on the tile's rows and each on half of a stage's keys (row group rg: keys
//           32 rg .. + 31, 8 a warp), with a running max, exp-sum and O of its own; at the
//           item's end row group 1 hands its state to row group 0 through shared memory,
//           which merges it as chapter 5 merges partitions. No warp idles, and every stage
//           is 64 keys: on the H200 the 16-bit kernel's 16-row tiles took 0.86-0.99x the
//           4-warp block's time (NOTES.md, "ch11 v8"); fp8 tiles stay on the 4-warp block.
template <int RG, int MT = 2, bool KH = false>
struct BlockShape {
  static constexpr int kThreads = 32 * kQuarters * RG;           // 256 or 128
  static constexpr int kMT = MT;                                 // 16-row mma tiles a row group
  static constexpr bool kQReg = MT == 1;                         // the queries' fragments in registers
  // ... of k-steps 0 .. kQRegSteps - 1; the last 8 (columns 448 .. 575) stay in shared memory.
  // All 36 would be 144 registers: ptxas spilled 104 bytes and the fp8 kernel ran 13 to 15%
  // slower than with 28 (no spill; NOTES.md, "ch11 v5").
  static constexpr int kQRegSteps = kQReg ? 28 : 0;
  static constexpr int kTileRows = KH ? 16 : 16 * MT * RG;       // the most rows of a tile it takes: 64, 32, 16, 32, 16
  static constexpr int kQRows = 32 * RG;                         // rows of Q, P and maxima it holds (4 threads a row)
  static constexpr int kStageTokens = 32 * RG;                   // latent rows a stage holds
  static constexpr int kRowGroupKeys = KH ? kStageTokens / RG : kStageTokens;  // keys of a stage a row group attends
  static constexpr int kKeysPerWarp = kRowGroupKeys / kQuarters;  // keys of a stage a warp scores: 16 or 8
  static constexpr int kJ = kKeysPerWarp / 8;                    // its n-tiles of scores: 2 or 1
  static constexpr size_t kQBytes = size_t(kQRows) * kRowWidth * 2;            // 73,728 or 36,864
  static constexpr size_t kStageBytes = size_t(kStageTokens) * kRowWidth * 2;  // 73,728 or 36,864
  static constexpr size_t kRingBytes = kStages * kStageBytes;
  static constexpr size_t kPBytes = size_t(kQRows) * kPChunks * 16;            // 8,192 or 4,096
  static constexpr size_t kMaxBytes = size_t(kQRows) * kQuarters * sizeof(float);
  static constexpr size_t kSmemBytes = kQBytes + kRingBytes + kPBytes + kMaxBytes;  // 230,400 or 115,200
  static constexpr size_t kRawBytes = size_t(kStageTokens) * kFp8RowBytes;    // 41,984 or 20,992
  // An H100 SM has 228 KB of shared memory; each resident block also holds 1 KB for the system.
  static_assert((3 - RG) * (kSmemBytes + 1024) <= 228 * 1024, "the blocks fit an H100 SM's shared memory");
  static_assert(kSmemBytes <= 227 * 1024, "a thread block's shared memory on an H100");
  static_assert(kRawBytes <= kStageBytes, "a raw fp8 stage fits ring slot 1");
  static_assert(kQRows * 4 == kThreads && kStageTokens * 4 == kThreads, "4 threads a row");
  static_assert(MT == 1 || MT == 2, "one or two 16-row mma tiles a row group");
  static_assert(!KH || (RG == 2 && MT == 1), "key halves: two row groups of one mma tile");
};
static_assert(BlockShape<2>::kTileRows == kTileRows && BlockShape<2>::kStageTokens == kStageTokens &&
                  BlockShape<2>::kThreads == 32 * kWarps && BlockShape<1>::kTileRows == kSmallTileRows &&
                  BlockShape<1, 1>::kTileRows == kQRegTileRows && BlockShape<2, 1>::kTileRows == kSmallTileRows &&
                  BlockShape<2, 1, true>::kTileRows == kQRegTileRows,
              "include/pa/ch11_mla.h states the block shapes for tests and the book");
// ANCHOR_END: block_shapes

// ANCHOR: fp8_design
// The fp8 latent cache (mla_decode_kernel<T, true>): the same kernel on 16-bit rows that it
// converts itself, a stage at a time. Its ring is one stage deep: ring slot 0 holds the
// stage's rows in 16 bits (the 16-bit kernel's layout, through chunk_at), and the first
// 41,984 bytes of slot 1 hold the next stage's raw fp8 rows (64 x 656 bytes, unswizzled).
// A stage: wait for its raw rows; every thread converts its share into slot 0 (e4m3 ->
// float, times the tile's scale, -> T; the RoPE part copied); a barrier; the cp.async of the
// next raw stage starts, and the scores, softmax and P V run as in the 16-bit kernel. On the
// 8-warp block the bytes a stage needs, Q + 16-bit stage + raw stage + P + maxima, are
// 198,656; the kernel asks for the 16-bit kernel's 230,400 (one thread block an SM either
// way). Tiles of at most 32 rows run on the 4-warp block (block_shapes), half of every part,
// two blocks an SM: while one converts its stage, the other's warps run their mma.
constexpr int kRawChunks = kFp8RowBytes / 16;                      // 41 chunks of 16 bytes a row
// ANCHOR_END: fp8_design

// Everything a launch passes to the kernel.
template <typename T>
struct MlaArgs {
  T* out;                    // [num_tokens, h_q, 512]
  const T* q;                // [num_tokens, h_q, 576]
  const T* latent_pool;      // [num_blocks, block_size, 576]   (16-bit kernel)
  const int *block_table, *seq_lens, *query_start_loc;
  const ch10::WorkItem* items;  // item k of thread block c at [k * gridDim.x + c]
  int rounds;                   // the most items of any thread block
  float *max_logits, *exp_sums, *partial_out;  // split tiles' partial results
  int* counters;                               // split tiles' tickets (left at zero)
  float scale;
  int num_q_heads, block_size, max_blocks_per_seq;
  const uint8_t* latent_fp8 = nullptr;  // [num_blocks, block_size, 656 bytes] (fp8 kernel)
};
template <typename T> struct MlaScoreArgs : MlaArgs<T> { float* scores; int score_keys; };  // kScores: mla_scores.cu
template <typename T, bool kScores> using MlaArgsOf = std::conditional_t<kScores, MlaScoreArgs<T>, MlaArgs<T>>;

// ANCHOR: chunk_at
// The 16-byte chunk c of row r of a shared-memory array whose rows are `chunks` chunks
// long (72 for a latent or query row, 8 for a row of P): 8 elements, stored at chunk
// c ^ (r % 8) of the row. Every read and write of those arrays goes through it.
// The one step you may take from an address it gave is a whole group of 8 chunks:
// chunk_at(base, n, r, c + 8 k) is chunk_at(base, n, r, c) + 64 k elements (128 k bytes
// in an SmemAddr), because the swizzle permutes the chunks within each group of 8 only. No
// other step works: chunk c + 1, c + 2 or c + 4 of row r is not 16, 32 or 64 bytes past
// chunk c (only in rows r % 8 == 0, where the swizzle moves nothing). Ask chunk_at for
// each chunk of a group you need, then step those addresses by groups of 8.
template <typename T>
__device__ inline T* chunk_at(T* base, int chunks, int r, int c) {
  return base + (r * chunks + (c ^ (r & 7))) * 8;
}
// ANCHOR_END: chunk_at

// ldmatrix's lanes, for a 16 x 16 block (four 8 x 8 matrices): lane l gives the address of
// row lane_row(l) of the block, at its 8-column half lane_half(l): matrices 0 .. 3 are then
// (rows 0-7, columns 0-7), (rows 8-15, 0-7), (rows 0-7, 8-15), (rows 8-15, 8-15).
__device__ inline int lane_row(int lane) { return (lane & 7) + 8 * ((lane >> 3) & 1); }
__device__ inline int lane_half(int lane) { return lane >> 4; }

// One work item (see ch10::WorkItem) on a block of RG row groups of MT mma tiles, KH: on
// key halves (BlockShape<RG, MT, KH>; the item's tile has at most kTileRows rows). Every
// thread of the block calls it with the same item.
// kScores (tests only, MlaDecode::run_scores): the item stops after the scores, which it
// writes out (below the scores exercise); no softmax, no P V, no output.
template <typename T, bool kFp8 = false, int RG = 2, int MT = 2, bool KH = false, bool kScores = false>
__device__ void attend_item(const MlaArgsOf<T, kScores>& a, const ch10::WorkItem& w, unsigned char* smem) {
  using B = BlockShape<RG, MT, KH>;
  constexpr int kThreads = B::kThreads, kStageTokens = B::kStageTokens, kMT = B::kMT;
  constexpr int kKeysPerWarp = B::kKeysPerWarp, kJ = B::kJ;  // 16 keys and 2 n-tiles a warp, or 8 and 1
  constexpr size_t kQBytes = B::kQBytes, kStageBytes = B::kStageBytes, kRingBytes = B::kRingBytes;
  T* qs = reinterpret_cast<T*>(smem);                                          // [rows][72 chunks]
  T* ring = reinterpret_cast<T*>(smem + kQBytes);                              // [2][stage rows][72 chunks]
  T* ps = reinterpret_cast<T*>(smem + kQBytes + kRingBytes);                   // [rows][8 chunks]
  float* maxes = reinterpret_cast<float*>(smem + kQBytes + kRingBytes + B::kPBytes);  // [rows][4]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rg = warp / kQuarters;       // row group: rows 16 kMT rg .. 16 kMT rg + 16 kMT - 1 of the tile
  const int quarter = warp % kQuarters;  // output columns 128 quarter ..; keys kKeysPerWarp quarter .. of a stage
  const int G = a.num_q_heads;
  const int q_start = a.query_start_loc[w.seq];
  const int n_new = a.query_start_loc[w.seq + 1] - q_start;
  const int seq_len = a.seq_lens[w.seq];
  const int rows = ch10::tile_rows(n_new, G, w.row0);

  // This lane's rows: row 16 kMT rg + 16 mt + g + 8 r of the tile for mma tile mt < kMT and
  // r = 0, 1: new token, head, and the position the token sits at (chapter 10's row
  // numbering); pos -1 for a row past the tile. live[mt]: the mma tile has a row of the
  // tile (16 heads of one new token fill one of the 8-warp block's four; the others skip
  // their mma).
  int token[kMT][2], head[kMT][2], pos[kMT][2];
  bool live[kMT];
  const int first_row = KH ? 0 : 16 * kMT * rg;  // the row group's first row of the tile (KH: both have all)
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    live[mt] = first_row + 16 * mt < rows;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int local = first_row + 16 * mt + g + 8 * r, row = w.row0 + local;
      token[mt][r] = row / G;
      head[mt][r] = row % G;
      pos[mt][r] = local < rows ? seq_len - n_new + token[mt][r] : -1;
    }
  }

  const int BS = a.block_size, bs_shift = 31 - __clz(BS);
  const int* table = a.block_table + int64_t(w.seq) * a.max_blocks_per_seq;
  const int num_stages = (w.kv_end - w.kv_begin + kStageTokens - 1) / kStageTokens;
  const uint4 zero{0u, 0u, 0u, 0u};

  __syncthreads();  // the previous item is done with shared memory
  // Copies of whole rows: thread i copies chunks i % 4 + 4 k (k = 0 .. 17) of row i / 4 (a
  // tile's or a stage's rows: a warp instruction moves 64 contiguous bytes of 8 rows). Its
  // destinations are two chunks of its row, d0 and d1, plus 64 k / 2 elements.
  const int my_row = threadIdx.x / 4, my_chunk = threadIdx.x % 4;
  auto copy_row = [&](T* base, const T* src, bool valid) {
    T* d0 = chunk_at(base, kRowChunks, my_row, my_chunk);
    T* d1 = chunk_at(base, kRowChunks, my_row, my_chunk + 4);
#pragma unroll
    for (int k = 0; k < kRowChunks / 4; ++k) {
      T* dst = (k % 2 ? d1 : d0) + 64 * (k / 2);
      if (valid) cp_async16(dst, src + 8 * (my_chunk + 4 * k));
      else *reinterpret_cast<uint4*>(dst) = zero;
    }
  };
  // The fp8 kernel: the raw stage (ring slot 1), copied and converted by the same 4 threads a
  // row. A row past the chunk is zeros (e4m3 0 times scale 0: 0).
  unsigned char* raw = smem + kQBytes + kStageBytes;
  auto copy_raw = [&](const uint8_t* src, bool valid) {
    unsigned char* dst = raw + my_row * kFp8RowBytes;
#pragma unroll
    for (int c = my_chunk; c < kRawChunks; c += 4) {
      if (valid) cp_async16(dst + 16 * c, src + 16 * c);
      else *reinterpret_cast<uint4*>(dst + 16 * c) = zero;
    }
  };
  // ANCHOR: fp8_convert
  auto convert_raw = [&] {
    // TODO(ch11, stretch): the fp8 latent cache (include/pa/ch11_mla.h, "The fp8 latent
    //   cache"). The raw stage holds this thread's row at raw + my_row * kFp8RowBytes: 656
    //   bytes (e4m3 c_kv, four fp32 tile scales at byte kFp8ScalesAt, the RoPE part's 64
    //   values of T at byte kFp8RopeAt). On return, row my_row of ring slot 0 (`ring`, the
    //   16-bit kernel's layout: chunk c of the row at chunk_at(ring, kRowChunks, my_row, c))
    //   holds the 576 values of T that row stands for: column c < kLatentDim is byte c's
    //   e4m3 value times the scale of its tile of kFp8Tile values, in fp32, rounded to T;
    //   the last kRopeDim columns are the RoPE part exactly as stored. The row's four
    //   threads (my_chunk 0 .. 3) share its 72 chunks; nothing else in shared memory changes.
    //   A raw row of zeros (past the chunk's end) gives zeros. Tests: StretchFp8Mla.*,
    //   StretchFp8MlaSplit.* (the fp8 kernel is this chapter's kernel on the rows you convert).
    // (your code here)
  };
  // ANCHOR_END: fp8_convert
  (void)copy_raw;
  (void)convert_raw;
  // The tile's queries, whole rows (zeros past the tile): committed with stage 0's group.
  {
    // KH: rows 0-15 and 16-31 of qs both hold the tile's rows, one copy a row group.
    const int local = KH ? (my_row < 32 ? my_row % 16 : kTileRows) : my_row;
    const int row = w.row0 + (local < rows ? local : 0);
    copy_row(qs, a.q + (int64_t(q_start + row / G) * G + row % G) * kRowWidth, local < rows);
  }
  // ANCHOR: load_stage
  // Stage st: latent rows kv_begin + 64 st .. of the chunk, whole (576 wide: K and V at once),
  // each row 72 copies of 16 bytes from its block's slot. Rows past the chunk's end are
  // zeroed (a read of shared memory nothing wrote is a bug, and 0 * NaN would be NaN). One
  // cp.async group per stage, also when there is nothing to copy. A thread's row is row
  // my_row of every stage: it reads the block table for the next stage's row a stage ahead.
  auto block_of = [&](int st) {
    const int tok = w.kv_begin + st * kStageTokens + my_row;
    return st < num_stages && tok < w.kv_end ? table[tok >> bs_shift] : -1;
  };
  int next_block = block_of(0);
  auto issue = [&](int st) {
    if (st < num_stages) {
      const int tok = w.kv_begin + st * kStageTokens + my_row;
      const int64_t slot = int64_t(next_block) * BS + (tok & (BS - 1));
      if constexpr (kFp8) copy_raw(a.latent_fp8 + slot * kFp8RowBytes, next_block >= 0);
      else copy_row(ring + (st % kStages) * kStageTokens * kRowWidth, a.latent_pool + slot * kRowWidth,
                    next_block >= 0);
      next_block = block_of(st + 1);
    }
    cp_async_commit();
  };
  // ANCHOR_END: load_stage
  for (int st = 0; st < kStages - 1; ++st) issue(st);

  // The running state of the lane's four rows: max and exp-sum (base 2; this lane's share of
  // the sum: its keys of its quarter, added over lanes and warps at the end), and the output
  // o[mt][n][i]: row 16 kMT rg + 16 mt + g + 8 (i / 2), column 128 quarter + 8 n + 2 t + i % 2.
  float o[kMT][kNTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int n = 0; n < kNTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mt][n][i] = 0.f;
  float m_run[kMT][2], l_run[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) m_run[mt][r] = -INFINITY, l_run[mt][r] = 0.f;
  const float scale_log2 = a.scale * 1.4426950408889634f;
  const int row0 = 16 * kMT * rg;         // the row group's first row of qs, P and maxima (of the tile: first_row)
  const int key0 = kKeysPerWarp * quarter;  // the warp's first key of a stage (16 or 8 a warp)
  uint32_t qf[B::kQReg ? B::kQRegSteps : 1][4];  // kQReg: the A fragments of the tile's query rows, k-step kk at qf[kk]

  for (int st = 0; st < num_stages; ++st) {
    const T* kv = ring;
    if constexpr (kFp8) {
      cp_async_wait<0>();
      __syncthreads();  // raw stage st has landed; everyone is done with slot 0 and with P
      convert_raw();
      __syncthreads();  // slot 0 holds stage st in 16 bits; the raw stage is free
      issue(st + 1);
    } else {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // stage st has landed; everyone is done with stage st - 1 and with P
      issue(st + kStages - 1);
      kv = ring + (st % kStages) * kStageTokens * kRowWidth;
    }
    // The row group's keys of the stage start at its row `first_key` (KH: 32 rg), position tok0.
    const int first_key = KH ? B::kRowGroupKeys * rg : 0;
    kv += first_key * kRowWidth;
    const int tok0 = w.kv_begin + st * kStageTokens + first_key;

    // ANCHOR: q_frag
    // q_frag(af, mt, kk): the A fragment (include/pa/mma.h) of query rows row0 + 16 mt ..
    // + 15 at k-step kk (columns 16 kk .. + 15). The block shape decides where it comes
    // from: ldmatrix from qs, or (kQReg) the registers qf, filled once an item, when the
    // item's first stage (and with it the queries) has landed.
    SmemAddr qa[4];  // the lane's row of qs for ldmatrix: k-step kk at qa[kk % 4] + 128 bytes a group of 4
#pragma unroll
    for (int m = 0; m < 4; ++m) qa[m] = smem_addr(chunk_at(qs, kRowChunks, row0 + lane_row(lane), 2 * m + lane_half(lane)));
    if constexpr (B::kQReg) {
      if (st == 0) {
#pragma unroll
        for (int kk = 0; kk < B::kQRegSteps; ++kk) ldmatrix_x4(qf[kk], qa[kk % 4] + 128 * (kk / 4));
      }
    }
    auto q_frag = [&](uint32_t(&af)[4], int mt, int kk) {
      if (B::kQReg && kk < B::kQRegSteps) {
#pragma unroll
        for (int i = 0; i < 4; ++i) af[i] = qf[B::kQReg ? kk : 0][i];  // kk known at compile time (unrolled): a register
      } else {
        ldmatrix_x4(af, qa[kk % 4] + mt * (16 * kRowWidth * int(sizeof(T))) + 128 * (kk / 4));
      }
    };
    // ANCHOR_END: q_frag

    // ANCHOR: scores
    // sc[mt][j][i]: the score of row row0 + 16 mt + g + 8 (i / 2) against the stage's latent
    // row key0 + 8 j + 2 t + i % 2 (an mma accumulator's layout, include/pa/mma.h); j < kJ:
    // a warp scores kKeysPerWarp keys of the stage, 8 a j.
    float sc[kMT][kJ][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < kJ; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) sc[mt][j][i] = 0.f;
    // TODO(ch11): on return, for mt < kMT, j < kJ and i = 0 .. 3, sc[mt][j][i] is the
    //   absorbed query of row row0 + 16 mt + g + 8 (i / 2) of qs (576 values) dotted with
    //   the stage's latent row tk = key0 + 8 j + 2 t + i % 2 (kv: 576 values), on the tensor
    //   cores (mma_16x8x16<T>), times scale_log2 -- or exactly -INFINITY if the row does
    //   not attend that key. The key sits at position kpos = tok0 + tk of the sequence; a
    //   row attends the keys of this item's chunk, [w.kv_begin, w.kv_end), at or before its
    //   own position pos[mt][i / 2] (pos -1: none). Stage rows past the chunk's end hold
    //   zeros. The queries come from q_frag (above); the stage is reached only through
    //   chunk_at (rows of kRowChunks chunks). An mma tile with live[mt] false has no row of
    //   the tile: skipping its mma is allowed. All five block shapes (BlockShape: kJ 2 or
    //   1, kMT 2 or 1) run this code: sc, live and pos have kMT entries, one on the blocks
    //   that hold the queries in registers; kv and tok0 are the row group's keys. Tests of
    //   the scores alone (the kernel stopped right below, P V not run): MlaScoreColumns.*,
    //   Ch11/MlaScores.*; then the whole kernel: Ch11/MlaGolden.*, Ch11/MlaHandPlan.*.
    (void)tok0;
    (void)scale_log2;
    (void)kv;
    (void)q_frag;
    // ANCHOR_END: scores
    if constexpr (kScores) {
      // Tests only (MlaDecode::run_scores): the scores exercise's own observable. The stage's
      // scores of keys before a.score_keys, as they are here, to a.scores; the item stops
      // after the stage that reaches a.score_keys (or its last). Nothing below (softmax, P V)
      // runs.
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kJ; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int kpos = tok0 + key0 + 8 * j + 2 * t + i % 2, r = i / 2;
            if (pos[mt][r] >= 0 && kpos < a.score_keys)
              a.scores[(int64_t(q_start + token[mt][r]) * G + head[mt][r]) * a.score_keys + kpos] = sc[mt][j][i];
          }
      if (st + 1 == num_stages || w.kv_begin + (st + 1) * kStageTokens >= a.score_keys) {
        cp_async_wait<0>();
        return;
      }
      if (a.score_keys > 0) continue;  // always (run_scores checks it); unconditional, nvcc warns of dead code
    }

    // ANCHOR: online_softmax
    // Each row's max over the stage: the warp's keys (its lanes t), then the row group's
    // four quarters through shared memory. All four warps take the same inputs in the same
    // order, so they agree on m and on the correction without another exchange.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = fmaxf(sc[mt][0][2 * r], sc[mt][0][2 * r + 1]);
#pragma unroll
        for (int j = 1; j < kJ; ++j) mx = fmaxf(mx, fmaxf(sc[mt][j][2 * r], sc[mt][j][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
        if (t == 0) maxes[(row0 + 16 * mt + g + 8 * r) * kQuarters + quarter] = mx;
      }
    __syncthreads();  // every quarter's maxima are in
    float corr[kMT][2];
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + 16 * mt + g + 8 * r;
        const float4 q4 = *reinterpret_cast<const float4*>(maxes + row * kQuarters);
        const float m_new = fmaxf(m_run[mt][r], fmaxf(fmaxf(q4.x, q4.y), fmaxf(q4.z, q4.w)));
        const float base = m_new == -INFINITY ? 0.f : m_new;  // nothing seen yet: no -inf - -inf
        corr[mt][r] = fast_exp2(m_run[mt][r] - base);
        rescale |= corr[mt][r] != 1.f;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kJ; ++j) {
          const float p0 = fast_exp2(sc[mt][j][2 * r] - base), p1 = fast_exp2(sc[mt][j][2 * r + 1] - base);
          sum += p0 + p1;
          // P, 16-bit, at [row][key0 + 8 j + 2 t]: where every warp of the row group reads it.
          *reinterpret_cast<uint32_t*>(chunk_at(ps, kPChunks, row, kJ * quarter + j) + 2 * t) = pack2<T>(p0, p1);
        }
        l_run[mt][r] = l_run[mt][r] * corr[mt][r] + sum;
        m_run[mt][r] = m_new;
      }
    // Once the max settles (long contexts: most stages), no row moves and O is left alone.
    if (__any_sync(kFullMask, rescale)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int n = 0; n < kNTiles; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) o[mt][n][i] *= corr[mt][i / 2];
    }
    __syncthreads();  // P holds the stage's probabilities, every key of every row
    // ANCHOR_END: online_softmax

    // ANCHOR: pv
    if (live[0]) {
#pragma unroll
      for (int u = 0; u < B::kRowGroupKeys / 16; ++u) {
        // P as the A operand of k-step u (keys 16 u .. + 15), for both mma tiles.
        uint32_t af[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
          ldmatrix_x4(af[mt], chunk_at(ps, kPChunks, row0 + 16 * mt + lane_row(lane), 2 * u + lane_half(lane)));
        // TODO(ch11): on return, for mt with live[mt] and every n < kNTiles, o[mt][n] has
        //   grown by P V for this k-step on the tensor cores (mma_16x8x16<T>(o[mt][n],
        //   af[mt], b)): V is the latent part (the first kLatentDim columns) of the stage's
        //   rows 16 u .. 16 u + 15 -- the very rows the scores were taken against, already
        //   in shared memory at kv (through chunk_at, rows of kRowChunks chunks) -- and
        //   o[mt][n] covers this warp's output columns kColsPerWarp * quarter + 8 n .. + 7
        //   (the accumulator layout of o above). Keys are the mma's k-index: key 16 u + k of
        //   the stage is row k of B.
        (void)af;
      }
    }
    // ANCHOR_END: pv
  }
  cp_async_wait<0>();
  // Each row's exp-sum: its four lanes, then its four quarters (through `maxes`, free now:
  // every warp is past the last stage's barriers).
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l_run[mt][r] += __shfl_xor_sync(kFullMask, l_run[mt][r], 1);
      l_run[mt][r] += __shfl_xor_sync(kFullMask, l_run[mt][r], 2);
      if (t == 0) maxes[(row0 + 16 * mt + g + 8 * r) * kQuarters + quarter] = l_run[mt][r];
    }
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float4 q4 = *reinterpret_cast<const float4*>(maxes + (row0 + 16 * mt + g + 8 * r) * kQuarters);
      l_run[mt][r] = (q4.x + q4.y) + (q4.z + q4.w);
    }
  // ANCHOR: key_halves_merge
  if constexpr (KH) {
    // Row group 1 attended the other half of every stage's keys for the same rows: its lane's
    // state (max, exp-sum, o) joins the same lane's of row group 0, through the ring (free:
    // every warp is past the last stage), as chapter 5 merges two partitions.
    float* xo = reinterpret_cast<float*>(smem + kQBytes);  // [kNTiles * 4][128 lanes]
    float* xm = xo + kNTiles * 4 * 128;                     // [max, sum of r = 0, 1][128 lanes]
    const int slot = quarter * 32 + lane;
    if (rg == 1) {
#pragma unroll
      for (int n = 0; n < kNTiles; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) xo[(n * 4 + i) * 128 + slot] = o[0][n][i];
#pragma unroll
      for (int r = 0; r < 2; ++r) xm[(2 * r) * 128 + slot] = m_run[0][r], xm[(2 * r + 1) * 128 + slot] = l_run[0][r];
    }
    __syncthreads();
    if (rg == 0) {
      float c0[2], c1[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m1 = xm[(2 * r) * 128 + slot], l1 = xm[(2 * r + 1) * 128 + slot];
        const float M = fmaxf(m_run[0][r], m1), base = M == -INFINITY ? 0.f : M;
        c0[r] = fast_exp2(m_run[0][r] - base), c1[r] = fast_exp2(m1 - base);
        l_run[0][r] = l_run[0][r] * c0[r] + l1 * c1[r];
        m_run[0][r] = M;
      }
#pragma unroll
      for (int n = 0; n < kNTiles; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[0][n][i] = o[0][n][i] * c0[i / 2] + xo[(n * 4 + i) * 128 + slot] * c1[i / 2];
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) pos[0][r] = -1;  // row group 0 writes the rows
    }
  }
  // ANCHOR_END: key_halves_merge

// ANCHOR: write_out
  // Row (mt, r) of this lane's o, divided by the row's exp-sum `sum` (0 where no key was
  // seen), to its place in out: this warp's 128 columns of the row's head and token.
  const auto write_row = [&](int mt, int r, float sum) {
    const float inv = sum == 0.f ? 0.f : 1.f / sum;
    T* dst = a.out + (int64_t(q_start + token[mt][r]) * G + head[mt][r]) * kLatentDim + kColsPerWarp * quarter + 2 * t;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n)
      *reinterpret_cast<uint32_t*>(dst + 8 * n) = pack2<T>(o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv);
  };
  if (w.num_splits == 1) {  // the whole KV of the tile: normalise and write the output
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (pos[mt][r] >= 0) write_row(mt, r, l_run[mt][r]);
    return;
  }
  // ANCHOR: split_merge
  // TODO(ch11, stretch): a chunk of a split tile (w.num_splits > 1): this item attended chunk
  //   w.split of its tile's KV, [w.kv_begin, w.kv_end). Once every chunk of the tile has run,
  //   each row of the tile (local row 0 .. rows - 1, row w.row0 + local of the sequence) holds
  //   in out what the path above would have written for the tile's whole KV. Exactly one
  //   chunk, the last to arrive here, merges, from its own registers (this lane's state is
  //   the path above's: m_run[mt][r] in base 2, l_run[mt][r] the row's whole exp-sum,
  //   o[mt][n][2r + e] its warp's 128 columns, unnormalised; pos[mt][r] >= 0 for a row of the
  //   tile) and the others' partial results, which it reads only once they are visible to the
  //   whole GPU. The others pass chapter 5's partials through the workspace: local row
  //   `local` of chunk p at index w.partial_base + local * w.num_splits + p of a.max_logits
  //   (the chunk's max score, natural log), a.exp_sums (its exp-sum at that max) and
  //   a.partial_out (512 floats at index * 512: its output, normalised by its own exp-sum).
  //   write_row(mt, r, sum), above, writes a row of o divided by sum to its place in out.
  //   a.counters[w.counter], the tile's ticket, is 0 before the launch and must be 0 after
  //   it; no chunk waits on one that has not arrived. Tests: StretchMlaSplit.*, on plans
  //   that split (the core tests plan on one thread block, where no tile is split).
  // (your code here)
  // ANCHOR_END: split_merge
  // ANCHOR_END: write_out
}

// ANCHOR: kernel
// Fixed grid (the plan's): thread block c runs items[k * grid + c] for k = 0, 1, ... until an
// empty place (seq -1). RG = 2: one thread block an SM (225 KB of shared memory); RG = 1: two
// (113 KB each; the runner takes them, MT = 1, for an fp8 pool's tiles of at most 16 rows:
// MlaBlock).
template <typename T, bool kFp8 = false, int RG = 2, int MT = 2, bool KH = false, bool kScores = false>
__global__ void __launch_bounds__(BlockShape<RG, MT>::kThreads, 3 - RG) mla_decode_kernel(MlaArgsOf<T, kScores> a) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  for (int k = 0; k < a.rounds; ++k) {
    const ch10::WorkItem w = a.items[int64_t(k) * gridDim.x + blockIdx.x];
    if (w.seq < 0) break;
    attend_item<T, kFp8, RG, MT, KH, kScores>(a, w, smem);
  }
}
// ANCHOR_END: kernel

}  // namespace pa::ch11
