// Chapter 9: performance engineering. Decode kernels that reach the memory-bandwidth
// ceiling, built one measured step at a time on top of chapters 4-6.
//
//   gqa        one thread block per (sequence, KV head) serves all of that KV head's query
//              heads: each K/V byte is read once, not Hq/Hkv times. Partitions of 512
//              tokens, as in chapter 5.
//   split      the same kernel with the number of partitions chosen so that the grid fills
//              about one wave of the GPU (plan_splits).
//   pipelined  each warp keeps the next KV blocks in flight with cp.async while it computes
//              on the current one, and reads its block-table entries ahead of time.
//   tensor_core  the pipelined kernel with the scores and the output update done as
//              matrix products on the tensor cores (mma.sync), block sizes 16 and 32;
//              block size 8 runs the pipelined kernel.
//   fp8        the tensor_core kernel on chapter 6's e4m3 cache.
//
// Every version computes out[b, h, :] exactly as chapter 4 specifies (same arguments,
// same layouts). Query/output dtypes: half and bf16 (the serving dtypes; float is
// refused with a message). Head sizes 64-256 and block sizes 8/16/32 as in chapter 4.
#pragma once

#include <cstdint>

#include "pa/ch05_paged_attention_v2.h"

namespace pa::ch09 {

using ch04::PagedAttentionShape;

// Chapter 5's scratch for partial results, plus one counter per (sequence, thread-block
// group): with several partitions, the last one of a sequence to finish merges them all,
// in the same kernel (no second launch). The kernels leave the counters at zero.
class Workspace : public ch05::Workspace {
 public:
  int* counters(size_t n);  // at least n counters, all zero

 private:
  DeviceBuffer<int> counters_;
};

enum class Version { gqa, split, pipelined, tensor_core };
const char* name_of(Version v);

// ANCHOR: plan
// How a launch cuts the context: `splits` partitions of `partition_size` tokens (a
// multiple of the block size) per sequence. One partition means no reduce kernel.
struct SplitPlan {
  int splits;
  int partition_size;
};

// Sizes the split so that work_units * splits thread blocks (work_units = sequences x
// KV-head groups) fill about one wave of resident blocks (num_sms * blocks_per_sm),
// without making a partition shorter than a few blocks per warp.
SplitPlan plan_splits(int work_units, int max_context_len, int block_size, int num_sms,
                      int blocks_per_sm);
// ANCHOR_END: plan

// Query heads one thread block serves: the largest of 8, 4, 2, 1 that divides Hq / Hkv.
int heads_per_block(const PagedAttentionShape& s);

// Decode with one of the versions. max_context_len >= every context_lens[b].
template <typename T>
void decode(Version v, const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
            const T* v_pool, const int* block_table, const int* context_lens, int max_context_len,
            float scale, Workspace& ws, cudaStream_t stream = nullptr);

// The same with a given plan (tests force odd partition counts with it).
template <typename T>
void decode_with_plan(Version v, const SplitPlan& plan, const PagedAttentionShape& s, T* out,
                      const T* q, const T* k_pool, const T* v_pool, const int* block_table,
                      const int* context_lens, int max_context_len, float scale, Workspace& ws,
                      cudaStream_t stream = nullptr);

// The tensor_core kernel on an fp8 e4m3 cache (chapter 6's pools and scales).
template <typename T>
void decode_fp8(const PagedAttentionShape& s, T* out, const T* q, const uint8_t* k_pool,
                const uint8_t* v_pool, const int* block_table, const int* context_lens,
                int max_context_len, const float* k_scale, const float* v_scale, float scale,
                Workspace& ws, cudaStream_t stream = nullptr);
template <typename T>
void decode_fp8_with_plan(const SplitPlan& plan, const PagedAttentionShape& s, T* out,
                          const T* q, const uint8_t* k_pool, const uint8_t* v_pool,
                          const int* block_table, const int* context_lens, int max_context_len,
                          const float* k_scale, const float* v_scale, float scale, Workspace& ws,
                          cudaStream_t stream = nullptr);

}  // namespace pa::ch09
