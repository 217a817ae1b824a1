// The host of chapter 13's planted bugs (hopper_pipeline.cuh), right: its output equals the
// host's bit for bit in every schedule order. Each mutant in tests/mutants/13-* breaks one
// line of the pipeline; this test must then fail, and the emulator's report name the bug.
#include <gtest/gtest.h>

#include "hopper_pipeline.cuh"
#include "schedules.h"

namespace {

namespace hp = pa::hopper_pipeline;

TEST(HopperPipeline, WarpSpecialisedGemmMatchesTheHostExactly) {
  const hp::Inputs in = hp::make_inputs();
  const std::vector<float> want = hp::expected(in);
  pa::test::for_each_schedule([&] {
    const std::string diff = hp::first_difference(hp::run(in), want);
    EXPECT_EQ(diff, "");
  });
}

// The host's answer is not trivially right: the tail of K (columns 192-223 of the last
// k-block) and the scales both change it.
TEST(HopperPipeline, TheExpectedOutputSeesTheTailAndTheScales) {
  hp::Inputs in = hp::make_inputs();
  const std::vector<float> want = hp::expected(in);
  in.a[size_t(hp::kK) - 1] = pa::from_float<pa::half>(5.f);  // A[0][223]
  EXPECT_NE(hp::expected(in)[0], want[0]);
  in = hp::make_inputs();
  in.scale[3] = 8.f;
  EXPECT_NE(hp::first_difference(hp::expected(in), want), "");
}

}  // namespace
