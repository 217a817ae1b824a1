// The host side of chapter 10's kernel: the head-size dispatch, one wave's size, and the
// launch of a planned batch (shared by the model-dtype and the e4m3 entry points).
#pragma once

#include <algorithm>
#include <type_traits>

#include "varlen_kernel.cuh"
#include "pa/launch.h"

namespace pa::ch10 {

// Calls f(std::integral_constant<int, D>{}) for the runtime head size.
template <class F>
void with_head_size(int head_size, F&& f) {
  switch (head_size) {
    case 64: return f(std::integral_constant<int, 64>{});
    case 80: return f(std::integral_constant<int, 80>{});
    case 96: return f(std::integral_constant<int, 96>{});
    case 112: return f(std::integral_constant<int, 112>{});
    case 128: return f(std::integral_constant<int, 128>{});
    case 256: return f(std::integral_constant<int, 256>{});
  }
  PA_REQUIRE(false, "head_size " << head_size << " is not supported (64, 80, 96, 112, 128, 256)");
}

// The kernel for (T, C, D), its ring depth and its dynamic shared memory, opted in above 48 KB.
// kShortTiles only with chapter 10's mask: a second kernel for every policy would double
// chapter 12's build.
template <typename T, typename C, int D, typename Mask = CausalMask, bool kShortTiles = false>
struct Kernel {
  static constexpr int kStages = stages_for<C, D>();
  static constexpr size_t kSmem = smem_bytes<C, D>();
  static constexpr bool kShort = kShortTiles && std::is_same<Mask, CausalMask>::value;
  static auto get() {
    const auto kernel = varlen_kernel<T, C, D, kStages, Mask, kShort>;
    if (kSmem > 48 * 1024)
      PA_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
    return kernel;
  }
};

// One wave of this kernel: resident thread blocks per SM x SMs.
template <typename T, typename C>
int wave_of(int head_size) {
  int wave = 0;
  with_head_size(head_size, [&](auto d) {
    constexpr int D = decltype(d)::value;
    const auto kernel = Kernel<T, C, D>::get();
    int sms = 0, per_sm = 4;  // the emulator has no occupancy: 4 per "SM" (worker)
    PA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
#if !defined(PA_BACKEND_CPU)
    PA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32,
                                                                Kernel<T, C, D>::kSmem));
#else
    (void)kernel;
#endif
    wave = std::max(1, sms) * std::max(1, per_sm);
  });
  return wave;
}

// Queries and outputs in half or bf16 (the tensor cores' inputs; float is refused).
template <typename T>
constexpr bool is_serving_dtype() { return std::is_same<T, half>::value || std::is_same<T, bf16>::value; }

template <typename T, typename C, typename Mask>
void VarlenAttention::launch(T* out, const T* q, const C* k_pool, const C* v_pool,
                             const int* block_table, const int* seq_lens,
                             const int* query_start_loc, const float* k_scale,
                             const float* v_scale, float scale, const Mask& mask,
                             cudaStream_t stream) {
  static_assert(is_serving_dtype<T>(), "chapter 10's kernel takes half or bf16");
  constexpr bool fp8 = std::is_same<C, uint8_t>::value;
  PA_REQUIRE(planned_, "VarlenAttention: run() before plan(): plan the step first");
  PA_REQUIRE(dtype_ == dtype_of<T>(), "VarlenAttention: planned for " << dtype_name(dtype_)
                                          << " queries, run with " << dtype_name(dtype_of<T>()));
  PA_REQUIRE(fp8 == (cache_ == CacheType::fp8_e4m3),
             "VarlenAttention: planned for " << (fp8 ? "the model dtype's" : "an e4m3")
                                             << " cache, run with " << (fp8 ? "run_fp8" : "run"));
  PA_REQUIRE(!fp8 || (k_scale && v_scale), "an e4m3 cache needs k_scale and v_scale");
  if (plan_.items.empty()) return;  // no new tokens at all
  const VarlenArgs<T, C> a{out, q, k_pool, v_pool, block_table, seq_lens, query_start_loc,
                           items_.get(), rounds_.get(), max_logits_.get(), exp_sums_.get(),
                           partial_out_.get(), counters_.get(), k_scale, v_scale, scale, shape_};
  const MergeArgs<T> m{out, query_start_loc, max_logits_.get(), exp_sums_.get(), partial_out_.get(),
                       counters_.get(), arrivals_.get(), merge_rows_.get(), merge_count_.get(), shape_.num_q_heads,
                       shape_.num_q_heads / shape_.num_kv_heads};
  // The merge kernel runs if this plan leaves it rows; and in a CUDA graph's capture if any
  // plan of this runner did, since the graph may be replayed after such a plan.
  bool merge_apart = num_merge_rows_ > 0;
#if !defined(PA_BACKEND_CPU)
  if (!merge_apart && merge_grid_ > 0) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    PA_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    merge_apart = capture != cudaStreamCaptureStatusNone;
  }
#endif
  with_head_size(shape_.head_size, [&](auto d) {
    constexpr int D = decltype(d)::value;
    auto attend = [&](auto short_tiles) {
      using K = Kernel<T, C, D, Mask, decltype(short_tiles)::value>;
      pa::launch(K::get(), dim3(plan_.grid), dim3(kWarps * 32), K::kSmem, stream, a, mask);
    };
    if (short_tiles_) attend(std::true_type{});
    else attend(std::false_type{});
    // Then the split tiles the kernel left to merge_kernel, one thread block a row, its
    // blocks placed before the attention kernel ends.
    if (merge_apart)
      pa::launch_dependent(merge_kernel<T, D>, dim3(merge_grid_), dim3(D / 4 * merge_lanes<D>()), 0, stream, m);
  });
}

// A later chapter's mask policy on the model-dtype cache (instantiated where Mask is defined).
template <typename T, typename Mask>
void VarlenAttention::run_masked(T* out, const T* q, const T* k_pool, const T* v_pool,
                                 const int* block_table, const int* seq_lens,
                                 const int* query_start_loc, float scale, const Mask& mask,
                                 cudaStream_t stream) {
  launch<T, T>(out, q, k_pool, v_pool, block_table, seq_lens, query_start_loc, nullptr, nullptr,
               scale, mask, stream);
}

}  // namespace pa::ch10
