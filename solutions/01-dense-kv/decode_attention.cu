// Chapter 1, exercise 2 of 3: decode attention over a dense KV cache.
//
// One thread block per (query head, sequence), four warps. Each warp walks every
// fourth token and keeps an *online softmax*: a running max m, a running sum l of
// exp(score - m) and a running output acc = sum of exp(score - m) * v. When a larger
// score arrives, the old l and acc are rescaled by exp(m_old - m_new). At the end the
// four warps' (m, l, acc) are merged the same way, through shared memory.
#include <cmath>

#include "pa/ch01_dense.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch01 {

constexpr int kWarps = 4;

// The sum of v over the 32 lanes of a warp, returned to every lane.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// kPerLane = ceil(head_size / 32): lane l holds elements l, l + 32, l + 64, ...
// ANCHOR: decode_kernel
template <typename T, int kPerLane>
__global__ void dense_decode_kernel(T* out, const T* q, const T* k_cache, const T* v_cache,
                                    const int* context_lens, float scale, DenseShape s) {
  const int head = blockIdx.x, seq = blockIdx.y;
  const int kv_head = head / (s.num_q_heads / s.num_kv_heads);  // GQA: heads share K/V
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int D = s.head_size;
  const int len = context_lens[seq];
  T* o = out + (int64_t(seq) * s.num_q_heads + head) * D;
  if (len <= 0) {  // nothing to attend to: define the output as zeros, never NaN
    for (int d = threadIdx.x; d < D; d += blockDim.x) o[d] = from_float<T>(0.f);
    return;
  }
  const T* q_row = q + (int64_t(seq) * s.num_q_heads + head) * D;
  const int64_t token_stride = int64_t(s.num_kv_heads) * D;  // between slots t and t+1
  const T* k_seq = k_cache + int64_t(seq) * s.max_seq_len * token_stride + int64_t(kv_head) * D;
  const T* v_seq = v_cache + int64_t(seq) * s.max_seq_len * token_stride + int64_t(kv_head) * D;

  float q_reg[kPerLane], acc[kPerLane];
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    q_reg[i] = d < D ? to_float(q_row[d]) * scale : 0.f;  // fold the scale into q once
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][kPerLane * 32];
  PA_SHARED_REGION(s_m), PA_SHARED_REGION(s_l), PA_SHARED_REGION(s_acc);  // names for checked mode
  // TODO(ch01): o[d] (d < D) = sum over tokens t < len of softmax_t(q . k_t) * v_t[d], with
  //   k_t, v_t this sequence's slot t for our KV head (q_reg already holds q * scale: lane l
  //   keeps elements l, l + 32, ...). All four warps share the tokens; their partial results
  //   are merged through s_m, s_l and s_acc, and warp 0 writes o. Slots t >= len are never
  //   read (they may hold NaN).
  // HINT(1): Do it in one pass with an online softmax (the comment at the top of the file):
  //   each warp keeps a running max m, a running sum l of exp(score - m) and acc = sum of
  //   exp(score - m) * v. When a larger score arrives, the old l and acc are rescaled by
  //   exp(m_old - m_new). Merging the four warps at the end is the same rescaling once more.
  // HINT(2): Warp w takes tokens t = w, w + kWarps, ... < len; k_t is k_seq + t *
  //   token_stride (v_t alike). The score is a dot product split over the lanes: each lane
  //   multiplies q_reg[i] by k_t[lane + 32 i] (for d < D), then warp_sum() gives every lane
  //   the total. For the merge, M is the largest m of the warps, and warp w weighs exp(s_m[w]
  //   - M). A warp that saw no token (len < kWarps) has m = -inf and l = 0: it must add
  //   nothing.
  // HINT(3): the online softmax. For each token t = warp, warp + kWarps, ... < len:
  //   1. score = q . k_t: each lane multiplies its elements, then warp_sum().
  //   2. m_new = max(m, score); rescale l and acc by exp(m - m_new);
  //      add p = exp(score - m_new) to l and p * v_t to acc; m = m_new.
  //   Then merge the warps: write m, l, acc to s_m, s_l, s_acc; __syncthreads();
  //   warp 0 computes M = max of s_m, L = sum of s_l[w] * exp(s_m[w] - M) and
  //   out = sum of s_acc[w] * exp(s_m[w] - M) / L. (A warp with no tokens has m = -inf.)
  // BEGIN SOLUTION
  for (int t = warp; t < len; t += kWarps) {
    const T* k = k_seq + t * token_stride;
    const T* v = v_seq + t * token_stride;
    float partial = 0.f;
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) partial += q_reg[i] * to_float(k[d]);
    }
    const float score = warp_sum(partial);
    const float m_new = fmaxf(m, score);
    const float correction = expf(m - m_new);  // 0 on the first token (m = -inf)
    const float p = expf(score - m_new);
    l = l * correction + p;
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      acc[i] = acc[i] * correction + (d < D ? p * to_float(v[d]) : 0.f);
    }
    m = m_new;
  }

  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
  for (int i = 0; i < kPerLane; ++i) s_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();

  if (warp == 0) {
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, s_m[w]);
    float weight[kWarps], L = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      weight[w] = s_m[w] == -INFINITY ? 0.f : expf(s_m[w] - M);  // empty warp: weight 0
      L += s_l[w] * weight[w];
    }
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d >= D) continue;
      float total = 0.f;
      for (int w = 0; w < kWarps; ++w) total += s_acc[w][d] * weight[w];
      o[d] = from_float<T>(total / L);
    }
  }
  // END SOLUTION
}
// ANCHOR_END: decode_kernel

template <typename T, int kPerLane>
void launch_decode(const DenseShape& s, T* out, const T* q, const T* k_cache, const T* v_cache,
                   const int* context_lens, float scale, cudaStream_t stream) {
  launch(dense_decode_kernel<T, kPerLane>, dim3(s.num_q_heads, s.num_seqs), dim3(32 * kWarps),
         0, stream, out, q, k_cache, v_cache, context_lens, scale, s);
}

template <typename T>
void decode_attention(const DenseShape& s, T* out, const T* q, const T* k_cache,
                      const T* v_cache, const int* context_lens, float scale,
                      cudaStream_t stream) {
  check_shape(s);
  switch ((s.head_size + 31) / 32) {  // check_shape allows only the listed head sizes
    case 2: return launch_decode<T, 2>(s, out, q, k_cache, v_cache, context_lens, scale, stream);
    case 3: return launch_decode<T, 3>(s, out, q, k_cache, v_cache, context_lens, scale, stream);
    case 4: return launch_decode<T, 4>(s, out, q, k_cache, v_cache, context_lens, scale, stream);
    case 8: return launch_decode<T, 8>(s, out, q, k_cache, v_cache, context_lens, scale, stream);
  }
  throw Error("decode_attention: head_size " + std::to_string(s.head_size) + " not dispatched");
}

#define PA_INSTANTIATE(T)                                                                \
  template void decode_attention<T>(const DenseShape&, T*, const T*, const T*, const T*, \
                                    const int*, float, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch01
