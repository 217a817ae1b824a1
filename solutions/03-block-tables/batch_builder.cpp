// Chapter 3, exercise 3 of 4: turning the block lists into a step's kernel metadata.
#include <algorithm>

#include "pa/ch03_block_table.h"

namespace pa::ch03 {

int SlotManager::step_blocks(const std::vector<int>& seq_ids, const std::vector<int>& new_tokens) const {
  PA_REQUIRE(seq_ids.size() == new_tokens.size(),
             "step_blocks: " << seq_ids.size() << " sequences but " << new_tokens.size() << " token counts");
  int total = 0;
  for (size_t i = 0; i < seq_ids.size(); ++i) total += blocks_needed(seq_ids[i], new_tokens[i]);
  return total;
}

// ANCHOR: build_batch
BatchMetadata build_batch(SlotManager& manager, const std::vector<int>& seq_ids,
                          const std::vector<int>& new_tokens, int max_blocks_per_seq) {
  PA_REQUIRE(!seq_ids.empty(), "build_batch: the batch is empty");
  PA_REQUIRE(seq_ids.size() == new_tokens.size(),
             "build_batch: " << seq_ids.size() << " sequences but " << new_tokens.size()
                             << " token counts");
  PA_REQUIRE(max_blocks_per_seq >= 0,
             "build_batch: max_blocks_per_seq must be >= 0, got " << max_blocks_per_seq);
  const int bs = manager.block_size();
  // Check everything first, so that a failure changes nothing.
  int64_t widest = 1;
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    PA_REQUIRE(new_tokens[i] >= 0, "build_batch: negative token count " << new_tokens[i]
                                                                         << " for sequence "
                                                                         << seq_ids[i]);
    PA_REQUIRE(std::count(seq_ids.begin(), seq_ids.end(), seq_ids[i]) == 1,
               "build_batch: sequence " << seq_ids[i] << " appears twice in the batch");
    const int64_t len = int64_t(manager.length(seq_ids[i])) + new_tokens[i];
    // A manager may hold blocks past the length (chapter 8's dense policy reserves them).
    const int64_t blocks = std::max<int64_t>((len + bs - 1) / bs, manager.block_list(seq_ids[i]).size());
    widest = std::max(widest, blocks);
    PA_REQUIRE(max_blocks_per_seq == 0 || blocks <= max_blocks_per_seq,
               "build_batch: sequence " << seq_ids[i] << " would hold " << len
                                        << " tokens, beyond the table's capacity of "
                                        << max_blocks_per_seq << " blocks x " << bs);
  }
  const int new_blocks = manager.step_blocks(seq_ids, new_tokens);
  if (new_blocks > manager.num_free())
    throw ch02::OutOfBlocks("build_batch: the step needs " + std::to_string(new_blocks) +
                            " new blocks, only " + std::to_string(manager.num_free()) +
                            " are free");
  BatchMetadata md;
  md.num_seqs = int(seq_ids.size());
  md.max_blocks_per_seq = max_blocks_per_seq > 0 ? max_blocks_per_seq : int(widest);
  md.query_start_loc.assign(1, 0);
  for (int n : new_tokens) md.query_start_loc.push_back(md.query_start_loc.back() + n);
  // TODO(ch03): md (num_seqs and max_blocks_per_seq already set) describes the step,
  //   sequences in batch order: slot_mapping = the slots of all new tokens, sequence after
  //   sequence; context_lens[i] = the length of seq_ids[i] after its new tokens; block_table
  //   = num_seqs rows of max_blocks_per_seq entries, row i = the block list of seq_ids[i],
  //   then kPaddingBlock. Each sequence grows by new_tokens[i] in the manager. (The checks
  //   above guarantee that it fits.)
  // HINT(1): The manager does the work: append_slots(seq, n) returns the new tokens' slots,
  //   and length(seq) and block_list(seq) give the rest. Filling the whole table with
  //   kPaddingBlock first leaves only each row's used prefix to write.
  // HINT(2): md.block_table.assign(num_seqs * max_blocks_per_seq, kPaddingBlock);
  //   md.context_lens.resize(num_seqs); then for each i: append the slots of
  //   manager.append_slots(seq_ids[i], new_tokens[i]) to md.slot_mapping, context_lens[i] =
  //   manager.length(seq_ids[i]), and std::copy the block list to md.block_table.begin() + i
  //   * max_blocks_per_seq.
  // HINT(3): fill md. For each sequence i of the batch, in order:
  //   append_slots(seq_ids[i], new_tokens[i]) and add the slots to md.slot_mapping;
  //   context_lens gets the length after the append; row i of block_table (width
  //   md.max_blocks_per_seq) gets the block list, then kPaddingBlock in the rest.
  // BEGIN SOLUTION
  // STUB: PA_TODO("ch03");
  md.block_table.assign(size_t(md.num_seqs) * md.max_blocks_per_seq, kPaddingBlock);
  md.context_lens.resize(size_t(md.num_seqs));
  for (int i = 0; i < md.num_seqs; ++i) {
    const std::vector<int64_t> slots = manager.append_slots(seq_ids[size_t(i)], new_tokens[size_t(i)]);
    md.slot_mapping.insert(md.slot_mapping.end(), slots.begin(), slots.end());
    md.context_lens[size_t(i)] = manager.length(seq_ids[size_t(i)]);
    const std::vector<int>& blocks = manager.block_list(seq_ids[size_t(i)]);
    std::copy(blocks.begin(), blocks.end(),
              md.block_table.begin() + int64_t(i) * md.max_blocks_per_seq);
  }
  // END SOLUTION
  return md;
}
// ANCHOR_END: build_batch

void BatchMetadata::validate(int num_blocks, int block_size) const {
  // TODO(ch03, stretch): the checked mode. Throw pa::Error (PA_REQUIRE) at the first bad entry,
  //   before any kernel can read it, and return quietly for metadata a kernel can read safely.
  //   A kernel reads, for each sequence b < num_seqs, its context_lens[b] tokens through the
  //   first ceil(context_lens[b] / block_size) entries of row b of block_table (the rest of
  //   the row is padding and never read), and writes each new token at slot_mapping[i] (a
  //   negative slot is a padding token that is skipped). The messages, in the order checked
  //   (the tests look for these words):
  //     "metadata: empty batch or table (<num_seqs> x <max_blocks_per_seq>)"
  //     "metadata: block_table has <n> entries, expected <num_seqs> x <max_blocks_per_seq>"
  //     "metadata: context_lens has <n> entries for <num_seqs> sequences"
  //   then per sequence b, in order:
  //     "metadata: sequence <b> has a negative length <len>"
  //     "metadata: context_len <len> of sequence <b> is beyond the table's capacity of
  //      <max_blocks_per_seq> blocks x <block_size>"
  //     "metadata: block_table[<b>][<j>] = <id> is not a block of the pool (0..<num_blocks - 1>)"
  //   then, when query_start_loc is set, check_varlen_batch's checks (varlen_checks.cpp, given:
  //   call it with an empty block_table and the context lens), and last, per new token i:
  //     "metadata: slot_mapping[<i>] = <slot> is outside the pool"
  //   Checked by StretchValidate.* (tests/03-block-tables/test_stretch_validate.cpp).
  // HINT(1): Every check is a bound: find, for each array, which of its entries a kernel
  //   really reads, and the range each of them must lie in. Capacity and slot bounds are
  //   products that can pass 2^31: compare them in 64 bits.
  // HINT(2): The sizes first (num_seqs and max_blocks_per_seq positive, block_table =
  //   num_seqs * max_blocks_per_seq entries, one context_len per sequence); then per
  //   sequence: len >= 0, len <= max_blocks_per_seq * block_size, and each of the first
  //   (len + block_size - 1) / block_size entries of its row in 0..num_blocks - 1; then
  //   check_varlen_batch; then each slot < num_blocks * block_size.
  // HINT(3): PA_REQUIRE(num_seqs > 0 && max_blocks_per_seq > 0, ...); PA_REQUIRE(block_table.size()
  //   == size_t(num_seqs) * max_blocks_per_seq, ...); PA_REQUIRE(context_lens.size() ==
  //   size_t(num_seqs), ...); for b: len = context_lens[b]; PA_REQUIRE(len >= 0, ...);
  //   PA_REQUIRE(int64_t(len) <= int64_t(max_blocks_per_seq) * block_size, ...); for j <
  //   (len + block_size - 1) / block_size: id = block_table[b * max_blocks_per_seq + j],
  //   PA_REQUIRE(id >= 0 && id < num_blocks, ...). If query_start_loc is not empty:
  //   check_varlen_batch(num_seqs, query_start_loc.back(), max_blocks_per_seq, block_size,
  //   num_blocks, {}, context_lens, query_start_loc, "context_len"). For i: PA_REQUIRE(
  //   slot_mapping[i] < int64_t(num_blocks) * block_size, ...).
  // BEGIN SOLUTION(ch03, stretch)
  // STUB: // Given for now: no check at all (every batch passes). Replace with your checks.
  // STUB: (void)num_blocks, (void)block_size;
  PA_REQUIRE(num_seqs > 0 && max_blocks_per_seq > 0,
             "metadata: empty batch or table (" << num_seqs << " x " << max_blocks_per_seq << ")");
  PA_REQUIRE(block_table.size() == size_t(num_seqs) * max_blocks_per_seq,
             "metadata: block_table has " << block_table.size() << " entries, expected "
                                          << num_seqs << " x " << max_blocks_per_seq);
  PA_REQUIRE(context_lens.size() == size_t(num_seqs),
             "metadata: context_lens has " << context_lens.size() << " entries for "
                                           << num_seqs << " sequences");
  for (int b = 0; b < num_seqs; ++b) {
    const int len = context_lens[size_t(b)];
    PA_REQUIRE(len >= 0, "metadata: sequence " << b << " has a negative length " << len);
    PA_REQUIRE(int64_t(len) <= int64_t(max_blocks_per_seq) * block_size,
               "metadata: context_len " << len << " of sequence " << b
                                        << " is beyond the table's capacity of "
                                        << max_blocks_per_seq << " blocks x " << block_size);
    for (int j = 0; j < (len + block_size - 1) / block_size; ++j) {
      const int32_t id = block_table[size_t(b) * max_blocks_per_seq + j];
      PA_REQUIRE(id >= 0 && id < num_blocks,
                 "metadata: block_table[" << b << "][" << j << "] = " << id
                                          << " is not a block of the pool (0.." << num_blocks - 1
                                          << ")");
    }
  }
  if (!query_start_loc.empty())
    check_varlen_batch(num_seqs, query_start_loc.back(), max_blocks_per_seq, block_size, num_blocks, {},
                       context_lens, query_start_loc, "context_len");
  for (size_t i = 0; i < slot_mapping.size(); ++i)
    PA_REQUIRE(slot_mapping[i] < int64_t(num_blocks) * block_size,
               "metadata: slot_mapping[" << i << "] = " << slot_mapping[i]
                                         << " is outside the pool");
  // END SOLUTION
}

}  // namespace pa::ch03
