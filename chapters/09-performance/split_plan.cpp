// Your exercise file. (Generated from solutions/09-performance/split_plan.cpp; instructors regenerate with tools/make_skeletons.py.)
// Chapter 9, exercise 3 (stretch): how many partitions, so that the grid fills the GPU once.
#include <algorithm>

#include "pa/ch09_fast_decode.h"

namespace pa::ch09 {

const char* name_of(Version v) {
  switch (v) {
    case Version::gqa: return "gqa";
    case Version::split: return "split";
    case Version::pipelined: return "pipelined";
    case Version::tensor_core: return "tensor_core";
  }
  return "?";
}

int* Workspace::counters(size_t n) {
  if (counters_.size() < n) {
    counters_ = DeviceBuffer<int>(n);
    counters_.fill_bytes(0);
  }
  return counters_.get();
}

int heads_per_block(const PagedAttentionShape& s) {
  const int group = s.num_q_heads / s.num_kv_heads;
  for (int gq : {8, 4, 2})
    if (group % gq == 0) return gq;
  return 1;
}

// ANCHOR: plan_splits
SplitPlan plan_splits(int work_units, int max_context_len, int block_size, int num_sms,
                      int blocks_per_sm) {
  PA_REQUIRE(work_units > 0 && block_size > 0 && num_sms > 0 && blocks_per_sm > 0,
             "plan_splits: sizes must be positive (work_units " << work_units << ", block_size "
                 << block_size << ", num_sms " << num_sms << ", blocks_per_sm " << blocks_per_sm << ")");
  const int blocks = std::max(1, (max_context_len + block_size - 1) / block_size);
  constexpr int kMinBlocks = 8;  // per partition: two per warp
  // TODO(ch09, stretch): return {splits, partition_size} for `blocks` KV blocks (the longest context's)
  //   and work_units (sequences x KV-head groups) thread blocks per partition. The tests
  //   check exact values, defined this way. The wanted count S is the largest number of partitions
  //   such that work_units * S thread blocks fit in one wave (num_sms * blocks_per_sm resident
  //   blocks) and S partitions of kMinBlocks blocks fit in `blocks`; but at least 1.
  //   partition_size (in tokens) is the fewest whole blocks with which S partitions cover all
  //   `blocks`; splits is the number of partitions of that size needed to cover them (none
  //   empty: it may be less than S). Tests: StretchSplitPlan.*, StretchSplitPlanDecode.* and
  //   StretchSplitPlanFp8.* (decode() and decode_fp8() without a plan).
  PA_TODO("ch09");
}
// ANCHOR_END: plan_splits

}  // namespace pa::ch09
