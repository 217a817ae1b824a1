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
  // HINT(1): Start from the tokens the trace really uses: the sum of r.total() (prompt_len +
  //   output_len) over its requests. Every field is then one expression in that sum, n,
  //   cfg.max_seq_len, per_token and budget_bytes.
  // HINT(2): reserved = n * max_seq_len * per_token; used = total_tokens * per_token;
  //   waste_fraction = 1 - used / reserved, in doubles; dense_seqs_in_budget = budget /
  //   (max_seq_len * per_token). The ideal count divides by the mean request, total_tokens /
  //   n: multiply first, (budget * n) / (total_tokens * per_token), with __int128 for the
  //   products (budget * n can pass 2^63).
  // HINT(3): fill in the report (see MemoryReport in include/pa/ch01_dense.h).
  //   A dense cache reserves max_seq_len slots for every request; a request uses only
  //   prompt_len + output_len of them. For ideal_seqs_in_budget, divide the budget by
  //   the mean tokens per request times per_token, in integers:
  //   (budget * n) / (total_tokens * per_token), rounded down.
  // BEGIN SOLUTION
  // STUB: PA_TODO("ch01");
  int64_t total_tokens = 0;
  for (const Request& r : trace) total_tokens += r.total();
  MemoryReport rep;
  rep.reserved_bytes = n * cfg.max_seq_len * per_token;
  rep.used_bytes = total_tokens * per_token;
  rep.waste_fraction = 1.0 - double(rep.used_bytes) / double(rep.reserved_bytes);
  rep.dense_seqs_in_budget = budget_bytes / (int64_t(cfg.max_seq_len) * per_token);
  // budget * n can exceed 2^63 for huge budgets: use 128-bit intermediate arithmetic.
  rep.ideal_seqs_in_budget = static_cast<int64_t>(
      (static_cast<__int128>(budget_bytes) * n) / (static_cast<__int128>(total_tokens) * per_token));
  return rep;
  // END SOLUTION
}

}  // namespace pa::ch01
