// The given check of a varlen batch (chapters 3, 8 and 10): what every kernel that reads
// block_table, context/seq lengths and query_start_loc relies on.
#include "pa/ch03_block_table.h"

namespace pa::ch03 {

// ANCHOR: check_varlen
void check_varlen_batch(int num_seqs, int num_tokens, int max_blocks_per_seq, int block_size,
                        int num_blocks, const std::vector<int>& block_table,
                        const std::vector<int>& lens, const std::vector<int>& query_start_loc,
                        const char* lens_name) {
  PA_REQUIRE(query_start_loc.size() == size_t(num_seqs) + 1,
             "query_start_loc has " << query_start_loc.size() << " entries, want num_seqs + 1 = " << num_seqs + 1);
  PA_REQUIRE(lens.size() == size_t(num_seqs),
             lens_name << "s has " << lens.size() << " entries, want num_seqs = " << num_seqs);
  PA_REQUIRE(block_table.empty() || block_table.size() == size_t(num_seqs) * max_blocks_per_seq,
             "block_table has " << block_table.size() << " entries, want num_seqs * max_blocks_per_seq = "
                                << int64_t(num_seqs) * max_blocks_per_seq);
  PA_REQUIRE(query_start_loc[0] == 0, "query_start_loc[0] must be 0, got " << query_start_loc[0]);
  PA_REQUIRE(query_start_loc.back() == num_tokens,
             "query_start_loc ends at " << query_start_loc.back() << ", but num_tokens is " << num_tokens);
  for (int b = 0; b < num_seqs; ++b) {
    const int n = query_start_loc[size_t(b) + 1] - query_start_loc[size_t(b)];
    const int len = lens[size_t(b)];
    PA_REQUIRE(n >= 0, "query_start_loc decreases at sequence " << b << " (" << query_start_loc[size_t(b)]
                           << " then " << query_start_loc[size_t(b) + 1]
                           << "): it must be the running sum of the query lengths");
    PA_REQUIRE(n <= len, "sequence " << b << " has " << n << " new tokens but " << lens_name << " " << len
                                     << " (the new tokens are part of the sequence: a query longer than its "
                                        "sequence)");
    PA_REQUIRE(int64_t(len) <= int64_t(max_blocks_per_seq) * block_size,
               "sequence " << b << ": " << lens_name << " " << len << " is beyond the table's capacity of "
                           << int64_t(max_blocks_per_seq) * block_size << " tokens (" << max_blocks_per_seq
                           << " blocks x " << block_size << ")");
    if (block_table.empty()) continue;
    for (int j = 0; j < (len + block_size - 1) / block_size; ++j) {
      const int id = block_table[size_t(b) * max_blocks_per_seq + j];
      PA_REQUIRE(id >= 0 && id < num_blocks, "block_table[" << b << "][" << j << "] = " << id
                                                 << " is not a block of the pool (0.." << num_blocks - 1 << ")");
    }
  }
}
// ANCHOR_END: check_varlen

}  // namespace pa::ch03
