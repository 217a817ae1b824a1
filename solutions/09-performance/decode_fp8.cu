// Chapter 9: the tensor-core kernel on chapter 6's fp8 (e4m3) cache. Nothing but the cache
// element changes: each e4m3 pair becomes an fp16 pair on its way into the tensor cores
// (CacheElem<uint8_t> for the CUDA-core fallback at block size 8), and the scales are
// folded into the scores (k_scale) and the output (v_scale).
#include "launch_decode.cuh"
#include "pa/ch06_fp8.h"

namespace pa::ch09 {

namespace {

template <typename T>
void run_fp8(const SplitPlan* plan, const PagedAttentionShape& s, T* out, const T* q,
             const uint8_t* k_pool, const uint8_t* v_pool, const int* block_table,
             const int* context_lens, int max_context_len, const float* k_scale,
             const float* v_scale, float scale, Workspace& ws, cudaStream_t stream) {
  if constexpr (!is_serving_dtype<T>()) {
    PA_REQUIRE(false, PA_FLOAT_REFUSED);
  } else {
    check_decode(s, max_context_len);
    PA_REQUIRE(s.head_size % ch06::kFp8X == 0,
               "head_size " << s.head_size << " is not a multiple of " << ch06::kFp8X
                            << " (one 16-byte chunk of e4m3)");
    PA_REQUIRE(k_scale && v_scale, "an fp8 cache needs k_scale and v_scale");
    const DecodeArgs<T, uint8_t> a{out, nullptr, nullptr, nullptr, nullptr, q, k_pool, v_pool, block_table,
                                   context_lens, k_scale, v_scale, scale, 0, s};
    with_config(s, [&](auto cfg) {
      using Cfg = decltype(cfg);
      launch_pipelined<T, uint8_t, Cfg::D, Cfg::BS, Cfg::GQ>(Version::tensor_core, plan, a,
                                                             max_context_len, ws, stream);
    });
  }
}

}  // namespace

template <typename T>
void decode_fp8(const PagedAttentionShape& s, T* out, const T* q, const uint8_t* k_pool,
                const uint8_t* v_pool, const int* block_table, const int* context_lens,
                int max_context_len, const float* k_scale, const float* v_scale, float scale,
                Workspace& ws, cudaStream_t stream) {
  run_fp8<T>(nullptr, s, out, q, k_pool, v_pool, block_table, context_lens, max_context_len,
             k_scale, v_scale, scale, ws, stream);
}

template <typename T>
void decode_fp8_with_plan(const SplitPlan& plan, const PagedAttentionShape& s, T* out,
                          const T* q, const uint8_t* k_pool, const uint8_t* v_pool,
                          const int* block_table, const int* context_lens, int max_context_len,
                          const float* k_scale, const float* v_scale, float scale, Workspace& ws,
                          cudaStream_t stream) {
  run_fp8<T>(&plan, s, out, q, k_pool, v_pool, block_table, context_lens, max_context_len,
             k_scale, v_scale, scale, ws, stream);
}

#define PA_INSTANTIATE(T)                                                                         \
  template void decode_fp8<T>(const PagedAttentionShape&, T*, const T*, const uint8_t*,          \
                              const uint8_t*, const int*, const int*, int, const float*,         \
                              const float*, float, Workspace&, cudaStream_t);                    \
  template void decode_fp8_with_plan<T>(const SplitPlan&, const PagedAttentionShape&, T*,        \
                                        const T*, const uint8_t*, const uint8_t*, const int*,    \
                                        const int*, int, const float*, const float*, float,      \
                                        Workspace&, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch09
