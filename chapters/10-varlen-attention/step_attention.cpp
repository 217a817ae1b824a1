// Chapter 8's engine on chapter 10's kernel (given code): the step's metadata, uploaded
// once per step into buffers that keep their addresses, and one runner call per layer.
#include "pa/ch10_varlen.h"

namespace pa::ch10 {

namespace {

// Copies `host` into `dev`, growing it only when it is too small.
void upload(DeviceBuffer<int>& dev, const std::vector<int>& host) {
  if (dev.size() < host.size()) dev = DeviceBuffer<int>(std::max(host.size(), 2 * dev.size()));
  PA_CUDA_CHECK(cudaMemcpy(dev.get(), host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice));
}

}  // namespace

void VarlenStepAttention::plan(const ch03::BatchMetadata& batch, const ch02::PoolShape& pool,
                               int num_q_heads, DType dtype) {
  PA_REQUIRE(dtype == DType::fp16 || dtype == DType::bf16,
             "VarlenStepAttention: the cache is " << dtype_name(dtype) << "; chapter 10's kernel reads fp16 or bf16");
  const VarlenShape s{batch.num_seqs, batch.query_start_loc.empty() ? 0 : batch.query_start_loc.back(),
                      num_q_heads, pool.num_kv_heads, pool.head_size, pool.block_size, pool.num_blocks,
                      batch.max_blocks_per_seq};
  check_metadata(s, batch.block_table, batch.context_lens, batch.query_start_loc);
  runner_.plan(s, dtype, CacheType::model_dtype, batch.context_lens, batch.query_start_loc);
  upload(block_table_, batch.block_table);
  upload(seq_lens_, batch.context_lens);
  upload(query_start_loc_, batch.query_start_loc);
  dtype_ = dtype;
  ++steps_;
}

void VarlenStepAttention::run(void* out, const void* q, const void* k_pool, const void* v_pool, float scale,
                              cudaStream_t stream) {
  PA_REQUIRE(steps_ > 0, "VarlenStepAttention: run() before plan()");
  auto go = [&](auto t) {
    using T = decltype(t);
    runner_.run<T>(static_cast<T*>(out), static_cast<const T*>(q), static_cast<const T*>(k_pool),
                   static_cast<const T*>(v_pool), block_table_.get(), seq_lens_.get(), query_start_loc_.get(),
                   scale, stream);
  };
  if (dtype_ == DType::fp16) go(half{});
  else go(bf16{});
}

}  // namespace pa::ch10
