// Your exercise file. (Generated from solutions/08-serving/cascade_attention.cu; instructors regenerate with tools/make_skeletons.py.)
// Chapter 8, exercise 4 of 4: cascade attention, a shared prefix read once for its group.
//
// Three kernels, all writing or reading chapter 5's workspace. Sequence b's partitions are
// its prefix chunks first (slots 0 .. chunks - 1, none for a sequence in no group), then
// its suffix partitions (slots chunks .. chunks + parts - 1):
//   cascade_prefix_kernel  grid (group, KV head, prefix chunk): the chunk's K and V go to
//                          shared memory once; each warp then takes query rows of the group
//                          (member x query head of this KV head) and attends over them with
//                          chapter 4's attend_kv_block, reading K and V from shared memory.
//   cascade_suffix_kernel  grid (query head, sequence, partition): chapter 5's partition
//                          kernel over the tokens after the sequence's prefix.
//   cascade_merge_kernel   grid (query head, sequence): chapter 5's merge_partitions.
// Global memory sees each shared block once per KV head, in 16-byte coalesced loads; the
// arithmetic is chapter 4's, on CUDA cores (a tensor-core version is chapter 9's business).
// What a chunk writes grows with the group: members x G rows of D floats, against the
// chunk's 2 x C x D values of K and V read. With big groups the partial results, not the
// KV cache, are the prefix pass's memory traffic (NOTES.md has the numbers).
#include <algorithm>
#include <type_traits>

#include "attend_block.cuh"       // chapter 4's building blocks
#include "reduce_partitions.cuh"  // chapter 5's partition_index and merge_partitions
#include "pa/ch08_cascade.h"
#include "pa/launch.h"
#include "cascade_prefix_mma.cuh"  // the prefix pass on tensor cores (fp16, bf16)

namespace pa::ch08 {

using ch04::kWarps;
using ch04::PagedAttentionShape;
using ch04::WarpState;
using ch05::kPartitionSize;
using ch05::partition_index;

__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// ANCHOR: prefix_kernel
template <typename T, int D, int BS>
__global__ void __launch_bounds__(kWarps * 32)
cascade_prefix_kernel(float* max_logits, float* exp_sums, float* partial_out, const T* q,
                      const T* k_pool, const T* v_pool, const int* block_table, CascadeView plan,
                      int chunk_tokens, int max_partitions, float scale, PagedAttentionShape s) {
  constexpr int kRows = (D + 31) / 32;
  constexpr int kVecs = D * BS * int(sizeof(T)) / 16;  // 16-byte pieces of a block's K (or V) for one head
  const int group = blockIdx.x, kv_head = blockIdx.y, chunk = blockIdx.z;
  const int G = s.num_q_heads / s.num_kv_heads;  // query heads per KV head
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int prefix_len = plan.group_prefix_len[group];
  const int begin = chunk * chunk_tokens;
  if (begin >= prefix_len) return;  // this group's prefix has fewer chunks
  const int num_blocks = (min(prefix_len, begin + chunk_tokens) - begin) / BS;  // all full
  const int* members = plan.members + plan.group_start[group];
  const int num_rows = (plan.group_start[group + 1] - plan.group_start[group]) * G;

  // The chunk's K and V for this KV head, read from the pools once, into shared memory in
  // the pools' layouts: block i of the chunk at k_s + i * D * BS and v_s + i * D * BS.
  PA_DYNAMIC_SHARED(T, k_s);
  T* v_s = k_s + chunk_tokens * D;
  const int* table = block_table + int64_t(members[0]) * s.max_blocks_per_seq;  // every member's row starts alike
  const int64_t block_elems = int64_t(s.num_kv_heads) * D * BS;
  for (int i = threadIdx.x; i < num_blocks * kVecs; i += blockDim.x) {
    const int blk = i / kVecs, piece = i % kVecs;  // neighbouring threads, neighbouring 16 bytes
    const int64_t at = int64_t(table[begin / BS + blk]) * block_elems + int64_t(kv_head) * D * BS;
    reinterpret_cast<uint4*>(k_s + blk * D * BS)[piece] = reinterpret_cast<const uint4*>(k_pool + at)[piece];
    reinterpret_cast<uint4*>(v_s + blk * D * BS)[piece] = reinterpret_cast<const uint4*>(v_pool + at)[piece];
  }
  __shared__ float q_s[kWarps][D];   // each warp's current query row, scaled
  __shared__ float p_s[kWarps][BS];  // attend_kv_block's scratch
  __syncthreads();

  // TODO(ch08): every query row of the group for this KV head gets the chunk's partial
  //   softmax state. Row r (0 <= r < num_rows) is sequence members[r / G] with query head
  //   kv_head * G + r % G. At w = partition_index(seq, head, chunk, s.num_q_heads,
  //   max_partitions): max_logits[w] = the largest score q . k * scale over the chunk's
  //   num_blocks * BS tokens, exp_sums[w] = the sum of exp(score - max_logits[w]), and
  //   partial_out[w * D + d] = the sum of exp(score - max_logits[w]) * v[d], divided by
  //   exp_sums[w]. K and V come from k_s and v_s (shared memory, the pools' layouts,
  //   every token valid), never from the pools again: that is the point of the pass.
  (void)kRows, (void)warp, (void)lane, (void)num_rows;
  (void)q_s, (void)p_s;
}
// ANCHOR_END: prefix_kernel

// Chapter 5's partition kernel, over sequence b's tokens after its prefix: partition p
// covers [prefix + p * 512, prefix + (p + 1) * 512) and goes to slot chunks + p. The
// prefix is whole blocks, so every partition starts at a block edge.
template <typename T, int D, int BS>
__global__ void __launch_bounds__(kWarps * 32)
cascade_suffix_kernel(float* max_logits, float* exp_sums, float* partial_out, const T* q,
                      const T* k_pool, const T* v_pool, const int* block_table,
                      const int* context_lens, const int* seq_prefix_len, int chunk_tokens,
                      int max_partitions, float scale, PagedAttentionShape s) {
  constexpr int kRows = (D + 31) / 32;
  const int head = blockIdx.x, seq = blockIdx.y, part = blockIdx.z;
  const int kv_head = head / (s.num_q_heads / s.num_kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int len = context_lens[seq], prefix = seq_prefix_len[seq];
  const int begin = prefix + part * kPartitionSize;
  if (begin >= len) return;  // no suffix tokens here (or no suffix at all)

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
  const int first = begin / BS;
  const int last = min(ceil_div(len, BS), first + kPartitionSize / BS);
  for (int b = first + warp; b < last; b += kWarps) {
    const int64_t at = int64_t(table[b]) * block_elems + int64_t(kv_head) * D * BS;
    ch04::attend_kv_block<T, D, BS>(k_pool + at, v_pool + at, min(BS, len - b * BS), q_s,
                                    p_s[warp], st);
  }
  ch04::merge_warps(st);
  if (warp != 0) return;
  const int slot = ceil_div(prefix, chunk_tokens) + part;
  const int64_t at = partition_index(seq, head, slot, s.num_q_heads, max_partitions);
  if (lane == 0) {
    max_logits[at] = st.m;
    exp_sums[at] = st.l;
  }
  for (int r = 0; r < kRows; ++r)
    if (lane + 32 * r < D) partial_out[at * D + lane + 32 * r] = st.acc[r];
}

// Each (sequence, query head): its prefix chunks and suffix partitions, merged. A
// sequence whose whole context is the prefix has no suffix partition; context_len 0 has
// no partition at all, and merge_partitions gives zeros.
template <typename T>
__global__ void cascade_merge_kernel(T* out, const float* max_logits, const float* exp_sums,
                                     const float* partial_out, const int* context_lens,
                                     const int* seq_prefix_len, int chunk_tokens,
                                     int max_partitions, PagedAttentionShape s) {
  const int head = blockIdx.x, seq = blockIdx.y, D = s.head_size;
  const int len = context_lens[seq], prefix = seq_prefix_len[seq];
  const int parts = ceil_div(prefix, chunk_tokens) + ceil_div(max(len - prefix, 0), kPartitionSize);
  const int64_t first = partition_index(seq, head, 0, s.num_q_heads, max_partitions);
  T* o = out + (int64_t(seq) * s.num_q_heads + head) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    o[d] = from_float<T>(ch05::merge_partitions(max_logits, exp_sums, partial_out, first, parts, D, d));
}

template <typename T, int D, int BS>
void launch_cascade(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                    const T* v_pool, const int* bt, const int* lens, int max_context_len,
                    const CascadeDevicePlan& plan, float scale, ch05::Workspace& ws,
                    cudaStream_t stream) {
  // fp16 and bf16: the tensor-core prefix pass, one partial per 512-token partition; fp32:
  // the exercise's CUDA-core pass, one per chunk that fits in shared memory.
  constexpr bool kMma = !std::is_same_v<T, float>;
  constexpr int chunk = kMma ? ch05::kPartitionSize : prefix_chunk_tokens(D, BS, int(sizeof(T)));
  const int chunks = ceil_div(plan.max_prefix_len(), chunk);
  // No suffix is longer than max_context_len minus the shortest prefix.
  const int parts = std::max(1, ch05::num_partitions(max_context_len - plan.min_prefix_len()));
  const int row_blocks = ceil_div(plan.max_group_size() * (s.num_q_heads / s.num_kv_heads), kMmaRowsPerBlock);
  PA_REQUIRE(chunks <= 65535 && parts <= 65535 && int64_t(chunks) * row_blocks <= 65535,
             "max_context_len " << max_context_len << " needs too many partitions");
  const int slots = chunks + parts;
  ws.reserve(s.num_seqs, s.num_q_heads, slots, s.head_size);
  const CascadeView v = plan.view();
  if (v.num_groups > 0) {
    const size_t smem = size_t(2) * (kMma ? (D <= 128 ? 64 : 32) : chunk) * D * sizeof(T);
    if constexpr (kMma) {
      const auto kernel = cascade_prefix_mma_kernel<T, D, BS>;
      if (smem > 48 * 1024)
        PA_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      launch(kernel, dim3(v.num_groups, s.num_kv_heads, chunks * row_blocks), dim3(128), smem, stream,
             ws.max_logits(), ws.exp_sums(), ws.partial_out(), q, k_pool, v_pool, bt, v, row_blocks, slots,
             scale, s);
    } else {
      const auto cuda_cores = cascade_prefix_kernel<T, D, BS>;
      if (smem > 48 * 1024)  // above 48 KB a kernel must opt in
        PA_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(cuda_cores),
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      launch(cuda_cores, dim3(v.num_groups, s.num_kv_heads, chunks), dim3(kWarps * 32), smem, stream,
             ws.max_logits(), ws.exp_sums(), ws.partial_out(), q, k_pool, v_pool, bt, v, chunk, slots, scale, s);
    }
  }
  launch(cascade_suffix_kernel<T, D, BS>, dim3(s.num_q_heads, s.num_seqs, parts),
         dim3(kWarps * 32), 0, stream, ws.max_logits(), ws.exp_sums(), ws.partial_out(), q,
         k_pool, v_pool, bt, lens, v.seq_prefix_len, chunk, slots, scale, s);
  launch(cascade_merge_kernel<T>, dim3(s.num_q_heads, s.num_seqs), dim3(128), 0, stream, out,
         static_cast<const float*>(ws.max_logits()), static_cast<const float*>(ws.exp_sums()),
         static_cast<const float*>(ws.partial_out()), lens, v.seq_prefix_len, chunk, slots, s);
}

template <typename T, int D>
void dispatch_block_size(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                         const T* v_pool, const int* bt, const int* lens, int max_context_len,
                         const CascadeDevicePlan& plan, float scale, ch05::Workspace& ws,
                         cudaStream_t stream) {
  switch (s.block_size) {
    case 8: return launch_cascade<T, D, 8>(s, out, q, k_pool, v_pool, bt, lens, max_context_len, plan, scale, ws, stream);
    case 16: return launch_cascade<T, D, 16>(s, out, q, k_pool, v_pool, bt, lens, max_context_len, plan, scale, ws, stream);
    case 32: return launch_cascade<T, D, 32>(s, out, q, k_pool, v_pool, bt, lens, max_context_len, plan, scale, ws, stream);
  }
}

template <typename T>
void cascade_attention(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                       const T* v_pool, const int* block_table, const int* context_lens,
                       int max_context_len, const CascadeDevicePlan& plan, float scale,
                       ch05::Workspace& ws, cudaStream_t stream) {
  ch04::check_shape(s);
  PA_REQUIRE(!plan.empty(), "the cascade plan is empty: upload plan_cascade's plan of this batch");
  PA_REQUIRE(plan.num_seqs() == s.num_seqs && plan.block_size() == s.block_size &&
                 plan.max_blocks_per_seq() == s.max_blocks_per_seq,
             "the cascade plan was made for another batch: " << plan.num_seqs() << " sequences, block_size "
                 << plan.block_size() << ", max_blocks_per_seq " << plan.max_blocks_per_seq()
                 << "; this one has " << s.num_seqs << ", " << s.block_size << ", "
                 << s.max_blocks_per_seq);
  PA_REQUIRE(max_context_len >= 0, "max_context_len must be >= 0, got " << max_context_len);
  PA_REQUIRE(int64_t(max_context_len) <= int64_t(s.max_blocks_per_seq) * s.block_size,
             "max_context_len " << max_context_len << " is beyond the table's capacity of "
                                << s.max_blocks_per_seq << " blocks x " << s.block_size);
  PA_REQUIRE(plan.max_prefix_len() <= max_context_len,
             "the cascade plan's shared prefix of " << plan.max_prefix_len()
                 << " tokens is longer than max_context_len " << max_context_len
                 << ": the plan was made for another batch");
#define PA_CASE(D)                                                                              \
  case D:                                                                                       \
    return dispatch_block_size<T, D>(s, out, q, k_pool, v_pool, block_table, context_lens,   \
                                     max_context_len, plan, scale, ws, stream);
  switch (s.head_size) {
    PA_CASE(64)
    PA_CASE(80)
    PA_CASE(96)
    PA_CASE(112)
    PA_CASE(128)
    PA_CASE(256)
  }
#undef PA_CASE
}

#define PA_INSTANTIATE(T)                                                                      \
  template void cascade_attention<T>(const PagedAttentionShape&, T*, const T*, const T*,      \
                                     const T*, const int*, const int*, int,                   \
                                     const CascadeDevicePlan&, float, ch05::Workspace&,       \
                                     cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch08
