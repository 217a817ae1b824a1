// Chapter 3: the batch builder's block_table, context_lens and slot_mapping, and the
// checked mode that refuses bad metadata.
#include <gtest/gtest.h>

#include "compare.h"
#include "golden.h"
#include "pa/ch03_block_table.h"

namespace {

using pa::ch03::BatchMetadata;
using pa::ch03::BlockManager;
using pa::test::GoldenCase;

class BatchGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchGolden, MetadataMatchesReference) {
  const GoldenCase c(pa::test::golden_dir("ch03") + "/" + GetParam());
  BlockManager m(int(c.param_int("num_blocks")), int(c.param_int("block_size")));
  const auto kind = c.get<int>("op_kind"), seq = c.get<int>("op_seq"), n = c.get<int>("op_n");
  for (size_t i = 0; i < kind.size(); ++i) {
    if (kind[i] == 0) m.add_sequence(seq[i]);
    if (kind[i] == 1) m.append_slots(seq[i], n[i]);
    if (kind[i] == 2) m.release(seq[i]);
  }
  const BatchMetadata md = pa::ch03::build_batch(m, c.get<int>("batch_seq_ids"),
                                                 c.get<int>("batch_new_tokens"),
                                                 c.get<int>("max_blocks_per_seq")[0]);
  EXPECT_EQ(md.max_blocks_per_seq, int(c.shape("block_table")[1]));
  EXPECT_EQ(md.block_table, c.get<int32_t>("block_table"));
  EXPECT_EQ(md.context_lens, c.get<int32_t>("context_lens"));
  EXPECT_EQ(md.slot_mapping, c.get<int64_t>("slot_mapping"));
  md.validate(m.num_blocks(), m.block_size());
}

INSTANTIATE_TEST_SUITE_P(Ch03, BatchGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch03", "batch_")),
                         [](const auto& info) { return info.param; });

using pa::test::error_contains;

TEST(Batch, AFailedBuildChangesNothing) {
  BlockManager m(3, 8);
  m.add_sequence(0);
  m.add_sequence(1);
  m.append_slots(0, 8);
  // Sequence 0 needs one more block and sequence 1 needs three: four, with two free.
  EXPECT_THROW(pa::ch03::build_batch(m, {0, 1}, {1, 17}), pa::ch02::OutOfBlocks);
  EXPECT_EQ(m.length(0), 8);
  EXPECT_EQ(m.length(1), 0);
  EXPECT_EQ(m.allocator().num_free(), 2);
  EXPECT_TRUE(error_contains([&] { pa::ch03::build_batch(m, {0}, {9}, 1); },
                             "beyond the table's capacity"));
  EXPECT_TRUE(error_contains([&] { pa::ch03::build_batch(m, {0, 0}, {1, 1}); }, "appears twice"));
  EXPECT_TRUE(error_contains([&] { pa::ch03::build_batch(m, {0}, {-1}); }, "negative token count"));
  EXPECT_EQ(m.length(0), 8);
}

// BatchMetadata::validate is chapter 3's stretch exercise: test_stretch_validate.cpp.

}  // namespace
