// The wording of checked mode's race reports, from pieces of ThreadSanitizer's log written
// here (so these run in every build, and say exactly what a student reads):
// - two lanes of one warp: name both fixes, __syncwarp() and __syncthreads(), since the
//   report cannot tell whether other warps use the memory too;
// - many races that differ only in threads or addresses: one report, with a count.
#include <gtest/gtest.h>

#include <string>

#include "../../emu/src/race_check.h"  // emu::race::report_from_log
#include "../common/compare.h"         // pa::test::contains_text

namespace {

using pa::test::contains_text;

// One TSan race report: `writer` wrote at `write_line`, `reader` read earlier at `read_line`
// of solutions/04-paged-attention-v1/attend_block.cuh, at `address`.
std::string race(unsigned long address, int writer, int write_line, int reader, int read_line) {
  auto thread = [](int id, int t) {
    return "  Thread T" + std::to_string(id) + " 'block (0,0,0), thread (" + std::to_string(t) +
           ",0,0), warp " + std::to_string(t / 32) + " lane " + std::to_string(t % 32) +
           "' (tid=0, running) created by thread T2 at:\n"
           "    #0 emu::Block::start_fibers(std::function<void ()> const&, unsigned long) <null> "
           "(test+0x655bf)\n\n";
  };
  char addr[32];
  std::snprintf(addr, sizeof addr, "0x%lx", address);
  const std::string file = "/work/main/solutions/04-paged-attention-v1/attend_block.cuh:";
  return "==================\n"
         "WARNING: ThreadSanitizer: data race (pid=4242)\n"
         "  Write of size 4 at " + std::string(addr) + " by thread T" + std::to_string(100 + writer) +
         ":\n"
         "    #0 merge_warps<float, 128> " + file + std::to_string(write_line) + " (test+0x5398e)\n"
         "\n"
         "  Previous read of size 4 at " + std::string(addr) + " by thread T" +
         std::to_string(100 + reader) + ":\n"
         "    #0 merge_warps<float, 128> " + file + std::to_string(read_line) + " (test+0x539ff)\n"
         "\n"
         "  Location is TLS of thread T2.\n\n" +
         thread(100 + writer, writer) + thread(100 + reader, reader) +
         "SUMMARY: ThreadSanitizer: data race " + file + std::to_string(write_line) +
         " in merge_warps<float, 128>\n"
         "==================\n";
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

// 04-missing-barrier's first pair: lane 0 of warp 0 writes s_m[0], lane 31 reads it. The
// fix is a __syncthreads (warp 0 reads every warp's slot), which the pair cannot show.
TEST(ReportWording, TwoLanesOfOneWarpNameBothBarriers) {
  const std::string msg = emu::race::report_from_log(race(0x7f0000001000, 0, 126, 31, 129),
                                                      "paged_attention_v1_kernel", false);
  EXPECT_TRUE(contains_text(msg, "emulator racecheck: data race on __shared__ memory"));
  EXPECT_TRUE(contains_text(msg, "attend_block.cuh:126"));
  EXPECT_TRUE(contains_text(msg, "attend_block.cuh:129"));
  EXPECT_TRUE(contains_text(msg, "Both threads are in warp 0"));
  EXPECT_TRUE(contains_text(msg, "__syncwarp() if only lanes of this warp"));
  EXPECT_TRUE(contains_text(msg, "__syncthreads()"));
  EXPECT_TRUE(contains_text(msg, "if other warps do too"));
}

TEST(ReportWording, ThreadsOfTwoWarpsNameTheBlockBarrier) {
  const std::string msg = emu::race::report_from_log(race(0x7f0000001000, 32, 126, 0, 129),
                                                      "paged_attention_v1_kernel", false);
  EXPECT_TRUE(contains_text(msg, "Put a __syncthreads() between them"));
  EXPECT_EQ(msg.find("__syncwarp"), std::string::npos) << msg;
}

// Issue 26: one wrong plan printed the same message 92 times before anything else.
TEST(ReportWording, NinetyTwoRacesAtTheSameLinesAreOneReportWithACount) {
  std::string log;
  for (int i = 0; i < 92; ++i) log += race(0x7f0000001000 + 4 * i, 32 * (i % 4), 126, i % 32, 129);
  const std::string msg = emu::race::report_from_log(log, "k", false);
  EXPECT_EQ(count(msg, "emulator racecheck:"), 1u) << msg;
  EXPECT_TRUE(contains_text(msg, "(and 91 more like it: the same two lines"));
  // Races at other lines are still told apart.
  const std::string two =
      emu::race::report_from_log(log + race(0x7f0000002000, 32, 57, 0, 59), "k", false);
  EXPECT_EQ(count(two, "emulator racecheck:"), 2u) << two;
  EXPECT_TRUE(contains_text(two, "attend_block.cuh:57"));
}

TEST(ReportWording, OtherThreadSanitizerReportsAreEachShownOnce) {
  std::string log;
  for (int i = 0; i < 92; ++i) {
    char addr[32];
    std::snprintf(addr, sizeof addr, "0x%x", 0x5000 + 16 * i);
    log += "==================\n"
           "WARNING: ThreadSanitizer: signal-unsafe call inside of a signal (pid=" +
           std::to_string(4000 + i) + ")\n"
           "    #0 malloc <null> (libtsan.so.2+" + addr + ")\n"
           "    #1 plan_items /work/main/solutions/10-varlen-attention/plan.cpp:40 (test+" +
           addr + ")\n\n"
           "SUMMARY: ThreadSanitizer: signal-unsafe call inside of a signal\n"
           "==================\n";
  }
  const std::string msg = emu::race::report_from_log(log, "k", false);
  EXPECT_EQ(count(msg, "WARNING: ThreadSanitizer: signal-unsafe call"), 1u) << msg;
  EXPECT_TRUE(contains_text(msg, "(and 91 more like it)"));
}

}  // namespace
