// What a kernel can rely on: shuffles, votes, barriers, shared memory, atomics and the
// half/bf16/fp8 types. These run on both backends, so on a GPU they check that the
// emulator agrees with the hardware; on the CPU they run under every schedule order.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "pa/device_buffer.h"
#include "pa/dtype.h"
#include "pa/launch.h"
#include "schedules.h"
#include "pa/mma.h"

namespace {

using pa::test::for_each_schedule;

__global__ void shuffle_kernel(int* out) {
  const int lane = threadIdx.x % 32;
  const int t = threadIdx.x;
  int v = lane;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[t * 8 + 0] = v;                                             // butterfly sum: 496
  out[t * 8 + 1] = __shfl_sync(0xffffffffu, lane * 10, 5);        // broadcast from lane 5
  out[t * 8 + 2] = __shfl_sync(0xffffffffu, lane * 10, 3, 8);     // lane 3 of my 8-segment
  out[t * 8 + 3] = __shfl_down_sync(0xffffffffu, lane, 1);        // lane 31 keeps its own
  out[t * 8 + 4] = __shfl_up_sync(0xffffffffu, lane, 2);          // lanes 0, 1 keep their own
  out[t * 8 + 5] = __shfl_xor_sync(0xffffffffu, lane, 4, 4);      // xor may reach a lower segment
  out[t * 8 + 6] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  out[t * 8 + 7] = (__any_sync(0xffffffffu, lane == 7) ? 1 : 0) +
                   (__all_sync(0xffffffffu, lane < 32) ? 2 : 0) +
                   (__all_sync(0xffffffffu, lane < 31) ? 4 : 0);
}

TEST(Semantics, ShufflesAndVotesGiveTheHardwareLaneValues) {
  for_each_schedule([] {
    const int threads = 64;
    pa::DeviceBuffer<int> out(threads * 8);
    pa::launch(shuffle_kernel, dim3(1), dim3(threads), 0, nullptr, out.get());
    std::vector<int> h = out.download();
    unsigned ballot = 0;
    for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
    for (int t = 0; t < threads; ++t) {
      const int lane = t % 32;
      SCOPED_TRACE("thread " + std::to_string(t));
      EXPECT_EQ(h[t * 8 + 0], 496);
      EXPECT_EQ(h[t * 8 + 1], 50);
      EXPECT_EQ(h[t * 8 + 2], ((lane / 8) * 8 + 3) * 10);
      EXPECT_EQ(h[t * 8 + 3], lane == 31 ? 31 : lane + 1);
      EXPECT_EQ(h[t * 8 + 4], lane < 2 ? lane : lane - 2);
      // Only the upper end of the segment is checked (PTX shfl.bfly): lane 4 reads lane 0,
      // lane 0 would read lane 4, past its segment, so it keeps its own value.
      EXPECT_EQ(h[t * 8 + 5], (lane & 4) ? (lane ^ 4) : lane);
      EXPECT_EQ(static_cast<unsigned>(h[t * 8 + 6]), ballot);
      EXPECT_EQ(h[t * 8 + 7], 1 + 2);
    }
  });
}

// A half-warp mask: the two halves shuffle independently.
__global__ void half_warp_kernel(int* out) {
  const int lane = threadIdx.x % 32;
  const unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  int v = lane;
  for (int offset = 8; offset > 0; offset /= 2) v += __shfl_xor_sync(mask, v, offset);
  out[threadIdx.x] = v;
}

TEST(Semantics, DisjointMasksShuffleIndependently) {
  for_each_schedule([] {
    pa::DeviceBuffer<int> out(32);
    pa::launch(half_warp_kernel, dim3(1), dim3(32), 0, nullptr, out.get());
    std::vector<int> h = out.download();
    for (int l = 0; l < 32; ++l) EXPECT_EQ(h[l], l < 16 ? 120 : 376) << "lane " << l;
  });
}

// Block-wide sum through static shared memory, with the barriers it needs.
__global__ void block_sum_kernel(const float* in, float* out) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int nwarps = (blockDim.x + 31) / 32;
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? partial[lane] : 0.f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) out[blockIdx.x] = v;
  }
}

TEST(Semantics, SharedMemoryReductionWithBarriersIsExact) {
  for_each_schedule([] {
    const int blocks = 6, threads = 256;
    std::vector<float> in(blocks * threads);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 97) - 40.f;
    pa::DeviceBuffer<float> d_in(in), d_out(blocks);
    pa::launch(block_sum_kernel, dim3(blocks), dim3(threads), 0, nullptr, d_in.get(),
               d_out.get());
    std::vector<float> out = d_out.download();
    for (int b = 0; b < blocks; ++b) {
      float want = 0;
      for (int t = 0; t < threads; ++t) want += in[b * threads + t];
      EXPECT_EQ(out[b], want) << "block " << b;
    }
  });
}

__global__ void barrier_count_kernel(int* out) {
  const int c = __syncthreads_count(threadIdx.x % 3 == 0);
  const bool any = __syncthreads_or(threadIdx.x == 77);
  const bool all = __syncthreads_and(threadIdx.x < 1000);
  if (threadIdx.x == 0) {
    out[0] = c;
    out[1] = any;
    out[2] = all;
  }
}

TEST(Semantics, SyncthreadsCountOrAnd) {
  for_each_schedule([] {
    pa::DeviceBuffer<int> out(3);
    pa::launch(barrier_count_kernel, dim3(1), dim3(100), 0, nullptr, out.get());
    std::vector<int> h = out.download();
    EXPECT_EQ(h[0], 34);
    EXPECT_EQ(h[1], 1);
    EXPECT_EQ(h[2], 1);
  });
}

// Dynamic shared memory: reverse an array within each block.
__global__ void reverse_kernel(const int* in, int* out) {
  PA_DYNAMIC_SHARED(int, buf);
  const int n = blockDim.x, base = blockIdx.x * n;
  buf[threadIdx.x] = in[base + threadIdx.x];
  __syncthreads();
  out[base + threadIdx.x] = buf[n - 1 - threadIdx.x];
}

TEST(Semantics, DynamicSharedMemory) {
  for_each_schedule([] {
    const int blocks = 3, n = 200;
    std::vector<int> in(blocks * n);
    std::iota(in.begin(), in.end(), 0);
    pa::DeviceBuffer<int> d_in(in), d_out(in.size());
    pa::launch(reverse_kernel, dim3(blocks), dim3(n), n * sizeof(int), nullptr, d_in.get(),
               d_out.get());
    std::vector<int> out = d_out.download();
    for (int b = 0; b < blocks; ++b)
      for (int i = 0; i < n; ++i) EXPECT_EQ(out[b * n + i], in[b * n + n - 1 - i]);
  });
}

__global__ void atomics_kernel(int* count, float* fsum, int* maxv, unsigned* bits) {
  atomicAdd(count, 1);
  atomicAdd(fsum, 0.5f);
  atomicMax(maxv, static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x));
  atomicOr(bits, 1u << (threadIdx.x % 32));
  int old = atomicCAS(count + 1, 0, 7);  // only the first thread anywhere swaps
  if (old == 0) atomicAdd(count + 2, 1);
}

TEST(Semantics, AtomicsAcrossBlocks) {
  for_each_schedule([] {
    const int blocks = 40, threads = 96;
    pa::DeviceBuffer<int> count(3), maxv(1);
    pa::DeviceBuffer<float> fsum(1);
    pa::DeviceBuffer<unsigned> bits(1);
    count.fill_bytes(0);
    maxv.fill_bytes(0);
    fsum.fill_bytes(0);
    bits.fill_bytes(0);
    pa::launch(atomics_kernel, dim3(blocks), dim3(threads), 0, nullptr, count.get(),
               fsum.get(), maxv.get(), bits.get());
    std::vector<int> c = count.download();
    EXPECT_EQ(c[0], blocks * threads);
    EXPECT_EQ(c[1], 7);
    EXPECT_EQ(c[2], 1);
    EXPECT_EQ(fsum.download()[0], 0.5f * blocks * threads);
    EXPECT_EQ(maxv.download()[0], blocks * threads - 1);
    EXPECT_EQ(bits.download()[0], 0xffffffffu);
  });
}

// 3-D grids and blocks map to the same linear indices as on the GPU.
__global__ void index_kernel(int* out) {
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int per_block = blockDim.x * blockDim.y * blockDim.z;
  out[block * per_block + thread] = block * 1000 + thread;
}

TEST(Semantics, ThreeDimensionalIndices) {
  const dim3 grid(3, 2, 2), block(4, 3, 5);
  const int n = 12 * 60;
  pa::DeviceBuffer<int> out(n);
  out.fill_bytes(0xFF);
  pa::launch(index_kernel, grid, block, 0, nullptr, out.get());
  std::vector<int> h = out.download();
  for (int i = 0; i < n; ++i) EXPECT_EQ(h[i], (i / 60) * 1000 + i % 60);
}

// A partial last warp (48 threads): a full mask names only the lanes that exist.
__global__ void partial_warp_kernel(int* out) {
  const int active = __popc(__activemask());
  const int from_lane0 = __shfl_sync(0xffffffffu, int(threadIdx.x), 0);
  out[threadIdx.x] = active * 1000 + from_lane0;
}

TEST(Semantics, ActiveMaskOfAPartialWarp) {
  pa::DeviceBuffer<int> out(48);
  pa::launch(partial_warp_kernel, dim3(1), dim3(48), 0, nullptr, out.get());
  std::vector<int> h = out.download();
  for (int t = 0; t < 48; ++t) EXPECT_EQ(h[t], t < 32 ? 32000 : 16032) << "thread " << t;
}

// The toolkit's own half, bfloat16 and fp8 types work in kernels on both backends.
__global__ void types_kernel(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[3 * i + 0] = __half2float(__float2half_rn(in[i]));
  out[3 * i + 1] = __bfloat162float(__float2bfloat16_rn(in[i]));
  out[3 * i + 2] = static_cast<float>(__nv_fp8_e4m3(in[i]));
}

TEST(Semantics, HalfBfloat16Fp8Conversions) {
  std::vector<float> in = {0.f, 1.f, -2.5f, 1.0009765625f, 3.14159f, 65504.f, 1e-8f,
                           448.f, 500.f, -1e6f, 0.0135f, 3.3f};
  const int n = static_cast<int>(in.size());
  pa::DeviceBuffer<float> d_in(in), d_out(3 * n);
  pa::launch(types_kernel, dim3(1), dim3(64), 0, nullptr, d_in.get(), d_out.get(), n);
  std::vector<float> out = d_out.download();
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE("input " + std::to_string(in[i]));
    EXPECT_EQ(out[3 * i + 0], __half2float(__float2half_rn(in[i])));  // host conversion
    EXPECT_EQ(out[3 * i + 1], __bfloat162float(__float2bfloat16_rn(in[i])));
    EXPECT_EQ(out[3 * i + 2], static_cast<float>(__nv_fp8_e4m3(in[i])));
  }
  EXPECT_EQ(out[3 * 7 + 2], 448.f);   // e4m3's largest finite value
  EXPECT_EQ(out[3 * 8 + 2], 448.f);   // saturates, no infinity in e4m3
  EXPECT_EQ(out[3 * 1 + 0], 1.f);
}

// ldmatrix (pa/mma.h): lane l passes row l of a 32 x 8 matrix of 16-bit values stored with
// a row stride of 24 values (48 bytes), so matrix m is rows 8m .. 8m + 7; value (row, col)
// is row * 256 + col. Each lane writes its four registers of both forms.
__global__ void ldmatrix_kernel(uint32_t* out) {
  __shared__ __align__(16) uint16_t m[32 * 24];
  for (int i = threadIdx.x; i < 32 * 24; i += blockDim.x) m[i] = uint16_t((i / 24) * 256 + i % 24);
  __syncthreads();
  const int lane = threadIdx.x % 32;
  uint32_t r[4], t[4];
  pa::ldmatrix_x4(r, m + lane * 24);
  pa::ldmatrix_x4_trans(t, m + lane * 24);
  for (int i = 0; i < 4; ++i) {
    out[threadIdx.x * 8 + i] = r[i];
    out[threadIdx.x * 8 + 4 + i] = t[i];
  }
}

TEST(Semantics, LdmatrixGivesMmaFragmentLayouts) {
  pa::DeviceBuffer<uint32_t> out(64 * 8);
  pa::launch(ldmatrix_kernel, dim3(1), dim3(64), 0, nullptr, out.get());
  const std::vector<uint32_t> got = out.download();
  auto value = [](int row, int col) { return uint32_t(row * 256 + col); };
  for (int thread = 0; thread < 64; ++thread) {
    const int lane = thread % 32;
    for (int mat = 0; mat < 4; ++mat) {
      SCOPED_TRACE("thread " + std::to_string(thread) + ", matrix " + std::to_string(mat));
      const uint32_t plain = value(8 * mat + lane / 4, 2 * (lane % 4)) |
                             (value(8 * mat + lane / 4, 2 * (lane % 4) + 1) << 16);
      const uint32_t trans = value(8 * mat + 2 * (lane % 4), lane / 4) |
                             (value(8 * mat + 2 * (lane % 4) + 1, lane / 4) << 16);
      EXPECT_EQ(got[thread * 8 + mat], plain) << "ldmatrix_x4";
      EXPECT_EQ(got[thread * 8 + 4 + mat], trans) << "ldmatrix_x4_trans";
    }
  }
}

}  // namespace
