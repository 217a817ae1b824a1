// The host side of chapter 9's kernels: shape dispatch, the split plan, the launches.
#pragma once

#include <algorithm>
#include <type_traits>

#include "decode_kernel.cuh"
#include "pa/launch.h"

namespace pa::ch09 {

template <int D_, int BS_, int GQ_>
struct Config {
  static constexpr int D = D_, BS = BS_, GQ = GQ_;
};

// Calls f(Config<D, BS, GQ>{}) for the runtime sizes: every supported combination is
// compiled once.
template <int D, int BS, class F>
void with_group(int gq, F&& f) {
  switch (gq) {
    case 1: return f(Config<D, BS, 1>{});
    case 2: return f(Config<D, BS, 2>{});
    case 4: return f(Config<D, BS, 4>{});
    case 8: return f(Config<D, BS, 8>{});
  }
  PA_REQUIRE(false, "heads per block " << gq << " is not 1, 2, 4 or 8");
}
template <int D, class F>
void with_block_size(int bs, int gq, F&& f) {
  switch (bs) {
    case 8: return with_group<D, 8>(gq, f);
    case 16: return with_group<D, 16>(gq, f);
    case 32: return with_group<D, 32>(gq, f);
  }
}
template <class F>
void with_config(const PagedAttentionShape& s, F&& f) {
  const int gq = heads_per_block(s);
  switch (s.head_size) {
    case 64: return with_block_size<64>(s.block_size, gq, f);
    case 80: return with_block_size<80>(s.block_size, gq, f);
    case 96: return with_block_size<96>(s.block_size, gq, f);
    case 112: return with_block_size<112>(s.block_size, gq, f);
    case 128: return with_block_size<128>(s.block_size, gq, f);
    case 256: return with_block_size<256>(s.block_size, gq, f);
  }
}

// Ring slots per warp for the pipelined kernel: as many as fit in about 96 KB per thread
// block, at most 4; 0 (no ring: read blocks directly) when even 2 do not fit in 200 KB.
template <typename C, int D, int BS>
constexpr int stages_for() {
  constexpr size_t slot = size_t(2) * D * BS * sizeof(C);
  constexpr size_t per_block = kWarps * slot;
  if (2 * per_block > 200 * 1024) return 0;
  return int(std::max<size_t>(2, std::min<size_t>(4, 96 * 1024 / per_block)));
}

// How many thread blocks of this kernel one SM holds at once.
template <typename Kernel>
int resident_blocks(Kernel kernel, size_t smem) {
#if defined(PA_BACKEND_CPU)
  (void)kernel;
  (void)smem;
  return 4;  // the emulator has no occupancy; any plan is correct, this one is typical
#else
  int n = 0;
  PA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kWarps * 32, smem));
  return std::max(1, n);
#endif
}

inline int sm_count() {
  int sms = 0;
  PA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

// Launches one kernel (partitions merged by their last one, in the kernel) with the given
// math (CudaCoreMath or TensorCoreMath) and ring depth (0: direct loads).
// plan == nullptr: Version::gqa takes 512-token partitions, the others plan_splits.
template <template <typename, typename, int, int, int> class MathT, typename T, typename C, int D,
          int BS, int GQ, int kStages>
void launch_decode(Version v, const SplitPlan* plan, DecodeArgs<T, C> a, int max_context_len,
                   Workspace& ws, cudaStream_t stream) {
  using Math = MathT<T, C, D, BS, GQ>;
  const PagedAttentionShape& s = a.s;
  const auto kernel = decode_kernel<Math, T, C, D, BS, GQ, kStages>;
  constexpr size_t smem = smem_bytes<Math, C, D, BS, GQ>(kStages);
  if (smem > 48 * 1024)  // above 48 KB a kernel must opt in
    PA_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int units = s.num_kv_heads * (s.num_q_heads / s.num_kv_heads / GQ);
  SplitPlan p{};
  if (plan) {
    p = *plan;
  } else if (v == Version::gqa) {
    p = {std::max(1, ch05::num_partitions(max_context_len)), ch05::kPartitionSize};
  } else {
    p = plan_splits(units * s.num_seqs, max_context_len, BS, sm_count(),
                    resident_blocks(kernel, smem));
  }
  PA_REQUIRE(p.splits >= 1 && p.splits <= 65535 && p.partition_size >= BS &&
                 p.partition_size % BS == 0,
             "bad split plan: " << p.splits << " partitions of " << p.partition_size
                                << " tokens (block size " << BS << ")");
  PA_REQUIRE(int64_t(p.splits) * p.partition_size >= max_context_len,
             "split plan covers " << int64_t(p.splits) * p.partition_size
                                  << " tokens, max_context_len is " << max_context_len);
  a.partition_blocks = p.partition_size / BS;
  if (p.splits > 1) {
    ws.reserve(s.num_seqs, s.num_q_heads, p.splits, D);
    a.max_logits = ws.max_logits();
    a.exp_sums = ws.exp_sums();
    a.partial_out = ws.partial_out();
    a.counters = ws.counters(size_t(s.num_seqs) * units);
  }
  launch(kernel, dim3(units, s.num_seqs, p.splits), dim3(kWarps * 32), smem, stream, a);
}

// The pipelined kernels: tensor cores where the tiles fit (block size 16 or 32), CUDA
// cores otherwise; the deepest ring that fits (none if not even two slots per warp do).
template <typename T, typename C, int D, int BS, int GQ>
void launch_pipelined(Version v, const SplitPlan* plan, const DecodeArgs<T, C>& a,
                      int max_context_len, Workspace& ws, cudaStream_t stream) {
  constexpr int stages = stages_for<C, D, BS>();
  if constexpr (BS % 16 == 0) {
    if (v == Version::tensor_core)
      return launch_decode<TensorCoreMath, T, C, D, BS, GQ, stages>(v, plan, a, max_context_len, ws, stream);
  }
  launch_decode<CudaCoreMath, T, C, D, BS, GQ, stages>(v, plan, a, max_context_len, ws, stream);
}

// The checks every entry point makes before it launches.
inline void check_decode(const PagedAttentionShape& s, int max_context_len) {
  ch04::check_shape(s);
  PA_REQUIRE(max_context_len >= 0, "max_context_len must be >= 0, got " << max_context_len);
  PA_REQUIRE(int64_t(max_context_len) <= int64_t(s.max_blocks_per_seq) * s.block_size,
             "max_context_len " << max_context_len << " is beyond the table's capacity of "
                                << s.max_blocks_per_seq << " blocks x " << s.block_size);
}

// Queries and outputs in half or bf16, the dtypes a server runs in; float is refused (it
// would double the instantiations for a dtype nobody serves; chapters 4-5 take it).
template <typename T>
constexpr bool is_serving_dtype() { return std::is_same<T, half>::value || std::is_same<T, bf16>::value; }
#define PA_FLOAT_REFUSED \
  "chapter 9's kernels take half or bf16 queries and outputs (float: use chapters 4-5)"

}  // namespace pa::ch09
