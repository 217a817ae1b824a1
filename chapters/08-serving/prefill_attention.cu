// Your exercise file. (Generated from solutions/08-serving/prefill_attention.cu; instructors regenerate with tools/make_skeletons.py.)
// Chapter 8, exercise 1 of 4: prefill attention over paged KV (varlen, causal).
//
// One thread block per (query head, new token). The block finds its token's sequence
// and position, then does what chapter 4's v1 kernel does for a decode token, over the
// causal length pos + 1 instead of the whole context: its warps walk the sequence's
// block table and attend block by block (ch04::attend_kv_block), then merge.
// Simple, and correct for any chunk; it re-reads the prefix once per new token and
// query head, which a tiled kernel would share (chapter 9's business, not this one's).
#include "attend_block.cuh"
#include "pa/ch08_prefill.h"
#include "pa/launch.h"

namespace pa::ch08 {

using ch04::kWarps;
using ch04::WarpState;

// ANCHOR: prefill_kernel
template <typename T, int D, int BS>
__global__ void __launch_bounds__(kWarps * 32)
prefill_attention_kernel(T* out, const T* q, const T* k_pool, const T* v_pool,
                         const int* block_table, const int* context_lens,
                         const int* query_start_loc, float scale, PrefillShape s) {
  constexpr int kRows = (D + 31) / 32;
  const int head = blockIdx.x, token = blockIdx.y;
  const int kv_head = head / (s.num_q_heads / s.num_kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ float q_s[D];
  __shared__ float p_s[kWarps][BS];
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    q_s[d] = to_float(q[(int64_t(token) * s.num_q_heads + head) * D + d]) * scale;
  __syncthreads();

  WarpState<kRows> st;
  st.m = -INFINITY;
  st.l = 0.f;
  for (int r = 0; r < kRows; ++r) st.acc[r] = 0.f;
  // TODO(ch08): for new token `token` and query head `head`, the warps' states st hold causal
  //   attention over the token's own sequence: every position 0 .. pos (pos = the token's
  //   position in its sequence) attended exactly once, through row b of block_table, and no
  //   position beyond pos (those may hold later tokens of the chunk, or anything).
  //   merge_warps, below, combines the warps.
  (void)kv_head;
  (void)p_s;

  ch04::merge_warps(st);
  T* o = out + (int64_t(token) * s.num_q_heads + head) * D;
  if (warp == 0)
    for (int r = 0; r < kRows; ++r)
      if (lane + 32 * r < D) o[lane + 32 * r] = from_float<T>(st.acc[r]);
}
// ANCHOR_END: prefill_kernel

template <typename T, int D, int BS>
void launch_prefill(const PrefillShape& s, T* out, const T* q, const T* k_pool, const T* v_pool,
                    const int* bt, const int* lens, const int* qsl, float scale,
                    cudaStream_t stream) {
  launch(prefill_attention_kernel<T, D, BS>, dim3(s.num_q_heads, s.num_tokens), dim3(kWarps * 32),
         0, stream, out, q, k_pool, v_pool, bt, lens, qsl, scale, s);
}

template <typename T, int D>
void dispatch_block_size(const PrefillShape& s, T* out, const T* q, const T* k_pool,
                         const T* v_pool, const int* bt, const int* lens, const int* qsl,
                         float scale, cudaStream_t stream) {
  switch (s.block_size) {
    case 8: return launch_prefill<T, D, 8>(s, out, q, k_pool, v_pool, bt, lens, qsl, scale, stream);
    case 16: return launch_prefill<T, D, 16>(s, out, q, k_pool, v_pool, bt, lens, qsl, scale, stream);
    case 32: return launch_prefill<T, D, 32>(s, out, q, k_pool, v_pool, bt, lens, qsl, scale, stream);
  }
}

template <typename T>
void prefill_attention(const PrefillShape& s, T* out, const T* q, const T* k_pool,
                       const T* v_pool, const int* block_table, const int* context_lens,
                       const int* query_start_loc, float scale, cudaStream_t stream) {
  check_shape(s);
  if (s.num_tokens == 0) return;
#define PA_CASE(D)                                                                            \
  case D:                                                                                     \
    return dispatch_block_size<T, D>(s, out, q, k_pool, v_pool, block_table, context_lens, \
                                     query_start_loc, scale, stream);
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

#define PA_INSTANTIATE(T)                                                                    \
  template void prefill_attention<T>(const PrefillShape&, T*, const T*, const T*, const T*, \
                                     const int*, const int*, const int*, float, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch08
