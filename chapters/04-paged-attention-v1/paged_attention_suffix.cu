// Your exercise file. (Generated from solutions/04-paged-attention-v1/paged_attention_suffix.cu; instructors regenerate with tools/make_skeletons.py.)
// Chapter 4, stretch exercise: attention over a sequence's blocks from a given block on, with
// its log-sum-exp. When many sequences share their first blocks (one system prompt), the
// shared blocks can be attended once for all of them and each sequence's own blocks apart;
// this kernel is the second half, and chapter 5's stretch exercise merges the two.
#include <cmath>

#include "attend_block.cuh"
#include "pa/ch04_paged_attention.h"
#include "pa/launch.h"

namespace pa::ch04 {

// Grid (query head, sequence), as v1.
// ANCHOR: suffix_kernel
template <typename T, int D, int BS>
__global__ void __launch_bounds__(kWarps * 32)
paged_attention_suffix_kernel(T* out, float* lse, const T* q, const T* k_pool, const T* v_pool,
                              const int* block_table, const int* context_lens, const int* first_block,
                              float scale, PagedAttentionShape s) {
  constexpr int kRows = (D + 31) / 32;
  const int head = blockIdx.x, seq = blockIdx.y;
  const int kv_head = head / (s.num_q_heads / s.num_kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int len = context_lens[seq];
  const int first = first_block[seq];  // 0 <= first; the tokens first * BS .. len - 1
  T* o = out + (int64_t(seq) * s.num_q_heads + head) * D;
  float* row_lse = lse + int64_t(seq) * s.num_q_heads + head;
  __shared__ float q_s[D];
  __shared__ float p_s[kWarps][BS];
  PA_SHARED_REGION(q_s), PA_SHARED_REGION(p_s);
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    q_s[d] = to_float(q[(int64_t(seq) * s.num_q_heads + head) * D + d]) * scale;
  __syncthreads();
  WarpState<kRows> st;
  st.m = -INFINITY;
  st.l = 0.f;
  for (int r = 0; r < kRows; ++r) st.acc[r] = 0.f;
  const int* table = block_table + int64_t(seq) * s.max_blocks_per_seq;
  // TODO(ch04, stretch): o[d] (d < D) = the attention of this query head over the sequence's
  //   tokens first * BS .. len - 1 only (logical blocks first .. ceil(len / BS) - 1; the
  //   table's entries before `first` may name any block, even one full of NaN, and are never
  //   read), and *row_lse = log(sum over those tokens of exp(scale * q . k)), natural log.
  //   No such token (first * BS >= len): o = 0 and *row_lse = -inf. Every thread of the block
  //   reaches merge_warps. Checked by StretchSuffix.*
  //   (tests/04-paged-attention-v1/test_stretch_suffix.cpp).
  (void)kv_head, (void)warp, (void)lane, (void)len, (void)first, (void)o, (void)row_lse;
  (void)table, (void)k_pool, (void)v_pool;
}
// ANCHOR_END: suffix_kernel

template <typename T, int D>
void launch_suffix(const PagedAttentionShape& s, T* out, float* lse, const T* q, const T* k_pool,
                   const T* v_pool, const int* bt, const int* lens, const int* first_block, float scale,
                   cudaStream_t stream) {
  const dim3 grid(s.num_q_heads, s.num_seqs), block(kWarps * 32);
  switch (s.block_size) {
    case 8: return launch(paged_attention_suffix_kernel<T, D, 8>, grid, block, 0, stream, out, lse, q, k_pool,
                          v_pool, bt, lens, first_block, scale, s);
    case 16: return launch(paged_attention_suffix_kernel<T, D, 16>, grid, block, 0, stream, out, lse, q, k_pool,
                           v_pool, bt, lens, first_block, scale, s);
    case 32: return launch(paged_attention_suffix_kernel<T, D, 32>, grid, block, 0, stream, out, lse, q, k_pool,
                           v_pool, bt, lens, first_block, scale, s);
  }
}

template <typename T>
void paged_attention_suffix(const PagedAttentionShape& s, T* out, float* lse, const T* q, const T* k_pool,
                            const T* v_pool, const int* block_table, const int* context_lens,
                            const int* first_block, float scale, cudaStream_t stream) {
  check_shape(s);
  PA_REQUIRE(s.head_size == 64 || s.head_size == 128,
             "paged_attention_suffix: head_size " << s.head_size << " (the stretch exercise instantiates 64 and 128)");
  if (s.head_size == 64) return launch_suffix<T, 64>(s, out, lse, q, k_pool, v_pool, block_table, context_lens,
                                                     first_block, scale, stream);
  launch_suffix<T, 128>(s, out, lse, q, k_pool, v_pool, block_table, context_lens, first_block, scale, stream);
}

#define PA_INSTANTIATE(T)                                                                              \
  template void paged_attention_suffix<T>(const PagedAttentionShape&, T*, float*, const T*, const T*, \
                                          const T*, const int*, const int*, const int*, float, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch04
