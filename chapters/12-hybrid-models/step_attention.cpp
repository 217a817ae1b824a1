// Chapter 12 in chapter 8's engine (given code): one step attention for a hybrid model's
// layer groups. A full group without sinks runs chapter 10's kernel unchanged; a sliding
// group (or a full group with sinks) runs WindowAttention, chapter 10's kernel with this
// chapter's mask policy.
#include <algorithm>

#include "pa/ch12_engine.h"

namespace pa::ch12 {

// ANCHOR: hybrid_plan
void HybridStepAttention::plan(const std::vector<ch03::BatchMetadata>& groups, const ch08::StepCache& cache) {
  PA_REQUIRE(!cache.latent, "HybridStepAttention: windows are for K/V pools, not a latent cache (MLA)");
  PA_REQUIRE(cache.dtype == DType::fp16 || cache.dtype == DType::bf16,
             "HybridStepAttention: the cache is " << dtype_name(cache.dtype) << "; the kernel reads fp16 or bf16");
  PA_REQUIRE(!groups.empty(), "HybridStepAttention: plan() needs the metadata of at least one layer group");
  PA_REQUIRE(cache.windows.empty() || cache.windows.size() == groups.size(),
             "HybridStepAttention: " << groups.size() << " groups but " << cache.windows.size() << " windows");
  while (groups_.size() < groups.size()) groups_.push_back(std::make_unique<Group>());
  const ch02::PoolShape& pool = cache.pool;
  for (size_t g = 0; g < groups.size(); ++g) {
    const ch03::BatchMetadata& batch = groups[g];
    const ch10::VarlenShape s{batch.num_seqs, batch.query_start_loc.empty() ? 0 : batch.query_start_loc.back(),
                              cache.num_q_heads, pool.num_kv_heads, pool.head_size, pool.block_size,
                              pool.num_blocks, batch.max_blocks_per_seq};
    const int window = cache.windows.empty() ? 0 : cache.windows[g];
    Group& G = *groups_[g];
    G.windowed = window > 0 || !cache.sinks.empty();
    if (!G.windowed) {  // full attention: chapter 10 as it is
      ch10::check_metadata(s, batch.block_table, batch.context_lens, batch.query_start_loc);
      G.full.plan(s, cache.dtype, ch10::CacheType::model_dtype, batch.context_lens, batch.query_start_loc);
    } else {
      WindowOptions opt;
      opt.sinks = cache.sinks;
      // A full group with sinks: a window that no context of the step exceeds.
      opt.window = window > 0 ? window
                              : std::max(1, batch.context_lens.empty()
                                                ? 1
                                                : *std::max_element(batch.context_lens.begin(), batch.context_lens.end()));
      G.window.plan(s, cache.dtype, batch.block_table, batch.context_lens, batch.query_start_loc, opt);
    }
    G.block_table.upload_prefix(batch.block_table);
    G.seq_lens.upload_prefix(batch.context_lens);
    G.query_start_loc.upload_prefix(batch.query_start_loc);
  }
  num_groups_ = int(groups.size());
  dtype_ = cache.dtype;
  ++steps_;
}
// ANCHOR_END: hybrid_plan

void HybridStepAttention::run(int group, void* out, const void* q, const void* k_pool, const void* v_pool,
                              float scale, cudaStream_t stream) {
  PA_REQUIRE(steps_ > 0, "HybridStepAttention: run() before plan()");
  PA_REQUIRE(group >= 0 && group < num_groups_,
             "HybridStepAttention: layer group " << group << " was not planned (" << num_groups_ << " groups)");
  Group& G = *groups_[size_t(group)];
  auto go = [&](auto t) {
    using T = decltype(t);
    T* o = static_cast<T*>(out);
    const T *qq = static_cast<const T*>(q), *k = static_cast<const T*>(k_pool), *v = static_cast<const T*>(v_pool);
    if (G.windowed)
      G.window.run<T>(o, qq, k, v, G.block_table.get(), G.seq_lens.get(), G.query_start_loc.get(), scale, stream);
    else
      G.full.run<T>(o, qq, k, v, G.block_table.get(), G.seq_lens.get(), G.query_start_loc.get(), scale, stream);
  };
  if (dtype_ == DType::fp16) go(half{});
  else go(bf16{});
}

}  // namespace pa::ch12
