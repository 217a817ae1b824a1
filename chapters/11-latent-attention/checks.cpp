// The given host side of chapter 11: the latent pool's and the batch's checks, and the
// shape chapter 10's planner plans with.
#include "pa/ch03_block_table.h"
#include "pa/ch11_mla.h"

namespace pa::ch11 {

namespace {
void check_block_size(int block_size) {
  PA_REQUIRE(block_size == 16 || block_size == 32 || block_size == 64,
             "block_size " << block_size << " is not supported (16, 32 or 64)");
}
}  // namespace

void check_latent_pool(const LatentPoolShape& s) {
  check_block_size(s.block_size);
  PA_REQUIRE(s.num_blocks > 0, "num_blocks must be positive, got " << s.num_blocks);
  PA_REQUIRE(s.latent_dim == kLatentDim && s.rope_dim == kRopeDim,
             "a latent row is c_kv " << kLatentDim << " + k_rope " << kRopeDim << " = " << kRowWidth
                                     << " wide, got " << s.latent_dim << " + " << s.rope_dim);
}

void check_mla_shape(const MlaShape& s) {
  PA_REQUIRE(s.num_seqs > 0 && s.num_seqs <= 65535, "num_seqs must be in 1..65535, got " << s.num_seqs);
  PA_REQUIRE(s.num_tokens >= 0, "num_tokens must be >= 0, got " << s.num_tokens);
  PA_REQUIRE(s.num_q_heads >= 1 && s.num_q_heads <= kMaxQHeads,
             "num_q_heads " << s.num_q_heads << " is not supported (1 to " << kMaxQHeads << ")");
  PA_REQUIRE(s.qk_head_size == kRowWidth,
             "qk_head_size " << s.qk_head_size << " is not supported: the absorbed query is " << kRowWidth
                             << " wide (c_kv " << kLatentDim << " + k_rope " << kRopeDim << ")");
  PA_REQUIRE(s.v_head_size == kLatentDim,
             "v_head_size " << s.v_head_size << " is not supported: the output is the latent part, "
                            << kLatentDim << " wide");
  check_block_size(s.block_size);
  PA_REQUIRE(s.num_blocks > 0, "num_blocks must be positive, got " << s.num_blocks);
  PA_REQUIRE(s.max_blocks_per_seq > 0, "max_blocks_per_seq must be positive, got " << s.max_blocks_per_seq);
}

void check_mla_metadata(const MlaShape& s, const std::vector<int>& block_table,
                        const std::vector<int>& seq_lens, const std::vector<int>& query_start_loc) {
  check_mla_shape(s);
  ch03::check_varlen_batch(s.num_seqs, s.num_tokens, s.max_blocks_per_seq, s.block_size, s.num_blocks,
                           block_table, seq_lens, query_start_loc, "seq_len");
  for (int b = 0; b < s.num_seqs; ++b) {
    const int n = query_start_loc[size_t(b) + 1] - query_start_loc[size_t(b)];
    PA_REQUIRE(n <= kMaxNewTokens, "sequence " << b << " has " << n
                                               << " new tokens; the MLA decode kernel takes 0 to "
                                               << kMaxNewTokens);
  }
}

// ANCHOR: planning_shape
// Chapter 10's planner, honestly: one KV head (the latent row), h_q query heads on it,
// head size 576. Its own check of sizes would refuse 576 and block size 64 (chapter 10's
// kernel does not take them): VarlenShape::check_sizes hands that check back to this chapter.
namespace {
void check_planned_sizes(const ch10::VarlenShape& v) {
  check_mla_shape(MlaShape{v.num_seqs, v.num_tokens, v.num_q_heads, v.block_size, v.num_blocks,
                           v.max_blocks_per_seq, v.head_size, kLatentDim});
  PA_REQUIRE(v.num_kv_heads == 1, "an MLA plan has one KV head (the latent row), got " << v.num_kv_heads);
}
}  // namespace

ch10::VarlenShape planning_shape(const MlaShape& s) {
  ch10::VarlenShape v{s.num_seqs, s.num_tokens, s.num_q_heads, 1, s.qk_head_size,
                      s.block_size, s.num_blocks, s.max_blocks_per_seq};
  v.check_sizes = check_planned_sizes;
  return v;
}
// ANCHOR_END: planning_shape

}  // namespace pa::ch11
