// Chapter 8's engine on chapter 10's kernel (given code): the step's metadata, uploaded
// once per step into buffers that keep their addresses, and one runner call per layer.
#include "pa/ch10_varlen.h"

namespace pa::ch10 {

void VarlenStepAttention::plan(const std::vector<ch03::BatchMetadata>& groups, const ch08::StepCache& cache) {
  PA_REQUIRE(!cache.latent, "VarlenStepAttention: chapter 10's kernel reads K/V pools, not a latent cache (MLA)");
  PA_REQUIRE(cache.dtype == DType::fp16 || cache.dtype == DType::bf16,
             "VarlenStepAttention: the cache is " << dtype_name(cache.dtype)
                                                  << "; chapter 10's kernel reads fp16 or bf16");
  PA_REQUIRE(!groups.empty(), "VarlenStepAttention: plan() needs the metadata of at least one layer group");
  for (size_t g = 0; g < cache.windows.size(); ++g)
    PA_REQUIRE(cache.windows[g] == 0, "VarlenStepAttention: layer group " << g << " has a sliding window of "
                                          << cache.windows[g]
                                          << "; chapter 10's kernel attends full layers (ch12::HybridStepAttention "
                                             "takes windows)");
  PA_REQUIRE(cache.sinks.empty(), "VarlenStepAttention: the model has attention sinks; chapter 10's kernel has "
                                  "none (ch12::HybridStepAttention takes them)");
  if (groups_.size() < groups.size()) groups_.resize(groups.size());
  const ch02::PoolShape& pool = cache.pool;
  for (size_t g = 0; g < groups.size(); ++g) {  // each group: its own tables, its own plan
    const ch03::BatchMetadata& batch = groups[g];
    const VarlenShape s{batch.num_seqs, batch.query_start_loc.empty() ? 0 : batch.query_start_loc.back(),
                        cache.num_q_heads, pool.num_kv_heads, pool.head_size, pool.block_size, pool.num_blocks,
                        batch.max_blocks_per_seq};
    check_metadata(s, batch.block_table, batch.context_lens, batch.query_start_loc);
    Group& G = groups_[g];
    G.runner.plan(s, cache.dtype, CacheType::model_dtype, batch.context_lens, batch.query_start_loc);
    G.block_table.upload_prefix(batch.block_table);
    G.seq_lens.upload_prefix(batch.context_lens);
    G.query_start_loc.upload_prefix(batch.query_start_loc);
  }
  num_groups_ = int(groups.size());
  dtype_ = cache.dtype;
  ++steps_;
}

void VarlenStepAttention::run(int group, void* out, const void* q, const void* k_pool, const void* v_pool,
                              float scale, cudaStream_t stream) {
  PA_REQUIRE(steps_ > 0, "VarlenStepAttention: run() before plan()");
  PA_REQUIRE(group >= 0 && group < num_groups_,
             "VarlenStepAttention: layer group " << group << " was not planned (" << num_groups_ << " groups)");
  Group& G = groups_[size_t(group)];
  auto go = [&](auto t) {
    using T = decltype(t);
    G.runner.run<T>(static_cast<T*>(out), static_cast<const T*>(q), static_cast<const T*>(k_pool),
                    static_cast<const T*>(v_pool), G.block_table.get(), G.seq_lens.get(), G.query_start_loc.get(),
                    scale, stream);
  };
  if (dtype_ == DType::fp16) go(half{});
  else go(bf16{});
}

}  // namespace pa::ch10
