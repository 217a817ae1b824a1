// The given host side of chapter 4: shape checks and the checked upload of metadata.
#include <algorithm>

#include "pa/ch04_paged_attention.h"

namespace pa::ch04 {

void check_shape(const PagedAttentionShape& s) {
  PA_REQUIRE(s.num_seqs > 0 && s.num_seqs <= 65535,
             "num_seqs must be in 1..65535, got " << s.num_seqs);
  PA_REQUIRE(s.num_q_heads > 0 && s.num_kv_heads > 0,
             "head counts must be positive, got num_q_heads " << s.num_q_heads
                                                              << ", num_kv_heads " << s.num_kv_heads);
  PA_REQUIRE(s.num_q_heads % s.num_kv_heads == 0,
             "num_q_heads (" << s.num_q_heads << ") must be a multiple of num_kv_heads ("
                             << s.num_kv_heads << ")");
  PA_REQUIRE(s.head_size == 64 || s.head_size == 80 || s.head_size == 96 || s.head_size == 112 ||
                 s.head_size == 128 || s.head_size == 256,
             "head_size " << s.head_size << " is not supported (64, 80, 96, 112, 128, 256)");
  PA_REQUIRE(s.block_size == 8 || s.block_size == 16 || s.block_size == 32,
             "block_size " << s.block_size << " is not supported (8, 16 or 32)");
  PA_REQUIRE(s.num_blocks > 0, "num_blocks must be positive, got " << s.num_blocks);
  PA_REQUIRE(s.max_blocks_per_seq > 0,
             "max_blocks_per_seq must be positive, got " << s.max_blocks_per_seq);
}

DeviceBatch::DeviceBatch(const ch03::BatchMetadata& md, int num_blocks, int block_size)
    : num_seqs(md.num_seqs), max_blocks_per_seq(md.max_blocks_per_seq), max_context_len(0) {
  md.validate(num_blocks, block_size);  // throws, naming the first bad entry
  std::vector<int> table(md.block_table.begin(), md.block_table.end());
  std::vector<int> lens(md.context_lens.begin(), md.context_lens.end());
  for (int len : lens) max_context_len = std::max(max_context_len, len);
  block_table = DeviceBuffer<int>(table);
  context_lens = DeviceBuffer<int>(lens);
}

}  // namespace pa::ch04
