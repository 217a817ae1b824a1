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
  // HINT(1): A request holds whole blocks: ceil(t / block_size) of them. Sum the tokens and
  //   the blocks over the trace first; every field is then one expression, as in chapter 1's
  //   dense_memory_report.
  // HINT(2): ceil in integers is (t + bs - 1) / bs. reserved = blocks * block_size *
  //   per_token; used = tokens * per_token; waste_fraction = 1 - used / reserved, in doubles;
  //   paged_seqs_in_budget = (budget * n) / (blocks * block_size * per_token), with the
  //   products in __int128.
  // HINT(3): a request of t tokens holds ceil(t / block_size) blocks. Fill the report
  //   as its comments in include/pa/ch03_block_table.h say, in exact integers (use a
  //   128-bit product for budget * n).
  // BEGIN SOLUTION
  // STUB: PA_TODO("ch03");
  int64_t tokens = 0, blocks = 0;
  for (const Request& r : trace) {
    PA_REQUIRE(r.prompt_len >= 0 && r.output_len >= 0, "paged_memory_report: negative length");
    tokens += r.total();
    blocks += (r.total() + block_size - 1) / block_size;
  }
  PagedMemoryReport rep;
  rep.reserved_bytes = blocks * block_size * per_token;
  rep.used_bytes = tokens * per_token;
  rep.waste_fraction = 1.0 - double(rep.used_bytes) / double(rep.reserved_bytes);
  rep.paged_seqs_in_budget = int64_t((__int128(budget_bytes) * n) /
                                     (__int128(blocks) * block_size * per_token));
  return rep;
  // END SOLUTION
}

}  // namespace pa::ch03
