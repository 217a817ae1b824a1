// Chapter 6: the v1 and v2 kernels on an fp8 cache (given: they are chapters 4 and 5's
// kernels with attend_kv_block_fp8 in the inner step and the scales folded in).
#include <algorithm>

#include "attend_block_fp8.cuh"
#include "pa/ch06_fp8.h"
#include "pa/launch.h"
#include "reduce_partitions.cuh"  // chapter 5's reduce

namespace pa::ch06 {

using ch04::kWarps;
using ch04::merge_warps;

// The walk shared by v1 (one partition: all blocks) and v2 (blocks [first, last)):
// returns the thread block's merged state in warp 0. q_s gets q * scale * k_scale.
template <typename T, int D, int BS>
__device__ void attend_range_fp8(WarpState<(D + 31) / 32>& st, const T* q_row,
                                 const uint8_t* k_pool, const uint8_t* v_pool, const int* table,
                                 int kv_head, int len, int first, int last, float qk_scale,
                                 const PagedAttentionShape& s) {
  constexpr int kRows = (D + 31) / 32;
  __shared__ float q_s[D];
  __shared__ float p_s[kWarps][BS];
  const int warp = threadIdx.x / 32;
  for (int d = threadIdx.x; d < D; d += blockDim.x) q_s[d] = to_float(q_row[d]) * qk_scale;
  __syncthreads();
  st.m = -INFINITY;
  st.l = 0.f;
  for (int r = 0; r < kRows; ++r) st.acc[r] = 0.f;
  const int64_t block_elems = int64_t(s.num_kv_heads) * D * BS;
  for (int b = first + warp; b < last; b += kWarps) {
    const int64_t at = int64_t(table[b]) * block_elems + int64_t(kv_head) * D * BS;
    attend_kv_block_fp8<D, BS>(k_pool + at, v_pool + at, min(BS, len - b * BS), q_s, p_s[warp], st);
  }
  merge_warps(st);
}

template <typename T, int D, int BS>
__global__ void __launch_bounds__(kWarps * 32)
paged_attention_v1_fp8_kernel(T* out, const T* q, const uint8_t* k_pool, const uint8_t* v_pool,
                              const int* block_table, const int* context_lens,
                              const float* k_scale, const float* v_scale, float scale,
                              PagedAttentionShape s) {
  constexpr int kRows = (D + 31) / 32;
  const int head = blockIdx.x, seq = blockIdx.y, lane = threadIdx.x % 32;
  const int len = context_lens[seq];
  T* o = out + (int64_t(seq) * s.num_q_heads + head) * D;
  if (len <= 0) {
    for (int d = threadIdx.x; d < D; d += blockDim.x) o[d] = from_float<T>(0.f);
    return;
  }
  WarpState<kRows> st;
  attend_range_fp8<T, D, BS>(st, q + (int64_t(seq) * s.num_q_heads + head) * D, k_pool, v_pool,
                             block_table + int64_t(seq) * s.max_blocks_per_seq,
                             head / (s.num_q_heads / s.num_kv_heads), len, 0,
                             (len + BS - 1) / BS, scale * *k_scale, s);
  if (threadIdx.x / 32 != 0) return;
  const float vs = *v_scale;
  for (int r = 0; r < kRows; ++r)
    if (lane + 32 * r < D) o[lane + 32 * r] = from_float<T>(st.acc[r] * vs);
}

template <typename T, int D, int BS>
__global__ void __launch_bounds__(kWarps * 32)
paged_attention_v2_fp8_kernel(float* max_logits, float* exp_sums, float* partial_out, const T* q,
                              const uint8_t* k_pool, const uint8_t* v_pool, const int* block_table,
                              const int* context_lens, const float* k_scale, const float* v_scale,
                              float scale, PagedAttentionShape s) {
  constexpr int kRows = (D + 31) / 32;
  constexpr int kBlocksPerPartition = ch05::kPartitionSize / BS;
  const int head = blockIdx.x, seq = blockIdx.y, part = blockIdx.z, lane = threadIdx.x % 32;
  const int len = context_lens[seq];
  if (part * ch05::kPartitionSize >= len) return;
  const int first = part * kBlocksPerPartition;
  const int last = min((len + BS - 1) / BS, first + kBlocksPerPartition);
  WarpState<kRows> st;
  attend_range_fp8<T, D, BS>(st, q + (int64_t(seq) * s.num_q_heads + head) * D, k_pool, v_pool,
                             block_table + int64_t(seq) * s.max_blocks_per_seq,
                             head / (s.num_q_heads / s.num_kv_heads), len, first, last,
                             scale * *k_scale, s);
  if (threadIdx.x / 32 != 0) return;
  const int64_t at = ch05::partition_index(seq, head, part, s.num_q_heads, gridDim.z);
  if (lane == 0) {
    max_logits[at] = st.m;
    exp_sums[at] = st.l;
  }
  const float vs = *v_scale;
  for (int r = 0; r < kRows; ++r)
    if (lane + 32 * r < D) partial_out[at * D + lane + 32 * r] = st.acc[r] * vs;
}

// Calls launcher.run<D, BS>() for the shape's head and block size.
template <int D, typename L>
void dispatch_block_size(const PagedAttentionShape& s, const L& launcher) {
  switch (s.block_size) {
    case 8: return launcher.template run<D, 8>();
    case 16: return launcher.template run<D, 16>();
    case 32: return launcher.template run<D, 32>();
  }
}
template <typename L>
void dispatch(const PagedAttentionShape& s, const L& launcher) {
  switch (s.head_size) {
    case 64: return dispatch_block_size<64>(s, launcher);
    case 80: return dispatch_block_size<80>(s, launcher);
    case 96: return dispatch_block_size<96>(s, launcher);
    case 112: return dispatch_block_size<112>(s, launcher);
    case 128: return dispatch_block_size<128>(s, launcher);
    case 256: return dispatch_block_size<256>(s, launcher);
  }
}

template <typename T>
struct V1Launcher {
  const PagedAttentionShape& s;
  T* out;
  const T* q;
  const uint8_t *k_pool, *v_pool;
  const int *block_table, *context_lens;
  const float *k_scale, *v_scale;
  float scale;
  cudaStream_t stream;
  template <int D, int BS>
  void run() const {
    launch(paged_attention_v1_fp8_kernel<T, D, BS>, dim3(s.num_q_heads, s.num_seqs),
           dim3(kWarps * 32), 0, stream, out, q, k_pool, v_pool, block_table, context_lens,
           k_scale, v_scale, scale, s);
  }
};

template <typename T>
struct V2Launcher {
  const PagedAttentionShape& s;
  ch05::Workspace& ws;
  int parts;
  const T* q;
  const uint8_t *k_pool, *v_pool;
  const int *block_table, *context_lens;
  const float *k_scale, *v_scale;
  float scale;
  cudaStream_t stream;
  template <int D, int BS>
  void run() const {
    launch(paged_attention_v2_fp8_kernel<T, D, BS>, dim3(s.num_q_heads, s.num_seqs, parts),
           dim3(kWarps * 32), 0, stream, ws.max_logits(), ws.exp_sums(), ws.partial_out(), q,
           k_pool, v_pool, block_table, context_lens, k_scale, v_scale, scale, s);
  }
};

template <typename T>
void paged_attention_v1_fp8(const PagedAttentionShape& s, T* out, const T* q,
                            const uint8_t* k_pool, const uint8_t* v_pool, const int* block_table,
                            const int* context_lens, const float* k_scale, const float* v_scale,
                            float scale, cudaStream_t stream) {
  ch04::check_shape(s);
  dispatch(s, V1Launcher<T>{s, out, q, k_pool, v_pool, block_table, context_lens, k_scale,
                            v_scale, scale, stream});
}

template <typename T>
void paged_attention_v2_fp8(const PagedAttentionShape& s, T* out, const T* q,
                            const uint8_t* k_pool, const uint8_t* v_pool, const int* block_table,
                            const int* context_lens, int max_context_len, const float* k_scale,
                            const float* v_scale, float scale, ch05::Workspace& ws,
                            cudaStream_t stream) {
  ch04::check_shape(s);
  PA_REQUIRE(max_context_len >= 0 &&
                 int64_t(max_context_len) <= int64_t(s.max_blocks_per_seq) * s.block_size,
             "max_context_len " << max_context_len << " is beyond the table's capacity of "
                                << s.max_blocks_per_seq << " blocks x " << s.block_size);
  const int parts = std::max(1, ch05::num_partitions(max_context_len));
  ws.reserve(s.num_seqs, s.num_q_heads, parts, s.head_size);
  dispatch(s, V2Launcher<T>{s, ws, parts, q, k_pool, v_pool, block_table, context_lens, k_scale,
                            v_scale, scale, stream});
  launch(ch05::paged_attention_v2_reduce_kernel<T>, dim3(s.num_q_heads, s.num_seqs), dim3(128), 0,
         stream, out, static_cast<const float*>(ws.max_logits()),
         static_cast<const float*>(ws.exp_sums()), static_cast<const float*>(ws.partial_out()),
         context_lens, ch05::kPartitionSize, parts, s);
}

#define PA_INSTANTIATE(T)                                                                         \
  template void paged_attention_v1_fp8<T>(const PagedAttentionShape&, T*, const T*, const uint8_t*, \
                                          const uint8_t*, const int*, const int*, const float*,     \
                                          const float*, float, cudaStream_t);                       \
  template void paged_attention_v2_fp8<T>(const PagedAttentionShape&, T*, const T*, const uint8_t*, \
                                          const uint8_t*, const int*, const int*, int, const float*, \
                                          const float*, float, ch05::Workspace&, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch06
