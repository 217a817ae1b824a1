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
  // HINT(1): Three levels, as in every reduction: each thread over its share of the
  //   elements (the grid may be much smaller than n), then the threads of a block, then the
  //   blocks. Only the last level needs an atomic, and a float max has no atomicMax of its
  //   own: think about how the bits of a float >= 0 compare as an int.
  // HINT(2): A grid-stride loop keeps a thread's running max of fabsf(to_float(x[i])),
  //   starting from 0. A warp combines its 32 values with __shfl_xor_sync and fmaxf (offsets
  //   16, 8, 4, 2, 1); lane 0 of each warp puts its warp's max in a __shared__ array of
  //   kAmaxThreads / 32 floats; after __syncthreads one thread takes the max of those and
  //   does one atomicMax on amax viewed as an int (__float_as_int: for floats >= 0 the int
  //   order is the float order).
  // HINT(3): float m = 0; for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i +=
  //   gridDim.x * blockDim.x, in int64_t) m = fmaxf(m, fabsf(to_float(x[i]))); for (off = 16;
  //   off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off)); __shared__ float
  //   s_max[kAmaxThreads / 32]; if (lane == 0) s_max[warp] = m; __syncthreads(); if
  //   (threadIdx.x == 0) { for w in 1 .. blockDim.x / 32 - 1: m = fmaxf(m, s_max[w]);
  //   atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m)); }
  // BEGIN SOLUTION(ch06, stretch)
  // STUB: (void)amax, (void)x, (void)n;
  float m = 0.f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(to_float(x[i])));
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  __shared__ float s_max[kAmaxThreads / 32];
  PA_SHARED_REGION(s_max);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) s_max[warp] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x) / 32; ++w) m = fmaxf(m, s_max[w]);
    atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));  // m >= 0: the int order is the float order
  }
  // END SOLUTION
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
