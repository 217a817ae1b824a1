// Hopper's bugs, planted one per test, on the emulator only: each is caught by the plain
// emulator (late deliveries, poisoned destinations, deadlocks named) and named in checked
// mode with its barrier, phase and lines.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../common/compare.h"  // error_of, contains_text
#include "pa/device_buffer.h"
#include "pa/hopper.h"
#include "pa/launch.h"
#include "schedules.h"

namespace {

using pa::test::contains_text;
using pa::test::error_of;

std::string file_line(int line) { return "test_hopper_hazards.cu:" + std::to_string(line); }

using pa::test::ScheduleScope;
const char* const kOrders[] = {"forward", "reverse", "greedy", "random:1", "random:2"};

// ---- A static __shared__ barrier has no shared address in the window. --------------------
constexpr int kStaticLine = __LINE__ + 3;
__global__ void static_barrier_kernel() {
  __shared__ uint64_t bar;
  pa::mbarrier_init(&bar, 1);
}

TEST(HopperHazards, AStaticSharedBarrierIsRefused) {
  const std::string msg = error_of([] {
    pa::launch(static_barrier_kernel, dim3(1), dim3(1), 64, nullptr);
  });
  EXPECT_TRUE(contains_text(msg, "mbarrier_init at tests/emu/" + file_line(kStaticLine) +
                                     " was given "));
  EXPECT_TRUE(contains_text(msg, "which is not in the block's dynamic shared memory (64 bytes)"));
  EXPECT_TRUE(contains_text(msg, "A static __shared__ array has none: carve the buffer, and its "
                                 "mbarriers, from PA_DYNAMIC_SHARED."));
}

// ---- An expect_tx whose bytes never all arrive: a deadlock that names the barrier, its
// phase, the arrivals, the bytes expected and arrived, and where each thread waits. --------
constexpr int kShortInitLine = __LINE__ + 7;
constexpr int kShortWaitLine = __LINE__ + 14;
__global__ void short_copy_kernel(const float* src) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem);
  float* data = reinterpret_cast<float*>(smem + 128);
  if (threadIdx.x == 0) {
    pa::mbarrier_init(bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    pa::mbarrier_arrive_expect_tx(bar, 512);  // says 512 bytes; copies 256
    pa::bulk_load(data, src, 256, bar);
  }
  pa::mbarrier_wait_parity(bar, 0);
}

TEST(HopperHazards, AnExpectTxThatNeverCompletesIsADeadlockNamed) {
  pa::DeviceBuffer<float> src(64);
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    const std::string msg = error_of([&] {
      pa::launch(short_copy_kernel, dim3(1), dim3(64), 128 + 512, nullptr, src.get());
    });
    EXPECT_TRUE(contains_text(msg, "deadlock in block (0,0,0): no thread can move.")) << order;
    EXPECT_TRUE(contains_text(msg, "threads 0-63 wait in mbarrier_wait_parity (parity 0) on the "
                                   "mbarrier at shared 0x0400 at tests/emu/" +
                                       file_line(kShortWaitLine)));
    EXPECT_TRUE(contains_text(msg, "the mbarrier at shared 0x0400 (initialised at tests/emu/" +
                                       file_line(kShortInitLine) +
                                       " for 1 arrival a phase): phase 0 (parity 0) is not "
                                       "complete: 0 of 1 arrivals missing; 512 bytes expected "
                                       "(expect_tx), 256 bytes arrived"));
    EXPECT_TRUE(contains_text(msg, "the 256 bytes missing were never issued"));
  }
}

// ---- A warp that arrived in phase 0 and exits without arrive_drop: phase 1 never completes.
__global__ void exit_without_drop_kernel() {
  PA_DYNAMIC_SHARED(uint64_t, bar);
  if (threadIdx.x == 0) {
    pa::mbarrier_init(bar, 64);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  pa::mbarrier_arrive(bar);
  pa::mbarrier_wait_parity(bar, 0);
  if (threadIdx.x >= 32) return;  // warp 1 leaves; it should have called mbarrier_arrive_drop
  pa::mbarrier_arrive(bar);
  pa::mbarrier_wait_parity(bar, 1);
}

TEST(HopperHazards, AWarpThatExitsWithoutArriveDropIsNamed) {
  const std::string msg = error_of([] {
    pa::launch(exit_without_drop_kernel, dim3(1), dim3(64), 8, nullptr);
  });
  EXPECT_TRUE(contains_text(msg, "phase 1 (parity 1) is not complete: 32 of 64 arrivals missing"));
  EXPECT_TRUE(contains_text(msg, "threads 32-63 (warp 1) arrived on it in an earlier phase and "
                                 "exited without mbarrier_arrive_drop"));
}

// ---- A producer that starts on the wrong parity: it waits for phase 0 of an 'empty' barrier
// that only consumers complete, after they consume what the producer never sends. ----------
constexpr int kWrongParityLine = __LINE__ + 15;
__global__ void wrong_parity_kernel(const float* src, float* out) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + 1;
  float* stage = reinterpret_cast<float*>(smem + 128);
  if (threadIdx.x == 0) {
    pa::mbarrier_init(full, 1);
    pa::mbarrier_init(empty, 32);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x >= 32) {  // warp 1: the producer
    if (threadIdx.x == 32) {
      for (int k = 0; k < 2; ++k) {
        pa::mbarrier_wait_parity(empty, k & 1);  // should be (k & 1) ^ 1
        pa::mbarrier_arrive_expect_tx(full, 128);
        pa::bulk_load(stage, src + 32 * k, 128, full);
      }
    }
    return;
  }
  for (int k = 0; k < 2; ++k) {  // warp 0: the consumers
    pa::mbarrier_wait_parity(full, k & 1);
    out[32 * k + threadIdx.x] = stage[threadIdx.x];
    pa::mbarrier_arrive(empty);
  }
}

TEST(HopperHazards, AProducerOnTheWrongParityDeadlocksWithAHint) {
  pa::DeviceBuffer<float> src(64), out(64);
  const std::string msg = error_of([&] {
    pa::launch(wrong_parity_kernel, dim3(1), dim3(64), 256, nullptr, src.get(), out.get());
  });
  EXPECT_TRUE(contains_text(msg, "deadlock in block (0,0,0)"));
  EXPECT_TRUE(contains_text(msg, "wait in mbarrier_wait_parity (parity 0) on the mbarrier at "
                                 "shared 0x0408 at tests/emu/" + file_line(kWrongParityLine)));
  EXPECT_TRUE(contains_text(msg, "thread 32 waits with parity 0, for phase 0 of this barrier to "
                                 "complete. If it is a producer waiting for an empty stage"));
  EXPECT_TRUE(contains_text(msg, "its first wait takes parity 1"));
}

// ---- A wait that succeeds two phases after what its thread last saw: parity aliasing. -----
constexpr int kSkipLine = __LINE__ + 14;
__global__ void skipped_phase_kernel() {
  PA_DYNAMIC_SHARED(uint64_t, bar);
  if (threadIdx.x == 0) {
    pa::mbarrier_init(bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 0; k < 3; ++k) pa::mbarrier_arrive(bar);  // three phases complete
    return;
  }
  __syncwarp(0xfffffffeu);
  pa::mbarrier_wait_parity(bar, 0);  // phase 0, seen first: thread 1 has seen 1 complete...
  pa::mbarrier_wait_parity(bar, 0);  // ...wants phase 2 (parity 0) but skipped phase 1's wait
}

TEST(HopperHazards, AWaitTwoPhasesBehindIsNamed) {
  ScheduleScope scope("greedy");  // thread 0 completes all three phases before any wait
  const std::string msg = error_of([] {
    pa::launch(skipped_phase_kernel, dim3(1), dim3(2), 8, nullptr);
  });
  EXPECT_TRUE(contains_text(msg, "emulator mbarrier check: mbarrier_wait_parity at tests/emu/" +
                                     file_line(kSkipLine - 1) + " (parity 0) succeeded"))
      << msg;
  EXPECT_TRUE(contains_text(msg, "with 3 phases complete, but this thread's last wait on it saw 0 "
                                 "complete: phases 0 to 1 completed unseen"));
}

// ---- A read of a TMA destination before its barrier's phase completed. --------------------
constexpr int kTmaIssueLine = __LINE__ + 14;
constexpr int kTmaEarlyReadLine = __LINE__ + 16;
__global__ void early_read_kernel(const __grid_constant__ pa::TensorMap map, float* out,
                                  bool wait) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 1024);
  const float* tile = reinterpret_cast<const float*>(smem);
  if (threadIdx.x == 0) {
    pa::mbarrier_init(bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    pa::mbarrier_arrive_expect_tx(bar, 1024);
    pa::tma_load_2d(smem, map, 0, 0, bar);
  }
  if (wait) pa::mbarrier_wait_parity(bar, 0);
  out[threadIdx.x] = tile[threadIdx.x];
  if (!wait) pa::mbarrier_wait_parity(bar, 0);
}

TEST(HopperHazards, AReadOfATmaDestinationBeforeItsPhaseIsCaught) {
  std::vector<float> host(16 * 16);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(i);
  pa::DeviceBuffer<float> in(host), out(64);
  pa::TensorMapSpec spec;
  spec.dtype = pa::TmaDtype::F32;
  spec.global = in.get();
  spec.dims[0] = 16, spec.dims[1] = 16;
  spec.strides[0] = 64;
  spec.box[0] = 16, spec.box[1] = 16;
  const pa::TensorMap map = pa::encode_tensor_map(spec);
  // The right code reads the tile in every order.
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    EXPECT_EQ(error_of([&] {
      pa::launch(early_read_kernel, dim3(1), dim3(64), 1024 + 64, nullptr, map, out.get(), true);
    }), "(no error)");
    const std::vector<float> h = out.download();
    for (int t = 0; t < 64; ++t) ASSERT_EQ(h[t], host[size_t(t)]) << order;
  }
  const std::string msg = error_of([&] {
    pa::launch(early_read_kernel, dim3(1), dim3(64), 1024 + 64, nullptr, map, out.get(), false);
  });
#if defined(PA_EMU_CHECK)
  EXPECT_TRUE(contains_text(msg, "emulator TMA check: read of 4 bytes of dynamic shared memory "
                                 "before the mbarrier phase that its copy completes on"));
  EXPECT_TRUE(contains_text(msg, file_line(kTmaEarlyReadLine)));
  EXPECT_TRUE(contains_text(msg, "The copy: tma_load (cp.async.bulk.tensor, global to shared) "
                                 "issued at tests/emu/" + file_line(kTmaIssueLine) +
                                 " by thread 0, completing its bytes on the mbarrier at shared "
                                 "0x0800"));
  EXPECT_TRUE(contains_text(msg, "in its phase 0 (parity 0)"));
#else
  // The plain emulator: the issuing thread's early read meets the in-flight poison in every
  // order; in forward order every thread's does (the bytes land at the first wait's poll,
  // after the others have read). Under greedy, thread 0 polls first and the others read
  // landed bytes: a race whose outcome a GPU may give too.
  EXPECT_EQ(msg, "(no error)");
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    pa::launch(early_read_kernel, dim3(1), dim3(64), 1024 + 64, nullptr, map, out.get(), false);
    const std::vector<float> h = out.download();
    EXPECT_TRUE(std::isnan(h[0])) << order;
    if (std::string(order) == "forward")
      for (int t = 0; t < 64; ++t) ASSERT_TRUE(std::isnan(h[t])) << order << " thread " << t;
  }
#endif
}

// ---- A TMA store's source written again before its wait_group.read. -----------------------
constexpr int kReuseLine = __LINE__ + 11;
__global__ void store_reuse_kernel(const __grid_constant__ pa::TensorMap map, bool wait_first) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  float* tile = reinterpret_cast<float*>(smem);
  for (int i = threadIdx.x; i < 256; i += blockDim.x) tile[i] = 1.0f;
  pa::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    pa::tma_store_2d(map, tile, 0, 0);
    pa::bulk_commit();
    if (wait_first) pa::bulk_wait_group_read<0>();
    tile[0] = 2.0f;  // the next tile's first value, written while the store may still read
    if (!wait_first) pa::bulk_wait_group_read<0>();
  }
}

TEST(HopperHazards, ATmaStoreSourceReusedBeforeItsWaitIsCaught) {
  pa::DeviceBuffer<float> g(256);
  pa::TensorMapSpec spec;
  spec.dtype = pa::TmaDtype::F32;
  spec.global = g.get();
  spec.dims[0] = 16, spec.dims[1] = 16;
  spec.strides[0] = 64;
  spec.box[0] = 16, spec.box[1] = 16;
  const pa::TensorMap map = pa::encode_tensor_map(spec);
  EXPECT_EQ(error_of([&] { pa::launch(store_reuse_kernel, dim3(1), dim3(32), 1024, nullptr, map, true); }),
            "(no error)");
  EXPECT_EQ(g.download()[0], 1.0f);
  const std::string msg = error_of([&] {
    pa::launch(store_reuse_kernel, dim3(1), dim3(32), 1024, nullptr, map, false);
  });
#if defined(PA_EMU_CHECK)
  EXPECT_TRUE(contains_text(msg, "emulator TMA check: write of 4 bytes of dynamic shared memory "
                                 "that a bulk store has not read yet"));
  EXPECT_TRUE(contains_text(msg, file_line(kReuseLine)));
  EXPECT_TRUE(contains_text(msg, "The copy: tma_store (cp.async.bulk.tensor, shared to global) "
                                 "issued at tests/emu/" + file_line(kReuseLine - 3) +
                                 " by thread 0, in its bulk group 0"));
#else
  // The plain emulator reads the source at the wait: the store carries the new value.
  EXPECT_EQ(msg, "(no error)");
  EXPECT_EQ(g.download()[0], 2.0f);
#endif
}

// ---- A generic-proxy write read by a TMA store without fence.proxy.async. -----------------
constexpr int kUnfencedWriteLine = __LINE__ + 4;
__global__ void unfenced_store_kernel(const __grid_constant__ pa::TensorMap map, bool fence) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  float* tile = reinterpret_cast<float*>(smem);
  for (int i = threadIdx.x; i < 256; i += blockDim.x) tile[i] = float(i);
  if (fence) pa::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    pa::tma_store_2d(map, tile, 0, 0);
    pa::bulk_commit();
    pa::bulk_wait_group<0>();
  }
}

TEST(HopperHazards, AStoreOfUnfencedWritesIsCaught) {
  pa::DeviceBuffer<float> g(256);
  pa::TensorMapSpec spec;
  spec.dtype = pa::TmaDtype::F32;
  spec.global = g.get();
  spec.dims[0] = 16, spec.dims[1] = 16;
  spec.strides[0] = 64;
  spec.box[0] = 16, spec.box[1] = 16;
  const pa::TensorMap map = pa::encode_tensor_map(spec);
  EXPECT_EQ(error_of([&] { pa::launch(unfenced_store_kernel, dim3(1), dim3(32), 1024, nullptr, map, true); }),
            "(no error)");
  EXPECT_EQ(g.download()[5], 5.f);
  const std::string msg = error_of([&] {
    pa::launch(unfenced_store_kernel, dim3(1), dim3(32), 1024, nullptr, map, false);
  });
#if defined(PA_EMU_CHECK)
  EXPECT_TRUE(contains_text(msg, "emulator TMA check: tma_store at tests/emu/" +
                                     file_line(kUnfencedWriteLine + 4) +
                                     " reads shared memory that thread ("));
  EXPECT_TRUE(contains_text(msg, ") wrote with an ordinary store, and that thread has not "
                                 "called fence_proxy_async since"));
  EXPECT_TRUE(contains_text(msg, file_line(kUnfencedWriteLine)));
#else
  // The plain emulator: the store reads the async proxy's view of shared memory, which the
  // ordinary stores reach only at a fence.proxy.async; without one it holds the block's
  // starting poison, and the tensor gets NaN.
  EXPECT_EQ(msg, "(no error)");
  const std::vector<float> h = g.download();
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(std::isnan(h[size_t(i)])) << i;
#endif
}

// ---- A tensor map whose extent is larger than its allocation. ----------------------------
TEST(HopperHazards, ATensorMapPastItsAllocationIsRefused) {
  pa::DeviceBuffer<float> g(16 * 15);  // one row short
  pa::TensorMapSpec spec;
  spec.dtype = pa::TmaDtype::F32;
  spec.global = g.get();
  spec.dims[0] = 16, spec.dims[1] = 16;
  spec.strides[0] = 64;
  spec.box[0] = 16, spec.box[1] = 16;
  EXPECT_TRUE(contains_text(error_of([&] { pa::encode_tensor_map(spec); }),
                            "the tensor's extent, 1024 bytes from globalAddress, is larger than "
                            "its allocation, which ends 960 bytes after it"));
}

// ---- Named barriers and setmaxnreg: their rules. ------------------------------------------
__global__ void named_count_kernel() { pa::named_barrier_sync(1, 48); }
__global__ void named_zero_kernel() { pa::named_barrier_sync(0, 64); }
constexpr int kRegLine = __LINE__ + 3;
__global__ void uneven_registers_kernel() {
  if (threadIdx.x % 128 < 64) pa::setmaxnreg_dec<40>();
  else pa::setmaxnreg_inc<232>();
}

TEST(HopperHazards, NamedBarrierAndSetmaxnregRulesAreChecked) {
  EXPECT_TRUE(contains_text(error_of([] { pa::launch(named_count_kernel, dim3(1), dim3(64), 0, nullptr); }),
                            "a named barrier's count is a nonzero multiple of 32"));
  EXPECT_TRUE(contains_text(error_of([] { pa::launch(named_zero_kernel, dim3(1), dim3(64), 0, nullptr); }),
                            "barrier 0 is not one of 1-15 (barrier 0 is __syncthreads()'s)"));
  const std::string msg = error_of([] { pa::launch(uneven_registers_kernel, dim3(1), dim3(128), 0, nullptr); });
  EXPECT_TRUE(contains_text(msg, "warpgroup 0's call number 1 of setmaxnreg was setmaxnreg_"));
  EXPECT_TRUE(contains_text(msg, "setmaxnreg is .sync.aligned, the same instruction in every "
                                 "thread of the warpgroup"));
  EXPECT_TRUE(contains_text(msg, file_line(kRegLine)));
}

// ---- One arrival too many. -----------------------------------------------------------------
__global__ void extra_arrival_kernel() {
  PA_DYNAMIC_SHARED(uint64_t, bar);
  if (threadIdx.x == 0) {
    pa::mbarrier_init(bar, 1);
    pa::mbarrier_expect_tx(bar, 16);  // phase 0 also waits for 16 bytes: it stays open
  }
  __syncthreads();
  pa::mbarrier_arrive(bar);  // 2 threads, 1 arrival expected
}

TEST(HopperHazards, AnArrivalTooManyIsNamed) {
  const std::string msg = error_of([] { pa::launch(extra_arrival_kernel, dim3(1), dim3(2), 8, nullptr); });
  EXPECT_TRUE(contains_text(msg, "arrives 1 times on the mbarrier at shared 0x0400"));
  EXPECT_TRUE(contains_text(msg, "has 0 arrivals left: more arrivals than the barrier was "
                                 "initialised for"));
}

// ==== wgmma's hazards ===========================================================================
// The operands: A 64 x 16 and B 8 x 16 fp16, K-major with a 32-byte swizzle (one TMA box of
// 16 x rows each), at the start of the block's dynamic shared memory; the barrier after them.
struct WgTiles {
  pa::half* a;
  pa::half* b;
  uint64_t* bar;
};
__device__ WgTiles wg_tiles(unsigned char* smem) {
  return {reinterpret_cast<pa::half*>(smem), reinterpret_cast<pa::half*>(smem + 2048),
          reinterpret_cast<uint64_t*>(smem + 2304)};
}
__device__ uint64_t wg_desc(const pa::half* tile) {
  return pa::wgmma_descriptor(tile, 16, 256, pa::WgmmaSwizzle::B32);
}
// Every element of A is a, of B b (so the swizzle does not matter): D = 16 a b + C.
constexpr int kWgFillBLine = __LINE__ + 3;
__device__ void wg_fill(WgTiles s, float a, float b) {
  for (int i = threadIdx.x; i < 64 * 16; i += blockDim.x) s.a[i] = pa::from_float<pa::half>(a);
  for (int i = threadIdx.x; i < 8 * 16; i += blockDim.x) s.b[i] = pa::from_float<pa::half>(b);
}
constexpr size_t kWgShared = 4096;

std::string wg_course_line(int line) { return "tests/emu/" + file_line(line); }

// ---- Accumulators read or written between wgmma_mma_async and the wait that covers it. ------
// mode 0: right; 1: acc1 read before any wait; 2: acc1 read after wait_group<1>, which leaves
// its group pending; 3: acc1 written (a rescale) in flight.
constexpr int kAccIssue1Line = __LINE__ + 17;
constexpr int kAccRead1Line = __LINE__ + 19;
constexpr int kAccWaitLine = __LINE__ + 19;
constexpr int kAccRead2Line = __LINE__ + 19;
constexpr int kAccWriteLine = __LINE__ + 19;
__global__ void acc_in_flight_kernel(int mode, float* out) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  const WgTiles s = wg_tiles(smem);
  const int t = threadIdx.x;
  wg_fill(s, 1.f, 1.f);
  pa::fence_proxy_async();
  __syncthreads();
  pa::WgmmaAcc<8> acc0, acc1;
  for (int i = 0; i < 4; ++i) acc0.d[i] = acc1.d[i] = 0.f;
  pa::wgmma_fence();
  pa::wgmma_mma_async<pa::half>(acc0, wg_desc(s.a), wg_desc(s.b));
  pa::wgmma_commit_group();
  pa::wgmma_mma_async<pa::half>(acc1, wg_desc(s.a), wg_desc(s.b));
  pa::wgmma_commit_group();
  float early = 0.f;
  if (mode == 1) early = acc1.d[0];  // before any wait
  pa::wgmma_wait_group<1>(acc0);
  if (mode == 2) early = acc1.d[0];  // group 1 is still pending
  if (mode == 3) acc1.d[0] = 1.f;    // lost: the wgmma's result lands over it
  pa::wgmma_wait_group<0>(acc1);
  out[t] = mode == 1 || mode == 2 ? early : acc1.d[0];
  out[128 + t] = acc0.d[0];
}

TEST(HopperWgmmaHazards, AccumulatorsTouchedInFlightAreCaught) {
  pa::DeviceBuffer<float> out(256);
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    EXPECT_EQ(error_of([&] { pa::launch(acc_in_flight_kernel, dim3(1), dim3(128), kWgShared, nullptr, 0, out.get()); }),
              "(no error)");
    const std::vector<float> h = out.download();
    for (int t = 0; t < 256; ++t) ASSERT_EQ(h[size_t(t)], 16.f) << order << " " << t;
  }
  std::string msg[4];
  for (int mode = 1; mode <= 3; ++mode)
    msg[mode] = error_of([&] {
      pa::launch(acc_in_flight_kernel, dim3(1), dim3(128), kWgShared, nullptr, mode, out.get());
    });
#if defined(PA_EMU_CHECK)
  EXPECT_TRUE(contains_text(msg[1], "emulator wgmma check: read of accumulator registers in flight: "
                                    "d[0] of a wgmma's accumulators"));
  EXPECT_TRUE(contains_text(msg[1], file_line(kAccRead1Line)));
  EXPECT_TRUE(contains_text(msg[1], "The wgmma: wgmma_mma_async issued at " +
                                        wg_course_line(kAccIssue1Line) +
                                        " by warpgroup 0, in this thread's wgmma group 1."));
  EXPECT_TRUE(contains_text(msg[1], "This thread has not waited since it committed group 1: no "
                                    "wgmma_wait_group covers it yet."));
  EXPECT_TRUE(contains_text(msg[2], file_line(kAccRead2Line)));
  EXPECT_TRUE(contains_text(msg[2], "This thread's last wait, the wgmma_wait_group<1> at " +
                                        wg_course_line(kAccWaitLine) +
                                        ", left its newest 1 group pending (group 1 of 0-1), group 1 "
                                        "among them. For group 1 to be done there, that wait "
                                        "leaves at most 0 pending: wgmma_wait_group<0>."));
  EXPECT_TRUE(contains_text(msg[3], "emulator wgmma check: write of accumulator registers in "
                                    "flight: d[0]"));
  EXPECT_TRUE(contains_text(msg[3], file_line(kAccWriteLine)));
#else
  // The plain emulator: in flight, accumulators hold NaN; a write in flight is lost.
  for (int mode = 1; mode <= 3; ++mode) EXPECT_EQ(msg[mode], "(no error)");
  for (int mode = 1; mode <= 3; ++mode)
    for (const char* order : kOrders) {
      ScheduleScope scope(order);
      pa::launch(acc_in_flight_kernel, dim3(1), dim3(128), kWgShared, nullptr, mode, out.get());
      const std::vector<float> h = out.download();
      for (int t = 0; t < 128; ++t) {
        if (mode == 3) ASSERT_EQ(h[size_t(t)], 16.f) << order << " thread " << t;  // not 1
        else ASSERT_TRUE(std::isnan(h[size_t(t)])) << order << " mode " << mode << " thread " << t;
        ASSERT_EQ(h[128 + size_t(t)], 16.f);
      }
    }
#endif
}

// ---- A stage released one wait too early: overwritten by the next TMA load (mode 1) or by
// ordinary stores (mode 2) while the wgmma that reads it is still in flight. --------------
// A is 64 x 32 and B 8 x 32 in global memory: two k-blocks through one stage.
constexpr int kStageIssueLine = __LINE__ + 22;
constexpr int kStageRefillLine = __LINE__ + 28;
constexpr int kStageStoreLine = __LINE__ + 35;
__global__ void early_release_kernel(const __grid_constant__ pa::TensorMap map_a,
                                     const __grid_constant__ pa::TensorMap map_b, int mode, float* out) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  const WgTiles s = wg_tiles(smem);
  const int t = threadIdx.x;
  if (t == 0) {
    pa::mbarrier_init(s.bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (t == 0) {
    pa::mbarrier_arrive_expect_tx(s.bar, 2048 + 256);
    pa::tma_load_2d(s.a, map_a, 0, 0, s.bar);
    pa::tma_load_2d(s.b, map_b, 0, 0, s.bar);
  }
  pa::mbarrier_wait_parity(s.bar, 0);
  pa::WgmmaAcc<8> acc;
  for (int i = 0; i < 4; ++i) acc.d[i] = 0.f;
  pa::wgmma_fence();
  pa::wgmma_mma_async<pa::half>(acc, wg_desc(s.a), wg_desc(s.b));
  pa::wgmma_commit_group();
  if (mode == 0) pa::wgmma_wait_group<0>(acc);  // the right place: the stage is read
  __syncthreads();                               // the stage is released
  if (mode != 2) {
    if (t == 0) {
      pa::mbarrier_arrive_expect_tx(s.bar, 2048 + 256);
      pa::tma_load_2d(s.a, map_a, 16, 0, s.bar);
      pa::tma_load_2d(s.b, map_b, 16, 0, s.bar);
    }
    pa::mbarrier_wait_parity(s.bar, 1);
    pa::wgmma_fence();
    pa::wgmma_mma_async<pa::half>(acc, wg_desc(s.a), wg_desc(s.b));
    pa::wgmma_commit_group();
  } else {
    for (int i = t; i < 64 * 16; i += blockDim.x) s.a[i] = pa::from_float<pa::half>(0.f);
  }
  pa::wgmma_wait_group<0>(acc);
  for (int i = 0; i < 4; ++i) out[acc.row(i, t) * 8 + acc.col(i, t)] = acc.d[i];
}

TEST(HopperWgmmaHazards, AStageReleasedOneWaitTooEarlyIsCaught) {
  std::vector<pa::half> a(64 * 32), b(8 * 32);
  for (size_t i = 0; i < a.size(); ++i) a[i] = pa::from_float<pa::half>(float(int(i % 7) - 3));
  for (size_t i = 0; i < b.size(); ++i) b[i] = pa::from_float<pa::half>(float(int(i % 5) - 2));
  pa::DeviceBuffer<pa::half> da(a), db(b);
  auto map = [](const pa::half* g, int rows) {
    pa::TensorMapSpec spec;
    spec.dtype = pa::TmaDtype::F16;
    spec.global = g;
    spec.dims[0] = 32, spec.dims[1] = uint64_t(rows);
    spec.strides[0] = 64;
    spec.box[0] = 16, spec.box[1] = uint32_t(rows);
    spec.swizzle = pa::TmaSwizzle::B32;
    return pa::encode_tensor_map(spec);
  };
  const pa::TensorMap ma = map(da.get(), 64), mb = map(db.get(), 8);
  auto want = [&](int m, int n, int k0, int k1) {
    float sum = 0.f;
    for (int k = k0; k < k1; ++k) sum += pa::to_float(a[size_t(m * 32 + k)]) * pa::to_float(b[size_t(n * 32 + k)]);
    return sum;
  };
  pa::DeviceBuffer<float> out(64 * 8);
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    EXPECT_EQ(error_of([&] { pa::launch(early_release_kernel, dim3(1), dim3(128), kWgShared, nullptr, ma, mb, 0, out.get()); }),
              "(no error)");
    const std::vector<float> h = out.download();
    for (int m = 0; m < 64; ++m)
      for (int n = 0; n < 8; ++n) ASSERT_EQ(h[size_t(m * 8 + n)], want(m, n, 0, 32)) << order;
  }
  const std::string msg1 = error_of([&] {
    pa::launch(early_release_kernel, dim3(1), dim3(128), kWgShared, nullptr, ma, mb, 1, out.get());
  });
  const std::vector<float> h1 = out.download();
  const std::string msg2 = error_of([&] {
    pa::launch(early_release_kernel, dim3(1), dim3(128), kWgShared, nullptr, ma, mb, 2, out.get());
  });
  const std::vector<float> h2 = out.download();
#if defined(PA_EMU_CHECK)
  EXPECT_TRUE(contains_text(msg1, "emulator wgmma check: tma_load at " + wg_course_line(kStageRefillLine) +
                                      " writes shared memory (2048 bytes at shared 0x0400) that the "
                                      "wgmma_mma_async issued at " + wg_course_line(kStageIssueLine) +
                                      " by warpgroup 0 still reads: its wgmma group 0 is not "
                                      "covered by a wgmma_wait_group yet. The stage was released "
                                      "one wait too early"));
  EXPECT_TRUE(contains_text(msg2, "emulator wgmma check: write of 2 bytes of dynamic shared memory "
                                  "that an in-flight wgmma still reads"));
  EXPECT_TRUE(contains_text(msg2, file_line(kStageStoreLine)));
  EXPECT_TRUE(contains_text(msg2, "The wgmma: wgmma_mma_async issued at " +
                                      wg_course_line(kStageIssueLine) +
                                      " by warpgroup 0, in its wgmma group 0."));
  (void)h1, (void)h2;
#else
  // The plain emulator reads a wgmma's operands at the wait that covers it: the first k-block's
  // wgmma reads the second k-block (mode 1: twice the second block's product) or the zeros
  // stored over A (mode 2: whatever of them are stored by then; all of them but under greedy
  // order, where thread 0 reaches the wait first), never the right sum.
  EXPECT_EQ(msg1, "(no error)");
  EXPECT_EQ(msg2, "(no error)");
  int right = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 8; ++n) {
      ASSERT_EQ(h1[size_t(m * 8 + n)], 2 * want(m, n, 16, 32)) << m << "," << n;
      right += h2[size_t(m * 8 + n)] == want(m, n, 0, 32);
    }
  EXPECT_LT(right, 64 * 8 / 2);
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    pa::launch(early_release_kernel, dim3(1), dim3(128), kWgShared, nullptr, ma, mb, 2, out.get());
    const std::vector<float> h = out.download();
    if (std::string(order) != "greedy")
      for (int i = 0; i < 64 * 8; ++i) ASSERT_EQ(h[size_t(i)], 0.f) << order << " " << i;
  }
#endif
}

// ---- A generic-proxy write that a wgmma reads without fence.proxy.async: checked mode names
// it; the plain emulator's wgmma reads the async proxy's view, still the block's poison. ----
__global__ void unfenced_operand_kernel(bool fence, float* out) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  const WgTiles s = wg_tiles(smem);
  wg_fill(s, 1.f, 2.f);
  if (fence) pa::fence_proxy_async();
  __syncthreads();
  pa::WgmmaAcc<8> acc;
  for (int i = 0; i < 4; ++i) acc.d[i] = 0.f;
  pa::wgmma_fence();
  pa::wgmma_mma_async<pa::half>(acc, wg_desc(s.a), wg_desc(s.b));
  pa::wgmma_commit_group();
  pa::wgmma_wait_group<0>(acc);
  out[threadIdx.x] = acc.d[0];
}

TEST(HopperWgmmaHazards, AnOrdinaryStoreReadByWgmmaWithoutAProxyFenceIsCaught) {
  pa::DeviceBuffer<float> out(128);
  EXPECT_EQ(error_of([&] { pa::launch(unfenced_operand_kernel, dim3(1), dim3(128), kWgShared, nullptr, true, out.get()); }),
            "(no error)");
  EXPECT_EQ(out.download()[5], 32.f);
  const std::string msg = error_of([&] {
    pa::launch(unfenced_operand_kernel, dim3(1), dim3(128), kWgShared, nullptr, false, out.get());
  });
#if defined(PA_EMU_CHECK)
  EXPECT_TRUE(contains_text(msg, "emulator wgmma check: wgmma_mma_async<fp16> m64n8k16 (A: "
                                 "descriptor 0xc000001000010040, K-major; B: descriptor "
                                 "0xc0000010000100c0, K-major; D += A * B) at tests/emu/"));
  EXPECT_TRUE(contains_text(msg, " reads B from shared memory that thread ("));
  EXPECT_TRUE(contains_text(msg, ") wrote with an ordinary store, and that thread has not called "
                                 "fence_proxy_async since:"));
  EXPECT_TRUE(contains_text(msg, file_line(kWgFillBLine)));  // B's store, in wg_fill
#else
  EXPECT_EQ(msg, "(no error)");
  const std::vector<float> h = out.download();
  for (int t = 0; t < 128; ++t) ASSERT_TRUE(std::isnan(h[size_t(t)])) << "thread " << t;
#endif
}

// ---- A missing wgmma_fence: none before the first wgmma (mode 1), or none between a rescale
// of the accumulators and the wgmma that accumulates onto them (mode 2). Both builds name it.
constexpr int kFenceIssueLine = __LINE__ + 11;
constexpr int kFenceWaitLine = __LINE__ + 12;
__global__ void missing_fence_kernel(int mode, float* out) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  const WgTiles s = wg_tiles(smem);
  wg_fill(s, 1.f, 1.f);
  pa::fence_proxy_async();
  __syncthreads();
  pa::WgmmaAcc<8> acc;
  for (int i = 0; i < 4; ++i) acc.d[i] = 0.f;
  if (mode != 1) pa::wgmma_fence();
  pa::wgmma_mma_async<pa::half>(acc, wg_desc(s.a), wg_desc(s.b));
  pa::wgmma_commit_group();
  pa::wgmma_wait_group<0>(acc);
  for (int i = 0; i < 4; ++i) acc.d[i] *= 0.5f;  // a rescale, as online softmax does
  if (mode == 0) pa::wgmma_fence();
  pa::wgmma_mma_async<pa::half>(acc, wg_desc(s.a), wg_desc(s.b));
  pa::wgmma_commit_group();
  pa::wgmma_wait_group<0>(acc);
  out[threadIdx.x] = acc.d[0];
}

TEST(HopperWgmmaHazards, AMissingWgmmaFenceIsNamed) {
  pa::DeviceBuffer<float> out(128);
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    EXPECT_EQ(error_of([&] { pa::launch(missing_fence_kernel, dim3(1), dim3(128), kWgShared, nullptr, 0, out.get()); }),
              "(no error)");
    EXPECT_EQ(out.download()[7], 24.f);
  }
  const std::string msg1 = error_of([&] {
    pa::launch(missing_fence_kernel, dim3(1), dim3(128), kWgShared, nullptr, 1, out.get());
  });
  EXPECT_TRUE(contains_text(msg1, "emulator wgmma check: wgmma_mma_async<fp16> m64n8k16"));
  EXPECT_TRUE(contains_text(msg1, "at " + wg_course_line(kFenceIssueLine) +
                                      ": thread (0,0,0) (warpgroup 0) has not called "
                                      "wgmma_fence() before its first wgmma."));
  const std::string msg2 = error_of([&] {
    pa::launch(missing_fence_kernel, dim3(1), dim3(128), kWgShared, nullptr, 2, out.get());
  });
  EXPECT_TRUE(contains_text(msg2, "accumulates into registers that thread (0,0,0) (warpgroup 0) "
                                  "changed with ordinary code after the wgmma_wait_group at " +
                                      wg_course_line(kFenceWaitLine) +
                                      " handed them back (d[0] was 16.000000, is 8.000000), with "
                                      "no wgmma_fence() since."));
}

// ---- A's registers (wgmma_mma_async_rs): two k-steps from two register sets after one fence
// are right (each set is checked on its own); a set rewritten by ordinary code and read again
// with no wgmma_fence in between is named, with the wgmma that read it before (mode 1). ------
constexpr int kRsReadLine = __LINE__ + 13;
__global__ void a_registers_kernel(int mode, float* out) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  const WgTiles s = wg_tiles(smem);
  wg_fill(s, 1.f, 1.f);
  pa::fence_proxy_async();
  __syncthreads();
  pa::WgmmaAcc<8> acc;
  for (int i = 0; i < 4; ++i) acc.d[i] = 0.f;
  uint32_t a[2][4];
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 4; ++j) a[k][j] = 0x3C003C00u;  // two fp16 ones
  pa::wgmma_fence();
  pa::wgmma_mma_async_rs<pa::half>(acc, a[0], wg_desc(s.b));
  pa::wgmma_mma_async_rs<pa::half>(acc, a[1], wg_desc(s.b));
  pa::wgmma_commit_group();
  pa::wgmma_wait_group<0>(acc);
  if (mode == 1) a[0][0] = 0;  // ordinary code rewrites A's registers, and no fence follows
  pa::wgmma_mma_async_rs<pa::half>(acc, a[0], wg_desc(s.b));
  pa::wgmma_commit_group();
  pa::wgmma_wait_group<0>(acc);
  out[threadIdx.x] = acc.d[0];
}

TEST(HopperWgmmaHazards, ARegistersRewrittenWithoutAFenceAreNamed) {
  pa::DeviceBuffer<float> out(128);
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    EXPECT_EQ(error_of([&] { pa::launch(a_registers_kernel, dim3(1), dim3(128), kWgShared, nullptr, 0, out.get()); }),
              "(no error)");
    EXPECT_EQ(out.download()[7], 48.f);  // three k16 products of ones
  }
  const std::string msg = error_of([&] {
    pa::launch(a_registers_kernel, dim3(1), dim3(128), kWgShared, nullptr, 1, out.get());
  });
  EXPECT_TRUE(contains_text(msg, "emulator wgmma check: wgmma_mma_async_rs<fp16> m64n8k16"));
  EXPECT_TRUE(contains_text(msg, "changed A's registers since the wgmma at " + wg_course_line(kRsReadLine) +
                                     " read them, with no wgmma_fence() in between"));
}

// ---- .sync.aligned: a warpgroup whose threads pass different descriptors (mode 1), a block
// too small for a warpgroup (mode 2), a warp that skips the wgmma (mode 3: a deadlock). -----
constexpr int kAlignedLine = __LINE__ + 12;
__global__ void unaligned_kernel(int mode) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  const WgTiles s = wg_tiles(smem);
  wg_fill(s, 1.f, 1.f);
  pa::fence_proxy_async();
  __syncthreads();
  pa::WgmmaAcc<8> acc;
  for (int i = 0; i < 4; ++i) acc.d[i] = 0.f;
  pa::wgmma_fence();
  const uint64_t db = mode == 1 && threadIdx.x >= 64 ? pa::wgmma_descriptor_advance(wg_desc(s.b), 32) : wg_desc(s.b);
  if (mode != 3 || threadIdx.x < 96)
    pa::wgmma_mma_async<pa::half>(acc, wg_desc(s.a), db);
  pa::wgmma_commit_group();
  pa::wgmma_wait_group<0>(acc);
}

TEST(HopperWgmmaHazards, AWarpgroupThatDoesNotIssueTogetherIsNamed) {
  const std::string msg1 = error_of([] { pa::launch(unaligned_kernel, dim3(1), dim3(128), kWgShared, nullptr, 1); });
  EXPECT_TRUE(contains_text(msg1, "emulator wgmma check: wgmma is .sync.aligned: the 128 threads "
                                  "of warpgroup 0 issue the same one, with the same shape and "
                                  "descriptors. This thread called wgmma_mma_async<fp16> m64n8k16"));
  EXPECT_TRUE(contains_text(msg1, ", the first of its warpgroup to arrive, wgmma_mma_async<fp16>"));
  EXPECT_TRUE(contains_text(msg1, wg_course_line(kAlignedLine)));
  const std::string msg2 = error_of([] { pa::launch(unaligned_kernel, dim3(1), dim3(64), kWgShared, nullptr, 2); });
  EXPECT_TRUE(contains_text(msg2, "a wgmma is issued by a warpgroup, 4 warps (128 threads) "
                                  "starting at a warp index divisible by 4; this thread is in "
                                  "warpgroup 0 (threads 0-127), but the block has 64 threads"));
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    const std::string msg3 = error_of([] { pa::launch(unaligned_kernel, dim3(1), dim3(128), kWgShared, nullptr, 3); });
    EXPECT_TRUE(contains_text(msg3, "deadlock in block (0,0,0): no thread can move.")) << order;
    EXPECT_TRUE(contains_text(msg3, "threads 0-95 wait in wgmma_mma_async at " + wg_course_line(kAlignedLine)));
    EXPECT_TRUE(contains_text(msg3, "warpgroup 0: 96 of its 128 threads arrived at the "
                                    "wgmma_mma_async at " + wg_course_line(kAlignedLine) +
                                    "; threads 96-127 have not (wgmma is .sync.aligned"));
  }
}

// ---- A wgmma that reads a TMA destination before the barrier phase its bytes complete on.
constexpr int kEarlyWgmmaLine = __LINE__ + 20;
constexpr int kEarlyTmaLine = __LINE__ + 13;
__global__ void early_wgmma_kernel(const __grid_constant__ pa::TensorMap map_a,
                                   const __grid_constant__ pa::TensorMap map_b, bool wait, float* out) {
  PA_DYNAMIC_SHARED(unsigned char, smem);
  const WgTiles s = wg_tiles(smem);
  if (threadIdx.x == 0) {
    pa::mbarrier_init(s.bar, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    pa::mbarrier_arrive_expect_tx(s.bar, 2048 + 256);
    pa::tma_load_2d(s.a, map_a, 0, 0, s.bar);
    pa::tma_load_2d(s.b, map_b, 0, 0, s.bar);
  }
  if (wait) pa::mbarrier_wait_parity(s.bar, 0);
  pa::WgmmaAcc<8> acc;
  for (int i = 0; i < 4; ++i) acc.d[i] = 0.f;
  pa::wgmma_fence();
  pa::wgmma_mma_async<pa::half>(acc, wg_desc(s.a), wg_desc(s.b));
  pa::wgmma_commit_group();
  pa::wgmma_wait_group<0>(acc);
  if (!wait) pa::mbarrier_wait_parity(s.bar, 0);
  out[threadIdx.x] = acc.d[0];
}

TEST(HopperWgmmaHazards, AWgmmaBeforeItsTmaPhaseIsCaught) {
  std::vector<pa::half> ones(64 * 16, pa::from_float<pa::half>(1.f));
  pa::DeviceBuffer<pa::half> da(ones), db(std::vector<pa::half>(ones.begin(), ones.begin() + 8 * 16));
  auto map = [](const pa::half* g, int rows) {
    pa::TensorMapSpec spec;
    spec.dtype = pa::TmaDtype::F16;
    spec.global = g;
    spec.dims[0] = 16, spec.dims[1] = uint64_t(rows);
    spec.strides[0] = 32;
    spec.box[0] = 16, spec.box[1] = uint32_t(rows);
    spec.swizzle = pa::TmaSwizzle::B32;
    return pa::encode_tensor_map(spec);
  };
  const pa::TensorMap ma = map(da.get(), 64), mb = map(db.get(), 8);
  pa::DeviceBuffer<float> out(128);
  EXPECT_EQ(error_of([&] { pa::launch(early_wgmma_kernel, dim3(1), dim3(128), kWgShared, nullptr, ma, mb, true, out.get()); }),
            "(no error)");
  EXPECT_EQ(out.download()[9], 16.f);
  const std::string msg = error_of([&] {
    pa::launch(early_wgmma_kernel, dim3(1), dim3(128), kWgShared, nullptr, ma, mb, false, out.get());
  });
#if defined(PA_EMU_CHECK)
  EXPECT_TRUE(contains_text(msg, "emulator TMA check: wgmma_mma_async<fp16> m64n8k16"));
  EXPECT_TRUE(contains_text(msg, "at " + wg_course_line(kEarlyWgmmaLine) +
                                     " reads B from shared memory that the tma_load issued at " +
                                     wg_course_line(kEarlyTmaLine) +
                                     " by thread 0 has not landed in yet: its bytes complete on "
                                     "the mbarrier at shared 0x0d00"));
  EXPECT_TRUE(contains_text(msg, "in its phase 0 (parity 0). Wait for that phase"));
#else
  EXPECT_EQ(msg, "(no error)");
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    pa::launch(early_wgmma_kernel, dim3(1), dim3(128), kWgShared, nullptr, ma, mb, false, out.get());
    const std::vector<float> h = out.download();
    for (int t = 0; t < 128; ++t) ASSERT_TRUE(std::isnan(h[size_t(t)])) << order << " thread " << t;
  }
#endif
}

}  // namespace
