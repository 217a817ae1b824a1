// The given host side of chapter 10: shape and batch checks, before anything reaches the GPU.
#include "pa/ch03_block_table.h"
#include "pa/ch04_paged_attention.h"
#include "pa/ch10_varlen.h"

namespace pa::ch10 {

void check_shape(const VarlenShape& s) {
  PA_REQUIRE(s.num_tokens >= 0, "num_tokens must be >= 0, got " << s.num_tokens);
  if (s.check_sizes) return s.check_sizes(s);  // a later chapter's sizes (chapter 11's latent rows)
  // The rest is chapter 4's shape: the same sizes, the same limits.
  ch04::check_shape(ch04::PagedAttentionShape{s.num_seqs, s.num_q_heads, s.num_kv_heads,
                                              s.head_size, s.block_size, s.num_blocks,
                                              s.max_blocks_per_seq});
}

// ANCHOR: check_metadata
void check_metadata(const VarlenShape& s, const std::vector<int>& block_table,
                    const std::vector<int>& seq_lens, const std::vector<int>& query_start_loc) {
  check_shape(s);
  // Chapter 3's check of a varlen batch (chapter 8's prefill kernel relies on the same).
  ch03::check_varlen_batch(s.num_seqs, s.num_tokens, s.max_blocks_per_seq, s.block_size, s.num_blocks,
                           block_table, seq_lens, query_start_loc, "seq_len");
}
// ANCHOR_END: check_metadata

}  // namespace pa::ch10
