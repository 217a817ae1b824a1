// Chapter 10: the kernel serving engines run today. One launch of paged attention over a
// ragged batch: decodes (one new token), speculative-decoding verifications (a few new
// tokens) and chunked-prefill pieces (hundreds or thousands) of many sequences together.
//
// The batch is described the way the field describes it:
//   q, out           [num_tokens, Hq, D]  the new tokens of every sequence, stacked
//   query_start_loc  [B + 1]              sequence b's new tokens are rows
//                                         query_start_loc[b] .. query_start_loc[b + 1] - 1
//   seq_lens         [B]                  tokens of sequence b in the cache, new ones included
//   block_table      [B, max_blocks_per_seq], the pools in chapter 2's layouts (or chapter 6's
//                    e4m3 bytes)
// New token i of sequence b (n_b new tokens) sits at position seq_lens[b] - n_b + i and
// attends causally to positions 0 .. that one (its K/V were written by
// reshape_and_cache before the launch, as in chapter 8).
//
// Plan, then run. plan() runs on the host, once per engine step: it turns the batch's
// lengths into a balanced list of work items -- (sequence, KV head, a tile of 64 query rows
// or of 8 for a decode of G <= 8, a chunk of the KV) -- dealt to a fixed grid of one GPU wave, and
// copies that list to the device. run() is then called once per layer with the same plan:
// a fixed grid and the plan in device memory, so a step can be captured in a CUDA graph and
// replayed. Items that split one tile's KV write partial results; the last of them to finish
// merges them by log-sum-exp (chapter 5's merge_partitions), in the same launch.
//
// Queries and outputs are half or bf16; the cache is the same dtype or e4m3 (run_fp8). Head
// sizes 64, 80, 96, 112, 128, 256; block sizes 8, 16, 32 (16 and 32 for e4m3). The scores
// and the output update run on the tensor cores (chapter 9's mma.sync tiles).
#pragma once

#include <cstdint>
#include <vector>

#include "pa/backend.h"
#include "pa/check.h"
#include "pa/device_buffer.h"
#include "pa/dtype.h"
#include "pa/ch08_model.h"

namespace pa::ch10 {

// ANCHOR: shape
struct VarlenShape {
  int num_seqs;            // B
  int num_tokens;          // new tokens of the whole batch: rows of q and out
  int num_q_heads;         // Hq
  int num_kv_heads;        // Hkv; Hq must be a multiple of it (GQA; Hkv = 1 is MQA)
  int head_size;           // D: 64, 80, 96, 112, 128 or 256
  int block_size;          // tokens per KV block: 8, 16 or 32
  int num_blocks;          // blocks in each pool
  int max_blocks_per_seq;  // the block table's width
  // Chapter 11 plans its latent tiles with make_plan (head size 576, block size 64: sizes
  // this chapter's kernel does not take) and checks those sizes itself: when set,
  // check_shape calls this instead of chapter 4's size limits. nullptr: chapter 4's.
  void (*check_sizes)(const VarlenShape&) = nullptr;
};
// ANCHOR_END: shape

// Throws pa::Error naming the problem: an unsupported head or block size, Hq not a multiple
// of Hkv, non-positive sizes (the sizes by s.check_sizes when it is set).
void check_shape(const VarlenShape& s);

// The host's check of the batch before it goes to the device: query_start_loc [B + 1] starts
// at 0, never decreases and ends at num_tokens; every sequence has 0 <= n_b <= seq_lens[b]
// <= max_blocks_per_seq * block_size; each used table entry is a block of the pool.
// block_table may be empty (not checked: the caller validated it, chapter 4's DeviceBatch).
void check_metadata(const VarlenShape& s, const std::vector<int>& block_table,
                    const std::vector<int>& seq_lens, const std::vector<int>& query_start_loc);

// ANCHOR: work_item
// Query rows: sequence b's new token i with query head kv_head * G + h (G = Hq / Hkv) is
// row i * G + h of that sequence, so one KV head's G query heads sit side by side and each
// K/V byte loaded serves all of them. A tile is kTileRows consecutive rows, or kDecodeRows
// for a decode tile: one new token of at most 8 query heads per KV head (chapter 9's K Q^T
// has 8 columns). A larger group's decode is one general tile of its G rows (MQA's 32 heads:
// one 32-row tile), so that its KV is read once for all its heads, not once per 8.
inline constexpr int kTileRows = 64;   // 4 warps x 16 rows (one mma.sync row tile each)
inline constexpr int kWarps = kTileRows / 16;  // warps of a thread block
inline constexpr int kDecodeRows = 8;  // a decode tile: G <= 8 heads
inline constexpr int kKvTile = 64;     // tokens of K/V per pipeline stage (at most); chunks are multiples
inline constexpr int kWarpItemTokens = 2 * 16 * kWarps;  // a decode tile this short: a warp item

// The tiles of a sequence with n_new new tokens start every tile_size(n_new, G) rows; the one
// at row0 has tile_rows(n_new, G, row0) rows.
__host__ __device__ inline bool decode_tile(int n_new, int G) { return n_new == 1 && G <= kDecodeRows; }
__host__ __device__ inline int tile_size(int n_new, int G) {
  return decode_tile(n_new, G) ? kDecodeRows : kTileRows;
}
__host__ __device__ inline int tile_rows(int n_new, int G, int row0) {
  const int left = n_new * G - row0;
  return left < tile_size(n_new, G) ? left : tile_size(n_new, G);
}

struct WorkItem {
  int seq;           // b
  int kv_head;       // the KV head; its G query heads are the tile's columns of rows
  int row0;          // the tile's first row (a multiple of tile_size(n_b))
  int kv_begin;      // the KV tokens this item attends over: [kv_begin, kv_end) of the
  int kv_end;        //   sequence's cache (kv_end <= the last position a row of the tile sees + 1)
  int split;         // which chunk of its tile's KV this is: 0 .. num_splits - 1
  int num_splits;    // 1: the item writes out itself; more: partials, merged by the last
  int partial_base;  // split tiles: where the tile's partial results start in the workspace
  int counter;       // split tiles: the tile's ticket counter; -1 otherwise
  int by_warp;       // 1: a warp item -- a whole decode tile of at most kWarpItemTokens that
                     //   one warp runs alone, beside three others; a block runs these first
};
// ANCHOR_END: work_item

// One thread block of the merge kernel (solutions/10-varlen-attention/merge_kernel.cuh):
// row `row` of a split tile (its first item's seq, kv_head, row0, num_splits, partial_base
// and counter); `blocks` thread blocks merge that tile.
struct MergeRow {
  int seq, kv_head, row0, row, num_splits, partial_base, counter, blocks;
};

// ANCHOR: plan
// What plan() computes on the host: every work item, dealt to `grid` thread blocks. Thread
// block c runs items[cta_start[c]] .. items[cta_start[c + 1] - 1]: its warp items first,
// then its own in order. (On the device the items are laid out by rounds: see plan().)
// A tile's KV [0, kv_needed) is cut into chunks [p * chunk, (p + 1) * chunk) of one size per
// tile (a multiple of kKvTile), the last one shorter; kv_needed = seq_len - n_b + (the
// tile's last new token) + 1.
struct Plan {
  int grid = 0;              // thread blocks of a launch: one wave of the GPU, fixed per config
  int chunk_tokens = 0;      // the forced chunk (a multiple of kKvTile), or 0: sized per tile
  double target_cost = 0;    // one thread block's fair share: the step's item_cost / grid
  int num_counters = 0;      // tiles whose KV is split (one ticket counter each)
  int64_t partial_rows = 0;  // workspace rows the split tiles need (kTileRows per chunk)
  std::vector<WorkItem> items;
  std::vector<int> cta_start;  // [grid + 1]
};

// The planner, a pure function of the lengths (host vectors, as the scheduler has them).
// chunk_tokens = 0 sizes each tile's chunks to about target_cost (at least 256 tokens), so
// that the items fill `grid` thread blocks about once; a positive value forces one chunk size
// for every tile (rounded up to kKvTile; tests use it to force splits). Items are dealt
// longest first to the least-loaded thread block.
// chunk_tokens = kWholeTiles cuts no tile: every item attends its tile's whole KV (warp
// items as with 0). The core tests plan this way; split tiles (their partials and the merge
// by the last chunk) are the chapter's stretch exercise, tested by the Stretch* suites.
// window > 0 (chapter 12's sliding window: a row at position p sees keys [p - window + 1,
// p]): a tile's KV starts at its first row's first key rounded down to 16 tokens, kv_first,
// and only [kv_first, kv_needed) is priced and cut into chunks [kv_first + p * chunk, ...);
// no warp items. 0: no window, every tile from key 0 (as above).
inline constexpr int kWholeTiles = -1;
Plan make_plan(const VarlenShape& s, const std::vector<int>& seq_lens,
               const std::vector<int>& query_start_loc, int grid, int chunk_tokens = 0,
               int window = 0);

// The cost the planner balances, in "KV tokens of a decode row tile": a tile of `rows`
// valid query rows over `kv_tokens` tokens, run by the thread block or by one warp (a warp
// item; tests and the book use it).
double item_cost(int kv_tokens, int rows, bool by_warp = false);

// The chunk a tile of `rows` rows is cut into when the step's fair share per thread block
// is target_cost: the whole tokens whose item_cost (its start included) fits in
// target_cost, at least 256, rounded up to a multiple of kKvTile (make_plan's; tests use it).
int chunk_for(int rows, double target_cost);
// ANCHOR_END: plan

// The device's layout of a plan: item k of thread block c at [k * grid + c], the empty places
// (a block with fewer items) seq -1; *rounds = the most items of any block. Throws unless
// cta_start has grid + 1 entries, from 0 to the number of items. (Chapter 11's runner too.)
std::vector<WorkItem> items_by_rounds(const Plan& plan, int* rounds);

// Does every tile of the batch that runs the rows path have at most 32 rows, and one more than
// 16 (MQA's decode, 8 drafts at G = 4)? Then the launch takes the kernel in which warps 2 and
// 3, which own no rows, skip their stages (varlen_kernel's kShortTiles). No query_start_loc: no.
bool short_tiles(const VarlenShape& s, const std::vector<int>& query_start_loc);

// ANCHOR: runner
enum class CacheType { model_dtype, fp8_e4m3 };

// Plan once per step, run once per layer. Device buffers (the plan, the workspace, the
// counters) keep their addresses while a plan fits in them, and the merge kernel's grid
// only grows, so a graph captured after the largest step stays valid.
class VarlenAttention {
 public:
  // The plan for this batch, for queries of `dtype` (fp16 or bf16) and this cache.
  // chunk_tokens as in make_plan; grid = 0 takes one wave of the GPU for the kernel that
  // will run (its resident thread blocks per SM x the SM count). On the device, item k of
  // thread block c sits at [k * grid + c] (a block's first item costs one load, not two);
  // rounds = the most items of any block, and a block with fewer has empty places (seq -1).
  void plan(const VarlenShape& s, DType dtype, CacheType cache, const std::vector<int>& seq_lens,
            const std::vector<int>& query_start_loc, int chunk_tokens = 0, int grid = 0,
            cudaStream_t stream = nullptr);

  // Attention of every row of q (device pointers, the planned shape and dtype). seq_lens and
  // query_start_loc must hold on the device what plan() was given.
  template <typename T>
  void run(T* out, const T* q, const T* k_pool, const T* v_pool, const int* block_table,
           const int* seq_lens, const int* query_start_loc, float scale,
           cudaStream_t stream = nullptr);
  // The same on chapter 6's e4m3 cache, with its scales (device pointers, one float each).
  template <typename T>
  void run_fp8(T* out, const T* q, const uint8_t* k_pool, const uint8_t* v_pool,
               const int* block_table, const int* seq_lens, const int* query_start_loc,
               const float* k_scale, const float* v_scale, float scale,
               cudaStream_t stream = nullptr);

  // Lays out and uploads `plan` (plan() is make_plan's plan, then this). Tests call it with
  // plans made by hand that make_plan never makes (chunks that end inside a stage of the
  // ring). A plan must cover the batch as make_plan's do (see Plan and WorkItem; kv_begin a
  // multiple of 8 tokens, 16 for e4m3: one 16-byte copy of V); only its cta_start is
  // checked. seq_lens and query_start_loc as for plan().
  // query_start_loc (the batch's, as for plan()) tells which split tiles the merge kernel
  // takes and how many rows each has; without it, every split tile that may be one gets a
  // block for each of kTileRows rows (a tile of fewer rows leaves the rest idle).
  void use_plan(const VarlenShape& s, DType dtype, CacheType cache, const Plan& plan,
                cudaStream_t stream = nullptr, const std::vector<int>& query_start_loc = {});

  // run() with a later chapter's mask policy in place of chapter 10's causal mask (a type
  // like CausalMask in solutions/10-varlen-attention/varlen_args.cuh; chapter 12's sliding
  // window, sinks and soft-cap). Defined in launch_varlen.cuh: the chapter that defines
  // Mask instantiates it. A plan for a policy with hooks must have no warp items (make_plan
  // with a window makes none); its decode tiles run on the general path.
  template <typename T, typename Mask>
  void run_masked(T* out, const T* q, const T* k_pool, const T* v_pool, const int* block_table,
                  const int* seq_lens, const int* query_start_loc, float scale, const Mask& mask,
                  cudaStream_t stream = nullptr);

  const Plan& host_plan() const { return plan_; }
  // Fills the partial-result workspace with NaN: a merge that reads a partial no item wrote
  // shows it. (Another byte for a test's rerun that tells a NaN read from one computed.)
  void poison_workspace(int byte = 0xff);

 private:
  template <typename T, typename C, typename Mask>
  void launch(T* out, const T* q, const C* k_pool, const C* v_pool, const int* block_table,
              const int* seq_lens, const int* query_start_loc, const float* k_scale,
              const float* v_scale, float scale, const Mask& mask, cudaStream_t stream);

  Plan plan_;
  VarlenShape shape_{};
  DType dtype_ = DType::fp16;
  CacheType cache_ = CacheType::model_dtype;
  bool planned_ = false;
  DeviceBuffer<WorkItem> items_;
  std::vector<WorkItem> by_rounds_;  // the items in the device's layout
  int host_rounds_ = 0;              // the most items of any block (copied to rounds_)
  DeviceBuffer<int> rounds_, counters_, arrivals_;
  DeviceBuffer<MergeRow> merge_rows_;  // the merge kernel's blocks (merge_kernel.cuh)
  std::vector<MergeRow> merge_rows_host_;  // (kept until the copy is done, as by_rounds_)
  int num_merge_rows_ = 0;                 // this plan's (copied to merge_count_)
  int merge_grid_ = 0;                     // the merge kernel's grid: the most rows of any plan
  bool short_tiles_ = false;               // rows-path tiles of 17-32 rows and none longer
  DeviceBuffer<int> merge_count_;
  DeviceBuffer<float> max_logits_, exp_sums_, partial_out_;
};
// ANCHOR_END: runner

// ANCHOR: step_attention
// Chapter 8's engine on this chapter's kernel: TinyModel::set_step_attention(
// std::make_shared<ch10::VarlenStepAttention>()) turns each layer's decode (chapter 5) and
// prefill (chapter 8) launches into one varlen launch over the whole step. plan() runs
// once per step (each layer group's metadata goes to the device and its work items are
// dealt); run() once per layer, with the layer's group. The model's cache must be fp16 or
// bf16, in K/V pools (not MLA's latent pool).
class VarlenStepAttention : public ch08::StepAttention {
 public:
  using ch08::StepAttention::plan;
  using ch08::StepAttention::run;
  void plan(const std::vector<ch03::BatchMetadata>& groups, const ch08::StepCache& cache) override;
  void run(int group, void* out, const void* q, const void* k_pool, const void* v_pool, float scale,
           cudaStream_t stream) override;
  int steps_planned() const { return steps_; }

 private:
  struct Group {  // one layer group's plan and metadata on the device
    VarlenAttention runner;
    DeviceBuffer<int> block_table, seq_lens, query_start_loc;
  };
  std::vector<Group> groups_;
  int num_groups_ = 0;  // planned this step
  DType dtype_ = DType::fp16;
  int steps_ = 0;
};
// ANCHOR_END: step_attention

// Thread blocks of one wave for the kernel that serves (dtype, cache, head_size): resident
// blocks per SM x SMs (the CPU emulator: 4 per worker thread).
int wave_size(DType dtype, CacheType cache, int head_size);

}  // namespace pa::ch10
