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

namespace {

using pa::test::contains_text;
using pa::test::error_of;

std::string file_line(int line) { return "test_hopper_hazards.cu:" + std::to_string(line); }

struct ScheduleScope {
  explicit ScheduleScope(const char* order) { emu::set_schedule(order); }
  ~ScheduleScope() { emu::set_schedule(nullptr); }
};
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

// ---- A generic-proxy write read by a TMA store without fence.proxy.async (checked mode). --
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

TEST(HopperHazards, AStoreOfUnfencedWritesIsNamedInCheckedMode) {
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
  // Not visible in plain mode: the emulator's two proxies are one memory.
  EXPECT_EQ(msg, "(no error)");
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

}  // namespace
