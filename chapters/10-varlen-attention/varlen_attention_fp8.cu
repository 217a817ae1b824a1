// Chapter 10 on chapter 6's e4m3 cache: the same kernel with C = uint8_t. Each e4m3 pair
// becomes an fp16 pair on its way into the tensor cores (chapter 9's chunk_to_pairs), the K
// scale is folded into the scores and the V scale into the output.
#include "launch_varlen.cuh"

namespace pa::ch10 {

int wave_fp8(DType dtype, int head_size) {
  return dtype == DType::fp16 ? wave_of<half, uint8_t>(head_size) : wave_of<bf16, uint8_t>(head_size);
}

template <typename T>
void VarlenAttention::run_fp8(T* out, const T* q, const uint8_t* k_pool, const uint8_t* v_pool,
                              const int* block_table, const int* seq_lens,
                              const int* query_start_loc, const float* k_scale,
                              const float* v_scale, float scale, cudaStream_t stream) {
  launch<T, uint8_t>(out, q, k_pool, v_pool, block_table, seq_lens, query_start_loc, k_scale,
                     v_scale, scale, CausalMask{}, stream);
}

#define PA_INSTANTIATE(T)                                                                        \
  template void VarlenAttention::run_fp8<T>(T*, const T*, const uint8_t*, const uint8_t*,        \
                                            const int*, const int*, const int*, const float*,    \
                                            const float*, float, cudaStream_t);
PA_INSTANTIATE(half)
PA_INSTANTIATE(bf16)
#undef PA_INSTANTIATE

}  // namespace pa::ch10
