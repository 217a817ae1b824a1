// The given host side of the prefill kernel: shape and metadata checks.
#include "pa/ch08_prefill.h"

#include "pa/ch03_block_table.h"
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
  PA_REQUIRE(block_table.size() == size_t(s.num_seqs) * s.max_blocks_per_seq,
             "block_table has " << block_table.size() << " entries, want num_seqs * max_blocks_per_seq");
  // The rest is chapter 3's check of a varlen batch.
  ch03::check_varlen_batch(s.num_seqs, s.num_tokens, s.max_blocks_per_seq, s.block_size, s.num_blocks,
                           block_table, context_lens, query_start_loc, "context_len");
}

}  // namespace pa::ch08
