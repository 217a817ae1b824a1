// The given host side of chapter 10: shape and batch checks, before anything reaches the GPU.
#include "pa/ch04_paged_attention.h"
#include "pa/ch10_varlen.h"

namespace pa::ch10 {

void check_shape(const VarlenShape& s) {
  PA_REQUIRE(s.num_tokens >= 0, "num_tokens must be >= 0, got " << s.num_tokens);
  // The rest is chapter 4's shape: the same sizes, the same limits.
  ch04::check_shape(ch04::PagedAttentionShape{s.num_seqs, s.num_q_heads, s.num_kv_heads,
                                              s.head_size, s.block_size, s.num_blocks,
                                              s.max_blocks_per_seq});
}

// ANCHOR: check_metadata
void check_metadata(const VarlenShape& s, const std::vector<int>& block_table,
                    const std::vector<int>& seq_lens, const std::vector<int>& query_start_loc) {
  check_shape(s);
  PA_REQUIRE(query_start_loc.size() == size_t(s.num_seqs) + 1,
             "query_start_loc has " << query_start_loc.size() << " entries, want num_seqs + 1 = "
                                    << s.num_seqs + 1);
  PA_REQUIRE(seq_lens.size() == size_t(s.num_seqs),
             "seq_lens has " << seq_lens.size() << " entries, want num_seqs = " << s.num_seqs);
  PA_REQUIRE(block_table.empty() || block_table.size() == size_t(s.num_seqs) * s.max_blocks_per_seq,
             "block_table has " << block_table.size() << " entries, want num_seqs * max_blocks_per_seq = "
                                << int64_t(s.num_seqs) * s.max_blocks_per_seq);
  PA_REQUIRE(query_start_loc[0] == 0, "query_start_loc[0] must be 0, got " << query_start_loc[0]);
  PA_REQUIRE(query_start_loc.back() == s.num_tokens,
             "query_start_loc ends at " << query_start_loc.back() << ", but num_tokens is "
                                        << s.num_tokens);
  for (int b = 0; b < s.num_seqs; ++b) {
    const int n = query_start_loc[size_t(b) + 1] - query_start_loc[size_t(b)];
    const int len = seq_lens[size_t(b)];
    PA_REQUIRE(n >= 0, "query_start_loc decreases at sequence " << b << " ("
                           << query_start_loc[size_t(b)] << " then " << query_start_loc[size_t(b) + 1]
                           << "): it must be the running sum of the query lengths");
    PA_REQUIRE(n <= len, "sequence " << b << " has " << n << " new tokens but seq_len " << len
                                     << " (the new tokens are part of the sequence: a query "
                                        "longer than its sequence)");
    PA_REQUIRE(int64_t(len) <= int64_t(s.max_blocks_per_seq) * s.block_size,
               "sequence " << b << ": seq_len " << len << " is beyond the table's capacity of "
                           << int64_t(s.max_blocks_per_seq) * s.block_size << " tokens ("
                           << s.max_blocks_per_seq << " blocks x " << s.block_size << ")");
    if (block_table.empty()) continue;
    for (int j = 0; j < (len + s.block_size - 1) / s.block_size; ++j) {
      const int id = block_table[size_t(b) * s.max_blocks_per_seq + j];
      PA_REQUIRE(id >= 0 && id < s.num_blocks, "block_table[" << b << "][" << j << "] = " << id
                                                   << " is not a block of the pool (0.."
                                                   << s.num_blocks - 1 << ")");
    }
  }
}
// ANCHOR_END: check_metadata

}  // namespace pa::ch10
