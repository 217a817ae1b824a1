// Chapter 13: the host side of the Hopper prefill: the items, the tensor maps over chapter
// 2's pools, and the launch.
#include <algorithm>
#include <type_traits>

#include "prefill_kernel.cuh"
#include "pa/launch.h"

namespace pa::ch13 {

void check_prefill_shape(const ch10::VarlenShape& s) {
  ch10::check_shape(s);
  PA_REQUIRE(s.head_size == 64 || s.head_size == 128 || s.head_size == 256,
             "HopperPrefill: head_size " << s.head_size << " is not supported (64, 128, 256)");
  PA_REQUIRE(s.block_size == 8 || s.block_size == 16 || s.block_size == 32,
             "HopperPrefill: block_size " << s.block_size << " is not supported (8, 16, 32)");
}

std::vector<PrefillItem> prefill_items(const ch10::VarlenShape& s, const std::vector<int>& seq_lens,
                                       const std::vector<int>& query_start_loc) {
  const int G = s.num_q_heads / s.num_kv_heads;
  std::vector<PrefillItem> items;
  for (int b = 0; b < s.num_seqs; ++b) {
    const int n = query_start_loc[size_t(b) + 1] - query_start_loc[size_t(b)];
    for (int row0 = 0; row0 < n * G; row0 += kCtaRows) {
      const int last = std::min(row0 + kCtaRows, n * G) - 1;
      const int kv_end = seq_lens[size_t(b)] - n + last / G + 1;
      for (int h = 0; h < s.num_kv_heads; ++h) items.push_back({b, h, row0, kv_end});
    }
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const PrefillItem& x, const PrefillItem& y) { return x.kv_end > y.kv_end; });
  return items;
}

bool hopper_device() {
#if defined(PA_BACKEND_CPU)
  return true;
#else
  int dev = 0, major = 0;
  PA_CUDA_CHECK(cudaGetDevice(&dev));
  PA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major == 9;
#endif
}

void HopperPrefill::plan(const ch10::VarlenShape& s, const std::vector<int>& seq_lens,
                         const std::vector<int>& query_start_loc, cudaStream_t stream) {
  check_prefill_shape(s);
  ch10::check_metadata(s, {}, seq_lens, query_start_loc);
  const std::vector<PrefillItem> items = prefill_items(s, seq_lens, query_start_loc);
  shape_ = s;
  num_items_ = int(items.size());
  (void)stream;  // the upload is synchronous, as chapter 10's plan's
  items_.upload_prefix(items);  // keeps its address while the items fit
}

namespace {

template <typename T, int D>
void launch_prefill(const TensorMap& k_map, const TensorMap& v_map, const PrefillArgs<T>& args,
                    int items, cudaStream_t stream) {
  const auto kernel = prefill_kernel<T, D>;
  const size_t smem = TileShape<D>::kSmem;
  PA_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch(kernel, dim3(unsigned(items)), dim3(384), smem, stream, k_map, v_map, args);
}

}  // namespace

template <typename T>
void HopperPrefill::run(T* out, const T* q, const T* k_pool, const T* v_pool, const int* block_table,
                        const int* seq_lens, const int* query_start_loc, float scale,
                        cudaStream_t stream) {
  PA_REQUIRE(hopper_device(), "HopperPrefill: this GPU is not a Hopper (sm_90); use chapter 10's kernel");
  if (num_items_ == 0) return;
  const ch10::VarlenShape& s = shape_;
  const TensorMap k_map = encode_tensor_map(k_map_spec(k_pool, s));
  const TensorMap v_map = encode_tensor_map(v_map_spec(v_pool, s));
  const PrefillArgs<T> args{out, q, block_table, seq_lens, query_start_loc, items_.get(),
                            scale * 1.4426950408889634f, s.num_q_heads, s.num_kv_heads,
                            s.max_blocks_per_seq, s.num_blocks, s.block_size};
  switch (s.head_size) {
    case 64: return launch_prefill<T, 64>(k_map, v_map, args, num_items_, stream);
    case 128: return launch_prefill<T, 128>(k_map, v_map, args, num_items_, stream);
    default: return launch_prefill<T, 256>(k_map, v_map, args, num_items_, stream);
  }
}

template void HopperPrefill::run<half>(half*, const half*, const half*, const half*, const int*,
                                       const int*, const int*, float, cudaStream_t);
template void HopperPrefill::run<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const int*,
                                       const int*, const int*, float, cudaStream_t);

}  // namespace pa::ch13
