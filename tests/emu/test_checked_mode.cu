// The emulator as a CPU compute-sanitizer. Call sites of warp primitives are checked in
// every build; races and out-of-bounds accesses are named in checked mode
// (cmake -DPA_EMU_CHECK=ON, `make check-chapter-N`), and these tests prove each report
// names what a student needs: the memory, both lines, both threads, the barrier interval.
// Correct kernels (barriers, __syncwarp, shuffles, atomics) must stay silent.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../common/compare.h"  // pa::test::error_of
#include "pa/device_buffer.h"
#include "pa/launch.h"

namespace {

std::string file_line(int line) { return "test_checked_mode.cu:" + std::to_string(line); }

using pa::test::contains_text;
using pa::test::error_of;

// ---- Divergent shuffle: some lanes take a branch with a shuffle in it; the others meet
// them at the next __syncwarp, which has the same mask. Without the call-site check the
// two primitives would "match" and the warp would compute garbage.
constexpr int kShuffleLine = __LINE__ + 4;
constexpr int kSyncwarpLine = __LINE__ + 4;
__global__ void divergent_shuffle_kernel(int* out, int valid) {
  int v = threadIdx.x;
  if (int(threadIdx.x) < valid) v += __shfl_xor_sync(0xffffffffu, v, 1);
  __syncwarp();
  out[threadIdx.x] = v;
}

TEST(CheckedMode, ShuffleInADivergentBranchIsNamedWithBothLines) {
  pa::DeviceBuffer<int> out(32);
  const std::string msg = error_of(
      [&] { pa::launch(divergent_shuffle_kernel, dim3(1), dim3(32), 0, nullptr, out.get(), 20); });
  EXPECT_NE(msg.find("meet in different warp primitives"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file_line(kShuffleLine)), std::string::npos) << msg;
  EXPECT_NE(msg.find(file_line(kSyncwarpLine)), std::string::npos) << msg;
  // Every lane taking the branch is fine.
  EXPECT_EQ(error_of([&] {
              pa::launch(divergent_shuffle_kernel, dim3(1), dim3(32), 0, nullptr, out.get(), 32);
            }),
            "(no error)");
}

#if defined(PA_EMU_CHECK)

// ---- A missing barrier on shared memory: warp 0 reads what other warps write.
constexpr int kSharedWriteLine = __LINE__ + 6;
constexpr int kSharedReadLine = __LINE__ + 7;
template <bool kBarrier>
__global__ void partial_sums_kernel(float* out) {
  __shared__ float partial[4];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = float(warp + 1);
  if (kBarrier) __syncthreads();
  if (threadIdx.x == 0) out[0] = partial[0] + partial[1] + partial[2] + partial[3];
}

TEST(CheckedMode, MissingBarrierIsARaceOnSharedMemoryWithBothLines) {
  pa::DeviceBuffer<float> out(1);
  const std::string msg = error_of(
      [&] { pa::launch(partial_sums_kernel<false>, dim3(1), dim3(128), 0, nullptr, out.get()); });
  EXPECT_NE(msg.find("emulator racecheck: data race on __shared__ memory"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(file_line(kSharedWriteLine)), std::string::npos) << msg;
  EXPECT_NE(msg.find(file_line(kSharedReadLine)), std::string::npos) << msg;
  EXPECT_NE(msg.find("block (0,0,0), thread ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("before the block's first __syncthreads"), std::string::npos) << msg;
  EXPECT_EQ(error_of([&] {
              pa::launch(partial_sums_kernel<true>, dim3(1), dim3(128), 0, nullptr, out.get());
            }),
            "(no error)");
}

// ---- Lanes of one warp exchange through shared memory: __syncwarp orders them.
template <bool kSyncwarp>
__global__ void warp_rotate_kernel(int* out) {
  __shared__ int slot[32];
  const int lane = threadIdx.x;
  slot[lane] = lane * 10;
  if (kSyncwarp) __syncwarp();
  out[lane] = slot[(lane + 1) % 32];
}

TEST(CheckedMode, LanesOfAWarpNeedSyncwarp) {
  pa::DeviceBuffer<int> out(32);
  const std::string msg = error_of(
      [&] { pa::launch(warp_rotate_kernel<false>, dim3(1), dim3(32), 0, nullptr, out.get()); });
  EXPECT_NE(msg.find("data race on __shared__ memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("__syncwarp()"), std::string::npos) << msg;
  EXPECT_EQ(error_of([&] {
              pa::launch(warp_rotate_kernel<true>, dim3(1), dim3(32), 0, nullptr, out.get());
            }),
            "(no error)");
}

// ---- Each warp's lane 0 writes its slot; warp 0 reads all four without a __syncthreads.
// In forward order the first race TSan sees is inside warp 0 (lane 0 writes slot[0], lane
// 1 reads it), yet the fix is a __syncthreads: the report must not offer __syncwarp alone.
template <bool kBarrier>
__global__ void warp_zero_reads_every_slot_kernel(float* out) {
  __shared__ float slot[4];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) slot[warp] = float(warp + 1);
  if (kBarrier) __syncthreads();
  if (warp == 0) out[lane] = slot[0] + slot[1] + slot[2] + slot[3];
}

TEST(CheckedMode, ARaceInsideOneWarpNamesBothBarriers) {
  pa::DeviceBuffer<float> out(32);
  emu::set_schedule("forward");
  const std::string msg = error_of([&] {
    pa::launch(warp_zero_reads_every_slot_kernel<false>, dim3(1), dim3(128), 0, nullptr, out.get());
  });
  emu::set_schedule(nullptr);
  EXPECT_TRUE(contains_text(msg, "data race on __shared__ memory"));
  EXPECT_TRUE(contains_text(msg, "Both threads are in warp 0"));
  EXPECT_TRUE(contains_text(msg, "__syncthreads()"));
  EXPECT_TRUE(contains_text(msg, "if other warps do too"));
  // In every order, a __syncthreads() is among the fixes offered.
  EXPECT_TRUE(contains_text(error_of([&] {
                              pa::launch(warp_zero_reads_every_slot_kernel<false>, dim3(1), dim3(128),
                                         0, nullptr, out.get());
                            }),
                            "__syncthreads()"));
  EXPECT_EQ(error_of([&] {
              pa::launch(warp_zero_reads_every_slot_kernel<true>, dim3(1), dim3(128), 0, nullptr,
                         out.get());
            }),
            "(no error)");
}

// ---- Blocks writing one global slot race; a ticket counter (an atomic with a fence on
// each side: test_async_copy.cu) orders them.
constexpr int kGlobalWriteLine = __LINE__ + 2;
__global__ void every_block_writes_kernel(int* out) {
  if (threadIdx.x == 0) out[0] = int(blockIdx.x);
}

__global__ void last_block_sums_kernel(int* partial, unsigned* ticket, int* total) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = int(blockIdx.x) + 1;
    __threadfence();
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    __threadfence();  // the other blocks' partials, fenced before their atomics, are visible
    int sum = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) sum += partial[b];
    *total = sum;
  }
}

TEST(CheckedMode, BlocksWritingOneGlobalSlotRace) {
  pa::DeviceBuffer<int> out(1);
  const std::string msg = error_of(
      [&] { pa::launch(every_block_writes_kernel, dim3(8), dim3(32), 0, nullptr, out.get()); });
  EXPECT_NE(msg.find("data race on global memory (byte 0 of a 4-byte device allocation)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(file_line(kGlobalWriteLine)), std::string::npos) << msg;
  EXPECT_NE(msg.find("different blocks"), std::string::npos) << msg;
}

TEST(CheckedMode, ATicketCounterOrdersBlocks) {
  pa::DeviceBuffer<int> partial(16), total(1);
  pa::DeviceBuffer<unsigned> ticket(1);
  ticket.fill_bytes(0);
  EXPECT_EQ(error_of([&] {
              pa::launch(last_block_sums_kernel, dim3(16), dim3(64), 0, nullptr, partial.get(),
                         ticket.get(), total.get());
            }),
            "(no error)");
  EXPECT_EQ(total.download()[0], 16 * 17 / 2);
}

// ---- initcheck: a read of shared memory that no thread of the block wrote names the
// array and the element (PA_SHARED_REGION, or a static array's own name), the line that
// reads, and the run of elements around it that was never written.
constexpr int kHalfWrittenReadLine = __LINE__ + 6;
__global__ void half_written_kernel(float* out) {
  __shared__ float q_s[128];
  PA_SHARED_REGION(q_s);
  if (threadIdx.x < 64) q_s[threadIdx.x] = 1.f;  // the loop bound is wrong: half of q_s
  __syncthreads();
  out[blockIdx.x * 128 + threadIdx.x] = q_s[threadIdx.x];
}

TEST(CheckedMode, InitcheckNamesTheArrayTheElementAndWhatWasNeverWritten) {
  pa::DeviceBuffer<float> out(256);
  const std::string msg = error_of(
      [&] { pa::launch(half_written_kernel, dim3(2), dim3(128), 0, nullptr, out.get()); });
  EXPECT_TRUE(contains_text(msg, "emulator initcheck: read of 4 bytes of __shared__ memory that "
                                 "no thread of this block has written: q_s["));
  EXPECT_TRUE(contains_text(msg, file_line(kHalfWrittenReadLine)));
  EXPECT_TRUE(contains_text(msg, "Never written in this block: q_s[64] to q_s[127] (the rest of "
                                 "q_s (128 elements) was written)"));
  EXPECT_TRUE(contains_text(msg, "No thread of this block wrote it, before or after the read"));
  // 64 threads of each of 2 blocks read at that line: one report, with a count.
  EXPECT_TRUE(contains_text(msg, "more reads like it at this line"));
  EXPECT_EQ(msg.find("emulator initcheck", msg.find("emulator initcheck") + 1), std::string::npos)
      << msg;
}

// The slot is written, but after the read (no barrier between): not "never written".
template <bool kBarrier>
__global__ void read_before_write_kernel(float* out) {
  __shared__ float slot[4];
  PA_SHARED_REGION(slot);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) slot[warp] = float(warp);
  if (kBarrier) __syncthreads();
  if (threadIdx.x == 0) out[0] = slot[3];
}

TEST(CheckedMode, InitcheckTellsAReadBeforeTheWriteFromAMissingWrite) {
  pa::DeviceBuffer<float> out(1);
  emu::set_schedule("forward");  // thread 0 reads slot[3] before warp 3's lane 0 writes it
  const std::string msg = error_of(
      [&] { pa::launch(read_before_write_kernel<false>, dim3(1), dim3(128), 0, nullptr, out.get()); });
  emu::set_schedule(nullptr);
  EXPECT_TRUE(contains_text(msg, "has written: slot[3]"));
  EXPECT_TRUE(contains_text(msg, "Not yet written when read: slot[1] to slot[3] (the rest of slot "
                                 "(4 elements) had been written)"));
  EXPECT_TRUE(contains_text(msg, "A thread of this block wrote it later"));
  EXPECT_EQ(msg.find("Never written"), std::string::npos) << msg;
  EXPECT_EQ(error_of([&] {
              pa::launch(read_before_write_kernel<true>, dim3(1), dim3(128), 0, nullptr, out.get());
            }),
            "(no error)");
}

// A two-dimensional array: warp 2 skips its row.
__global__ void skipped_row_kernel(float* out) {
  __shared__ float p_s[4][16];
  PA_SHARED_REGION(p_s);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (warp != 2 && lane < 16) p_s[warp][lane] = float(lane);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = p_s[2][3];
}

TEST(CheckedMode, InitcheckNamesAnElementOfATwoDimensionalArray) {
  pa::DeviceBuffer<float> out(1);
  const std::string msg = error_of(
      [&] { pa::launch(skipped_row_kernel, dim3(1), dim3(128), 0, nullptr, out.get()); });
  EXPECT_TRUE(contains_text(msg, "has written: p_s[2][3]"));
  EXPECT_TRUE(contains_text(msg, "Never written in this block: p_s[2][0] to p_s[2][15]"));
}

// Not named with PA_SHARED_REGION: a static array still goes by its own name, in bytes.
__global__ void unnamed_slots_kernel(float* out) {
  __shared__ float s_m[4];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0 && warp != 2) s_m[warp] = 1.f;  // an idle warp skips its slot
  __syncthreads();
  if (threadIdx.x == 0) out[0] = s_m[0] + s_m[1] + s_m[2] + s_m[3];
}

TEST(CheckedMode, InitcheckNamesAStaticArrayByItsName) {
  pa::DeviceBuffer<float> out(1);
  const std::string msg = error_of(
      [&] { pa::launch(unnamed_slots_kernel, dim3(1), dim3(128), 0, nullptr, out.get()); });
  EXPECT_TRUE(contains_text(msg, "has written: s_m, bytes 8-11 of its 16"));
  EXPECT_TRUE(contains_text(msg, "Never written in this block: s_m bytes 8-11 (the rest of s_m "
                                 "(16 bytes) was written)"));
}

// One dynamic buffer carved into two arrays, named with PA_SHARED_REGION(ptr, count).
template <bool kNamed>
__global__ void carved_kernel(float* out) {
  PA_DYNAMIC_SHARED(float, smem);
  float* q_s = smem;       // 64 floats
  float* p_s = smem + 64;  // 32 floats
  if (kNamed) {
    PA_SHARED_REGION(q_s, 64);
    PA_SHARED_REGION(p_s, 32);
  }
  q_s[threadIdx.x] = 1.f;
  q_s[threadIdx.x + 32] = 1.f;
  if (threadIdx.x < 8) p_s[threadIdx.x] = 2.f;
  __syncthreads();
  out[threadIdx.x] = p_s[threadIdx.x];
}

TEST(CheckedMode, InitcheckNamesTheRegionsOfADynamicBuffer) {
  pa::DeviceBuffer<float> out(32);
  const size_t bytes = 96 * sizeof(float);
  const std::string named = error_of(
      [&] { pa::launch(carved_kernel<true>, dim3(1), dim3(32), bytes, nullptr, out.get()); });
  EXPECT_TRUE(contains_text(named, "of dynamic shared memory that no thread of this block has "
                                   "written: p_s["));
  EXPECT_TRUE(contains_text(named, "Never written in this block: p_s[8] to p_s[31] (the rest of "
                                   "p_s (32 elements) was written)"));
  const std::string unnamed = error_of(
      [&] { pa::launch(carved_kernel<false>, dim3(1), dim3(32), bytes, nullptr, out.get()); });
  EXPECT_TRUE(contains_text(unnamed, "has written: byte"));
  EXPECT_TRUE(contains_text(unnamed, "bytes 288-383 (the rest of the block's dynamic shared "
                                     "memory (384 bytes) was written)"));
  EXPECT_TRUE(contains_text(unnamed, "PA_SHARED_REGION(ptr, count)"));
}

// ---- Reading one element past the end of a device allocation, or of dynamic shared
// memory, faults at once: the launch fails with a report that names the buffer, the
// distance and the line (the access did not happen), and the program goes on.
constexpr int kOverrunLine = __LINE__ + 2;
__global__ void read_past_end_kernel(const float* in, float* out, int n) {
  out[threadIdx.x] = in[threadIdx.x + n - 31];  // thread 31 reads in[n]
}

TEST(CheckedMode, ReadPastTheEndOfADeviceAllocationIsNamed) {
  pa::DeviceBuffer<float> in(64), out(32);
  const std::string msg = error_of([&] {
    pa::launch(read_past_end_kernel, dim3(1), dim3(32), 0, nullptr, in.get(), out.get(), 64);
  });
  EXPECT_TRUE(contains_text(msg, "emulator memcheck: out-of-bounds access to global memory: 0 "
                                 "bytes past the end of a 256-byte device allocation"));
  EXPECT_TRUE(contains_text(msg, "thread (31,0,0)"));
  EXPECT_TRUE(contains_text(msg, file_line(kOverrunLine)));
  // The launch failed; the next one runs (in the same block slots and fiber stacks).
  EXPECT_EQ(error_of([&] {
              pa::launch(read_past_end_kernel, dim3(1), dim3(32), 0, nullptr, in.get(),
                         out.get(), 63);
            }),
            "(no error)");
}

constexpr int kSharedOverrunLine = __LINE__ + 3;
__global__ void shared_overrun_kernel(float* out) {
  PA_DYNAMIC_SHARED(float, tile);
  tile[threadIdx.x + 1] = 1.f;  // thread 31 writes tile[32], one past 32 floats
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}

TEST(CheckedMode, WritePastDynamicSharedMemoryIsNamed) {
  pa::DeviceBuffer<float> out(32);
  for (int round = 0; round < 2; ++round) {  // the same report twice: nothing left behind
    const std::string msg = error_of([&] {
      pa::launch(shared_overrun_kernel, dim3(3), dim3(32), 32 * sizeof(float), nullptr,
                 out.get());
    });
    EXPECT_TRUE(contains_text(msg, "emulator memcheck: out-of-bounds access to dynamic shared "
                                   "memory: byte 128 of a block's 128 bytes, 0 bytes past the end"));
    EXPECT_TRUE(contains_text(msg, file_line(kSharedOverrunLine)));
    EXPECT_TRUE(contains_text(msg, "The access did not happen"));
  }
}

// A fiber stack overflow (deep recursion in a kernel) is a memcheck finding, not a crash.
__device__ int recurse(int depth) {
  volatile char pad[4096];
  pad[0] = char(depth);
  return depth > 0 ? recurse(depth - 1) + pad[0] : 0;
}
__global__ void deep_kernel(int* out, int depth) { out[threadIdx.x] = recurse(depth); }

TEST(CheckedMode, AFiberStackOverflowIsNamed) {
  pa::DeviceBuffer<int> out(32);
  out.fill_bytes(0);
  const std::string msg = error_of(
      [&] { pa::launch(deep_kernel, dim3(1), dim3(32), 0, nullptr, out.get(), 1 << 20); });
  EXPECT_TRUE(contains_text(msg, "emulator memcheck: fiber stack overflow"));
  EXPECT_TRUE(contains_text(msg, "PA_EMU_STACK_KB"));
  EXPECT_EQ(error_of([&] { pa::launch(deep_kernel, dim3(1), dim3(32), 0, nullptr, out.get(), 2); }),
            "(no error)");
}

#endif  // PA_EMU_CHECK

}  // namespace
