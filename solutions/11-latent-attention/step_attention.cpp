// Chapter 8's engine on chapter 11's latent cache (given code): the step's pieces of at
// most 4 new tokens, their metadata uploaded once per step, and per layer the latent
// writer and one launch of the absorbed decode kernel.
#include <algorithm>

#include "pa/ch11_mla.h"

namespace pa::ch11 {

MlaStepAttention::Pieces MlaStepAttention::cut(const ch03::BatchMetadata& batch) {
  const int M = batch.max_blocks_per_seq;
  PA_REQUIRE(batch.num_seqs > 0 && batch.query_start_loc.size() == size_t(batch.num_seqs) + 1 &&
                 batch.context_lens.size() == size_t(batch.num_seqs) &&
                 batch.block_table.size() == size_t(batch.num_seqs) * size_t(M),
             "MlaStepAttention: query_start_loc, context_lens and block_table do not match num_seqs "
                 << batch.num_seqs);
  Pieces p;
  p.query_start_loc.push_back(0);
  for (int b = 0; b < batch.num_seqs; ++b) {
    const int first = batch.query_start_loc[size_t(b)], n = batch.query_start_loc[size_t(b) + 1] - first;
    const int ctx = batch.context_lens[size_t(b)];
    PA_REQUIRE(n >= 0 && n <= ctx, "MlaStepAttention: sequence " << b << " has " << n << " new tokens and context_len "
                                                                 << ctx);
    for (int start = 0; start < n; start += kMaxNewTokens) {
      const int end = std::min(n, start + kMaxNewTokens);
      p.block_table.insert(p.block_table.end(), batch.block_table.begin() + int64_t(b) * M,
                           batch.block_table.begin() + int64_t(b + 1) * M);
      p.seq_lens.push_back(ctx - n + end);  // the piece's last token sees up to itself
      p.query_start_loc.push_back(first + end);
    }
  }
  return p;
}

void MlaStepAttention::plan(const std::vector<ch03::BatchMetadata>& groups, const ch08::StepCache& cache) {
  PA_REQUIRE(cache.latent, "MlaStepAttention: the model caches K/V per head; chapter 11's kernel reads a latent "
                           "cache (ModelConfig::attention = AttentionKind::mla)");
  PA_REQUIRE(cache.dtype == DType::fp16 || cache.dtype == DType::bf16,
             "MlaStepAttention: the cache is " << dtype_name(cache.dtype) << "; chapter 11's kernel reads fp16 or bf16");
  PA_REQUIRE(!groups.empty(), "MlaStepAttention: plan() needs the metadata of at least one layer group");
  const LatentPoolShape pool{cache.pool.num_blocks, cache.pool.block_size, cache.latent_dim, cache.rope_dim};
  check_latent_pool(pool);
  if (groups_.size() < groups.size()) groups_.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const ch03::BatchMetadata& batch = groups[g];
    const Pieces p = cut(batch);
    const int num_tokens = p.query_start_loc.back();
    PA_REQUIRE(batch.slot_mapping.size() == size_t(num_tokens),
               "MlaStepAttention: " << batch.slot_mapping.size() << " slots for " << num_tokens << " new tokens");
    // The writer stores each new token's row at its slot, unchecked on the device: a slot
    // past the pool writes past it. Every new token's row is read by the step (its own
    // key), so padding (a negative slot) has no place here either.
    const int64_t pool_slots = int64_t(pool.num_blocks) * pool.block_size;
    for (size_t i = 0; i < batch.slot_mapping.size(); ++i)
      PA_REQUIRE(batch.slot_mapping[i] >= 0 && batch.slot_mapping[i] < pool_slots,
                 "MlaStepAttention: slot_mapping[" << i << "] = " << batch.slot_mapping[i] << " (new token " << i
                                                   << " of layer group " << g << ") is outside the latent pool of "
                                                   << pool.num_blocks << " blocks x " << pool.block_size << " = "
                                                   << pool_slots << " slots");
    const MlaShape s{int(p.seq_lens.size()), num_tokens, cache.num_q_heads, pool.block_size, pool.num_blocks,
                     batch.max_blocks_per_seq};
    check_mla_shape(s);
    check_mla_metadata(s, p.block_table, p.seq_lens, p.query_start_loc);
    Group& G = groups_[g];
    G.runner.plan(s, cache.dtype, p.seq_lens, p.query_start_loc);
    G.block_table.upload_prefix(p.block_table);
    G.seq_lens.upload_prefix(p.seq_lens);
    G.query_start_loc.upload_prefix(p.query_start_loc);
    G.slots.upload_prefix(batch.slot_mapping);
    G.num_tokens = num_tokens;
    G.pieces = s.num_seqs;
  }
  num_groups_ = int(groups.size());
  pool_ = pool;
  dtype_ = cache.dtype;
  ++steps_;
}

void MlaStepAttention::write_latent(int group, void* latent_pool, const void* c_kv, const void* k_rope,
                                    cudaStream_t stream) {
  PA_REQUIRE(steps_ > 0, "MlaStepAttention: write_latent() before plan()");
  PA_REQUIRE(group >= 0 && group < num_groups_,
             "MlaStepAttention: layer group " << group << " was not planned (" << num_groups_ << " groups)");
  Group& G = groups_[size_t(group)];
  auto go = [&](auto t) {
    using T = decltype(t);
    reshape_and_cache_latent<T>(pool_, static_cast<const T*>(c_kv), static_cast<const T*>(k_rope), G.num_tokens,
                                static_cast<T*>(latent_pool), G.slots.get(), stream);
  };
  if (dtype_ == DType::fp16) go(half{});
  else go(bf16{});
}

void MlaStepAttention::run_latent(int group, void* out, const void* q, const void* latent_pool, float scale,
                                  cudaStream_t stream) {
  PA_REQUIRE(steps_ > 0, "MlaStepAttention: run_latent() before plan()");
  PA_REQUIRE(group >= 0 && group < num_groups_,
             "MlaStepAttention: layer group " << group << " was not planned (" << num_groups_ << " groups)");
  Group& G = groups_[size_t(group)];
  auto go = [&](auto t) {
    using T = decltype(t);
    G.runner.run<T>(static_cast<T*>(out), static_cast<const T*>(q), static_cast<const T*>(latent_pool),
                    G.block_table.get(), G.seq_lens.get(), G.query_start_loc.get(), scale, stream);
  };
  if (dtype_ == DType::fp16) go(half{});
  else go(bf16{});
}

}  // namespace pa::ch11
