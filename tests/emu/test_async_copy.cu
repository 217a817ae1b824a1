// Asynchronous work on the emulator: cp.async copies stay in flight until the wait that
// covers their group, and __threadfence is what orders blocks (checked mode). Each test
// plants the bug a student writes (a wait one group short, a missing barrier after the
// wait, a missing fence) and proves it shows: as garbage on the plain emulator, under every
// schedule order, and named with its lines in checked mode. The right code stays silent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../common/compare.h"  // error_of, contains_text
#include "pa/async_copy.h"
#include "pa/device_buffer.h"
#include "pa/launch.h"
#include "schedules.h"

namespace {

using pa::test::error_of;

#if defined(PA_BACKEND_CPU)  // what only the emulator's tests use
using pa::test::contains_text;
std::string file_line(int line) { return "test_async_copy.cu:" + std::to_string(line); }

constexpr unsigned kGarbage = 0xFFFFFFFFu;  // the emulator's in-flight bytes, as a word
#endif

using pa::test::ScheduleScope;  // restores the default order when a test ends
const char* const kOrders[] = {"forward", "reverse", "greedy", "random:1", "random:2", "random:3"};

// ---- One thread, two groups: what its destination holds before, between and after the
// waits. seen[0]: before any wait; seen[1], seen[2]: group 0's and group 1's word after
// cp_async_wait<1>; seen[3]: group 1's after cp_async_wait<0>.
#if defined(PA_BACKEND_CPU)
constexpr int kEarlyReadLine = __LINE__ + 9;
constexpr int kIssueLine = __LINE__ + 4;
constexpr int kCommitLine = __LINE__ + 4;
__global__ void two_groups_kernel(const unsigned* in, unsigned* seen) {
  PA_DYNAMIC_SHARED(unsigned, s);  // two 16-byte chunks
  pa::cp_async16(s, in);
  pa::cp_async_commit();
  pa::cp_async16(s + 4, in + 4);
  pa::cp_async_commit();
  seen[0] = s[0];
  pa::cp_async_wait<1>();
  seen[1] = s[0];
  seen[2] = s[4];
  pa::cp_async_wait<0>();
  seen[3] = s[4];
}

TEST(AsyncCopy, AGroupLandsAtTheWaitThatCoversIt) {
  pa::DeviceBuffer<unsigned> in(std::vector<unsigned>{11, 12, 13, 14, 21, 22, 23, 24}), seen(4);
  const std::string msg = error_of([&] {
    pa::launch(two_groups_kernel, dim3(1), dim3(1), 32, nullptr, in.get(), seen.get());
  });
#if defined(PA_EMU_CHECK)
  // The read before any wait is named: its line, the copy's issue and commit, and that the
  // thread has not waited since.
  EXPECT_TRUE(contains_text(msg, "emulator cp.async check: read of 4 bytes of dynamic shared memory "
                                 "before the cp.async copy into it has landed"));
  EXPECT_TRUE(contains_text(msg, file_line(kEarlyReadLine)));
  EXPECT_TRUE(contains_text(msg, "issued at tests/emu/" + file_line(kIssueLine) +
                                     " by this thread, in its commit group 0 (committed at tests/emu/" +
                                     file_line(kCommitLine) + ")"));
  EXPECT_TRUE(contains_text(msg, "has not waited since it committed group 0"));
#else
  EXPECT_EQ(msg, "(no error)");
  EXPECT_EQ(seen.download(), (std::vector<unsigned>{kGarbage, 11, kGarbage, 21}));
#endif
}
#endif  // PA_BACKEND_CPU

// ---- A ring of kStages stages, as chapters 9-11 keep KV in flight: a warp copies tile
// t + kStages - 1 while it reads tile t. Each lane copies 16 bytes of a 128-float tile, and reads its neighbour's (so the barrier after the wait matters too). Tile t
// has landed when at most kStages - 2 groups are in flight: kWait = kStages - 2 is right,
// kStages - 1 is a wait one group short.
constexpr int kStages = 3;
constexpr int kRingWaitLine = __LINE__ + 15;
constexpr int kRingReadLine = __LINE__ + 18;
constexpr int kRingIssueLine = __LINE__ + 6;
template <int kWait, bool kBarrier>
__global__ void ring_sum_kernel(const float* in, float* out, int tiles) {
  PA_DYNAMIC_SHARED(float, ring);  // kStages tiles of 128 floats
  const int lane = threadIdx.x;
  auto issue = [&](int t) {
    if (t < tiles) pa::cp_async16(ring + (t % kStages) * 128 + 4 * lane, in + t * 128 + 4 * lane);
    pa::cp_async_commit();
  };
  for (int t = 0; t < kStages - 1; ++t) issue(t);
  const int piece = 4 * ((lane + 1) % 32);  // the neighbour's 16 bytes
  float sum = 0.f;
  for (int t = 0; t < tiles; ++t) {
    pa::cp_async_wait<kWait>();
    if (kBarrier) __syncwarp();  // the neighbour's copy is visible; tile t - 1's stage is free
    issue(t + kStages - 1);
    const float* tile = ring + (t % kStages) * 128;
    for (int i = 0; i < 4; ++i) sum += tile[piece + i];
  }
  pa::cp_async_wait<0>();
  out[lane] = sum;
}

constexpr int kTiles = 5;
std::vector<float> ring_input() {
  std::vector<float> in(kTiles * 128);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(i % 97) * 0.25f;
  return in;
}
std::vector<float> ring_expected(const std::vector<float>& in) {
  std::vector<float> want(32, 0.f);
  for (int lane = 0; lane < 32; ++lane)
    for (int t = 0; t < kTiles; ++t)
      for (int i = 0; i < 4; ++i) want[lane] += in[t * 128 + 4 * ((lane + 1) % 32) + i];
  return want;
}

template <int kWait, bool kBarrier>
std::string run_ring(pa::DeviceBuffer<float>& in, pa::DeviceBuffer<float>& out) {
  return error_of([&] {
    pa::launch(ring_sum_kernel<kWait, kBarrier>, dim3(1), dim3(32), kStages * 128 * sizeof(float),
               nullptr, in.get(), out.get(), kTiles);
  });
}

TEST(AsyncCopy, ARingWithTheRightWaitIsExactInEveryOrder) {
  const std::vector<float> host = ring_input();
  pa::DeviceBuffer<float> in(host), out(32);
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    out.fill_bytes(0);
    EXPECT_EQ((run_ring<kStages - 2, true>(in, out)), "(no error)") << order;
    EXPECT_EQ(out.download(), ring_expected(host)) << order;
  }
}

#if defined(PA_BACKEND_CPU)
TEST(AsyncCopy, AWaitOneGroupShortIsCaughtInEveryOrder) {
  const std::vector<float> host = ring_input();
  pa::DeviceBuffer<float> in(host), out(32);
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    out.fill_bytes(0);
    const std::string msg = run_ring<kStages - 1, true>(in, out);
#if defined(PA_EMU_CHECK)
    // The read, the group it needed, and the wait that should have covered it.
    EXPECT_TRUE(contains_text(msg, "emulator cp.async check: read of 4 bytes of dynamic shared memory"))
        << order;
    EXPECT_TRUE(contains_text(msg, "at tests/emu/" + file_line(kRingReadLine))) << order;
    EXPECT_TRUE(contains_text(msg, "The copy: issued at tests/emu/" + file_line(kRingIssueLine)))
        << order;
    EXPECT_TRUE(contains_text(msg, "in its commit group 0"));
    EXPECT_TRUE(contains_text(msg, "last wait, the cp_async_wait<2> at tests/emu/" +
                                       file_line(kRingWaitLine) +
                                       ", left its newest 2 groups in flight (groups 0-1 of 0-1)"))
        << order;
    EXPECT_TRUE(contains_text(msg, "that wait leaves at most 1 in flight: cp_async_wait<1>")) << order;
#else
    // Plain mode: every tile is read before it lands, so every sum is garbage.
    EXPECT_EQ(msg, "(no error)") << order;
    for (float v : out.download()) EXPECT_TRUE(std::isnan(v)) << order << ": got " << v;
#endif
  }
}

TEST(AsyncCopy, ANeighboursCopyNeedsABarrierAfterTheWaitInEveryOrder) {
  // Lanes wait for their own copies but skip the __syncwarp: a lane reads its neighbour's
  // stage before the neighbour's copy landed. Forward and reverse: every lane waits (and
  // lets the others run) before its copies land, so the first to resume reads the others'
  // garbage; greedy: lane 0 runs ahead before the others have even issued; random: some lane
  // comes first.
  const std::vector<float> host = ring_input();
  pa::DeviceBuffer<float> in(host), out(32);
  for (const char* order : kOrders) {
    ScheduleScope scope(order);
    out.fill_bytes(0);
    const std::string msg = run_ring<kStages - 2, false>(in, out);
#if defined(PA_EMU_CHECK)
    // Named as a read of a copy in flight, or (greedy: before the neighbour even issued it)
    // of bytes no thread has written yet, or as the race of the landing with the read.
    EXPECT_TRUE(contains_text(msg, "emulator cp.async check:") ||
                contains_text(msg, "emulator initcheck:") ||
                contains_text(msg, "emulator racecheck: data race on dynamic shared memory"))
        << order << "\n" << msg;
    EXPECT_TRUE(contains_text(msg, file_line(kRingReadLine))) << order;
#else
    EXPECT_EQ(msg, "(no error)") << order;
    int garbage = 0;
    for (float v : out.download()) garbage += std::isnan(v);
    EXPECT_GT(garbage, 0) << order << ": no lane read its neighbour's copy before it landed";
#endif
  }
}

constexpr int kMisalignedLine = __LINE__ + 3;
__global__ void misaligned_copy_kernel(const float* in) {
  PA_DYNAMIC_SHARED(float, s);
  pa::cp_async16(s, in + 1);  // 4 bytes into the source: not 16-byte aligned
  pa::cp_async_commit();
  pa::cp_async_wait<0>();
}

TEST(AsyncCopy, AMisalignedCopyIsNamedAtItsLine) {
  pa::DeviceBuffer<float> in(8);
  const std::string msg =
      error_of([&] { pa::launch(misaligned_copy_kernel, dim3(1), dim3(1), 16, nullptr, in.get()); });
  EXPECT_TRUE(contains_text(msg, "cp_async16 at "));
  EXPECT_TRUE(contains_text(msg, file_line(kMisalignedLine)));
  EXPECT_TRUE(contains_text(msg, "not both 16-byte aligned"));
}
#endif  // PA_BACKEND_CPU

// ---- Fences: a ticket orders blocks only with a fence on each side of the atomic. Every
// thread writes its part and fences, then __syncthreads, then thread 0 takes the ticket (as
// chapters 9-11 do); the last block fences again before it reads the others' parts.
constexpr int kPartWriteLine = __LINE__ + 4;
constexpr int kPartReadLine = __LINE__ + 11;
template <bool kWriterFence, bool kReaderFence>
__global__ void ticket_sum_kernel(int* part, unsigned* ticket, int* total) {
  part[blockIdx.x * blockDim.x + threadIdx.x] = int(blockIdx.x + threadIdx.x);
  if (kWriterFence) __threadfence();
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  if (!__syncthreads_or(last)) return;
  if (kReaderFence) __threadfence();
  int sum = 0;
  for (unsigned b = 0; b < gridDim.x; ++b) sum += part[b * blockDim.x + threadIdx.x];
  total[threadIdx.x] = sum;
  if (threadIdx.x == 0) *ticket = 0;  // every block has counted: ready for the next launch
}

template <bool kWriterFence, bool kReaderFence>
std::string run_tickets(std::vector<int>* totals) {
  constexpr int kBlocks = 16, kThreads = 64;
  pa::DeviceBuffer<int> part(kBlocks * kThreads), total(kThreads);
  pa::DeviceBuffer<unsigned> ticket(1);
  ticket.fill_bytes(0);
  const std::string msg = error_of([&] {
    pa::launch(ticket_sum_kernel<kWriterFence, kReaderFence>, dim3(kBlocks), dim3(kThreads), 0,
               nullptr, part.get(), ticket.get(), total.get());
  });
  *totals = total.download();
  return msg;
}

TEST(AsyncCopy, FencesOnBothSidesOfATicketOrderBlocks) {
  std::vector<int> totals;
  EXPECT_EQ((run_tickets<true, true>(&totals)), "(no error)");
  for (int t = 0; t < 64; ++t) EXPECT_EQ(totals[t], 16 * t + 15 * 16 / 2) << "thread " << t;
}

#if defined(PA_EMU_CHECK)
TEST(AsyncCopy, AWritersMissingFenceIsARaceWithBothLines) {
  std::vector<int> totals;
  const std::string msg = run_tickets<false, true>(&totals);
  EXPECT_TRUE(contains_text(msg, "emulator racecheck: data race on global memory"));
  EXPECT_TRUE(contains_text(msg, file_line(kPartWriteLine)));
  EXPECT_TRUE(contains_text(msg, file_line(kPartReadLine)));
  EXPECT_TRUE(contains_text(msg, "__threadfence() between its writes and its atomic"));
}

TEST(AsyncCopy, AReadersMissingFenceIsARaceWithBothLines) {
  std::vector<int> totals;
  const std::string msg = run_tickets<true, false>(&totals);
  EXPECT_TRUE(contains_text(msg, "emulator racecheck: data race on global memory"));
  EXPECT_TRUE(contains_text(msg, file_line(kPartWriteLine)));
  EXPECT_TRUE(contains_text(msg, file_line(kPartReadLine)));
  EXPECT_TRUE(contains_text(msg, "one between\n  its atomic and its reads"));
}
#endif

}  // namespace
