// Chapter 3: the paged cache's memory bill for chapter 1's trace, against the reference.
#include <gtest/gtest.h>

#include "golden.h"
#include "trace_case.h"
#include "pa/ch01_dense.h"
#include "pa/ch03_block_table.h"

namespace {

TEST(PagedMemory, MatchesReferenceForEachBlockSize) {
  const pa::test::GoldenCase c(pa::test::golden_dir("ch03") + "/trace_paged");
  const pa::KVConfig cfg = pa::test::kv_config_of(c);
  const int64_t budget = c.param_int("budget_bytes");
  const auto trace = pa::synthetic_trace();
  const auto bss = c.get<int>("block_sizes");
  for (size_t i = 0; i < bss.size(); ++i) {
    SCOPED_TRACE("block_size " + std::to_string(bss[i]));
    const auto rep = pa::ch03::paged_memory_report(trace, cfg, bss[i], budget);
    EXPECT_EQ(rep.reserved_bytes, c.get<int64_t>("reserved_bytes")[i]);
    EXPECT_EQ(rep.used_bytes, c.get<int64_t>("used_bytes")[i]);
    EXPECT_NEAR(rep.waste_fraction, c.get<double>("waste_fraction")[i], 1e-12);
    EXPECT_EQ(rep.paged_seqs_in_budget, c.get<int64_t>("paged_seqs_in_budget")[i]);
  }
  const auto dense = pa::ch01::dense_memory_report(trace, cfg, budget);
  EXPECT_EQ(dense.reserved_bytes, c.get<int64_t>("dense_reserved_bytes")[0]);
  EXPECT_EQ(dense.dense_seqs_in_budget, c.get<int64_t>("dense_seqs_in_budget")[0]);
}

TEST(PagedMemory, HandExample) {
  pa::KVConfig cfg{1, 1, 1, 1, 64};  // 2 bytes per token
  // 5 tokens -> 1 block of 8, 9 tokens -> 2 blocks: 24 slots reserved, 14 used.
  const auto rep = pa::ch03::paged_memory_report({{3, 2}, {4, 5}}, cfg, 8, 96);
  EXPECT_EQ(rep.reserved_bytes, 48);
  EXPECT_EQ(rep.used_bytes, 28);
  EXPECT_DOUBLE_EQ(rep.waste_fraction, 1.0 - 28.0 / 48.0);
  EXPECT_EQ(rep.paged_seqs_in_budget, 4);  // 96 bytes / (1.5 blocks * 8 slots * 2 bytes)
}

// Rounded down (a budget that is not a multiple), and exact in integers for a budget so
// large that budget * n passes 2^63 (and a double, 2^53).
TEST(PagedMemory, CountRoundsDownAndNeverOverflows) {
  pa::KVConfig cfg{1, 1, 1, 1, 64};                          // 2 bytes per token
  const std::vector<pa::Request> trace = {{3, 2}, {4, 5}};  // 3 blocks of 8 for 2 requests
  for (const int64_t budget : {int64_t(99), int64_t(1) << 62}) {
    SCOPED_TRACE("budget " + std::to_string(budget) + " bytes");
    const auto rep = pa::ch03::paged_memory_report(trace, cfg, 8, budget);
    // 99 * 2 / (3 * 8 * 2) = 4.125; 2^62 * 2 / 48, worked in Python.
    EXPECT_EQ(rep.paged_seqs_in_budget, budget == 99 ? 4 : int64_t(192153584101141162));
  }
}

}  // namespace
