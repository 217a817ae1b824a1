// The given host side of the prefill kernel: shape and metadata checks.
#include "pa/ch08_prefill.h"

#include "pa/ch04_paged_attention.h"
#include "pa/check.h"

namespace pa::ch08 {

void check_shape(const PrefillShape& s) {
  PA_REQUIRE(s.num_tokens >= 0 && s.num_tokens <= 65535,
             "num_tokens must be in 0..65535, got " << s.num_tokens);
  // The rest is chapter 4's shape: the same sizes, the same limits.
  ch04::check_shape(ch04::PagedAttentionShape{s.num_seqs, s.num_q_heads, s.num_kv_heads,
                                              s.head_size, s.block_size, s.num_blocks,
                                              s.max_blocks_per_seq});
}

void check_metadata(const PrefillShape& s, const std::vector<int>& block_table,
                    const std::vector<int>& context_lens,
                    const std::vector<int>& query_start_loc) {
  check_shape(s);
  PA_REQUIRE(query_start_loc.size() == size_t(s.num_seqs) + 1,
             "query_start_loc has " << query_start_loc.size() << " entries, want num_seqs + 1 = "
                                    << s.num_seqs + 1);
  PA_REQUIRE(context_lens.size() == size_t(s.num_seqs),
             "context_lens has " << context_lens.size() << " entries, want " << s.num_seqs);
  PA_REQUIRE(block_table.size() == size_t(s.num_seqs) * s.max_blocks_per_seq,
             "block_table has " << block_table.size() << " entries, want num_seqs * max_blocks_per_seq");
  PA_REQUIRE(query_start_loc[0] == 0, "query_start_loc[0] must be 0, got " << query_start_loc[0]);
  PA_REQUIRE(query_start_loc.back() == s.num_tokens,
             "query_start_loc ends at " << query_start_loc.back() << ", but num_tokens is "
                                        << s.num_tokens);
  for (int b = 0; b < s.num_seqs; ++b) {
    const int n = query_start_loc[size_t(b) + 1] - query_start_loc[size_t(b)];
    const int len = context_lens[size_t(b)];
    PA_REQUIRE(n >= 0, "query_start_loc decreases at sequence " << b);
    PA_REQUIRE(n <= len, "sequence " << b << " has " << n << " new tokens but context_len " << len
                                     << " (the new tokens are part of the context)");
    PA_REQUIRE(int64_t(len) <= int64_t(s.max_blocks_per_seq) * s.block_size,
               "sequence " << b << ": context_len " << len << " is beyond the table's capacity of "
                           << s.max_blocks_per_seq * s.block_size << " tokens");
    for (int j = 0; j < (len + s.block_size - 1) / s.block_size; ++j) {
      const int id = block_table[size_t(b) * s.max_blocks_per_seq + j];
      PA_REQUIRE(id >= 0 && id < s.num_blocks,
                 "block_table[" << b << "][" << j << "] = " << id << " is not a block of the pool");
    }
  }
}

}  // namespace pa::ch08
