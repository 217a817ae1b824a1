// Your exercise file. (Generated from solutions/06-fp8-kv-cache/scale_from_data.cu; instructors regenerate with tools/make_skeletons.py.)
// Chapter 6, stretch exercise: a scale chosen from the data.
//
// The cache stores e4m3(saturate(x / scale)), and e4m3's largest finite value is 448. The
// scale that uses e4m3's whole range and saturates nothing is amax / 448, amax = max |x|
// over the tensor: one pass over the data, a max-reduction. The kernel finds amax on the
// device; the host divides.
#include <algorithm>
#include <cmath>

#include "pa/ch06_fp8.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch06 {

constexpr int kAmaxThreads = 256;  // threads per block: 8 warps

// ANCHOR: amax_kernel
template <typename T>
__global__ void amax_kernel(float* amax, const T* x, int64_t n) {
  // TODO(ch06, stretch): when the whole grid has run (blockDim.x = kAmaxThreads, any number of
  //   thread blocks, any n >= 0), *amax, which holds 0 before the launch, is the largest
  //   |x[i]| over all i < n (as a float; every x[i] is finite). No element at or past n is
  //   read. Thread blocks may run in any order and at the same time, so they combine their
  //   results without a race; each reads its elements once. Checked by StretchAmax.*
  //   (tests/06-fp8-kv-cache/test_stretch_amax.cpp).
  (void)amax, (void)x, (void)n;
}
// ANCHOR_END: amax_kernel

template <typename T>
float e4m3_scale_for(const T* x, int64_t n, int grid_blocks, cudaStream_t stream) {
  PA_REQUIRE(n >= 0, "e4m3_scale_for: n must be >= 0, got " << n);
  PA_REQUIRE(grid_blocks >= 0, "e4m3_scale_for: grid_blocks must be >= 0, got " << grid_blocks);
  DeviceBuffer<float> amax(std::vector<float>{0.f});
  if (n > 0) {
    const int64_t want = (n + kAmaxThreads - 1) / kAmaxThreads;
    const int blocks = grid_blocks > 0 ? grid_blocks : int(std::min<int64_t>(want, 1024));
    launch(amax_kernel<T>, dim3(blocks), dim3(kAmaxThreads), 0, stream, amax.get(), x, n);
  }
  const float a = amax.download()[0];
  PA_REQUIRE(std::isfinite(a), "e4m3_scale_for: the data's largest magnitude is " << a);
  return a > 0.f ? a / 448.f : 1.f;  // all zeros: any scale works; 1 keeps the values as they are
}

template float e4m3_scale_for<float>(const float*, int64_t, int, cudaStream_t);
template float e4m3_scale_for<half>(const half*, int64_t, int, cudaStream_t);
template float e4m3_scale_for<bf16>(const bf16*, int64_t, int, cudaStream_t);

}  // namespace pa::ch06
