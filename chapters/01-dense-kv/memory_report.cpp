// Your exercise file. (Generated from solutions/01-dense-kv/memory_report.cpp; instructors regenerate with tools/make_skeletons.py.)
// Chapter 1, exercise 3 of 3: how much of a dense cache a real workload wastes.
#include "pa/ch01_dense.h"
#include "pa/check.h"

namespace pa::ch01 {

MemoryReport dense_memory_report(const std::vector<Request>& trace, const KVConfig& cfg,
                                 int64_t budget_bytes) {
  PA_REQUIRE(!trace.empty(), "dense_memory_report: the trace is empty");
  PA_REQUIRE(budget_bytes > 0, "dense_memory_report: budget_bytes must be positive");
  for (const Request& r : trace)
    PA_REQUIRE(r.prompt_len >= 0 && r.output_len >= 0 && r.total() <= cfg.max_seq_len,
               "dense_memory_report: a request of " << r.total()
                                                     << " tokens does not fit max_seq_len "
                                                     << cfg.max_seq_len);
  const int64_t per_token = cfg.bytes_per_token();
  const int64_t n = static_cast<int64_t>(trace.size());
  // TODO(ch01): return the MemoryReport of include/pa/ch01_dense.h for this trace, each field
  //   as its comment there defines it (bytes_per_token is per_token; n is the number of
  //   requests). Integer fields are exact and rounded down, and nothing overflows, even for a
  //   huge budget_bytes.
  PA_TODO("ch01");
}

}  // namespace pa::ch01
