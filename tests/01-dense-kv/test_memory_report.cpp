// Chapter 1: the memory a dense cache wastes on the built-in trace, against the reference.
#include <gtest/gtest.h>

#include "golden.h"
#include "trace_case.h"
#include "pa/ch01_dense.h"

namespace {

TEST(MemoryReport, TraceIsBitExactWithTheReference) {
  const pa::test::GoldenCase c(pa::test::golden_dir("ch01") + "/trace_default");
  const auto trace = pa::synthetic_trace(c.param_int("seed"), int(c.param_int("num_requests")));
  const auto prompts = c.get<int64_t>("prompt_lens"), outputs = c.get<int64_t>("output_lens");
  ASSERT_EQ(trace.size(), prompts.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    ASSERT_EQ(trace[i].prompt_len, prompts[i]) << "request " << i;
    ASSERT_EQ(trace[i].output_len, outputs[i]) << "request " << i;
  }
}

TEST(MemoryReport, MatchesReference) {
  const pa::test::GoldenCase c(pa::test::golden_dir("ch01") + "/trace_default");
  const pa::KVConfig cfg = pa::test::kv_config_of(c);
  const auto rep = pa::ch01::dense_memory_report(pa::synthetic_trace(), cfg,
                                                 c.param_int("budget_bytes"));
  EXPECT_EQ(rep.reserved_bytes, c.get<int64_t>("reserved_bytes")[0]);
  EXPECT_EQ(rep.used_bytes, c.get<int64_t>("used_bytes")[0]);
  EXPECT_NEAR(rep.waste_fraction, c.get<double>("waste_fraction")[0], 1e-12);
  EXPECT_EQ(rep.dense_seqs_in_budget, c.get<int64_t>("dense_seqs_in_budget")[0]);
  EXPECT_EQ(rep.ideal_seqs_in_budget, c.get<int64_t>("ideal_seqs_in_budget")[0]);
}

TEST(MemoryReport, HandExample) {
  pa::KVConfig cfg{1, 1, 1, 1, 10};  // 2 bytes per token
  const auto rep = pa::ch01::dense_memory_report({{3, 2}, {1, 0}}, cfg, 100);
  EXPECT_EQ(rep.reserved_bytes, 40);
  EXPECT_EQ(rep.used_bytes, 12);
  EXPECT_DOUBLE_EQ(rep.waste_fraction, 0.7);
  EXPECT_EQ(rep.dense_seqs_in_budget, 5);
  EXPECT_EQ(rep.ideal_seqs_in_budget, 16);  // 100 / (3 tokens * 2 bytes)
}

// The counts are rounded down (a budget that is not a multiple), and exact in integers for
// a budget so large that budget * n passes 2^63 (and a double, 2^53).
TEST(MemoryReport, CountsRoundDownAndNeverOverflow) {
  pa::KVConfig cfg{1, 1, 1, 1, 10};  // 2 bytes per token; a dense sequence reserves 20 bytes
  const std::vector<pa::Request> trace = {{3, 2}, {1, 0}};  // 6 tokens, mean 3
  for (const int64_t budget : {int64_t(99), int64_t(1) << 62}) {
    SCOPED_TRACE("budget " + std::to_string(budget) + " bytes");
    const auto rep = pa::ch01::dense_memory_report(trace, cfg, budget);
    // 99 / 20 = 4.95 and 99 / (3 * 2) = 16.5; 2^62 / 20 and 2^62 * 2 / 12, worked in Python.
    EXPECT_EQ(rep.dense_seqs_in_budget, budget == 99 ? 4 : int64_t(230584300921369395));
    EXPECT_EQ(rep.ideal_seqs_in_budget, budget == 99 ? 16 : int64_t(768614336404564650));
  }
}

TEST(MemoryReport, RequestLongerThanTheContextIsAnError) {
  pa::KVConfig cfg;
  EXPECT_THROW(pa::ch01::dense_memory_report({{2000, 100}}, cfg, 1 << 30), pa::Error);
  EXPECT_THROW(pa::ch01::dense_memory_report({}, cfg, 1 << 30), pa::Error);
}

}  // namespace
