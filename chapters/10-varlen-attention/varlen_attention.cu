// Chapter 10: plan() and run() on a cache in the model's dtype (e4m3: varlen_attention_fp8.cu).
#include "launch_varlen.cuh"

namespace pa::ch10 {

int wave_fp8(DType dtype, int head_size);  // varlen_attention_fp8.cu

int wave_size(DType dtype, CacheType cache, int head_size) {
  PA_REQUIRE(dtype == DType::fp16 || dtype == DType::bf16,
             "chapter 10's kernel takes half or bf16 queries and outputs, not "
                 << dtype_name(dtype) << " (float: chapters 4-5 and 8)");
  if (cache == CacheType::fp8_e4m3) return wave_fp8(dtype, head_size);
  return dtype == DType::fp16 ? wave_of<half, half>(head_size) : wave_of<bf16, bf16>(head_size);
}

// The checks both ways of planning make before anything is laid out.
void check_planned(const VarlenShape& s, DType dtype, CacheType cache) {
  PA_REQUIRE(dtype == DType::fp16 || dtype == DType::bf16,
             "chapter 10's kernel takes half or bf16 queries and outputs, not "
                 << dtype_name(dtype) << " (float: chapters 4-5 and 8)");
  check_shape(s);
  if (cache == CacheType::fp8_e4m3) {
    PA_REQUIRE(s.block_size >= 16, "an e4m3 cache needs block_size 16 or 32, got "
                                       << s.block_size << " (a V row of 8 one-byte tokens is "
                                          "smaller than one 16-byte copy)");
    PA_REQUIRE(s.head_size % 16 == 0, "head_size " << s.head_size << " is not a multiple of 16 "
                                                      "(one 16-byte chunk of e4m3)");
  }
}

void VarlenAttention::plan(const VarlenShape& s, DType dtype, CacheType cache,
                           const std::vector<int>& seq_lens,
                           const std::vector<int>& query_start_loc, int chunk_tokens, int grid,
                           cudaStream_t stream) {
  planned_ = false;
  check_planned(s, dtype, cache);
  const int g = grid > 0 ? grid : wave_size(dtype, cache, s.head_size);
  use_plan(s, dtype, cache, make_plan(s, seq_lens, query_start_loc, g, chunk_tokens), stream,
           query_start_loc);
}

// ANCHOR: plan_upload
// The merge kernel's blocks: one per row of each split tile it may merge (merged_apart), with
// the batch's query_start_loc; without it, kTileRows per tile of enough chunks to be one.
std::vector<MergeRow> merge_rows(const VarlenShape& s, const Plan& plan,
                                 const std::vector<int>& query_start_loc) {
  const int G = s.num_q_heads / s.num_kv_heads;
  std::vector<MergeRow> rows;
  for (const WorkItem& w : plan.items) {
    if (w.split != 0 || w.num_splits <= kApartChunks) continue;  // one entry per such tile
    int n = kTileRows;
    if (!query_start_loc.empty()) {
      PA_REQUIRE(size_t(w.seq) + 1 < query_start_loc.size(), "use_plan: query_start_loc has no sequence " << w.seq);
      n = tile_rows(query_start_loc[size_t(w.seq) + 1] - query_start_loc[size_t(w.seq)], G, w.row0);
      if (!merged_apart(w.num_splits, n)) continue;
    }
    for (int r = 0; r < n; ++r)
      rows.push_back({w.seq, w.kv_head, w.row0, r, w.num_splits, w.partial_base, w.counter, n});
  }
  return rows;
}

bool short_tiles(const VarlenShape& s, const std::vector<int>& query_start_loc) {
  const int G = s.num_q_heads / s.num_kv_heads;
  int most = 0;
  for (size_t b = 0; b + 1 < query_start_loc.size(); ++b) {
    const int n_new = query_start_loc[b + 1] - query_start_loc[b];
    if (n_new > 0 && !decode_tile(n_new, G)) most = std::max(most, tile_rows(n_new, G, 0));
  }
  return most > kSplitTokenRows && most <= kTileRows / 2;
}

void VarlenAttention::use_plan(const VarlenShape& s, DType dtype, CacheType cache, const Plan& plan,
                               cudaStream_t stream, const std::vector<int>& query_start_loc) {
  planned_ = false;
  check_planned(s, dtype, cache);
  by_rounds_ = items_by_rounds(plan, &host_rounds_);
  plan_ = plan;
  shape_ = s;
  dtype_ = dtype;
  cache_ = cache;
  items_.reserve(by_rounds_.size(), 0);
  rounds_.reserve(1, 0);
  counters_.reserve(size_t(plan_.num_counters), 0);  // zero; each launch leaves them zero
  const size_t rows = size_t(plan_.partial_rows);
  arrivals_.reserve(rows / kTileRows, 0);  // the merge kernel's, one per chunk (zero too)
  max_logits_.reserve(rows, 0xff);
  exp_sums_.reserve(rows, 0xff);
  partial_out_.reserve(rows * size_t(s.head_size), 0xff);
  PA_CUDA_CHECK(cudaMemcpyAsync(items_.get(), by_rounds_.data(), by_rounds_.size() * sizeof(WorkItem),
                                cudaMemcpyHostToDevice, stream));
  PA_CUDA_CHECK(cudaMemcpyAsync(rounds_.get(), &host_rounds_, sizeof(int), cudaMemcpyHostToDevice, stream));
  short_tiles_ = short_tiles(s, query_start_loc);
  // The merge kernel's rows, and their count on the device: its grid only grows, as the
  // buffers do, so a launch captured in a CUDA graph still runs a later plan's merges.
  merge_rows_host_ = merge_rows(s, plan, query_start_loc);
  num_merge_rows_ = int(merge_rows_host_.size());
  merge_grid_ = std::max(merge_grid_, num_merge_rows_);
  merge_rows_.reserve(size_t(merge_grid_), 0);
  merge_count_.reserve(1, 0);
  if (num_merge_rows_ > 0)
    PA_CUDA_CHECK(cudaMemcpyAsync(merge_rows_.get(), merge_rows_host_.data(),
                                  merge_rows_host_.size() * sizeof(MergeRow), cudaMemcpyHostToDevice, stream));
  PA_CUDA_CHECK(cudaMemcpyAsync(merge_count_.get(), &num_merge_rows_, sizeof(int), cudaMemcpyHostToDevice, stream));
  planned_ = true;
}
// ANCHOR_END: plan_upload

void VarlenAttention::poison_workspace(int byte) {
  max_logits_.fill_bytes(byte);
  exp_sums_.fill_bytes(byte);
  partial_out_.fill_bytes(byte);
}

template <typename T>
void VarlenAttention::run(T* out, const T* q, const T* k_pool, const T* v_pool,
                          const int* block_table, const int* seq_lens, const int* query_start_loc,
                          float scale, cudaStream_t stream) {
  launch<T, T>(out, q, k_pool, v_pool, block_table, seq_lens, query_start_loc, nullptr, nullptr,
               scale, CausalMask{}, stream);
}

#define PA_INSTANTIATE(T)                                                                       \
  template void VarlenAttention::run<T>(T*, const T*, const T*, const T*, const int*,           \
                                        const int*, const int*, float, cudaStream_t);
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch10
