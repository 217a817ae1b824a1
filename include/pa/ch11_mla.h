// Chapter 11: the latent KV cache of multi-head latent attention (MLA), paged.
//
// DeepSeek-V2/V3 and Kimi K2 cache, per token and layer, no K and V per head but one
// compressed latent c_kv (kLatentDim = 512 wide) and one decoupled RoPE key k_rope
// (kRopeDim = 64 wide), shared by every query head: a latent row of kRowWidth = 576
// values. Paged, the cache is one pool of blocks, each holding block_size tokens' rows:
//   latent_pool: [num_blocks, block_size, 576]    row = [c_kv (512) | k_rope (64)]
// A token's place is its slot, as in chapter 2: slot = block_id * block_size + offset.
//
// Serving absorbs the up-projections into the query (reference/pa_ref/mla.py shows it
// equals decompressing K and V per head): q_abs = [q_nope W_UK^T | q_rope], 576 wide,
// and then decode is multi-query attention (MQA) of h_q heads over the latent rows:
//   scores  q_abs . row            (all 576 columns: the latent and the RoPE part)
//   out     softmax(scores) . row[0:512]
// The value is the first 512 columns of the very rows the keys are: one load serves both
// products. The output stays in latent space (its W_UV comes after, outside the kernel).
//
// The batch is chapter 10's: q, out stacked [num_tokens, h_q, 576 / 512]; sequence b's new
// tokens are rows query_start_loc[b] .. query_start_loc[b + 1] - 1 (0 to 4 of them: decode,
// or multi-token prediction / speculative verification), the last of its seq_lens[b]
// tokens, each attending causally. Split-KV is planned by chapter 10's planner (make_plan)
// and merged by log-sum-exp in the same launch.
#pragma once

#include <cstdint>
#include <vector>

#include "pa/backend.h"
#include "pa/ch08_model.h"
#include "pa/ch10_varlen.h"
#include "pa/check.h"
#include "pa/device_buffer.h"
#include "pa/dtype.h"
#include "pa/trace.h"

namespace pa::ch11 {

// ANCHOR: widths
inline constexpr int kLatentDim = 512;                  // d_c: the compressed latent, c_kv
inline constexpr int kRopeDim = 64;                     // d_r: the decoupled RoPE key, k_rope
inline constexpr int kRowWidth = kLatentDim + kRopeDim;  // 576: one cached row per token
inline constexpr int kMaxQHeads = 128;                  // h_q: DeepSeek-V3's heads on one GPU
inline constexpr int kMaxNewTokens = 4;                 // s_q: new tokens a sequence may bring
// ANCHOR_END: widths

// ---- The paged latent cache -------------------------------------------------------------

// ANCHOR: pool_shape
struct LatentPoolShape {
  int num_blocks;          // blocks in the pool (one pool per layer)
  int block_size;          // tokens per block: 16, 32 or 64 (64 is FlashMLA's)
  int latent_dim = kLatentDim;  // c_kv's width: must be 512
  int rope_dim = kRopeDim;      // k_rope's width: must be 64
};
// ANCHOR_END: pool_shape

// Throws pa::Error for a block size other than 16, 32 or 64 ("block_size 8 is not
// supported (16, 32 or 64)"), a non-positive num_blocks, or widths other than 512 and 64
// ("a latent row is c_kv 512 + k_rope 64 = 576 wide, got 512 + 32").
void check_latent_pool(const LatentPoolShape& s);

// Elements of one pool: num_blocks * block_size * 576 (64-bit).
inline int64_t latent_pool_elems(const LatentPoolShape& s) {
  return int64_t(s.num_blocks) * s.block_size * kRowWidth;
}

// ANCHOR: writer
// The latent writer, chapter 2's reshape_and_cache for the latent:
//   c_kv [num_tokens, 512], k_rope [num_tokens, 64], slot_mapping [num_tokens] (int64).
// Token i's row [c_kv[i] | k_rope[i]] goes to slot slot_mapping[i] of latent_pool;
// slot_mapping[i] < 0 is a padding token, skipped. No other slot changes. Device pointers;
// slots must be < num_blocks * block_size (the block manager hands them out).
template <typename T>
void reshape_and_cache_latent(const LatentPoolShape& s, const T* c_kv, const T* k_rope,
                              int num_tokens, T* latent_pool, const int64_t* slot_mapping,
                              cudaStream_t stream = nullptr);
// ANCHOR_END: writer

// ---- The fp8 latent cache -----------------------------------------------------------------

// ANCHOR: fp8_row
// A latent row in fp8 (DeepSeek-V3.2's format): 656 bytes a token instead of 1,152.
//   bytes   0 .. 511   c_kv as e4m3 bytes (chapter 6's quantize_e4m3): value c is
//                      e4m3(saturate(c_kv[c] / scale[c / 128])), rounded to nearest even
//   bytes 512 .. 527   scale[0 .. 3], fp32: one per tile of 128 values of c_kv, the tile's
//                      amax / 448 (in fp32), or 1 for a tile of zeros (amax / 448 == 0)
//   bytes 528 .. 655   k_rope, 64 values in the query's 16-bit type (half or bf16), as given
// Pool: [num_blocks, block_size, 656] bytes. The RoPE part stays in 16 bits: it is 64 of
// the score's 576 columns, carries the position, and costs 128 bytes a token.
enum class LatentFormat { bits16, fp8_e4m3 };
inline constexpr int kFp8Tile = 128;                             // c_kv values a scale covers
inline constexpr int kFp8Scales = kLatentDim / kFp8Tile;          // 4
inline constexpr int kFp8ScalesAt = kLatentDim;                   // byte 512
inline constexpr int kFp8RopeAt = kFp8ScalesAt + 4 * kFp8Scales;  // byte 528
inline constexpr int kFp8RowBytes = kFp8RopeAt + 2 * kRopeDim;    // 656
static_assert(kFp8RowBytes == 656 && kFp8RowBytes % 16 == 0, "rows of 16-byte chunks");

// Bytes of one fp8 pool: num_blocks * block_size * 656 (64-bit).
inline int64_t latent_pool_bytes_fp8(const LatentPoolShape& s) {
  return int64_t(s.num_blocks) * s.block_size * kFp8RowBytes;
}

// The quantizing writer: as reshape_and_cache_latent (slot_mapping[i] < 0 skipped, no other
// slot changes), each row written in the fp8 format above. T (half or bf16) is the type of
// c_kv and k_rope and of the RoPE part stored. Device pointers.
template <typename T>
void reshape_and_cache_latent_fp8(const LatentPoolShape& s, const T* c_kv, const T* k_rope,
                                  int num_tokens, uint8_t* latent_pool, const int64_t* slot_mapping,
                                  cudaStream_t stream = nullptr);
// ANCHOR_END: fp8_row

// ---- What a token costs: the memory accounting against chapter 1 ------------------------

// ANCHOR: memory
// One cache's bill for chapter 1's trace, in a paged pool of `block_size` tokens a block
// (chapter 3): a request of t tokens holds ceil(t / block_size) blocks of every layer.
struct CacheCost {
  int64_t bytes_per_token_layer;  // what one token costs in one layer
  int64_t bytes_per_token;        // in every layer
  int64_t blocks_in_budget;       // whole blocks (every layer's) the budget holds: rounded down
  int64_t seqs_in_budget;         // (budget * n) / (sum(ceil(t / bs)) * bs * bytes_per_token),
                                  //   rounded down: average requests that fit (chapter 3's)
};

// Bytes one token's latent row costs in one layer: (512 + 64) * dtype_bytes (1,152 in
// bf16). One row for every head: MLA has no per-head K or V.
int64_t latent_bytes_per_token_layer(int dtype_bytes = 2);

// The same by format: bits16 -> (512 + 64) * dtype_bytes; fp8_e4m3 -> 656 (512 e4m3 bytes,
// 4 fp32 scales, the RoPE part in 16 bits; dtype_bytes must then be 2).
int64_t latent_bytes_per_token_layer(LatentFormat format, int dtype_bytes = 2);

// The bill of the latent cache (num_layers layers of latent rows in dtype_bytes), on the
// trace, in a budget of budget_bytes. Throws for an empty trace, a non-positive
// block_size, num_layers, dtype_bytes or budget (the message names which).
CacheCost latent_cache_cost(const std::vector<Request>& trace, int num_layers, int block_size,
                            int dtype_bytes, int64_t budget_bytes);

// DeepSeek Sparse Attention (DSA, chapter 14): every layer also caches the lightning
// indexer's key of each token, 128 e4m3 bytes and a float32 scale, in a second pool under
// the same block ids (ch08::PagedKV::indexer_pools). Bytes one token costs in one layer of
// a DSA model: the latent row in `format` plus those 132 (DeepSeek-V3.2, fp8: 656 + 132 =
// 788).
int64_t dsa_bytes_per_token_layer(LatentFormat format, int dtype_bytes = 2);
// The bill of a DSA model's two caches, num_layers layers of latent rows in `format` and
// their indexer keys, paged in the same blocks of block_size tokens: latent_cache_cost's
// fields, with dsa_bytes_per_token_layer a token and layer. Throws as latent_cache_cost does.
CacheCost dsa_cache_cost(const std::vector<Request>& trace, int num_layers, int block_size, LatentFormat format,
                         int64_t budget_bytes, int dtype_bytes = 2);

// The same bill for chapter 1's K/V cache of `cfg` (GQA or MHA; cfg.num_layers layers):
// chapter 3's paged_memory_report underneath, so the two chapters cannot disagree.
CacheCost kv_cache_cost(const std::vector<Request>& trace, const KVConfig& cfg, int block_size,
                        int64_t budget_bytes);

// The chapter's table: MLA (DeepSeek-V3's 61 layers of latent rows), GQA with 8 KV heads
// of 128 and MHA with 128 heads of 128 (the same 61 layers), bf16, on the trace.
struct MlaMemoryReport {
  CacheCost mla, gqa, mha;
};
MlaMemoryReport mla_memory_report(const std::vector<Request>& trace, int block_size,
                                  int64_t budget_bytes, int num_layers = 61);
// ANCHOR_END: memory

// ---- The absorbed decode kernel -----------------------------------------------------------

// ANCHOR: shape
struct MlaShape {
  int num_seqs;            // B
  int num_tokens;          // new tokens of the whole batch: rows of q and out
  int num_q_heads;         // h_q: 1 .. 128 (all share the one latent row: MQA)
  int block_size;          // 16, 32 or 64
  int num_blocks;          // blocks in the latent pool
  int max_blocks_per_seq;  // the block table's width
  int qk_head_size = kRowWidth;   // q's width: must be 576 (the absorbed query)
  int v_head_size = kLatentDim;   // out's width: must be 512 (the latent-space output)
  LatentFormat latent = LatentFormat::bits16;  // the pool's rows: 576 values of T, or fp8 (656 bytes)
};
// ANCHOR_END: shape

// Throws pa::Error naming the problem. Wordings the tests check:
//   "num_q_heads 256 is not supported (1 to 128)"
//   "qk_head_size 512 is not supported: the absorbed query is 576 wide (c_kv 512 + k_rope 64)"
//   "v_head_size 576 is not supported: the output is the latent part, 512 wide"
//   "block_size 8 is not supported (16, 32 or 64)"
void check_mla_shape(const MlaShape& s);

// The host's check of a batch: chapter 3's varlen checks (query_start_loc, seq_lens, the
// table's capacity, block ids in the pool when block_table is not empty), and at most 4
// new tokens a sequence: "sequence 2 has 5 new tokens; the MLA decode kernel takes 0 to 4".
void check_mla_metadata(const MlaShape& s, const std::vector<int>& block_table,
                        const std::vector<int>& seq_lens, const std::vector<int>& query_start_loc);

// The shape chapter 10's planner plans with: one KV head (MQA), G = h_q query heads per
// row tile's token, head size 576, and this chapter's check of its sizes (check_sizes):
// rows are chapter 10's, row = i * h_q + h for new token i and head h, tiles of 64.
ch10::VarlenShape planning_shape(const MlaShape& s);

// The thread block the kernel runs on. automatic: for tiles of at most kQRegTileRows rows,
// on a 16-bit pool key_halves (8 warps holding the queries in registers, each row group on
// half of a stage's keys, merged at the item's end: on the H200 0.86-0.99x the time of the
// 4-warp block below; 16-bit pools only), on an fp8 pool the 4-warp block that holds the
// queries in registers (a row costs its warps a third fewer shared-memory reads: the fp8
// kernel 17-22% faster on the H100); for tiles of at most kSmallTileRows, the 8-warp block that holds them in
// registers, one 16-row mma tile a row group (on the H200 0.90x the 8-warp block's time at
// 32 rows on a 16-bit pool, 0.93-0.95x the 4-warp block's on an fp8 one); 8 warps with 64-key
// stages otherwise. four_warps (32-key stages, two blocks an SM: the fp8 pool's 32-row tiles
// until 2026-11-28) and the others: for tests; a batch with a larger tile than a block takes
// throws ("sequence 1's tiles have 64 rows: the 4-warp thread block takes at most 32").
enum class MlaBlock {
  automatic,
  eight_warps,
  four_warps,
  queries_in_registers,
  eight_warps_queries_in_registers,
  key_halves
};

// A planned block's row groups: 2 for the blocks of 8 warps, 1 for those of 4.
inline int row_groups_of(MlaBlock block) {
  return block == MlaBlock::eight_warps || block == MlaBlock::eight_warps_queries_in_registers ||
                 block == MlaBlock::key_halves
             ? 2
             : 1;
}

// Plan once per step (chapter 10's make_plan), run once per layer.
class MlaDecode {
 public:
  // chunk_tokens as in ch10::make_plan (0: sized per tile; > 0 forces splits); grid = 0:
  // one wave of the kernel on this device.
  void plan(const MlaShape& s, DType dtype, const std::vector<int>& seq_lens,
            const std::vector<int>& query_start_loc, int chunk_tokens = 0, int grid = 0,
            cudaStream_t stream = nullptr);

  // out [num_tokens, h_q, 512] = absorbed attention of q [num_tokens, h_q, 576] over the
  // latent pool [num_blocks, block_size, 576]. Device pointers; seq_lens and
  // query_start_loc hold on the device what plan() was given. scale: the decompressed
  // head's, 1 / sqrt(d_nope + d_rope) (1 / sqrt(192) for DeepSeek-V3).
  template <typename T>
  void run(T* out, const T* q, const T* latent_pool, const int* block_table, const int* seq_lens,
           const int* query_start_loc, float scale, cudaStream_t stream = nullptr);

  // The same over an fp8 latent pool [num_blocks, block_size, 656 bytes] (plan() with
  // s.latent = LatentFormat::fp8_e4m3 and dtype fp16 or bf16: the RoPE part's type). The
  // kernel dequantizes each stage of rows in shared memory. Throws for a pool of the other
  // row width than planned ("MlaDecode: planned for a 16-bit latent pool (1152-byte rows),
  // run with an fp8 one (656-byte rows)", and the other way round); plan() throws for an fp8
  // pool with queries of another type ("the fp8 latent pool keeps k_rope in the query's
  // 16-bit type: fp16 or bf16 queries, not fp32").
  template <typename T>
  void run(T* out, const T* q, const uint8_t* latent_pool, const int* block_table, const int* seq_lens,
           const int* query_start_loc, float scale, cudaStream_t stream = nullptr);

  // Lays out and uploads `plan` (plan() is make_plan, then this). Tests call it with plans
  // make_plan never makes: chunks that end inside a stage, at any token. A plan must cover
  // the batch as make_plan's do (ch10::Plan, ch10::WorkItem); only cta_start is checked.
  // query_start_loc (the batch's, as for plan()) tells the tiles' rows for set_block's
  // choice; without it, 8 warps (they take any tile).
  void use_plan(const MlaShape& s, DType dtype, const ch10::Plan& plan, cudaStream_t stream = nullptr,
                const std::vector<int>& query_start_loc = {});

  // The thread block of the next plan() or use_plan() (MlaBlock; automatic unless set).
  void set_block(MlaBlock block) { block_ = block; }
  MlaBlock block() const { return planned_block_; }  // the planned thread block (never automatic)
  int row_groups() const { return row_groups_of(planned_block_); }  // 2: 8 warps, 1: 4
  const ch10::Plan& host_plan() const { return plan_; }
  void poison_workspace();  // NaN in the partial results: a merge that reads an unwritten one shows it

  // For tests: the scores exercise alone (mla_kernel.cuh, "the scores"). The planned items run
  // as in run() on a 16-bit pool, but each stops after the scores of its stages that begin
  // before key `keys` and writes them out: scores[(token * h_q + head) * keys + k] (device,
  // float; token a row of q) is the row's score of key k, q . row * scale * log2(e), or -inf
  // where the row does not attend key k, for every k < keys of those stages (32 * row_groups()
  // keys a stage). Nothing else is written; no softmax, no P V. Every item must start at key 0:
  // a plan that splits no tile (plan() on one thread block, or use_plan). keys: 1 to 1024.
  template <typename T>
  void run_scores(float* scores, int keys, const T* q, const T* latent_pool, const int* block_table,
                  const int* seq_lens, const int* query_start_loc, float scale, cudaStream_t stream = nullptr);

 private:
  ch10::Plan plan_;
  MlaShape shape_{};
  DType dtype_ = DType::fp16;
  bool planned_ = false;
  int rounds_ = 0;
  MlaBlock block_ = MlaBlock::automatic, planned_block_ = MlaBlock::eight_warps;
  DeviceBuffer<ch10::WorkItem> items_;
  DeviceBuffer<int> counters_;
  DeviceBuffer<float> max_logits_, exp_sums_, partial_out_;
};

// Thread blocks of one wave of the MLA kernel on blocks of row_groups row groups (2: 8 warps,
// 1: 4 warps; resident blocks per SM x SMs; the CPU emulator: 4 per worker thread, as
// chapter 10).
int mla_wave_size(DType dtype, int row_groups = 2);

// The kernel's tile, for tests and the book: items of up to 64 rows run on thread blocks of
// 8 warps (2 row groups x 4 column quarters) with 64-row stages, one block an SM; tiles of at
// most kSmallTileRows rows may also run on blocks of 4 warps (1 row group) with 32-row
// stages, two blocks an SM, or on 8 warps holding the queries in registers (one 16-row mma
// tile a row group), and tiles of at most kQRegTileRows on the 4-warp block holding them or
// on the 8-warp block on key halves (mla_kernel.cuh, BlockShape; MlaBlock above).
inline constexpr int kTileRows = ch10::kTileRows;  // 64 query rows an item
inline constexpr int kStageTokens = 64;            // latent rows a pipeline stage holds
inline constexpr int kWarps = 8;                   // 2 row groups x 4 column quarters
inline constexpr int kSmallTileRows = 32;          // the tiles of the 4-warp block and of the 8-warp block that holds Q in registers
inline constexpr int kQRegTileRows = 16;           // the tiles of the 4-warp block that holds Q in registers, and of key halves

// ---- In chapter 8's engine --------------------------------------------------------------

// ANCHOR: step_attention
// Chapter 8's engine on this chapter's cache and kernel: an MLA TinyModel (ModelConfig::
// attention = AttentionKind::mla, kv_dtype fp16 or bf16) with set_step_attention(
// std::make_shared<ch11::MlaStepAttention>()). plan() once per step: the pool's and the
// batch's checks, then the step's metadata on the device and chapter 10's plan; per layer,
// write_latent (this chapter's writer) and run_latent (the absorbed decode kernel).
//
// The kernel takes 0 to 4 new tokens a sequence; a prefill chunk is longer. So plan()
// cuts each sequence's new tokens into pieces of at most 4 consecutive rows, and each
// piece is a sequence of its own for the kernel: the same block table row, its seq_len
// ending at the piece's last token (causal). Rows keep their places, so one launch covers
// the whole step, and every token's row is in the pool before the launch (write_latent
// runs first). A chunk of n tokens reads its context ceil(n / 4) times: servers run MLA's
// prefill decompressed instead; decode (1 to 4 tokens) is one piece.
class MlaStepAttention : public ch08::StepAttention {
 public:
  void plan(const std::vector<ch03::BatchMetadata>& groups, const ch08::StepCache& cache) override;
  void write_latent(int group, void* latent_pool, const void* c_kv, const void* k_rope,
                    cudaStream_t stream) override;
  void run_latent(int group, void* out, const void* q, const void* latent_pool, float scale,
                  cudaStream_t stream) override;
  int steps_planned() const { return steps_; }
  // The kernel's sequences in group g's last plan: pieces of at most 4 new tokens.
  int pieces(int g = 0) const { return groups_.at(size_t(g)).pieces; }

  // What plan() gives the kernel for one group: the pieces' block table (piece-major,
  // max_blocks_per_seq wide), seq_lens and query_start_loc. Sequences with no new token
  // have no piece.
  struct Pieces {
    std::vector<int> block_table, seq_lens, query_start_loc;
  };
  static Pieces cut(const ch03::BatchMetadata& batch);

 private:
  struct Group {  // one layer group's plan and metadata on the device
    MlaDecode runner;
    DeviceBuffer<int> block_table, seq_lens, query_start_loc;
    DeviceBuffer<int64_t> slots;
    int num_tokens = 0, pieces = 0;
  };
  std::vector<Group> groups_;
  int num_groups_ = 0;
  LatentPoolShape pool_{};
  DType dtype_ = DType::fp16;
  int steps_ = 0;
};
// ANCHOR_END: step_attention

}  // namespace pa::ch11
