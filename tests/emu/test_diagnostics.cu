// The emulator's diagnoses of broken kernels (emulator only: on a GPU these kernels
// hang or are undefined behaviour). Each planted bug must be caught, named with its
// file:line, and must not hang the program.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pa/device_buffer.h"
#include "pa/launch.h"

namespace {

// Runs a launch that must fail; returns the message of the pa::Error it throws.
template <typename F>
std::string launch_error(F launch) {
  try {
    launch();
  } catch (const pa::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "the launch did not fail";
  return "";
}

std::string line_of(int line) { return "test_diagnostics.cu:" + std::to_string(line); }

// ANCHOR: planted_race
// ---- A planted race: the partials buffer is reused without a barrier between the last
// read of the first reduction and the first write of the second. ------------------------
template <bool kWithBarrier>
__global__ void two_sums_kernel(const float* x, const float* y, float* out) {
  __shared__ float partial[8];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float sums[2];
  for (int round = 0; round < 2; ++round) {
    float v = (round == 0 ? x : y)[threadIdx.x];
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    // Every warp totals the partials itself (no broadcast needed).
    float total = 0.f;
    for (int w = 0; w < 8; ++w) total += partial[w];
    sums[round] = total;
    // The next round overwrites partial[]: every thread must have finished reading it.
    if (kWithBarrier) __syncthreads();
  }
  if (lane == 0) {  // every warp reports what it saw
    out[2 * warp] = sums[0];
    out[2 * warp + 1] = sums[1];
  }
}
// ANCHOR_END: planted_race

std::vector<float> run_two_sums(bool with_barrier, const char* order) {
  std::vector<float> x(256), y(256);
  for (int i = 0; i < 256; ++i) {
    x[i] = float(i % 7);
    y[i] = 100.f + float(i % 5);
  }
  pa::DeviceBuffer<float> dx(x), dy(y), out(16);
  emu::set_schedule(order);
  if (with_barrier)
    pa::launch(two_sums_kernel<true>, dim3(1), dim3(256), 0, nullptr, dx.get(), dy.get(),
               out.get());
  else
    pa::launch(two_sums_kernel<false>, dim3(1), dim3(256), 0, nullptr, dx.get(), dy.get(),
               out.get());
  emu::set_schedule(nullptr);
  return out.download();
}

const char* kOrders[] = {"forward", "reverse", "greedy", "random:1", "random:2", "random:3"};

#if !defined(PA_EMU_CHECK)  // checked mode names this race instead (test_checked_mode.cu)
TEST(Diagnostics, PlantedSharedMemoryRaceIsExposedBySomeScheduleOrder) {
  float want_x = 0, want_y = 0;
  for (int i = 0; i < 256; ++i) {
    want_x += float(i % 7);
    want_y += 100.f + float(i % 5);
  }
  std::string exposed_by;
  for (const char* order : kOrders) {
    std::vector<float> out = run_two_sums(false, order);
    bool wrong = false;
    for (int w = 0; w < 8; ++w) wrong |= out[2 * w] != want_x || out[2 * w + 1] != want_y;
    if (wrong) exposed_by += std::string(" ") + order;
  }
  EXPECT_FALSE(exposed_by.empty()) << "no schedule order exposed the missing barrier";
  std::printf("[ info     ] the missing barrier was exposed by:%s\n", exposed_by.c_str());
}
#endif

TEST(Diagnostics, TheFixedReductionPassesEveryScheduleOrder) {
  for (const char* order : kOrders) {
    std::vector<float> out = run_two_sums(true, order);
    float want_x = 0, want_y = 0;
    for (int i = 0; i < 256; ++i) {
      want_x += float(i % 7);
      want_y += 100.f + float(i % 5);
    }
    for (int w = 0; w < 8; ++w) {
      EXPECT_EQ(out[2 * w], want_x) << order << ", warp " << w;
      EXPECT_EQ(out[2 * w + 1], want_y) << order << ", warp " << w;
    }
  }
}

// ---- A barrier inside a branch that not every thread takes. ---------------------------
constexpr int kBranchBarrierA = __LINE__ + 4;
constexpr int kBranchBarrierB = __LINE__ + 6;
__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
    out[threadIdx.x] = 1;
  } else {
    __syncthreads();
    out[threadIdx.x] = 2;
  }
}

TEST(Diagnostics, DivergentBarrierIsReportedWithBothLines) {
  pa::DeviceBuffer<int> out(64);
  std::string msg = launch_error(
      [&] { pa::launch(divergent_barrier_kernel, dim3(2), dim3(64), 0, nullptr, out.get()); });
  EXPECT_NE(msg.find("__syncthreads reached at different places"), std::string::npos) << msg;
  EXPECT_NE(msg.find(line_of(kBranchBarrierA)), std::string::npos) << msg;
  EXPECT_NE(msg.find(line_of(kBranchBarrierB)), std::string::npos) << msg;
  EXPECT_NE(msg.find("threads 0-31"), std::string::npos) << msg;
}

// ---- Half a warp shuffles while the other half waits at the block barrier. -----------
constexpr int kDeadlockShfl = __LINE__ + 5;
constexpr int kDeadlockSync = __LINE__ + 6;
__global__ void deadlock_kernel(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x % 32 < 16) {
    v = __shfl_xor_sync(0xffffffffu, v, 16);
  }
  __syncthreads();
  out[threadIdx.x] = v;
}

TEST(Diagnostics, DeadlockIsReportedNotHung) {
  pa::DeviceBuffer<int> out(64);
  std::string msg = launch_error(
      [&] { pa::launch(deadlock_kernel, dim3(1), dim3(64), 0, nullptr, out.get()); });
  EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
  EXPECT_NE(msg.find(line_of(kDeadlockShfl)), std::string::npos) << msg;
  EXPECT_NE(msg.find(line_of(kDeadlockSync)), std::string::npos) << msg;
}

// ---- Lanes of one warp meet at a shuffle with overlapping but different masks. ---------
constexpr int kMismatchLine = __LINE__ + 4;
__global__ void mask_mismatch_kernel(int* out) {
  const int lane = threadIdx.x % 32;
  const unsigned mask = lane < 16 ? 0xffffffffu : 0xffff0000u;
  out[threadIdx.x] = __shfl_xor_sync(mask, lane, 1);
}

TEST(Diagnostics, ShuffleMaskMismatchIsReported) {
  pa::DeviceBuffer<int> out(32);
  // Forward order: lane 0 (full mask) arrives first, then lane 16 with half a mask. (In
  // reverse order the upper half completes alone and the error is "exited" instead.)
  emu::set_schedule("forward");
  std::string msg = launch_error(
      [&] { pa::launch(mask_mismatch_kernel, dim3(1), dim3(32), 0, nullptr, out.get()); });
  emu::set_schedule(nullptr);
  EXPECT_NE(msg.find("mask mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find(line_of(kMismatchLine)), std::string::npos) << msg;
}

__global__ void not_in_own_mask_kernel(int* out) {
  out[threadIdx.x] = __shfl_sync(0x1u, 5, 0);  // every lane but lane 0 is outside the mask
}

TEST(Diagnostics, LaneOutsideItsOwnMaskIsReported) {
  pa::DeviceBuffer<int> out(32);
  std::string msg = launch_error(
      [&] { pa::launch(not_in_own_mask_kernel, dim3(1), dim3(32), 0, nullptr, out.get()); });
  EXPECT_NE(msg.find("does not include the calling lane"), std::string::npos) << msg;
}

__global__ void early_exit_kernel(int* out) {
  if (threadIdx.x == 3) return;  // lane 3 leaves, but the others name it in their mask
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

TEST(Diagnostics, ShuffleWithAnExitedLaneIsReported) {
  pa::DeviceBuffer<int> out(32);
  std::string msg = launch_error(
      [&] { pa::launch(early_exit_kernel, dim3(1), dim3(32), 0, nullptr, out.get()); });
  EXPECT_NE(msg.find("exited"), std::string::npos) << msg;
}

// Threads that exit early leave the block barrier; the rest still meet.
__global__ void exit_then_barrier_kernel(int* out) {
  if (threadIdx.x >= 40) return;
  __shared__ int s[40];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = s[39 - threadIdx.x];
}

TEST(Diagnostics, ExitedThreadsLeaveTheBarrier) {
  pa::DeviceBuffer<int> out(40);
  pa::launch(exit_then_barrier_kernel, dim3(1), dim3(128), 0, nullptr, out.get());
  std::vector<int> h = out.download();
  for (int i = 0; i < 40; ++i) EXPECT_EQ(h[i], 39 - i);
}

// ---- Launch configuration and memory errors, like the GPU's. ---------------------------
__global__ void empty_kernel(int*) {}

TEST(Diagnostics, BadLaunchConfigurations) {
  pa::DeviceBuffer<int> out(1);
  EXPECT_NE(launch_error([&] {
              pa::launch(empty_kernel, dim3(1), dim3(2048), 0, nullptr, out.get());
            }).find("invalid block"),
            std::string::npos);
  EXPECT_NE(launch_error([&] {
              pa::launch(empty_kernel, dim3(0), dim3(32), 0, nullptr, out.get());
            }).find("invalid grid"),
            std::string::npos);
  // Over 48 KB of dynamic shared memory needs the opt-in attribute, as on the GPU.
  EXPECT_NE(launch_error([&] {
              pa::launch(empty_kernel, dim3(1), dim3(32), 64 * 1024, nullptr, out.get());
            }).find("cudaFuncSetAttribute"),
            std::string::npos);
  PA_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(empty_kernel),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
  pa::launch(empty_kernel, dim3(1), dim3(32), 64 * 1024, nullptr, out.get());
}

TEST(Diagnostics, AFailedLaunchDoesNotPoisonTheNextOne) {
  pa::DeviceBuffer<int> out(64);
  launch_error(
      [&] { pa::launch(divergent_barrier_kernel, dim3(1), dim3(64), 0, nullptr, out.get()); });
  pa::launch(exit_then_barrier_kernel, dim3(1), dim3(64), 0, nullptr, out.get());
  EXPECT_EQ(out.download()[0], 39);
}

TEST(Diagnostics, UnknownScheduleOrderIsAnError) {
  pa::DeviceBuffer<int> out(1);
  emu::set_schedule("sideways");
  std::string msg =
      launch_error([&] { pa::launch(empty_kernel, dim3(1), dim3(1), 0, nullptr, out.get()); });
  emu::set_schedule(nullptr);
  EXPECT_NE(msg.find("PA_EMU_SCHEDULE=sideways"), std::string::npos) << msg;
}

TEST(Diagnostics, MemcpyPastTheEndOfAnAllocationIsAnError) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 100), cudaSuccess);
  std::vector<char> host(200);
  cudaError_t e = cudaMemcpy(p, host.data(), 200, cudaMemcpyHostToDevice);
  EXPECT_EQ(e, cudaErrorInvalidValue);
  EXPECT_NE(std::string(cudaGetErrorString(e)).find("overruns its allocation of 100 bytes"),
            std::string::npos);
  EXPECT_EQ(cudaMemcpy(p, host.data(), 100, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // double free
  cudaGetLastError();
}

}  // namespace
