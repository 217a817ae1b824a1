// Your exercise file. (Generated from solutions/04-paged-attention-v1/paged_attention_v1.cu; instructors regenerate with tools/make_skeletons.py.)
// Chapter 4, exercise 2 of 2: the v1 kernel, which walks a sequence's block table.
#include "attend_block.cuh"
#include "pa/ch04_paged_attention.h"
#include "pa/launch.h"

namespace pa::ch04 {

// ANCHOR: v1_kernel
template <typename T, int D, int BS>
__global__ void __launch_bounds__(kWarps * 32)
paged_attention_v1_kernel(T* out, const T* q, const T* k_pool, const T* v_pool,
                          const int* block_table, const int* context_lens, float scale,
                          PagedAttentionShape s) {
  constexpr int kRows = (D + 31) / 32;
  const int head = blockIdx.x, seq = blockIdx.y;
  const int kv_head = head / (s.num_q_heads / s.num_kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int len = context_lens[seq];
  T* o = out + (int64_t(seq) * s.num_q_heads + head) * D;
  if (len <= 0) {
    for (int d = threadIdx.x; d < D; d += blockDim.x) o[d] = from_float<T>(0.f);
    return;
  }
  __shared__ float q_s[D];
  __shared__ float p_s[kWarps][BS];
  PA_SHARED_REGION(q_s), PA_SHARED_REGION(p_s);  // checked mode's reports say "q_s[72]"
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    q_s[d] = to_float(q[(int64_t(seq) * s.num_q_heads + head) * D + d]) * scale;
  __syncthreads();
  WarpState<kRows> st;
  st.m = -INFINITY;
  st.l = 0.f;
  for (int r = 0; r < kRows; ++r) st.acc[r] = 0.f;
  const int num_logical = (len + BS - 1) / BS;
  const int* table = block_table + int64_t(seq) * s.max_blocks_per_seq;
  // TODO(ch04): every logical block b < num_logical of the sequence is attended exactly once,
  //   by one warp, through attend_kv_block: with this KV head's K and V in physical block
  //   table[b] and valid = the number of the sequence's tokens in it (BS, or fewer in the
  //   last block). Offsets are 64-bit. (merge_warps, below, combines the warps' states.)
  // (your code here)

  merge_warps(st);
  if (warp == 0)
    for (int r = 0; r < kRows; ++r)
      if (lane + 32 * r < D) o[lane + 32 * r] = from_float<T>(st.acc[r]);
}
// ANCHOR_END: v1_kernel

template <typename T, int D, int BS>
void launch_v1(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool, const T* v_pool,
               const int* block_table, const int* context_lens, float scale, cudaStream_t stream) {
  launch(paged_attention_v1_kernel<T, D, BS>, dim3(s.num_q_heads, s.num_seqs), dim3(kWarps * 32), 0,
         stream, out, q, k_pool, v_pool, block_table, context_lens, scale, s);
}

template <typename T, int D>
void dispatch_block_size(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                         const T* v_pool, const int* bt, const int* lens, float scale,
                         cudaStream_t stream) {
  switch (s.block_size) {
    case 8: return launch_v1<T, D, 8>(s, out, q, k_pool, v_pool, bt, lens, scale, stream);
    case 16: return launch_v1<T, D, 16>(s, out, q, k_pool, v_pool, bt, lens, scale, stream);
    case 32: return launch_v1<T, D, 32>(s, out, q, k_pool, v_pool, bt, lens, scale, stream);
  }
}

template <typename T>
void paged_attention_v1(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                        const T* v_pool, const int* block_table, const int* context_lens,
                        float scale, cudaStream_t stream) {
  check_shape(s);
  switch (s.head_size) {
    case 64: return dispatch_block_size<T, 64>(s, out, q, k_pool, v_pool, block_table, context_lens, scale, stream);
    case 80: return dispatch_block_size<T, 80>(s, out, q, k_pool, v_pool, block_table, context_lens, scale, stream);
    case 96: return dispatch_block_size<T, 96>(s, out, q, k_pool, v_pool, block_table, context_lens, scale, stream);
    case 112: return dispatch_block_size<T, 112>(s, out, q, k_pool, v_pool, block_table, context_lens, scale, stream);
    case 128: return dispatch_block_size<T, 128>(s, out, q, k_pool, v_pool, block_table, context_lens, scale, stream);
    case 256: return dispatch_block_size<T, 256>(s, out, q, k_pool, v_pool, block_table, context_lens, scale, stream);
  }
}

#define PA_INSTANTIATE(T)                                                                        \
  template void paged_attention_v1<T>(const PagedAttentionShape&, T*, const T*, const T*, const T*, \
                                      const int*, const int*, float, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch04
