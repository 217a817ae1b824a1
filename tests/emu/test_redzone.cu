// A write just outside a device buffer (issue 60). The plain emulator keeps a redzone of
// 4 KiB before and after each allocation and looks at it when a launch ends: the launch
// fails, naming the kernel, the buffer, the bytes written and the argument that points to
// the buffer, instead of a heap corruption that aborts the program much later. Checked mode
// stops the write itself at the guard page after the buffer (a memcheck report with the
// line); where the two differ, each build checks its own report.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../common/compare.h"  // pa::test::error_of, contains_text
#include "pa/device_buffer.h"
#include "pa/launch.h"

namespace {

using pa::test::contains_text;
using pa::test::error_of;

// One thread writes `value` at out[index]; index == the buffer's size is one past its end.
__global__ void write_at_kernel(float* out, long index, float value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[index] = value;
}

// A correct kernel: each thread writes its own element.
__global__ void fill_kernel(float* out, int n, float value) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = value;
}

// The classic loop bound, one too far: in's redzone is copied into out's.
__global__ void copy_kernel(const float* in, float* out, int n) {
  if (threadIdx.x == 0)
    for (int i = 0; i <= n; ++i) out[i] = in[i];
}

// The pointers come in a struct; the loop's bound is one too far.
struct Views {
  const float* in;
  float* out;
};
__global__ void copy_views_kernel(Views v, int n) {
  if (threadIdx.x == 0)
    for (int i = 0; i <= n; ++i) v.out[i] = v.in[i % n];
}

// The pointers come from device memory: no argument points to the buffers written.
__global__ void write_through_table_kernel(float* const* table, int count, int index) {
  if (threadIdx.x == 0)
    for (int k = 0; k < count; ++k) table[k][index] = 1.f;
}

std::string write_at(float* out, long index) {
  return error_of(
      [&] { pa::launch(write_at_kernel, dim3(2), dim3(32), 0, nullptr, out, index, 1.f); });
}

// The report of a write 0..3 bytes past the end of a `bytes`-byte buffer by `kernel`, in
// either build: plain mode at the launch's end, checked mode at the write.
void expect_one_float_past_the_end(const std::string& msg, const std::string& kernel,
                                   size_t bytes) {
#if defined(PA_EMU_CHECK)
  EXPECT_TRUE(contains_text(msg,
                            "emulator memcheck: out-of-bounds access to global memory: 0 bytes "
                            "past the end of a " +
                                std::to_string(bytes) + "-byte device allocation"));
  EXPECT_TRUE(contains_text(msg, "in kernel " + kernel + ","));
#else
  EXPECT_TRUE(contains_text(msg, "emulator: kernel " + kernel + " wrote past the end of a " +
                                     std::to_string(bytes) +
                                     "-byte device allocation (cudaMalloc)\n"));
  EXPECT_TRUE(contains_text(
      msg, "  bytes " + std::to_string(bytes) + ".." + std::to_string(bytes + 3) +
               " of it were written: from 0 to 3 bytes past its end (4 bytes changed)\n"));
  EXPECT_TRUE(
      contains_text(msg,
                    "it cannot say which thread wrote, or at which line. Checked mode stops "
                    "the kernel at a\n  write past the end and names both: make check-chapter-N"));
#endif
}

TEST(Redzone, OneElementPastTheEndFailsTheLaunchNamingKernelBufferAndArgument) {
  pa::DeviceBuffer<float> out(64);
  const std::string msg = write_at(out.get(), 64);
  expect_one_float_past_the_end(msg, "write_at_kernel", 256);
#if !defined(PA_EMU_CHECK)
  EXPECT_TRUE(contains_text(msg,
                            "  its 1st argument (of 3, a float*) points to it (64 elements): the "
                            "kernel wrote its element 64\n"));
#endif
}

TEST(Redzone, ACorrectKernelPassesAndTheRedzoneIsRestoredAfterAReport) {
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), 64 * sizeof(float)), cudaSuccess);
  auto fill = [&] { pa::launch(fill_kernel, dim3(2), dim3(32), 0, nullptr, out, 64, 2.f); };
  EXPECT_EQ(error_of(fill), "(no error)");
  expect_one_float_past_the_end(write_at(out, 64), "write_at_kernel", 256);
  // Reported once: the next launches pass, and the same write is named again.
  EXPECT_EQ(error_of(fill), "(no error)");
  EXPECT_EQ(error_of(fill), "(no error)");
  expect_one_float_past_the_end(write_at(out, 64), "write_at_kernel", 256);
  EXPECT_EQ(error_of(fill), "(no error)");
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

TEST(Redzone, ACopyOnePastTheEndOfTwoBuffersIsSeen) {
  // Each allocation's redzone has its own byte: the copied one differs from the one under it.
  pa::DeviceBuffer<float> in(64), out(64);
  const std::string msg = error_of(
      [&] { pa::launch(copy_kernel, dim3(1), dim3(32), 0, nullptr, in.get(), out.get(), 64); });
  expect_one_float_past_the_end(msg, "copy_kernel", 256);
#if !defined(PA_EMU_CHECK)
  EXPECT_TRUE(contains_text(msg,
                            "  its 2nd argument (of 3, a float*) points to it (64 elements): the "
                            "kernel wrote its element 64\n"));
#endif
}

TEST(Redzone, APointerInsideAStructArgumentIsNamed) {
  pa::DeviceBuffer<float> in(64), out(64);
  const std::string msg = error_of([&] {
    pa::launch(copy_views_kernel, dim3(1), dim3(32), 0, nullptr, Views{in.get(), out.get()}, 64);
  });
  expect_one_float_past_the_end(msg, "copy_views_kernel", 256);
#if !defined(PA_EMU_CHECK)
  EXPECT_TRUE(contains_text(msg,
                            "  its 1st argument (of 2, a Views) holds a pointer to it, at byte 8 "
                            "of the argument\n"));
#endif
}

TEST(Redzone, APointerReadFromMemoryIsSaidToBeNoArgument) {
  std::vector<pa::DeviceBuffer<float>> targets;
  std::vector<float*> pointers;
  for (int k = 0; k < 6; ++k) pointers.push_back(targets.emplace_back(64).get());
  pa::DeviceBuffer<float*> table(pointers);
  auto write_past = [&](int count) {
    return error_of([&] {
      pa::launch(write_through_table_kernel, dim3(1), dim3(32), 0, nullptr, table.get(), count, 64);
    });
  };
  const std::string msg = write_past(1);
  expect_one_float_past_the_end(msg, "write_through_table_kernel", 256);
#if !defined(PA_EMU_CHECK)
  EXPECT_TRUE(
      contains_text(msg,
                    "  none of the kernel's 3 arguments points into it: the kernel read the "
                    "pointer from\n  memory, or computed it from another buffer's\n"));
  // Six buffers at once: four are named, the others counted.
  const std::string six = write_past(6);
  size_t named = 0;
  for (size_t at = 0; (at = six.find("emulator: kernel", at)) != std::string::npos; ++at) ++named;
  EXPECT_EQ(named, 4u) << six;
  EXPECT_TRUE(contains_text(six, "  (and 2 more redzones of device allocations were written)\n"));
#endif
}

TEST(Redzone, AnArgumentInsideTheBufferCountsItsElementsFromItsOwnStart) {
  pa::DeviceBuffer<float> buf(64);
  const std::string msg = write_at(buf.get() + 32, 32);  // a view of the last 32 floats
  expect_one_float_past_the_end(msg, "write_at_kernel", 256);
#if !defined(PA_EMU_CHECK)
  EXPECT_TRUE(
      contains_text(msg,
                    "  its 1st argument (of 3, a float*) points to its byte 128 (32 elements "
                    "before the end): the kernel wrote its element 32\n"));
#endif
}

#if !defined(PA_EMU_CHECK)
// Checked mode has no guard page before a buffer, and rounds a buffer's end up to 16 bytes
// before its guard page: these tests are the plain redzone's alone.

TEST(Redzone, AWriteBeforeTheStartIsNamedToo) {
  pa::DeviceBuffer<float> out(64);
  const std::string msg = write_at(out.get(), -1);
  EXPECT_TRUE(
      contains_text(msg,
                    "emulator: kernel write_at_kernel wrote before the start of a 256-byte "
                    "device allocation (cudaMalloc)\n"
                    "  bytes -4..-1 of it were written: from 4 to 1 bytes before its start "
                    "(4 bytes changed)\n"
                    "  its 1st argument (of 3, a float*) points to it (64 elements): the kernel "
                    "wrote its element -1\n"));
  // Checked mode would not stop this write: the report does not send the student there.
  EXPECT_EQ(msg.find("make check-"), std::string::npos) << msg;
  // The redzone's first byte, 4 KiB before the start.
  EXPECT_TRUE(contains_text(write_at(out.get(), -1024), "bytes -4096..-4093 of it were written"));
}

TEST(Redzone, EveryByteOfTheRedzoneAfterTheEndIsWatched) {
  pa::DeviceBuffer<float> odd(10);  // 40 bytes: the allocation's rounding is redzone too
  EXPECT_TRUE(contains_text(write_at(odd.get(), 10),
                            "wrote past the end of a 40-byte device allocation "
                            "(cudaMalloc)\n  bytes 40..43 of it were written"));
  pa::DeviceBuffer<float> out(64);  // the last float of the 4 KiB after the end
  EXPECT_TRUE(
      contains_text(write_at(out.get(), 64 + 1023),
                    "bytes 4348..4351 of it were written: from 4092 to 4095 bytes past its end"));
}

TEST(Redzone, AWriteFarPastABufferIntoTheNextOnesRedzoneNamesBoth) {
  // Two buffers a and b, b's redzone right after a's in memory: among 32 buffers of one size
  // the allocator puts some next to each other.
  std::vector<pa::DeviceBuffer<float>> buffers(32);
  for (auto& x : buffers) x = pa::DeviceBuffer<float>(64);
  float* a = nullptr;
  long gap = 0;  // from a to b, in bytes
  for (auto& x : buffers)
    for (auto& y : buffers) {
      const long d = long(reinterpret_cast<char*>(y.get()) - reinterpret_cast<char*>(x.get()));
      if (d >= 4096 + 256 + 4096 && d <= 4096 + 256 + 4096 + 1024) a = x.get(), gap = d;
    }
  ASSERT_NE(a, nullptr) << "no two of 32 buffers lie next to each other in memory";
  const long index = (gap - 4) / 4;  // a[index] is b[-1]
  const std::string msg = write_at(a, index);
  EXPECT_TRUE(contains_text(msg, "wrote before the start of a 256-byte device allocation"));
  EXPECT_TRUE(contains_text(msg, "  none of the kernel's 3 arguments points into it"));
  EXPECT_TRUE(contains_text(
      msg, "  or, if the kernel meant the 256-byte device allocation just before it in memory, it "
           "wrote\n  past that one's end and redzone: its bytes " +
               std::to_string(gap - 4) + ".." + std::to_string(gap - 1) + ", from " +
               std::to_string(gap - 4 - 256) + " to " + std::to_string(gap - 1 - 256) +
               " bytes past its end\n"
               "  its 1st argument (of 3, a float*) points to it (64 elements): the kernel wrote "
               "its element " + std::to_string(index) + "\n"));
}

#endif

}  // namespace
