// Your exercise file. (Generated from solutions/03-block-tables/paged_memory_report.cpp; instructors regenerate with tools/make_skeletons.py.)
// Chapter 3, exercise 4 of 4: the paged cache's memory bill for chapter 1's trace.
#include "pa/ch03_block_table.h"

namespace pa::ch03 {

PagedMemoryReport paged_memory_report(const std::vector<Request>& trace, const KVConfig& cfg,
                                      int block_size, int64_t budget_bytes) {
  PA_REQUIRE(!trace.empty(), "paged_memory_report: the trace is empty");
  PA_REQUIRE(block_size > 0, "paged_memory_report: block_size must be positive");
  PA_REQUIRE(budget_bytes > 0, "paged_memory_report: budget_bytes must be positive");
  const int64_t per_token = cfg.bytes_per_token();
  const int64_t n = int64_t(trace.size());
  // TODO(ch03): return the PagedMemoryReport of include/pa/ch03_block_table.h, each field as
  //   its comment there defines it (t = r.total() of each request, bs = block_size,
  //   bytes_per_token = per_token, n = the number of requests). Integer fields are exact and
  //   rounded down, and nothing overflows, even for a huge budget_bytes.
  PA_TODO("ch03");
}

}  // namespace pa::ch03
