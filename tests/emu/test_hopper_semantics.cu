// Hopper's asynchronous machinery (pa/hopper.h), one test per instruction's semantics. These
// run on both backends: on an sm_90 GPU (built for sm_90a only, as test_emu_hopper) they prove
// that the emulator gives the hardware's answers; on the emulator they run in every schedule
// order. On an older GPU they skip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/compare.h"  // error_of, contains_text
#include "pa/device_buffer.h"
#include "pa/hopper.h"
#include "pa/launch.h"
#include "schedules.h"

namespace {

using pa::test::contains_text;
using pa::test::error_of;

// Skips the test on a GPU older than sm_90; true on the emulator.
bool have_hopper() {
#if defined(PA_BACKEND_CPU)
  return true;
#else
  cudaDeviceProp p{};
  return cudaGetDeviceProperties(&p, 0) == cudaSuccess && p.major >= 9;
#endif
}
#define PA_NEED_HOPPER() \
  if (!have_hopper()) GTEST_SKIP() << "needs an sm_90 GPU"

using pa::test::for_each_schedule;

// ---- The swizzle, on its own: chunk bits [4, 4 + b) XOR row bits [7, 7 + b). ----------
TEST(HopperSwizzle, XorsTheChunkWithTheRowWithinItsAtom) {
  EXPECT_EQ(pa::swizzle_address(0x1234, 0), 0x1234u);
  // 128B: row 3 of an atom (bits 7-9 = 3) moves chunk 1 to chunk 2; bytes within a chunk stay.
  EXPECT_EQ(pa::swizzle_address(3 * 128 + 1 * 16 + 5, 128), 3u * 128 + 2 * 16 + 5);
  EXPECT_EQ(pa::swizzle_address(7 * 128 + 0 * 16, 128), 7u * 128 + 7 * 16);
  EXPECT_EQ(pa::swizzle_address(1024 + 7 * 128, 128), 1024u + 7 * 128 + 7 * 16);  // repeats
  // 64B: two chunk bits, two row bits (rows of 128 bytes: a 64-byte box row pair shares one).
  EXPECT_EQ(pa::swizzle_address(3 * 128 + 1 * 16, 64), 3u * 128 + 2 * 16);
  EXPECT_EQ(pa::swizzle_address(4 * 128 + 1 * 16, 64), 4u * 128 + 1 * 16);  // row bits 7-8 only
  // 32B: one bit.
  EXPECT_EQ(pa::swizzle_address(1 * 128 + 0 * 16, 32), 1u * 128 + 1 * 16);
  EXPECT_EQ(pa::swizzle_address(2 * 128 + 1 * 16, 32), 2u * 128 + 1 * 16);
  // Its own inverse, and a permutation of each atom.
  for (uint32_t s : {32u, 64u, 128u}) {
    std::vector<int> hit(1024, 0);
    for (uint32_t a = 0; a < 1024; ++a) {
      EXPECT_EQ(pa::swizzle_address(pa::swizzle_address(a, s), s), a);
      ++hit[pa::swizzle_address(a, s)];
    }
    for (int h : hit) EXPECT_EQ(h, 1);
  }
}

// ---- The shared window ----------------------------------------------------------------
__global__ void window_kernel(uint32_t* out) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  unsigned char* aligned = pa::smem_align(smem, 1024);
  out[0] = pa::smem_address(aligned) % 1024;
  out[1] = pa::smem_pointer<unsigned char>(pa::smem_address(aligned + 48)) == aligned + 48;
  out[2] = pa::smem_address(smem);
  out[3] = uint32_t(reinterpret_cast<uintptr_t>(aligned) % 1024);  // low bits agree
}

TEST(HopperWindow, SharedAddressesRoundTripAndAlign) {
  PA_NEED_HOPPER();
  pa::DeviceBuffer<uint32_t> out(4);
  pa::launch(window_kernel, dim3(1), dim3(1), 2048, nullptr, out.get());
  const std::vector<uint32_t> h = out.download();
  EXPECT_EQ(h[0], 0u);
  EXPECT_EQ(h[1], 1u);
#if defined(PA_BACKEND_CPU)
  EXPECT_EQ(h[2], 0x400u);  // dynamic shared memory at 0x400, as on Hopper
  EXPECT_EQ(h[3], 0u);
#endif
}

// ---- mbarrier phases: every thread arrives each phase; try_wait of the phase a thread has
// not arrived in is false, of the phase just completed true; the parity alternates. -------
constexpr int kPhaseThreads = 64;
__global__ void phases_kernel(int* out) {
  PA_DYNAMIC_SHARED(uint64_t, bar);
  const int t = threadIdx.x;
  if (t == 0) {
    pa::mbarrier_init(bar, kPhaseThreads);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  for (int phase = 0; phase < 4; ++phase) {
    int* o = out + (phase * kPhaseThreads + t) * 4;
    o[0] = pa::mbarrier_try_wait_parity(bar, phase & 1);  // this thread has not arrived: false
    const uint64_t state = pa::mbarrier_arrive(bar);
    (void)state;
    pa::mbarrier_wait_parity(bar, phase & 1);
    o[1] = pa::mbarrier_try_wait_parity(bar, phase & 1);        // completed: true
    o[2] = pa::mbarrier_try_wait_parity(bar, (phase + 1) & 1);  // the next one: not yet
    o[3] = 1;
  }
}

TEST(HopperMbarrier, PhasesCompleteWhenEveryArrivalIsIn) {
  PA_NEED_HOPPER();
  for_each_schedule([] {
    pa::DeviceBuffer<int> out(4 * kPhaseThreads * 4);
    out.fill_bytes(0xFF);
    pa::launch(phases_kernel, dim3(1), dim3(kPhaseThreads), 64, nullptr, out.get());
    const std::vector<int> h = out.download();
    for (int i = 0; i < 4 * kPhaseThreads; ++i) {
      SCOPED_TRACE("phase " + std::to_string(i / kPhaseThreads) + " thread " +
                   std::to_string(i % kPhaseThreads));
      EXPECT_EQ(h[i * 4 + 0], 0);
      EXPECT_EQ(h[i * 4 + 1], 1);
      EXPECT_EQ(h[i * 4 + 2], 0);
      EXPECT_EQ(h[i * 4 + 3], 1);
    }
  });
}

// ---- Transaction bytes: a bulk copy whose bytes complete before their expect_tx, an
// expect_tx without an arrival, arrive.expect_tx, and arrive_drop (warp 1 drops out after
// phase 0, so phase 1 completes on warp 0's arrival alone). -------------------------------
// ANCHOR: transactions
__global__ void transactions_kernel(const float* src, float* out) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem);
  float* data = reinterpret_cast<float*>(smem + 128);  // 64 + 32 floats
  const int t = threadIdx.x;
  if (t == 0) {
    pa::mbarrier_init(bar, 2);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  // Phase 0: thread 0 copies 256 bytes first, then says to expect them, then arrives; thread
  // 32 drops out of the barrier with its arrival.
  if (t == 0) {
    pa::bulk_load(data, src, 256, bar);
    pa::mbarrier_expect_tx(bar, 256);
    pa::mbarrier_arrive(bar);
  }
  if (t == 32) pa::mbarrier_arrive_drop(bar);
  pa::mbarrier_wait_parity(bar, 0);
  out[t] = data[t % 64];
  __syncthreads();
  // Phase 1: one arrival is enough now.
  if (t == 0) {
    pa::mbarrier_arrive_expect_tx(bar, 128);
    pa::bulk_load(data + 64, src + 64, 128, bar);
  }
  pa::mbarrier_wait_parity(bar, 1);
  out[64 + t] = data[64 + t % 32];
}
// ANCHOR_END: transactions

TEST(HopperMbarrier, TransactionBytesCompleteAPhaseInAnyOrder) {
  PA_NEED_HOPPER();
  std::vector<float> src(96);
  for (int i = 0; i < 96; ++i) src[i] = float(i) * 1.5f;
  pa::DeviceBuffer<float> in(src), out(128);
  for_each_schedule([&] {
    out.fill_bytes(0);
    pa::launch(transactions_kernel, dim3(1), dim3(64), 128 + 96 * 4, nullptr, in.get(), out.get());
    const std::vector<float> h = out.download();
    for (int t = 0; t < 64; ++t) {
      EXPECT_EQ(h[t], src[t % 64]) << t;
      EXPECT_EQ(h[64 + t], src[64 + t % 32]) << t;
    }
  });
}

// ---- TMA loads: a 2-D box, partly outside the tensor (zeros there), in each swizzle. ------
// The tensor: 20 rows of 40 uint16 (row pitch 96 bytes); element (r, c) = r * 100 + c.
constexpr int kRows = 20, kCols = 40, kPitch = 48;
std::vector<uint16_t> tensor_2d() {
  std::vector<uint16_t> v(kRows * kPitch, 0xEEEE);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) v[r * kPitch + c] = uint16_t(r * 100 + c);
  return v;
}

__global__ void tma_load_2d_kernel(const __grid_constant__ pa::TensorMap map, int c0, int c1,
                                   uint32_t bytes, uint16_t* out) {
  PA_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* smem = pa::smem_align(raw, 1024);  // swizzle atoms start at their boundary
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 4096);
  if (threadIdx.x == 0) {
    pa::mbarrier_init(bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    pa::mbarrier_arrive_expect_tx(bar, bytes);
    pa::tma_load_2d(smem, map, c0, c1, bar);
  }
  pa::mbarrier_wait_parity(bar, 0);
  const uint16_t* s = reinterpret_cast<const uint16_t*>(smem);
  for (uint32_t i = threadIdx.x; i < bytes / 2; i += blockDim.x) out[i] = s[i];
}

TEST(HopperTma, A2DBoxLandsSwizzledWithZerosOutsideTheTensor) {
  PA_NEED_HOPPER();
  const std::vector<uint16_t> host = tensor_2d();
  pa::DeviceBuffer<uint16_t> tensor(host);
  const int c0 = -8, c1 = 15;  // columns -8.., rows 15..: the left and bottom edges are outside
  for (pa::TmaSwizzle sw : {pa::TmaSwizzle::None, pa::TmaSwizzle::B32, pa::TmaSwizzle::B64,
                            pa::TmaSwizzle::B128}) {
    const uint32_t span = sw == pa::TmaSwizzle::None ? 64 : static_cast<uint32_t>(sw);
    const uint32_t box_cols = span / 2, box_rows = 8, bytes = box_cols * box_rows * 2;
    SCOPED_TRACE("swizzle " + std::to_string(static_cast<uint32_t>(sw)));
    pa::TensorMapSpec spec;
    spec.dtype = pa::TmaDtype::U16;
    spec.rank = 2;
    spec.global = tensor.get();
    spec.dims[0] = kCols;
    spec.dims[1] = kRows;
    spec.strides[0] = kPitch * 2;
    spec.box[0] = box_cols;
    spec.box[1] = box_rows;
    spec.swizzle = sw;
    const pa::TensorMap map = pa::encode_tensor_map(spec);
    pa::DeviceBuffer<uint16_t> out(bytes / 2);
    for_each_schedule([&] {
      out.fill_bytes(0x11);
      pa::launch(tma_load_2d_kernel, dim3(1), dim3(64), 4096 + 1024 + 64, nullptr, map, c0, c1,
                 bytes, out.get());
      const std::vector<uint16_t> h = out.download();
      for (uint32_t r = 0; r < box_rows; ++r)
        for (uint32_t c = 0; c < box_cols; ++c) {
          const int gr = c1 + int(r), gc = c0 + int(c);
          const uint16_t want = gr >= 0 && gr < kRows && gc >= 0 && gc < kCols
                                    ? uint16_t(gr * 100 + gc) : uint16_t(0);
          const uint32_t at = pa::swizzle_address((r * box_cols + c) * 2, static_cast<uint32_t>(sw));
          ASSERT_EQ(h[at / 2], want) << "box row " << r << ", column " << c;
        }
    });
  }
}

// ---- 3-D and 5-D boxes (uint32), and an element stride in dimension 1. --------------------
__global__ void tma_load_nd_kernel(const __grid_constant__ pa::TensorMap map3,
                                   const __grid_constant__ pa::TensorMap map5, uint32_t bytes3,
                                   uint32_t bytes5, uint32_t* out) {
  PA_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* smem = pa::smem_align(raw, 1024);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 2048);
  if (threadIdx.x == 0) {
    pa::mbarrier_init(bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    pa::mbarrier_arrive_expect_tx(bar, bytes3 + bytes5);
    pa::tma_load_3d(smem, map3, 0, 1, 2, bar);
    pa::tma_load_5d(smem + 1024, map5, 4, 1, 0, 1, 0, bar);
  }
  pa::mbarrier_wait_parity(bar, 0);
  const uint32_t* s = reinterpret_cast<const uint32_t*>(smem);
  for (uint32_t i = threadIdx.x; i < bytes3 / 4; i += blockDim.x) out[i] = s[i];
  for (uint32_t i = threadIdx.x; i < bytes5 / 4; i += blockDim.x) out[256 + i] = s[256 + i];
}

TEST(HopperTma, 3DAnd5DBoxesWalkTheirDimensionsInOrder) {
  PA_NEED_HOPPER();
  // A dense 5-D tensor of uint32, dims (inner first) 8, 4, 3, 2, 2: value = its linear index.
  const uint64_t d[5] = {8, 4, 3, 2, 2};
  std::vector<uint32_t> host(8 * 4 * 3 * 2 * 2);
  for (size_t i = 0; i < host.size(); ++i) host[i] = uint32_t(i);
  pa::DeviceBuffer<uint32_t> tensor(host);
  pa::TensorMapSpec s3;
  s3.dtype = pa::TmaDtype::U32;
  s3.rank = 3;
  s3.global = tensor.get();
  s3.dims[0] = 8, s3.dims[1] = 4, s3.dims[2] = 3;  // the first 96 elements as 8 x 4 x 3
  s3.strides[0] = 32, s3.strides[1] = 128;
  s3.box[0] = 8, s3.box[1] = 4, s3.box[2] = 2;      // rows 1..4 (4 is outside), planes 2..3
  s3.elem_strides[1] = 2;                           // every other row: rows 1 and 3
  pa::TensorMapSpec s5;
  s5.dtype = pa::TmaDtype::U32;
  s5.rank = 5;
  s5.global = tensor.get();
  for (int i = 0; i < 5; ++i) s5.dims[i] = d[i];
  s5.strides[0] = 32, s5.strides[1] = 128, s5.strides[2] = 384, s5.strides[3] = 768;
  s5.box[0] = 4, s5.box[1] = 2, s5.box[2] = 3, s5.box[3] = 1, s5.box[4] = 2;
  const pa::TensorMap m3 = pa::encode_tensor_map(s3), m5 = pa::encode_tensor_map(s5);
  const uint32_t bytes3 = 8 * 2 * 2 * 4, bytes5 = 4 * 2 * 3 * 1 * 2 * 4;
  pa::DeviceBuffer<uint32_t> out(512);
  for_each_schedule([&] {
    out.fill_bytes(0x11);
    pa::launch(tma_load_nd_kernel, dim3(1), dim3(32), 2048 + 64 + 1024, nullptr, m3, m5, bytes3, bytes5,
               out.get());
    const std::vector<uint32_t> h = out.download();
    int i = 0;
    for (int z = 0; z < 2; ++z)
      for (int y = 0; y < 2; ++y)
        for (int x = 0; x < 8; ++x, ++i) {
          const int gy = 1 + 2 * y, gz = 2 + z;
          const uint32_t want = gy < 4 && gz < 3 ? uint32_t(gz * 32 + gy * 8 + x) : 0u;
          ASSERT_EQ(h[i], want) << "3-D element " << i;
        }
    i = 0;
    for (int a4 = 0; a4 < 2; ++a4)
      for (int a3 = 0; a3 < 1; ++a3)
        for (int a2 = 0; a2 < 3; ++a2)
          for (int a1 = 0; a1 < 2; ++a1)
            for (int a0 = 0; a0 < 4; ++a0, ++i) {
              const int g[5] = {4 + a0, 1 + a1, a2, 1 + a3, a4};
              const uint32_t want =
                  uint32_t((((g[4] * 2 + g[3]) * 3 + g[2]) * 4 + g[1]) * 8 + g[0]);
              ASSERT_EQ(h[256 + i], want) << "5-D element " << i;
            }
  });
}

// ---- TMA store: a box written back; only elements inside the tensor change. ---------------
__global__ void tma_store_kernel(const __grid_constant__ pa::TensorMap map, int c0, int c1) {
  PA_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* smem = pa::smem_align(raw, 1024);
  uint16_t* s = reinterpret_cast<uint16_t*>(smem);
  for (int i = threadIdx.x; i < 64 * 8; i += blockDim.x)
    s[pa::swizzle_address(uint32_t(i) * 2, 128) / 2] = uint16_t(5000 + i);
  pa::fence_proxy_async();  // ordinary stores, read next by the async proxy
  __syncthreads();
  if (threadIdx.x == 0) {
    pa::tma_store_2d(map, smem, c0, c1);
    pa::bulk_commit();
    pa::bulk_wait_group<0>();
  }
}

TEST(HopperTma, AStoreWritesOnlyTheBoxInsideTheTensor) {
  PA_NEED_HOPPER();
  const std::vector<uint16_t> host = tensor_2d();
  pa::DeviceBuffer<uint16_t> tensor(host);
  pa::TensorMapSpec spec;
  spec.dtype = pa::TmaDtype::U16;
  spec.global = tensor.get();
  spec.dims[0] = kCols, spec.dims[1] = kRows;
  spec.strides[0] = kPitch * 2;
  spec.box[0] = 64, spec.box[1] = 8;
  spec.swizzle = pa::TmaSwizzle::B128;
  const pa::TensorMap map = pa::encode_tensor_map(spec);
  const int c0 = 8, c1 = 16;
  pa::launch(tma_store_kernel, dim3(1), dim3(64), 2048, nullptr, map, c0, c1);
  const std::vector<uint16_t> h = tensor.download();
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kPitch; ++c) {
      const int br = r - c1, bc = c - c0;
      const bool in_box = br >= 0 && br < 8 && bc >= 0 && bc < 64 && c < kCols;
      const uint16_t want = in_box ? uint16_t(5000 + br * 64 + bc) : host[r * kPitch + c];
      ASSERT_EQ(h[r * kPitch + c], want) << "row " << r << ", column " << c;
    }
}

// ---- Bulk copies: a gather of rows by index, and a bulk store of them back. ---------------
constexpr int kRowFloats = 16;  // 64-byte rows
__global__ void gather_kernel(const float* pool, const int* rows, int n, float* out) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem);
  float* stage = reinterpret_cast<float*>(smem + 128);
  if (threadIdx.x == 0) {
    pa::mbarrier_init(bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    pa::mbarrier_arrive_expect_tx(bar, uint32_t(n * kRowFloats * 4));
    for (int i = 0; i < n; ++i)
      pa::bulk_load(stage + i * kRowFloats, pool + size_t(rows[i]) * kRowFloats, kRowFloats * 4, bar);
  }
  pa::mbarrier_wait_parity(bar, 0);
  if (threadIdx.x == 0) {
    pa::bulk_store(out, stage, uint32_t(n * kRowFloats * 4));
    pa::bulk_commit();
    pa::bulk_wait_group_read<0>();
    pa::bulk_wait_group<0>();
  }
}

TEST(HopperBulk, RowsGatheredByIndexAndStoredBack) {
  PA_NEED_HOPPER();
  std::vector<float> pool(32 * kRowFloats);
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = float(i) + 0.25f;
  const std::vector<int> rows = {7, 0, 31, 7, 12};
  pa::DeviceBuffer<float> p(pool), out(rows.size() * kRowFloats);
  pa::DeviceBuffer<int> r(rows);
  for_each_schedule([&] {
    out.fill_bytes(0);
    pa::launch(gather_kernel, dim3(1), dim3(32), 128 + rows.size() * kRowFloats * 4, nullptr,
               p.get(), r.get(), int(rows.size()), out.get());
    const std::vector<float> h = out.download();
    for (size_t i = 0; i < rows.size(); ++i)
      for (int j = 0; j < kRowFloats; ++j)
        ASSERT_EQ(h[i * kRowFloats + j], pool[size_t(rows[i]) * kRowFloats + j]) << i << "," << j;
  });
}

// ---- Named barriers: warps 2-3 wait for warps 0-1 (bar.arrive / bar.sync, 128 threads), and
// warps 0-1 meet alone on another barrier (64 threads), for several rounds. ---------------
__global__ void named_kernel(int* out) {
  PA_DYNAMIC_SHARED(int, s);
  const int t = threadIdx.x;
  for (int round = 0; round < 3; ++round) {
    if (t < 64) {
      s[t] = round * 1000 + t;
      pa::named_barrier_sync(2, 64);       // warps 0-1 only
      out[round * 128 + t] = s[63 - t];    // another warp's value, this round's
      pa::named_barrier_sync(2, 64);
      pa::named_barrier_arrive(1, 128);    // hand the round to warps 2-3 without waiting
    } else {
      pa::named_barrier_sync(1, 128);
      out[round * 128 + t] = s[t - 64];
    }
    __syncthreads();
  }
}

TEST(HopperNamedBarrier, ASubsetOfWarpsMeetsOnItsOwnBarrier) {
  PA_NEED_HOPPER();
  for_each_schedule([] {
    pa::DeviceBuffer<int> out(3 * 128);  // every element written: initcheck stays clean
    pa::launch(named_kernel, dim3(1), dim3(128), 64 * 4, nullptr, out.get());
    const std::vector<int> h = out.download();
    for (int round = 0; round < 3; ++round)
      for (int t = 0; t < 128; ++t) {
        const int want = t < 64 ? round * 1000 + 63 - t : round * 1000 + t - 64;
        ASSERT_EQ(h[round * 128 + t], want) << "round " << round << ", thread " << t;
      }
  });
}

// ---- setmaxnreg: a producer warpgroup gives registers up, a consumer takes more. ---------
__global__ void __launch_bounds__(256, 1) setmaxnreg_kernel(int* out) {
  if (threadIdx.x < 128) {
    pa::setmaxnreg_dec<40>();
    out[threadIdx.x] = 1;
  } else {
    pa::setmaxnreg_inc<232>();
    out[threadIdx.x] = 2;
  }
}

TEST(HopperRegisters, SetmaxnregPerWarpgroupRuns) {
  PA_NEED_HOPPER();
  pa::DeviceBuffer<int> out(256);
  pa::launch(setmaxnreg_kernel, dim3(1), dim3(256), 0, nullptr, out.get());
  const std::vector<int> h = out.download();
  for (int t = 0; t < 256; ++t) ASSERT_EQ(h[t], t < 128 ? 1 : 2);
}

// ---- The tensor-map encoder refuses what cuTensorMapEncodeTiled refuses, with its reason.
// (Host code: the same checks run before the driver on the GPU.) ----------------------------
TEST(HopperTensorMap, TheEncoderRefusesWhatTheDriverRefuses) {
  pa::DeviceBuffer<uint16_t> buf(4096);
  auto spec = [&] {
    pa::TensorMapSpec s;
    s.dtype = pa::TmaDtype::U16;
    s.rank = 2;
    s.global = buf.get();
    s.dims[0] = 64, s.dims[1] = 32;
    s.strides[0] = 128;
    s.box[0] = 64, s.box[1] = 8;
    return s;
  };
  EXPECT_EQ(pa::tensor_map_problem(spec()), "");
  auto refused = [&](pa::TensorMapSpec s) { return pa::tensor_map_problem(s); };
  pa::TensorMapSpec s = spec();
  s.rank = 6;
  EXPECT_TRUE(contains_text(refused(s), "tensorRank is 6: it must be non-zero and at most"));
  s = spec();
  s.global = reinterpret_cast<const char*>(buf.get()) + 8;
  s.allocation_bytes = 8000;
  EXPECT_TRUE(contains_text(refused(s), "globalAddress must be 16 byte aligned"));
  s = spec();
  s.strides[0] = 120;
  EXPECT_TRUE(contains_text(refused(s), "globalStrides[0] is 120 bytes: it must be a multiple of 16"));
  s = spec();
  s.strides[0] = uint64_t(1) << 40;
  s.allocation_bytes = ~size_t(0);
  EXPECT_TRUE(contains_text(refused(s), "less than 2^40"));
  s = spec();
  s.box[1] = 257;
  EXPECT_TRUE(contains_text(refused(s), "boxDim[1] is 257: it must be non-zero and at most 256"));
  s = spec();
  s.box[0] = 4;
  EXPECT_TRUE(contains_text(refused(s), "must be a multiple of 16 bytes"));
  s = spec();
  s.elem_strides[1] = 9;
  EXPECT_TRUE(contains_text(refused(s), "elementStrides[1] is 9"));
  s = spec();
  s.swizzle = pa::TmaSwizzle::B64;  // 128-byte inner box rows, a 64-byte swizzle
  EXPECT_TRUE(contains_text(refused(s), "must be at most the swizzle size, 64 bytes"));
  s = spec();  // the project's rule: 16-byte inner rows under a 128-byte swizzle (the GPU pads them)
  s.box[0] = 8;
  s.swizzle = pa::TmaSwizzle::B128;
  EXPECT_TRUE(contains_text(refused(s), "(boxDim[0] * element size = 16 bytes) is not the "
                                        "swizzle's 128 bytes: the GPU pads a shorter inner row"));
  s = spec();
  s.dims[1] = 0;
  EXPECT_TRUE(contains_text(refused(s), "globalDim[1] is 0"));
  s = spec();  // the project's own rule: 65 rows of 128 bytes do not fit 8,192 bytes (the
  s.dims[1] = 65;  // emulator knows the allocation; the GPU build is told it)
  s.allocation_bytes = 8192;
  EXPECT_TRUE(contains_text(refused(s), "the tensor's extent, 8320 bytes from globalAddress, is "
                                        "larger than its allocation, which ends 8192 bytes after it"));
  EXPECT_TRUE(contains_text(error_of([&] { pa::encode_tensor_map(s); }),
                            "encode_tensor_map: cuTensorMapEncodeTiled refuses this tensor map"));
}

}  // namespace

// ---- wgmma ----------------------------------------------------------------------------------
// The descriptor's bit fields, against values worked out by hand from the PTX ISA's "Matrix
// Descriptor Format" (start address, LBO and SBO as (x & 0x3FFFF) >> 4 in bits 0-13, 16-29,
// 32-45; base offset in 49-51; swizzle in 62-63: 1 = 128B, 2 = 64B, 3 = 32B) and its examples
// (MN-major bf16 with a 64B swizzle: LBO 256 elements, SBO 512: encoded 32 and 64).
TEST(HopperWgmma, DescriptorBitFieldsAreThePtxIsas) {
  using pa::WgmmaSwizzle;
  // 0x1400 >> 4 = 0x140; 256 >> 4 = 0x10 at bit 16; 1024 >> 4 = 0x40 at bit 32; 128B = 1 << 62.
  EXPECT_EQ(pa::wgmma_descriptor_bits(0x1400, 256, 1024, WgmmaSwizzle::B128),
            0x4000004000100140ull);
  EXPECT_EQ(pa::wgmma_descriptor_bits(0x1400, 256, 1024, WgmmaSwizzle::B64),
            0x8000004000100140ull);
  EXPECT_EQ(pa::wgmma_descriptor_bits(0x1400, 256, 1024, WgmmaSwizzle::B32),
            0xC000004000100140ull);
  EXPECT_EQ(pa::wgmma_descriptor_bits(0x1400, 256, 1024, WgmmaSwizzle::None),
            0x0000004000100140ull);
  // The ISA's examples: MN-major 64B bf16 (LBO 512 bytes -> 32, SBO 1024 -> 64); K-major
  // tf32 without swizzle (LBO 64 x 4 bytes -> 16, SBO 32 x 4 -> 8).
  EXPECT_EQ(pa::wgmma_descriptor_bits(0, 512, 1024, WgmmaSwizzle::B64),
            (uint64_t(32) << 16) | (uint64_t(64) << 32) | (uint64_t(2) << 62));
  EXPECT_EQ(pa::wgmma_descriptor_bits(0, 256, 128, WgmmaSwizzle::None),
            (uint64_t(16) << 16) | (uint64_t(8) << 32));
  // The base offset's three bits; addresses past 18 bits and the low 4 bits are dropped.
  EXPECT_EQ(pa::wgmma_descriptor_bits(0, 0, 0, WgmmaSwizzle::B128, 5),
            (uint64_t(5) << 49) | (uint64_t(1) << 62));
  EXPECT_EQ(pa::wgmma_descriptor_bits(0x40417, 16, 0, WgmmaSwizzle::None), 0x41ull | (1ull << 16));
  EXPECT_EQ(pa::wgmma_descriptor_bits(0x3FFF0, 0x3FFF0, 0x3FFF0, WgmmaSwizzle::B32),
            0x3FFFull | (0x3FFFull << 16) | (0x3FFFull << 32) | (3ull << 62));
  // Advancing the start address by 32 bytes (the next k-step of fp16 in a swizzled row)
  // changes only its field.
  const uint64_t d = pa::wgmma_descriptor_bits(0x1400, 16, 1024, WgmmaSwizzle::B128);
  EXPECT_EQ(pa::wgmma_descriptor_advance(d, 32), d + 2);
  EXPECT_EQ(pa::wgmma_descriptor_advance(pa::wgmma_descriptor_bits(0x3FFF0, 16, 0, WgmmaSwizzle::None), 16),
            pa::wgmma_descriptor_bits(0, 16, 0, WgmmaSwizzle::None));
  // The accumulator fragment: thread 37 (warp 1, lane 5: g = 1, q = 1).
  using Acc = pa::WgmmaAcc<64>;
  EXPECT_EQ(Acc::row(0, 37), 17);
  EXPECT_EQ(Acc::col(0, 37), 2);
  EXPECT_EQ(Acc::row(3, 37), 25);
  EXPECT_EQ(Acc::col(3, 37), 3);
  EXPECT_EQ(Acc::row(4, 37), 17);
  EXPECT_EQ(Acc::col(4, 37), 10);
  EXPECT_EQ(Acc::row(31, 127), 63);
  EXPECT_EQ(Acc::col(31, 127), 63);
}

// The operand tiles of the GEMM tests, K-major, as TMA boxes of one swizzle span place them:
// a tile of `rows` x K is K / cw boxes of rows x (cw elements of k), cw = W / size (no
// swizzle: 8, one 16-byte chunk), each box rows of W bytes one after another; then the
// swizzle of the shared address (pa::swizzle_address). The byte offset of (r, k) before it:
__host__ __device__ constexpr uint32_t kmajor_offset(uint32_t r, uint32_t k, uint32_t rows,
                                                     uint32_t sw, uint32_t size) {
  const uint32_t row_bytes = sw ? sw : 16, cw = row_bytes / size;
  return (k / cw) * rows * row_bytes + r * row_bytes + (k % cw) * size;
}
// The descriptor of k-step s (32 bytes of k: 16 fp16 elements, 32 fp8) of such a tile at
// `tile`: swizzled, the start moves along the row and SBO is 8 rows (LBO unused: 16); no
// swizzle, k-step s is boxes 2 s and 2 s + 1, LBO the distance between them and SBO 8 rows of
// 16 bytes.
template <typename E>
__device__ uint64_t kmajor_desc(const E* tile, uint32_t s, uint32_t rows, uint32_t sw) {
  const uint32_t row_bytes = sw ? sw : 16;
  return pa::wgmma_descriptor(reinterpret_cast<const unsigned char*>(tile) +
                                  kmajor_offset(0, s * uint32_t(32 / sizeof(E)), rows, sw, sizeof(E)),
                              sw ? 16 : rows * 16, 8 * row_bytes, static_cast<pa::WgmmaSwizzle>(sw));
}
// Ordinary stores of a row-major rows x K global matrix into such a tile, swizzled as TMA
// would, then fence.proxy.async (wgmma reads through the async proxy).
template <typename E>
__device__ void store_kmajor(E* tile, const E* g, int rows, int k_total, uint32_t sw) {
  const uint32_t base = pa::smem_address(tile);
  for (int i = threadIdx.x; i < rows * k_total; i += blockDim.x) {
    const uint32_t at = pa::swizzle_address(
        base + kmajor_offset(uint32_t(i / k_total), uint32_t(i % k_total), uint32_t(rows), sw, sizeof(E)), sw);
    tile[(at - base) / sizeof(E)] = g[i];
  }
}

template <typename E>
pa::TensorMap kmajor_map(const E* g, int rows, int k_total, uint32_t sw) {
  pa::TensorMapSpec s;
  s.dtype = std::is_same<E, pa::half>::value   ? pa::TmaDtype::F16
            : std::is_same<E, pa::bf16>::value ? pa::TmaDtype::BF16
                                               : pa::TmaDtype::U8;
  s.rank = 2;
  s.global = g;
  s.dims[0] = uint64_t(k_total), s.dims[1] = uint64_t(rows);
  s.strides[0] = uint64_t(k_total) * sizeof(E);
  s.box[0] = (sw ? sw : 16) / sizeof(E), s.box[1] = uint32_t(rows);
  s.swizzle = static_cast<pa::TmaSwizzle>(sw);
  return pa::encode_tensor_map(s);
}

using e4m3 = __nv_fp8_e4m3;
template <typename E>
E element_of(float x) {
  if constexpr (std::is_same<E, e4m3>::value) return e4m3(x);
  else return pa::from_float<E>(x);
}
template <typename E>
float float_of(E x) {
  if constexpr (std::is_same<E, e4m3>::value) return float(x);
  else return pa::to_float(x);
}

template <typename E>
std::vector<E> random_matrix(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<E> v(n);
  for (E& x : v) x = element_of<E>(dist(rng));
  return v;
}

// D = C + A * B^T with A 64 x K and Bt N x K, row-major, checked against a host GEMM in
// double (from the same rounded inputs). C(m, n) = 0.25 ((m + n) % 5).
template <typename E>
void expect_gemm(const std::vector<float>& got, const std::vector<E>& a, const std::vector<E>& bt,
                 int m_rows, int n, int k_total, bool with_c, int k_first = 0, int k_count = -1) {
  if (k_count < 0) k_count = k_total;
  for (int m = 0; m < m_rows; ++m)
    for (int j = 0; j < n; ++j) {
      double want = with_c ? 0.25 * ((m + j) % 5) : 0.0;
      for (int k = k_first; k < k_first + k_count; ++k)
        want += double(float_of(a[size_t(m) * size_t(k_total) + size_t(k)])) *
                double(float_of(bt[size_t(j) * size_t(k_total) + size_t(k)]));
      const double g = got[size_t(m) * size_t(n) + size_t(j)];
      ASSERT_NEAR(g, want, 1e-2 + 1e-2 * std::fabs(want)) << "D[" << m << "][" << j << "]";
    }
}

// ---- An m64nNk16 GEMM: A and B K-major in shared memory, placed by TMA loads (so that TMA's
// swizzled writes and wgmma's descriptor reads agree) or by ordinary stores and
// fence.proxy.async; K / 16 k-steps accumulate onto C in one group. -------------------------
template <typename E, int N, uint32_t SW>
__global__ void wgmma_gemm_kernel(const __grid_constant__ pa::TensorMap map_a,
                                  const __grid_constant__ pa::TensorMap map_b, const E* a,
                                  const E* bt, int k_total, bool use_tma, float* out) {
  PA_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* smem = pa::smem_align(raw, 1024);
  E* sa = reinterpret_cast<E*>(smem);
  E* sb = reinterpret_cast<E*>(smem + 64 * k_total * sizeof(E));
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + (64 + N) * k_total * sizeof(E));
  const int t = threadIdx.x;
  const int cw = int((SW ? SW : 16) / sizeof(E));
  if (t == 0) {
    pa::mbarrier_init(bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (use_tma) {
    if (t == 0) {
      pa::mbarrier_arrive_expect_tx(bar, uint32_t((64 + N) * k_total * sizeof(E)));
      for (int kb = 0; kb < k_total / cw; ++kb) {
        pa::tma_load_2d(sa + kb * 64 * cw, map_a, kb * cw, 0, bar);
        pa::tma_load_2d(sb + kb * N * cw, map_b, kb * cw, 0, bar);
      }
    }
    pa::mbarrier_wait_parity(bar, 0);
  } else {
    store_kmajor(sa, a, 64, k_total, SW);
    store_kmajor(sb, bt, N, k_total, SW);
    pa::fence_proxy_async();
    __syncthreads();
  }
  pa::WgmmaAcc<N> acc;
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    acc.d[i] = 0.25f * float((acc.row(i, t) + acc.col(i, t)) % 5);
  pa::wgmma_fence();
  for (int s = 0; s < k_total / int(32 / sizeof(E)); ++s)  // k-steps of 32 bytes: k16, or k32 for fp8
    pa::wgmma_mma_async<E>(acc, kmajor_desc(sa, uint32_t(s), 64, SW),
                           kmajor_desc(sb, uint32_t(s), N, SW));
  pa::wgmma_commit_group();
  pa::wgmma_wait_group<0>(acc);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) out[acc.row(i, t) * N + acc.col(i, t)] = acc.d[i];
}

template <typename E, int N, uint32_t SW>
void run_wgmma_gemm() {
  const int k_total = sizeof(E) == 1 ? 128 : 64;
  SCOPED_TRACE("swizzle " + std::to_string(SW) + ", N " + std::to_string(N));
  const std::vector<E> a = random_matrix<E>(64 * k_total, 11 + N), bt = random_matrix<E>(size_t(N) * k_total, 5 + SW);
  pa::DeviceBuffer<E> da(a), db(bt);
  const pa::TensorMap ma = kmajor_map(da.get(), 64, k_total, SW), mb = kmajor_map(db.get(), N, k_total, SW);
  pa::DeviceBuffer<float> out(64 * N);
  const size_t shared = (64 + N) * k_total * sizeof(E) + 64 + 1024;
  for (bool tma : {true, false}) {
    SCOPED_TRACE(tma ? "operands by TMA" : "operands by ordinary stores");
    for_each_schedule([&] {
      out.fill_bytes(0xFF);
      pa::launch(wgmma_gemm_kernel<E, N, SW>, dim3(1), dim3(128), shared, nullptr, ma, mb, da.get(),
                 db.get(), k_total, tma, out.get());
      expect_gemm(out.download(), a, bt, 64, N, k_total, true);
    });
  }
}

TEST(HopperWgmma, Fp16GemmInEachSwizzleMatchesTheHost) {
  PA_NEED_HOPPER();
  run_wgmma_gemm<pa::half, 24, 0>();
  run_wgmma_gemm<pa::half, 8, 32>();
  run_wgmma_gemm<pa::half, 64, 64>();
  run_wgmma_gemm<pa::half, 256, 128>();
}

TEST(HopperWgmma, Bf16GemmInEachSwizzleMatchesTheHost) {
  PA_NEED_HOPPER();
  run_wgmma_gemm<pa::bf16, 16, 0>();
  run_wgmma_gemm<pa::bf16, 32, 32>();
  run_wgmma_gemm<pa::bf16, 128, 64>();
  run_wgmma_gemm<pa::bf16, 64, 128>();
}

// fp8 e4m3 (k32): K-major only, each k-step 32 bytes of a row as for fp16.
TEST(HopperWgmma, Fp8E4m3GemmMatchesTheHost) {
  PA_NEED_HOPPER();
  run_wgmma_gemm<e4m3, 16, 32>();
  run_wgmma_gemm<e4m3, 64, 128>();
}

// ---- MN-major tiles (the transpose, imm-trans 1): A stored K x 64 (M contiguous) and B
// K x N (N contiguous, as V is), with a 128B swizzle: TMA boxes of 64 columns x K rows of
// 128 bytes; SBO is 8 rows (1,024 bytes), LBO the distance between 64-column boxes. --------
template <typename E, int N>
__global__ void wgmma_mn_kernel(const __grid_constant__ pa::TensorMap map_a,
                                const __grid_constant__ pa::TensorMap map_b, int k_total,
                                float* out) {
  PA_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* smem = pa::smem_align(raw, 1024);
  E* sa = reinterpret_cast<E*>(smem);
  E* sb = reinterpret_cast<E*>(smem + 64 * k_total * sizeof(E));
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + (64 + N) * k_total * sizeof(E));
  const int t = threadIdx.x;
  if (t == 0) {
    pa::mbarrier_init(bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (t == 0) {
    pa::mbarrier_arrive_expect_tx(bar, uint32_t((64 + N) * k_total * sizeof(E)));
    pa::tma_load_2d(sa, map_a, 0, 0, bar);
    for (int j = 0; j < N / 64; ++j) pa::tma_load_2d(sb + j * 64 * k_total, map_b, j * 64, 0, bar);
  }
  pa::mbarrier_wait_parity(bar, 0);
  const uint32_t box = uint32_t(k_total) * 128;  // bytes of one 64-column box
  pa::WgmmaAcc<N> acc;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc.d[i] = 0.f;
  pa::wgmma_fence();
  for (int s = 0; s < k_total / 16; ++s) {
    const uint64_t da = pa::wgmma_descriptor(sa + s * 16 * 64, box, 1024, pa::WgmmaSwizzle::B128);
    const uint64_t db = pa::wgmma_descriptor(sb + s * 16 * 64, box, 1024, pa::WgmmaSwizzle::B128);
    pa::wgmma_mma_async<E, pa::WgmmaMajor::MN, pa::WgmmaMajor::MN>(acc, da, db);
  }
  pa::wgmma_commit_group();
  pa::wgmma_wait_group<0>(acc);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) out[acc.row(i, t) * N + acc.col(i, t)] = acc.d[i];
}

template <typename E>
void run_wgmma_mn() {
  constexpr int N = 128;
  const int k_total = 32;
  // at[k][m] = A[m][k], b[k][n] = B[k][n] = Bt[n][k].
  const std::vector<E> at = random_matrix<E>(size_t(k_total) * 64, 3), b = random_matrix<E>(size_t(k_total) * N, 4);
  std::vector<E> a(64 * size_t(k_total)), bt(size_t(N) * size_t(k_total));
  for (int k = 0; k < k_total; ++k) {
    for (int m = 0; m < 64; ++m) a[size_t(m) * size_t(k_total) + size_t(k)] = at[size_t(k) * 64 + size_t(m)];
    for (int j = 0; j < N; ++j) bt[size_t(j) * size_t(k_total) + size_t(k)] = b[size_t(k) * N + size_t(j)];
  }
  pa::DeviceBuffer<E> dat(at), dbn(b);
  auto map = [&](const E* g, int cols) {
    pa::TensorMapSpec s;
    s.dtype = std::is_same<E, pa::half>::value ? pa::TmaDtype::F16 : pa::TmaDtype::BF16;
    s.global = g;
    s.dims[0] = uint64_t(cols), s.dims[1] = uint64_t(k_total);
    s.strides[0] = uint64_t(cols) * sizeof(E);
    s.box[0] = 64, s.box[1] = uint32_t(k_total);
    s.swizzle = pa::TmaSwizzle::B128;
    return pa::encode_tensor_map(s);
  };
  const pa::TensorMap ma = map(dat.get(), 64), mb = map(dbn.get(), N);
  pa::DeviceBuffer<float> out(64 * N);
  for_each_schedule([&] {
    out.fill_bytes(0xFF);
    pa::launch(wgmma_mn_kernel<E, N>, dim3(1), dim3(128), (64 + N) * k_total * sizeof(E) + 64 + 1024,
               nullptr, ma, mb, k_total, out.get());
    expect_gemm(out.download(), a, bt, 64, N, k_total, false);
  });
}

TEST(HopperWgmma, MnMajorTilesAreTheTranspose) {
  PA_NEED_HOPPER();
  run_wgmma_mn<pa::half>();
  run_wgmma_mn<pa::bf16>();
}

// ---- A from registers (wgmma_mma_async_rs): each thread's fragment straight from global
// memory, B K-major (128B swizzle, TMA). The first k-step overwrites the accumulators
// (scale-d 0), whatever they held. For fp16/bf16 register j holds two elements of A's row
// 16 w + g + 8 (j % 2), columns 2 q + 8 (j / 2) and the next; for fp8, four, columns
// 4 q + 16 (j / 2) to + 3 (the lowest first). ----------------------------------------------
template <typename E, int N>
__global__ void wgmma_rs_kernel(const __grid_constant__ pa::TensorMap map_b, const E* a,
                                int k_total, float* out) {
  PA_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* smem = pa::smem_align(raw, 1024);
  E* sb = reinterpret_cast<E*>(smem);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + N * k_total * sizeof(E));
  const int t = threadIdx.x, w = t / 32, g = (t % 32) / 4, q = t % 4;
  if (t == 0) {
    pa::mbarrier_init(bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  constexpr int cw = int(128 / sizeof(E)), per = int(4 / sizeof(E)), kstep = int(32 / sizeof(E));
  if (t == 0) {
    pa::mbarrier_arrive_expect_tx(bar, uint32_t(N * k_total * sizeof(E)));
    for (int kb = 0; kb < k_total / cw; ++kb) pa::tma_load_2d(sb + kb * N * cw, map_b, kb * cw, 0, bar);
  }
  pa::mbarrier_wait_parity(bar, 0);
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(a);
  pa::WgmmaAcc<N> acc;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc.d[i] = 1e6f;  // garbage that scale-d 0 discards
  for (int s = 0; s < k_total / kstep; ++s) {
    uint32_t frag[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = 16 * w + g + 8 * (j % 2), col = kstep * s + per * q + 4 * per * (j / 2);
      frag[j] = 0;
      for (size_t e = 0; e < 4; ++e)
        frag[j] |= uint32_t(bytes[(size_t(row) * size_t(k_total) + size_t(col)) * sizeof(E) + e]) << (8 * e);
    }
    pa::wgmma_fence();  // A's registers were just written by ordinary code
    pa::wgmma_mma_async_rs<E>(acc, frag, kmajor_desc(sb, uint32_t(s), N, 128), s > 0);
  }
  pa::wgmma_commit_group();
  pa::wgmma_wait_group<0>(acc);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) out[acc.row(i, t) * N + acc.col(i, t)] = acc.d[i];
}

template <typename E>
void run_wgmma_rs() {
  constexpr int N = 32;
  const int k_total = sizeof(E) == 1 ? 128 : 64;
  const std::vector<E> a = random_matrix<E>(64 * size_t(k_total), 21), bt = random_matrix<E>(size_t(N) * k_total, 22);
  pa::DeviceBuffer<E> da(a), db(bt);
  const pa::TensorMap mb = kmajor_map(db.get(), N, k_total, 128);
  pa::DeviceBuffer<float> out(64 * N);
  for_each_schedule([&] {
    out.fill_bytes(0xFF);
    pa::launch(wgmma_rs_kernel<E, N>, dim3(1), dim3(128), N * k_total * sizeof(E) + 64 + 1024, nullptr,
               mb, da.get(), k_total, out.get());
    expect_gemm(out.download(), a, bt, 64, N, k_total, false);
  });
}

TEST(HopperWgmma, AFromRegistersAndScaleDZero) {
  PA_NEED_HOPPER();
  run_wgmma_rs<pa::half>();
  run_wgmma_rs<pa::bf16>();
  run_wgmma_rs<e4m3>();
}

// ---- Groups: two warpgroups (threads 128-255 are warpgroup 1, rows 64-127 of A), each with
// two accumulators. acc_half takes k-steps 0-1 in group 0; acc_full all four k-steps, one
// group each (groups 1-4), chained on its registers, with wait_group<1> after each commit:
// the pipelined k-loop. After the first wait<1>, group 0 is done and acc_half is read while
// acc_full is still in flight. ----------------------------------------------------------------
constexpr int kGroupsK = 64;
template <typename E, int N>
__global__ void wgmma_groups_kernel(const __grid_constant__ pa::TensorMap map_a,
                                    const __grid_constant__ pa::TensorMap map_b, int k_total,
                                    float* half_out, float* full_out) {
  PA_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* smem = pa::smem_align(raw, 1024);
  E* sa = reinterpret_cast<E*>(smem);  // 128 rows
  E* sb = reinterpret_cast<E*>(smem + 128 * k_total * sizeof(E));
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + (128 + N) * k_total * sizeof(E));
  const int t = threadIdx.x % 128, wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    pa::mbarrier_init(bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    pa::mbarrier_arrive_expect_tx(bar, uint32_t((128 + N) * k_total * sizeof(E)));
    pa::tma_load_2d(sa, map_a, 0, 0, bar);
    pa::tma_load_2d(sb, map_b, 0, 0, bar);
  }
  pa::mbarrier_wait_parity(bar, 0);
  const E* my_a = sa + wg * 64 * 64;  // this warpgroup's 64 rows (128-byte rows: 1,024 per 8)
  pa::WgmmaAcc<N> acc_half, acc_full;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc_half.d[i] = acc_full.d[i] = 0.f;
  pa::wgmma_fence();
#pragma unroll
  for (int s = 0; s < 2; ++s)
    pa::wgmma_mma_async<E>(acc_half, kmajor_desc(my_a, uint32_t(s), 64, 128),
                           kmajor_desc(sb, uint32_t(s), N, 128));
  pa::wgmma_commit_group();
#pragma unroll
  for (int s = 0; s < kGroupsK / 16; ++s) {  // a trip count known at compile time: unrolled
    pa::wgmma_mma_async<E>(acc_full, kmajor_desc(my_a, uint32_t(s), 64, 128),
                           kmajor_desc(sb, uint32_t(s), N, 128));
    pa::wgmma_commit_group();
    pa::wgmma_wait_group<1>(acc_half);  // not acc_full: it is still in flight
    if (s == 0)  // group 0 is done: acc_half is this thread's again
#pragma unroll
      for (int i = 0; i < N / 2; ++i)
        half_out[(64 * wg + acc_half.row(i, t)) * N + acc_half.col(i, t)] = acc_half.d[i];
  }
  pa::wgmma_wait_group<0>(acc_full);
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    full_out[(64 * wg + acc_full.row(i, t)) * N + acc_full.col(i, t)] = acc_full.d[i];
}

template <typename E>
void run_wgmma_groups() {
  constexpr int N = 64;
  const int k_total = kGroupsK;
  const std::vector<E> a = random_matrix<E>(128 * size_t(k_total), 31), bt = random_matrix<E>(size_t(N) * k_total, 32);
  pa::DeviceBuffer<E> da(a), db(bt);
  const pa::TensorMap ma = kmajor_map(da.get(), 128, k_total, 128), mb = kmajor_map(db.get(), N, k_total, 128);
  pa::DeviceBuffer<float> half_out(128 * N), full_out(128 * N);
  for_each_schedule([&] {
    half_out.fill_bytes(0xFF);
    full_out.fill_bytes(0xFF);
    pa::launch(wgmma_groups_kernel<E, N>, dim3(1), dim3(256), (128 + N) * k_total * sizeof(E) + 64 + 1024,
               nullptr, ma, mb, k_total, half_out.get(), full_out.get());
    expect_gemm(half_out.download(), a, bt, 128, N, k_total, false, 0, 32);
    expect_gemm(full_out.download(), a, bt, 128, N, k_total, false);
  });
}

TEST(HopperWgmma, GroupsCompleteInOrderAndChainOnOneAccumulator) {
  PA_NEED_HOPPER();
  run_wgmma_groups<pa::half>();
  run_wgmma_groups<pa::bf16>();
}
