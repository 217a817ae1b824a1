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
  // HINT(1): Three things to find: the sequence b the token belongs to (query_start_loc is
  //   the prefix sum of the new-token counts: sequence b's new tokens are query_start_loc[b]
  //   .. query_start_loc[b + 1] - 1), its position pos in that sequence, and then chapter 4's
  //   v1 loop over len = pos + 1 tokens.
  // HINT(2): A binary search for the last b with query_start_loc[b] <= token (lo = 0, hi =
  //   num_seqs - 1, take the upper middle; this skips sequences with empty ranges). n =
  //   query_start_loc[b + 1] - query_start_loc[b]; pos = context_lens[b] - n + (token -
  //   query_start_loc[b]). The table row is block_table + b * max_blocks_per_seq; the loop is
  //   v1's, with ch04::attend_kv_block and valid = min(BS, len - b' * BS) for logical block
  //   b'.
  // HINT(3): 1. Find this token's sequence: the b with query_start_loc[b] <= token <
  //   query_start_loc[b + 1] (a binary search; a sequence with no new tokens has an empty
  //   range and is never the answer).
  //   2. Its position: the sequence's n new tokens are its last n, so new token i sits at
  //   pos = context_lens[b] - n + i. Causal: it sees positions 0 .. pos, len = pos + 1.
  //   3. As chapter 4's v1 kernel, over len: warp w takes logical blocks w, w + kWarps, ...
  //   of row b of block_table and calls ch04::attend_kv_block with valid = the block's
  //   positions below len. (The chunk's own K/V are already in the pool.)
  // BEGIN SOLUTION
  // STUB: (void)kv_head;
  // STUB: (void)p_s;
  int lo = 0, hi = s.num_seqs - 1;  // the last b with query_start_loc[b] <= token
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start_loc[mid] <= token) lo = mid; else hi = mid - 1;
  }
  const int seq = lo;
  const int n_new = query_start_loc[seq + 1] - query_start_loc[seq];
  const int pos = context_lens[seq] - n_new + (token - query_start_loc[seq]);
  const int len = pos + 1;
  const int* table = block_table + int64_t(seq) * s.max_blocks_per_seq;
  const int64_t block_elems = int64_t(s.num_kv_heads) * D * BS;
  for (int b = warp; b < (len + BS - 1) / BS; b += kWarps) {
    const int64_t at = int64_t(table[b]) * block_elems + int64_t(kv_head) * D * BS;
    ch04::attend_kv_block<T, D, BS>(k_pool + at, v_pool + at, min(BS, len - b * BS), q_s,
                                    p_s[warp], st);
  }
  // END SOLUTION

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
