// Chapter 9: the entry points for a cache in the model's dtype (the fp8 ones are in
// decode_fp8.cu). Each version is one instantiation of decode_kernel.
#include "launch_decode.cuh"

namespace pa::ch09 {

namespace {

template <typename T>
void run(Version v, const SplitPlan* plan, const PagedAttentionShape& s, T* out, const T* q,
         const T* k_pool, const T* v_pool, const int* block_table, const int* context_lens,
         int max_context_len, float scale, Workspace& ws, cudaStream_t stream) {
  if constexpr (!is_serving_dtype<T>()) {
    PA_REQUIRE(false, PA_FLOAT_REFUSED);
  } else {
    check_decode(s, max_context_len);
    const DecodeArgs<T, T> a{out, nullptr, nullptr, nullptr, nullptr, q, k_pool, v_pool, block_table,
                             context_lens, nullptr, nullptr, scale, 0, s};
    with_config(s, [&](auto cfg) {
      using Cfg = decltype(cfg);
      if (v == Version::pipelined || v == Version::tensor_core)
        launch_pipelined<T, T, Cfg::D, Cfg::BS, Cfg::GQ>(v, plan, a, max_context_len, ws, stream);
      else
        launch_decode<CudaCoreMath, T, T, Cfg::D, Cfg::BS, Cfg::GQ, 0>(v, plan, a, max_context_len,
                                                                       ws, stream);
    });
  }
}

}  // namespace

template <typename T>
void decode(Version v, const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
            const T* v_pool, const int* block_table, const int* context_lens, int max_context_len,
            float scale, Workspace& ws, cudaStream_t stream) {
  run<T>(v, nullptr, s, out, q, k_pool, v_pool, block_table, context_lens, max_context_len, scale,
         ws, stream);
}

template <typename T>
void decode_with_plan(Version v, const SplitPlan& plan, const PagedAttentionShape& s, T* out,
                      const T* q, const T* k_pool, const T* v_pool, const int* block_table,
                      const int* context_lens, int max_context_len, float scale, Workspace& ws,
                      cudaStream_t stream) {
  run<T>(v, &plan, s, out, q, k_pool, v_pool, block_table, context_lens, max_context_len, scale,
         ws, stream);
}

#define PA_INSTANTIATE(T)                                                                       \
  template void decode<T>(Version, const PagedAttentionShape&, T*, const T*, const T*,          \
                          const T*, const int*, const int*, int, float, Workspace&,             \
                          cudaStream_t);                                                        \
  template void decode_with_plan<T>(Version, const SplitPlan&, const PagedAttentionShape&, T*, \
                                    const T*, const T*, const T*, const int*, const int*, int, \
                                    float, Workspace&, cudaStream_t);
PA_INSTANTIATE(float)
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch09
