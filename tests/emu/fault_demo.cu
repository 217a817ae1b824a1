// A test program with a planted out-of-bounds kernel, run by test_fault_reports.cu as a
// student's test binary would be run. In checked mode, test A's launch fails with the
// memcheck report (and so test A fails), test B still runs and passes, and GoogleTest's
// summary counts both. The DISABLED_ tests crash on purpose, for the plain-mode reports
// (run them with --gtest_also_run_disabled_tests and a filter).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "pa/device_buffer.h"
#include "pa/launch.h"

namespace {

__global__ void read_past_end_kernel(const float* in, float* out, int n) {
  out[threadIdx.x] = in[threadIdx.x + n - 31];  // thread 31 reads in[n]  (FAULT_DEMO_LINE)
}

__global__ void double_kernel(const float* in, float* out) {
  out[threadIdx.x] = 2.f * in[threadIdx.x];
}

__global__ void write_through_null_kernel(float* out) {
  if (threadIdx.x == 5) out[threadIdx.x] = 1.f;
}

TEST(FaultDemo, A_ReadsPastTheEnd) {
  pa::DeviceBuffer<float> in(64), out(32);
  pa::launch(read_past_end_kernel, dim3(4), dim3(32), 0, nullptr, in.get(), out.get(), 64);
}

TEST(FaultDemo, B_RunsAfterIt) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = float(i);
  pa::DeviceBuffer<float> in(x), out(32);
  pa::launch(double_kernel, dim3(1), dim3(32), 0, nullptr, in.get(), out.get());
  const std::vector<float> got = out.download();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], 2.f * float(i)) << i;
}

TEST(FaultDemo, DISABLED_CrashesInHostCode) {
  pa::DeviceBuffer<float> in(32), out(32);  // a kernel runs first, as in a test
  pa::launch(double_kernel, dim3(1), dim3(32), 0, nullptr, in.get(), out.get());
  volatile uintptr_t bad = 16;  // then host code crashes: outside any kernel
  *reinterpret_cast<volatile int*>(bad) = 1;
}

TEST(FaultDemo, DISABLED_CrashesInAKernel) {
  pa::launch(write_through_null_kernel, dim3(8), dim3(32), 0, nullptr,  // every block faults
             static_cast<float*>(nullptr));
}

}  // namespace
