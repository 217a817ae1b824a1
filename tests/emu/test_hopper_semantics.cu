// Hopper's asynchronous machinery (pa/hopper.h), one test per instruction's semantics. These
// run on both backends: on an sm_90 GPU (built for sm_90a only, as test_emu_hopper) they prove
// that the emulator gives the hardware's answers; on the emulator they run in every schedule
// order. On an older GPU they skip.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../common/compare.h"  // error_of, contains_text
#include "pa/device_buffer.h"
#include "pa/hopper.h"
#include "pa/launch.h"

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

template <typename F>
void for_each_schedule(F body) {
#if defined(PA_BACKEND_CPU)
  for (const char* order : {"forward", "reverse", "greedy", "random:1", "random:7"}) {
    SCOPED_TRACE(std::string("schedule ") + order);
    emu::set_schedule(order);
    body();
  }
  emu::set_schedule(nullptr);
#else
  body();
#endif
}

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
