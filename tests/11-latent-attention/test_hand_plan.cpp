// Chapter 11: plans make_plan never makes. Its chunks are multiples of 64 tokens, so they
// end on a stage's edge, and the last one ends where the tile's last row stops seeing:
// keys past a chunk's end would be hidden by the causal mask alone. Chunks cut by hand at
// tokens 37, 70, 103, ... end inside a 32-row stage, before rows that see further: only
// the chunk's own end (kv_end) hides the rest of the stage.
#include <gtest/gtest.h>

#include "mla_case.h"

namespace pa::test {
namespace {

// Stretch (split tiles). Every tile of make_plan's unsplit plan, cut at 37 + 33 k (k = 0, 1, ...), dealt in
// order to `grid` thread blocks, a few items each.
ch10::Plan cut_mid_stage(const ch11::MlaShape& s, const std::vector<int>& seq_lens,
                         const std::vector<int>& qsl, int grid) {
  const ch10::Plan whole = ch10::make_plan(ch11::planning_shape(s), seq_lens, qsl, 1, 0);
  ch10::Plan plan;
  for (const ch10::WorkItem& tile : whole.items) {
    EXPECT_EQ(tile.num_splits, 1) << "make_plan split a tile of a one-block grid";
    std::vector<int> ends;
    for (int e = 37; e < tile.kv_end; e += 33) ends.push_back(e);
    ends.push_back(tile.kv_end);
    const int splits = int(ends.size());
    const int counter = splits > 1 ? plan.num_counters++ : -1;
    const int base = int(plan.partial_rows);
    if (splits > 1) plan.partial_rows += int64_t(ch10::kTileRows) * splits;
    for (int p = 0, begin = 0; p < splits; begin = ends[size_t(p)], ++p)
      plan.items.push_back({tile.seq, 0, tile.row0, begin, ends[size_t(p)], p, splits, base, counter, 0});
  }
  const int n = int(plan.items.size());
  plan.grid = std::min(grid, n);
  plan.cta_start.assign(size_t(plan.grid) + 1, 0);
  for (int c = 0; c <= plan.grid; ++c) plan.cta_start[size_t(c)] = int(int64_t(n) * c / plan.grid);
  return plan;
}

// The thread blocks a hand plan runs on: every block that takes the batch's tiles (8 warps
// with 64-key stages any; 4 warps with 32-key stages, and 8 warps holding the queries in
// registers, those of at most 32 rows; 4 warps holding them, and 8 on key halves, those of at
// most 16).
template <typename T>
std::vector<ch11::MlaBlock> block_shapes(const MlaCase<T>& m) {
  std::vector<ch11::MlaBlock> blocks{ch11::MlaBlock::eight_warps};
  if (m.max_tile_rows() <= ch11::kSmallTileRows) {
    blocks.push_back(ch11::MlaBlock::four_warps);
    blocks.push_back(ch11::MlaBlock::eight_warps_queries_in_registers);
  }
  if (m.max_tile_rows() <= ch11::kQRegTileRows) {
    blocks.push_back(ch11::MlaBlock::queries_in_registers);
    blocks.push_back(ch11::MlaBlock::key_halves);
  }
  return blocks;
}

class MlaHandPlan : public ::testing::TestWithParam<std::string> {};
class StretchMlaHandPlan : public ::testing::TestWithParam<std::string> {};

template <typename T>
void check_hand_plan(const GoldenCase& c) {
  MlaCase<T> m(c);
  const ch10::Plan plan = cut_mid_stage(m.shape, m.seq_lens, m.qsl, 5);
  ASSERT_GT(plan.num_counters, 0) << "no tile was cut";
  const auto [atol, rtol] = tolerance_of(c);
  for (ch11::MlaBlock block : block_shapes(m)) {
    EXPECT_TRUE(mla_close(m.run_plan(plan, block), c.get<double>("expected"), m.qsl, m.seq_lens,
                          m.shape.num_q_heads, ch11::kLatentDim, atol, rtol))
        << c.name() << ": every tile cut at tokens 37, 70, 103, ... (chunks that end inside a stage), "
        << plan.items.size() << " items on " << plan.grid << " thread blocks: " << block_words(m.planned_block);
  }
}

TEST_P(StretchMlaHandPlan, ChunksEndingInsideAStage) {
  const GoldenCase c(golden_dir("ch11") + "/" + GetParam());
  if (c.param("dtype") == "bf16") check_hand_plan<bf16>(c);
  else check_hand_plan<half>(c);
}

// No split at all: every tile's one item stops at token 37, inside its second stage, before
// rows that see further. Its rows see keys 0 .. min(their position, 36): the reference's
// expected_first37. Only the mask's kv_end hides the stage's rows 37 .. 63.
template <typename T>
void check_first_keys(const GoldenCase& c) {
  MlaCase<T> m(c);
  ch10::Plan plan = ch10::make_plan(ch11::planning_shape(m.shape), m.seq_lens, m.qsl, 1, 0);
  for (ch10::WorkItem& w : plan.items) {
    ASSERT_EQ(w.num_splits, 1) << "make_plan split a tile of a one-block grid";
    w.kv_end = std::min(w.kv_end, 37);
  }
  const auto [atol, rtol] = tolerance_of(c);
  for (ch11::MlaBlock block : block_shapes(m)) {
    EXPECT_TRUE(mla_close(m.run_plan(plan, block), c.get<double>("expected_first37"), m.qsl, m.seq_lens,
                          m.shape.num_q_heads, ch11::kLatentDim, atol, rtol))
        << c.name() << ": every tile's item stops at token 37 (a chunk end inside a stage, no split), on "
        << block_words(m.planned_block);
  }
}

TEST_P(MlaHandPlan, ItemsStoppingInsideAStage) {
  const GoldenCase c(golden_dir("ch11") + "/" + GetParam());
  if (c.param("dtype") == "bf16") check_first_keys<bf16>(c);
  else check_first_keys<half>(c);
}

INSTANTIATE_TEST_SUITE_P(Ch11, MlaHandPlan,
                         ::testing::Values("mla_fp16_h64_bs16_split", "mla_bf16_h128_bs32_split",
                                           "mla_fp16_h16_bs16_decode_edges"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Ch11, StretchMlaHandPlan,
                         ::testing::Values("mla_fp16_h64_bs16_split", "mla_bf16_h128_bs32_split",
                                           "mla_fp16_h16_bs16_decode_edges"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pa::test
