// The given v1-or-v2 heuristic of chapter 5 (numbers from the H100 benchmark: NOTES.md).
#include "pa/ch05_paged_attention_v2.h"

namespace pa::ch05 {

Version choose_version(const PagedAttentionShape& s, int max_context_len, int num_sms) {
  if (num_partitions(max_context_len) <= 1) return Version::v1;  // nothing to split
  // v1's grid is num_q_heads x num_seqs blocks. Measured on an H100 (132 SMs, NOTES.md):
  // at 256 blocks v2 is 2.4x faster, at 1024 the two tie, at 4096 v1 is 5% faster (v2
  // pays for its reduce). So: v1 from about 8 blocks per SM up.
  const int64_t v1_blocks = int64_t(s.num_q_heads) * s.num_seqs;
  return v1_blocks >= int64_t(num_sms) * 8 ? Version::v1 : Version::v2;
}

}  // namespace pa::ch05
