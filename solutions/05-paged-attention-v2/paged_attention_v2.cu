// Chapter 5, exercise 1 of 2: the partitioned kernel (the reduce is in reduce_partitions.cuh).
#include <algorithm>

#include "attend_block.cuh"  // chapter 4's building blocks (from its solution)
#include "reduce_partitions.cuh"
#include "pa/ch05_paged_attention_v2.h"
#include "pa/launch.h"

namespace pa::ch05 {

using ch04::attend_kv_block;
using ch04::kWarps;
using ch04::merge_warps;
using ch04::WarpState;

// ANCHOR: v2_kernel
// Grid (query head, sequence, partition). Like v1, restricted to one partition's blocks.
template <typename T, int D, int BS>
__global__ void __launch_bounds__(kWarps * 32)
paged_attention_v2_kernel(float* max_logits, float* exp_sums, float* partial_out, const T* q,
                          const T* k_pool, const T* v_pool, const int* block_table,
                          const int* context_lens, float scale, PagedAttentionShape s) {
  constexpr int kRows = (D + 31) / 32;
  constexpr int kBlocksPerPartition = kPartitionSize / BS;
  const int head = blockIdx.x, seq = blockIdx.y, part = blockIdx.z;
  const int max_partitions = gridDim.z;
  const int kv_head = head / (s.num_q_heads / s.num_kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int len = context_lens[seq];
  if (part * kPartitionSize >= len) return;  // this sequence has no tokens here

  __shared__ float q_s[D];
  __shared__ float p_s[kWarps][BS];
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    q_s[d] = to_float(q[(int64_t(seq) * s.num_q_heads + head) * D + d]) * scale;
  __syncthreads();

  WarpState<kRows> st;
  st.m = -INFINITY;
  st.l = 0.f;
  for (int r = 0; r < kRows; ++r) st.acc[r] = 0.f;
  const int* table = block_table + int64_t(seq) * s.max_blocks_per_seq;
  const int64_t block_elems = int64_t(s.num_kv_heads) * D * BS;
  // TODO(ch05): the thread block of partition `part` attends over this partition's tokens
  //   only, [part * kPartitionSize, min(len, (part + 1) * kPartitionSize)), each logical
  //   block once, as v1 does; then, at i = partition_index(seq, head, part, num_q_heads,
  //   max_partitions), it records max_logits[i] = the partition's max score, exp_sums[i] =
  //   its sum of exp(score - max), and partial_out[i * D + d] = its softmax-weighted V,
  //   already divided by exp_sums[i].
  // HINT(1): It is v1's loop over a window of blocks, followed by three stores instead of the
  //   output. After merge_warps(st), warp 0 holds the thread block's result: st.m, st.l, and
  //   st.acc already normalised.
  // HINT(2): first = part * kBlocksPerPartition; last = min(ceil(len / BS), first +
  //   kBlocksPerPartition); warps take b = first + warp, b += kWarps, while b < last (`at`
  //   and attend_kv_block as in v1; block_elems is there already). After merge_warps(st) only
  //   warp 0 writes: lane 0 max_logits and exp_sums, every lane its rows lane + 32 r < D of
  //   partial_out.
  // HINT(3): walk only this partition's logical blocks: from part * kBlocksPerPartition
  //   up to (but excluding) the next partition's first block or the sequence's last block,
  //   warp w taking every kWarps-th as in v1. Then merge_warps(st) and let warp 0 write
  //   st.m, st.l and the normalised st.acc rows to max_logits, exp_sums and partial_out
  //   (partial_out row (seq, head, part) has D floats) at partition_index(...).
  // BEGIN SOLUTION
  const int first = part * kBlocksPerPartition;
  const int last = min((len + BS - 1) / BS, first + kBlocksPerPartition);
  for (int b = first + warp; b < last; b += kWarps) {
    const int64_t at = int64_t(table[b]) * block_elems + int64_t(kv_head) * D * BS;
    attend_kv_block<T, D, BS>(k_pool + at, v_pool + at, min(BS, len - b * BS), q_s, p_s[warp], st);
  }
  merge_warps(st);
  if (warp != 0) return;
  const int64_t at = partition_index(seq, head, part, s.num_q_heads, max_partitions);
  if (lane == 0) {
    max_logits[at] = st.m;
    exp_sums[at] = st.l;
  }
  for (int r = 0; r < kRows; ++r)
    if (lane + 32 * r < D) partial_out[at * D + lane + 32 * r] = st.acc[r];
  // END SOLUTION
}
// ANCHOR_END: v2_kernel


void Workspace::reserve(int num_seqs, int num_q_heads, int partitions, int head_size) {
  const size_t rows = size_t(num_seqs) * num_q_heads * partitions;
  if (max_logits_.size() < rows) {
    max_logits_ = DeviceBuffer<float>(rows);
    exp_sums_ = DeviceBuffer<float>(rows);
  }
  if (partial_out_.size() < rows * head_size) partial_out_ = DeviceBuffer<float>(rows * head_size);
}

void Workspace::poison(int byte) {
  max_logits_.fill_bytes(byte);
  exp_sums_.fill_bytes(byte);
  partial_out_.fill_bytes(byte);
}

template <typename T, int D, int BS>
void launch_v2(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool, const T* v_pool,
               const int* bt, const int* lens, int parts, float scale, Workspace& ws,
               cudaStream_t stream) {
  launch(paged_attention_v2_kernel<T, D, BS>, dim3(s.num_q_heads, s.num_seqs, parts),
         dim3(kWarps * 32), 0, stream, ws.max_logits(), ws.exp_sums(), ws.partial_out(), q,
         k_pool, v_pool, bt, lens, scale, s);
  launch(paged_attention_v2_reduce_kernel<T>, dim3(s.num_q_heads, s.num_seqs), dim3(128), 0,
         stream, out, static_cast<const float*>(ws.max_logits()),
         static_cast<const float*>(ws.exp_sums()), static_cast<const float*>(ws.partial_out()),
         lens, kPartitionSize, parts, s);
}

template <typename T, int D>
void dispatch_block_size(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                         const T* v_pool, const int* bt, const int* lens, int parts, float scale,
                         Workspace& ws, cudaStream_t stream) {
  switch (s.block_size) {
    case 8: return launch_v2<T, D, 8>(s, out, q, k_pool, v_pool, bt, lens, parts, scale, ws, stream);
    case 16: return launch_v2<T, D, 16>(s, out, q, k_pool, v_pool, bt, lens, parts, scale, ws, stream);
    case 32: return launch_v2<T, D, 32>(s, out, q, k_pool, v_pool, bt, lens, parts, scale, ws, stream);
  }
}

template <typename T>
void paged_attention_v2(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                        const T* v_pool, const int* block_table, const int* context_lens,
                        int max_context_len, float scale, Workspace& ws, cudaStream_t stream) {
  ch04::check_shape(s);
  PA_REQUIRE(max_context_len >= 0, "max_context_len must be >= 0, got " << max_context_len);
  PA_REQUIRE(int64_t(max_context_len) <= int64_t(s.max_blocks_per_seq) * s.block_size,
             "max_context_len " << max_context_len << " is beyond the table's capacity of "
                                << s.max_blocks_per_seq << " blocks x " << s.block_size);
  const int parts = std::max(1, num_partitions(max_context_len));
  PA_REQUIRE(parts <= 65535, "max_context_len " << max_context_len << " needs too many partitions");
  ws.reserve(s.num_seqs, s.num_q_heads, parts, s.head_size);
  switch (s.head_size) {
    case 64: return dispatch_block_size<T, 64>(s, out, q, k_pool, v_pool, block_table, context_lens, parts, scale, ws, stream);
    case 80: return dispatch_block_size<T, 80>(s, out, q, k_pool, v_pool, block_table, context_lens, parts, scale, ws, stream);
    case 96: return dispatch_block_size<T, 96>(s, out, q, k_pool, v_pool, block_table, context_lens, parts, scale, ws, stream);
    case 112: return dispatch_block_size<T, 112>(s, out, q, k_pool, v_pool, block_table, context_lens, parts, scale, ws, stream);
    case 128: return dispatch_block_size<T, 128>(s, out, q, k_pool, v_pool, block_table, context_lens, parts, scale, ws, stream);
    case 256: return dispatch_block_size<T, 256>(s, out, q, k_pool, v_pool, block_table, context_lens, parts, scale, ws, stream);
  }
}

template <typename T>
void paged_attention(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                     const T* v_pool, const int* block_table, const int* context_lens,
                     int max_context_len, float scale, Workspace& ws, cudaStream_t stream) {
  int sms = 0;
  PA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (choose_version(s, max_context_len, sms) == Version::v1)
    ch04::paged_attention_v1(s, out, q, k_pool, v_pool, block_table, context_lens, scale, stream);
  else
    paged_attention_v2(s, out, q, k_pool, v_pool, block_table, context_lens, max_context_len, scale,
                       ws, stream);
}

#define PA_INSTANTIATE(T)                                                                          \
  template void paged_attention_v2<T>(const PagedAttentionShape&, T*, const T*, const T*,         \
                                      const T*, const int*, const int*, int, float, Workspace&,   \
                                      cudaStream_t);                                               \
  template void paged_attention<T>(const PagedAttentionShape&, T*, const T*, const T*, const T*,  \
                                   const int*, const int*, int, float, Workspace&, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch05
