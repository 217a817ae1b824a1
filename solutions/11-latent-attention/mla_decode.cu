// Chapter 11: plan() and run() of the absorbed MLA decode: chapter 10's planner, this
// chapter's kernel (mla_kernel.cuh).
#include <algorithm>
#include <type_traits>

#include "mla_kernel.cuh"
#include "pa/launch.h"

namespace pa::ch11 {

namespace {

// The kernel for T (kFp8: over an fp8 latent pool) on blocks of RG row groups of MT mma
// tiles (KH: on key halves), its dynamic shared memory opted in (it is above 48 KB).
template <typename T, bool kFp8, int RG, int MT = 2, bool KH = false>
auto kernel_for() {
  const auto kernel = mla_decode_kernel<T, kFp8, RG, MT, KH>;
  PA_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     int(BlockShape<RG, MT, KH>::kSmemBytes)));
  return kernel;
}

template <typename T, int RG>
int wave_of() {
  const auto kernel = kernel_for<T, false, RG>();
  int sms = 0, per_sm = 4;  // the emulator has no occupancy: 4 per "SM" (worker), as chapter 10
  PA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
#if !defined(PA_BACKEND_CPU)
  PA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, BlockShape<RG>::kThreads,
                                                              BlockShape<RG>::kSmemBytes));
#else
  (void)kernel;
#endif
  return std::max(1, sms) * std::max(1, per_sm);
}

// The thread block for `block` (MlaBlock; automatic: the runner's choice, which also looks
// at the pool's format). A sequence's largest tile is its first (chapter 10's tile_rows);
// without query_start_loc the tiles are unknown.
MlaBlock block_for(MlaBlock block, const MlaShape& s, const std::vector<int>& query_start_loc) {
  PA_REQUIRE(block == MlaBlock::automatic || block == MlaBlock::eight_warps || block == MlaBlock::four_warps ||
                 block == MlaBlock::queries_in_registers || block == MlaBlock::eight_warps_queries_in_registers ||
                 block == MlaBlock::key_halves,
             "MlaDecode: unknown MlaBlock " << int(block));
  if (block == MlaBlock::eight_warps) return block;
  PA_REQUIRE(block == MlaBlock::automatic || !query_start_loc.empty(),
             "MlaDecode: a thread block other than 8 warps with 64-key stages needs the batch's query_start_loc "
                 "(use_plan's last argument)");
  if (query_start_loc.empty()) return MlaBlock::eight_warps;
  PA_REQUIRE(int(query_start_loc.size()) == s.num_seqs + 1,
             "MlaDecode: query_start_loc has " << query_start_loc.size() << " entries for " << s.num_seqs
                                               << " sequences (num_seqs + 1 expected)");
  int rows = 0, widest = 0;
  for (size_t b = 0; b + 1 < query_start_loc.size(); ++b) {
    const int r = ch10::tile_rows(query_start_loc[b + 1] - query_start_loc[b], s.num_q_heads, 0);
    if (r > rows) rows = r, widest = int(b);
  }
  // The forced blocks that take only small tiles: the most rows each takes.
  struct Limit {
    MlaBlock block;
    int rows;
    const char* words;
  };
  static constexpr Limit kLimits[] = {
      {MlaBlock::four_warps, kSmallTileRows, "the 4-warp thread block"},
      {MlaBlock::eight_warps_queries_in_registers, kSmallTileRows,
       "the 8-warp thread block that holds the queries in registers"},
      {MlaBlock::queries_in_registers, kQRegTileRows, "the 4-warp thread block that holds the queries in registers"},
      {MlaBlock::key_halves, kQRegTileRows, "the 8-warp thread block on key halves"}};
  for (const Limit& l : kLimits)
    if (block == l.block)
      PA_REQUIRE(rows <= l.rows, "sequence " << widest << "'s tiles have " << rows << " rows: " << l.words
                                             << " takes at most " << l.rows);
  // Key halves is one thread block an SM, where an fp8 pool's conversion has no other block's
  // mma to overlap (it measured slower: NOTES.md, "ch11 v8"); the kernel is not built for it.
  PA_REQUIRE(block != MlaBlock::key_halves || s.latent == LatentFormat::bits16,
             "MlaDecode: the 8-warp thread block on key halves takes a 16-bit latent pool, not an fp8 one");
  if (block != MlaBlock::automatic) return block;
  if (rows <= kQRegTileRows)
    return s.latent == LatentFormat::fp8_e4m3 ? MlaBlock::queries_in_registers : MlaBlock::key_halves;
  return rows <= kSmallTileRows ? MlaBlock::eight_warps_queries_in_registers : MlaBlock::eight_warps;
}

// The launch of the kernel for T, kFp8 on BlockShape<RG, MT, KH>.
template <typename T, bool kFp8, int RG, int MT, bool KH = false>
void launch_on(const MlaArgs<T>& a, int grid, cudaStream_t stream) {
  using B = BlockShape<RG, MT, KH>;
  pa::launch(kernel_for<T, kFp8, RG, MT, KH>(), dim3(grid), dim3(B::kThreads), B::kSmemBytes, stream, a);
}

// The launch of the kernel for T, kFp8 and the planned block shape.
template <typename T, bool kFp8>
void launch_mla(const MlaArgs<T>& a, MlaBlock block, int grid, cudaStream_t stream) {
  if (block == MlaBlock::queries_in_registers) launch_on<T, kFp8, 1, 1>(a, grid, stream);
  else if (block == MlaBlock::eight_warps_queries_in_registers) launch_on<T, kFp8, 2, 1>(a, grid, stream);
  else if (block == MlaBlock::key_halves) {
    if constexpr (!kFp8) launch_on<T, false, 2, 1, true>(a, grid, stream);  // block_for refuses an fp8 pool
  }
  else if (block == MlaBlock::four_warps) launch_on<T, kFp8, 1, 2>(a, grid, stream);
  else launch_on<T, kFp8, 2, 2>(a, grid, stream);
}

void check_dtype(DType dtype) {
  PA_REQUIRE(dtype == DType::fp16 || dtype == DType::bf16,
             "the MLA decode kernel takes half or bf16 queries, cache and outputs, not " << dtype_name(dtype));
}

// The fp8 pool's own checks, before the dtype's: its RoPE part is in the query's type.
void check_latent_format(const MlaShape& s, DType dtype) {
  if (s.latent == LatentFormat::fp8_e4m3)
    PA_REQUIRE(dtype == DType::fp16 || dtype == DType::bf16,
               "the fp8 latent pool keeps k_rope in the query's 16-bit type: fp16 or bf16 queries, not "
                   << dtype_name(dtype));
  else
    PA_REQUIRE(s.latent == LatentFormat::bits16, "unknown LatentFormat " << int(s.latent));
}

const char* pool_words(LatentFormat f) {
  return f == LatentFormat::fp8_e4m3 ? "an fp8 latent pool (656-byte rows)" : "a 16-bit latent pool (1152-byte rows)";
}

}  // namespace

int mla_wave_size(DType dtype, int row_groups) {
  check_dtype(dtype);
  PA_REQUIRE(row_groups == 1 || row_groups == 2, "mla_wave_size: row_groups " << row_groups << " (1 or 2)");
  if (row_groups == 1) return dtype == DType::fp16 ? wave_of<half, 1>() : wave_of<bf16, 1>();
  return dtype == DType::fp16 ? wave_of<half, 2>() : wave_of<bf16, 2>();
}

// ANCHOR: plan
void MlaDecode::plan(const MlaShape& s, DType dtype, const std::vector<int>& seq_lens,
                     const std::vector<int>& query_start_loc, int chunk_tokens, int grid,
                     cudaStream_t stream) {
  planned_ = false;
  check_latent_format(s, dtype);
  check_dtype(dtype);
  check_mla_metadata(s, {}, seq_lens, query_start_loc);
  const int rg = row_groups_of(block_for(block_, s, query_start_loc));
  const int g = grid > 0 ? grid : mla_wave_size(dtype, rg);  // both 4-warp blocks: two an SM
  // Chapter 10's planner, reused: the latent rows are one KV head of h_q query heads.
  use_plan(s, dtype, ch10::make_plan(planning_shape(s), seq_lens, query_start_loc, g, chunk_tokens), stream,
           query_start_loc);
}
// ANCHOR_END: plan

void MlaDecode::use_plan(const MlaShape& s, DType dtype, const ch10::Plan& plan, cudaStream_t stream,
                         const std::vector<int>& query_start_loc) {
  planned_ = false;
  check_latent_format(s, dtype);
  check_dtype(dtype);
  check_mla_shape(s);
  planned_block_ = block_for(block_, s, query_start_loc);
  // A split tile's ticket counts its chunks' arrivals in 16 bits (mla_kernel.cuh, split_merge).
  for (const ch10::WorkItem& w : plan.items)
    PA_REQUIRE(w.num_splits < (1 << 16), "MlaDecode: a tile cut into " << w.num_splits
                                             << " chunks; the split merge takes at most 65535");
  // The device's layout, chapter 10's: item k of thread block c at [k * grid + c].
  const std::vector<ch10::WorkItem> by_rounds = ch10::items_by_rounds(plan, &rounds_);
  plan_ = plan;
  shape_ = s;
  dtype_ = dtype;
  items_.reserve(by_rounds.size(), 0);
  counters_.reserve(size_t(plan_.num_counters), 0);  // zero; each launch leaves them zero
  const size_t rows = size_t(plan_.partial_rows);
  max_logits_.reserve(rows, 0xff);
  exp_sums_.reserve(rows, 0xff);
  partial_out_.reserve(rows * size_t(kLatentDim), 0xff);
  if (!by_rounds.empty())
    PA_CUDA_CHECK(cudaMemcpyAsync(items_.get(), by_rounds.data(), by_rounds.size() * sizeof(ch10::WorkItem),
                                  cudaMemcpyHostToDevice, stream));
  planned_ = true;
}

void MlaDecode::poison_workspace() {
  max_logits_.fill_bytes(0xff);
  exp_sums_.fill_bytes(0xff);
  partial_out_.fill_bytes(0xff);
}

template <typename T>
void MlaDecode::run(T* out, const T* q, const T* latent_pool, const int* block_table,
                    const int* seq_lens, const int* query_start_loc, float scale,
                    cudaStream_t stream) {
  static_assert(std::is_same<T, half>::value || std::is_same<T, bf16>::value,
                "the MLA decode kernel takes half or bf16");
  PA_REQUIRE(planned_, "MlaDecode: run() before plan(): plan the step first");
  PA_REQUIRE(dtype_ == dtype_of<T>(), "MlaDecode: planned for " << dtype_name(dtype_) << ", run with "
                                                                << dtype_name(dtype_of<T>()));
  PA_REQUIRE(shape_.latent == LatentFormat::bits16, "MlaDecode: planned for " << pool_words(shape_.latent)
                                                        << ", run with a 16-bit one (1152-byte rows)");
  if (plan_.items.empty()) return;  // no new tokens at all
  const MlaArgs<T> a{out, q, latent_pool, block_table, seq_lens, query_start_loc, items_.get(), rounds_,
                     max_logits_.get(), exp_sums_.get(), partial_out_.get(), counters_.get(), scale,
                     shape_.num_q_heads, shape_.block_size, shape_.max_blocks_per_seq};
  launch_mla<T, false>(a, planned_block_, plan_.grid, stream);
}

// ANCHOR: run_fp8
template <typename T>
void MlaDecode::run(T* out, const T* q, const uint8_t* latent_pool, const int* block_table,
                    const int* seq_lens, const int* query_start_loc, float scale,
                    cudaStream_t stream) {
  static_assert(std::is_same<T, half>::value || std::is_same<T, bf16>::value,
                "the fp8 latent pool keeps k_rope in half or bf16, the query's type");
  PA_REQUIRE(planned_, "MlaDecode: run() before plan(): plan the step first");
  PA_REQUIRE(dtype_ == dtype_of<T>(), "MlaDecode: planned for " << dtype_name(dtype_) << ", run with "
                                                                << dtype_name(dtype_of<T>()));
  PA_REQUIRE(shape_.latent == LatentFormat::fp8_e4m3, "MlaDecode: planned for " << pool_words(shape_.latent)
                                                          << ", run with an fp8 one (656-byte rows)");
  if (plan_.items.empty()) return;
  MlaArgs<T> a{out, q, nullptr, block_table, seq_lens, query_start_loc, items_.get(), rounds_,
               max_logits_.get(), exp_sums_.get(), partial_out_.get(), counters_.get(), scale,
               shape_.num_q_heads, shape_.block_size, shape_.max_blocks_per_seq};
  a.latent_fp8 = latent_pool;
  launch_mla<T, true>(a, planned_block_, plan_.grid, stream);
}
// ANCHOR_END: run_fp8

#define PA_INSTANTIATE(T)                                                                     \
  template void MlaDecode::run<T>(T*, const T*, const T*, const int*, const int*, const int*, \
                                  float, cudaStream_t);                                       \
  template void MlaDecode::run<T>(T*, const T*, const uint8_t*, const int*, const int*,       \
                                  const int*, float, cudaStream_t);
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch11
