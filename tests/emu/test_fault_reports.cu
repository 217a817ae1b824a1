// What a student sees when a kernel faults: these tests run a test program with a planted
// out-of-bounds kernel (fault_demo.cu) as `make test-chapter-N` would, and read its output.
//   checked mode: the access fails its own test (the launch throws the memcheck report),
//                 the next test runs, and GoogleTest's summary counts both;
//   plain mode:   the process dies, and says which command finds the access.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "../common/compare.h"  // pa::test::contains_text

namespace {

using pa::test::contains_text;

struct Outcome {
  std::string output;
  int status = -1;  // as waitpid gives it
};

Outcome run(const std::string& command) {
  Outcome r;
  FILE* p = popen(("exec " + command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  r.status = pclose(p);
  return r;
}

const std::string kDemo = PA_EMU_FAULT_DEMO;

// The demo's source line marked `tag`, as reports print it: "fault_demo.cu:17".
std::string demo_line(const std::string& tag) {
  std::ifstream in(PA_EMU_FAULT_DEMO_SOURCE);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(tag) != std::string::npos) return "fault_demo.cu:" + std::to_string(n);
  return "(" + tag + " not found in fault_demo.cu)";
}

// The demo under another name, as a chapter's test program (the name says the chapter).
std::string demo_named(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/pa-emu-fault-demo-" +
                          std::to_string(getpid());
  const std::string path = dir + "/" + name;
  run("sh -c \"mkdir -p '" + dir + "' && cp '" + kDemo + "' '" + path + "'\"");
  return path;
}

const char* kCrash = " --gtest_also_run_disabled_tests --gtest_filter=FaultDemo.DISABLED_";

#if defined(PA_EMU_CHECK)

TEST(FaultReports, AnOutOfBoundsAccessFailsItsTestAndTheNextTestRuns) {
  const Outcome r = run(kDemo + " --gtest_brief=1");
  const std::string& out = r.output;
  ASSERT_TRUE(WIFEXITED(r.status)) << "the demo died instead of failing a test:\n" << out;
  EXPECT_NE(WEXITSTATUS(r.status), 0) << out;
  // Test A fails, naming the buffer, the distance, the thread and the line.
  EXPECT_TRUE(contains_text(out, "emulator memcheck: out-of-bounds access to global memory: "
                                 "0 bytes past the end of a 256-byte device allocation"));
  EXPECT_TRUE(contains_text(out, "in kernel read_past_end_kernel"));
  EXPECT_TRUE(contains_text(out, "thread (31,0,0)"));
  EXPECT_TRUE(contains_text(out, demo_line("(FAULT_DEMO_LINE)")));
  EXPECT_TRUE(contains_text(out, "[  FAILED  ] FaultDemo.A_ReadsPastTheEnd"));
  // Test B runs after it and passes; the summary counts both.
  EXPECT_EQ(out.find("[  FAILED  ] FaultDemo.B_RunsAfterIt"), std::string::npos) << out;
  EXPECT_TRUE(contains_text(out, "[==========] 2 tests from 1 test suite ran."));
  EXPECT_TRUE(contains_text(out, "[  PASSED  ] 1 test."));
  // One report for the launch, though four blocks' thread 31 each read past the end.
  size_t reports = 0;
  for (size_t at = 0; (at = out.find("emulator memcheck:", at)) != std::string::npos; ++at)
    ++reports;
  EXPECT_EQ(reports, 1u) << out;
}

TEST(FaultReports, AWildPointerInAKernelFailsItsTestToo) {
  const Outcome r = run(kDemo + kCrash + "CrashesInAKernel --gtest_brief=1");
  ASSERT_TRUE(WIFEXITED(r.status)) << r.output;
  EXPECT_TRUE(contains_text(r.output, "emulator memcheck: invalid access at address 0x14 "
                                      "(in no buffer)"));
  EXPECT_TRUE(contains_text(r.output, "thread (5,0,0)"));
  EXPECT_TRUE(contains_text(r.output, "[  PASSED  ] 0 tests."));
  EXPECT_EQ(r.output.find("emulator memcheck", r.output.find("emulator memcheck") + 1),
            std::string::npos)
      << r.output;  // eight blocks faulted; the launch says it once
}

TEST(FaultReports, ACrashInHostCodeStillEndsTheProgram) {
  const Outcome r = run(demo_named("test_ch07_chapter") + kCrash + "CrashesInHostCode");
  EXPECT_TRUE(WIFSIGNALED(r.status) || (WIFEXITED(r.status) && WEXITSTATUS(r.status) != 0))
      << r.output;
  EXPECT_TRUE(contains_text(r.output, "(outside any kernel)"));
  // Checked mode is what it would advise: nothing to advise here.
  EXPECT_EQ(r.output.find("make check-"), std::string::npos) << r.output;
}

#else  // plain mode

TEST(FaultReports, APlainCrashInAKernelGivesTheCheckedCommand) {
  // Not a chapter's program: the command's general form.
  const Outcome r = run(kDemo + kCrash + "CrashesInAKernel");
  EXPECT_TRUE(WIFSIGNALED(r.status)) << r.output;
  EXPECT_TRUE(contains_text(r.output, "in kernel write_through_null_kernel"));
  EXPECT_TRUE(contains_text(r.output, "thread (5,0,0)"));
  EXPECT_TRUE(contains_text(r.output, "make check-chapter-N (N: the chapter whose tests crashed)"));
  // A write just past a buffer would have failed the launch instead (test_redzone.cu).
  EXPECT_TRUE(contains_text(r.output, "writes just outside a buffer (within 4 KiB\n  of its ends) "
                                      "when the launch ends, naming the buffer: this access went farther"));
  // Eight blocks fault, on every worker at once: one of them reports.
  size_t reports = 0;
  for (size_t at = 0; (at = r.output.find("emulator: segmentation fault", at)) != std::string::npos;
       ++at)
    ++reports;
  EXPECT_EQ(reports, 1u) << r.output;
}

TEST(FaultReports, APlainCrashOutsideKernelsNamesBothCausesAndTheChaptersCommand) {
  const Outcome chapter = run(demo_named("test_ch07_chapter") + kCrash + "CrashesInHostCode");
  EXPECT_TRUE(WIFSIGNALED(chapter.status)) << chapter.output;
  EXPECT_TRUE(contains_text(chapter.output, "(outside any kernel)"));
  EXPECT_TRUE(contains_text(chapter.output, "host code crashed"));
  EXPECT_TRUE(contains_text(chapter.output, "a kernel that ran earlier wrote out of bounds"));
  EXPECT_TRUE(contains_text(chapter.output, "but a write farther away corrupts memory\n"));
  EXPECT_TRUE(contains_text(chapter.output, "make check-chapter-7\n"));
  const Outcome solution = run(demo_named("test_ch03_solution") + kCrash + "CrashesInHostCode");
  EXPECT_TRUE(contains_text(solution.output, "make check-solution-3\n"));
}

#endif

}  // namespace
