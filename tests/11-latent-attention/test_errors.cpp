// Chapter 11: bad input gets a clear error before anything reaches the device.
#include <gtest/gtest.h>

#include "compare.h"
#include "pa/ch11_mla.h"

namespace pa::test {
namespace {

ch11::MlaShape good() { return ch11::MlaShape{2, 3, 16, 64, 8, 4}; }

void plan(const ch11::MlaShape& s, std::vector<int> seq_lens, std::vector<int> qsl) {
  ch11::MlaDecode m;
  m.plan(s, DType::fp16, seq_lens, qsl, 0, 4);
}

TEST(MlaErrors, TooManyHeads) {
  auto s = good();
  s.num_q_heads = 256;
  EXPECT_TRUE(error_contains([&] { ch11::check_mla_shape(s); }, "num_q_heads 256 is not supported (1 to 128)"));
  EXPECT_TRUE(error_contains([&] { plan(s, {5, 9}, {0, 1, 3}); }, "num_q_heads 256 is not supported (1 to 128)"));
}

TEST(MlaErrors, WrongWidths) {
  auto s = good();
  s.qk_head_size = 512;
  EXPECT_TRUE(error_contains([&] { plan(s, {5, 9}, {0, 1, 3}); },
                             "qk_head_size 512 is not supported: the absorbed query is 576 wide (c_kv 512 + k_rope 64)"));
  s = good();
  s.v_head_size = 576;
  EXPECT_TRUE(error_contains([&] { plan(s, {5, 9}, {0, 1, 3}); },
                             "v_head_size 576 is not supported: the output is the latent part, 512 wide"));
  EXPECT_TRUE(error_contains([&] { ch11::check_latent_pool(ch11::LatentPoolShape{8, 64, 512, 128}); },
                             "a latent row is c_kv 512 + k_rope 64 = 576 wide, got 512 + 128"));
}

// Issue 59: plan() had the slots and the pool's shape, but checked only how many slots
// there were; slot 5000 on a pool of 4 x 16 slots then crashed in the latent writer.
TEST(MlaErrors, PlanRefusesASlotOutsideTheLatentPool) {
  ch03::BatchMetadata md;
  md.num_seqs = 2;
  md.max_blocks_per_seq = 1;
  md.block_table = {2, 3};
  md.context_lens = {1, 2};
  md.query_start_loc = {0, 1, 3};
  ch08::StepCache cache;
  cache.pool = ch02::PoolShape{4, 16, 1, 576};
  cache.num_q_heads = 16;
  cache.dtype = DType::fp16;
  cache.latent = true;
  cache.latent_dim = 512;
  cache.rope_dim = 64;
  ch11::MlaStepAttention attention;
  auto plan_slots = [&](std::vector<int64_t> slots) {
    md.slot_mapping = slots;
    attention.plan({md}, cache);
  };
  EXPECT_TRUE(error_contains([&] { plan_slots({32, 48, 5000}); },
                             "MlaStepAttention: slot_mapping[2] = 5000 (new token 2 of layer group 0) is outside the "
                             "latent pool of 4 blocks x 16 = 64 slots"));
  EXPECT_TRUE(error_contains([&] { plan_slots({64, 48, 49}); }, "slot_mapping[0] = 64 (new token 0"))
      << "one past the last slot";
  EXPECT_TRUE(error_contains([&] { plan_slots({32, -1, 49}); }, "slot_mapping[1] = -1 (new token 1"))
      << "every new token's row is read: no padding";
  EXPECT_NO_THROW(plan_slots({63, 0, 49})) << "the first and the last slot of the pool";
  EXPECT_EQ(attention.steps_planned(), 1);
}

TEST(MlaErrors, FourWarpBlockOnALargeTile) {
  ch11::MlaDecode m;
  m.set_block(ch11::MlaBlock::four_warps);
  EXPECT_NO_THROW(m.plan(good(), DType::fp16, {5, 9}, {0, 1, 3}, 0, 4));  // 16 heads x 2 tokens: 32 rows fit
  EXPECT_EQ(m.row_groups(), 1);
  auto s = good();
  s.num_q_heads = 32;
  EXPECT_TRUE(error_contains([&] { m.plan(s, DType::fp16, {5, 9}, {0, 1, 3}, 0, 4); },
                             "sequence 1's tiles have 64 rows: the 4-warp thread block takes at most 32"));
  // A hand plan's query_start_loc picks the block: one of another batch is refused.
  const ch10::Plan plan = ch10::make_plan(ch11::planning_shape(good()), {5, 9}, {0, 1, 3}, 1, 0);
  EXPECT_TRUE(error_contains([&] { m.use_plan(good(), DType::fp16, plan, nullptr, {0, 1}); },
                             "MlaDecode: query_start_loc has 2 entries for 2 sequences (num_seqs + 1 expected)"));
  EXPECT_TRUE(error_contains([&] { m.use_plan(good(), DType::fp16, plan); },
                             "MlaDecode: a thread block other than 8 warps with 64-key stages needs the batch's query_start_loc"));
  // The block that holds the queries in registers takes one mma tile a warp: 16 rows.
  m.set_block(ch11::MlaBlock::queries_in_registers);
  auto decode = good();
  decode.num_tokens = 2;
  EXPECT_NO_THROW(m.plan(decode, DType::fp16, {5, 9}, {0, 1, 2}, 0, 4));  // 16 heads x 1 token
  EXPECT_EQ(m.block(), ch11::MlaBlock::queries_in_registers);
  EXPECT_TRUE(error_contains([&] { m.plan(good(), DType::fp16, {5, 9}, {0, 1, 3}, 0, 4); },
                             "sequence 1's tiles have 32 rows: the 4-warp thread block that holds the queries in "
                             "registers takes at most 16"));
  // The 8-warp block that holds the queries in registers: one mma tile a row group, 32 rows.
  m.set_block(ch11::MlaBlock::eight_warps_queries_in_registers);
  EXPECT_NO_THROW(m.plan(good(), DType::fp16, {5, 9}, {0, 1, 3}, 0, 4));  // 16 heads x 2 tokens
  EXPECT_EQ(m.block(), ch11::MlaBlock::eight_warps_queries_in_registers);
  EXPECT_EQ(m.row_groups(), 2);
  EXPECT_TRUE(error_contains([&] { m.plan(s, DType::fp16, {5, 9}, {0, 1, 3}, 0, 4); },
                             "sequence 1's tiles have 64 rows: the 8-warp thread block that holds the queries in "
                             "registers takes at most 32"));
  // Key halves: both row groups on the same 16 rows.
  m.set_block(ch11::MlaBlock::key_halves);
  EXPECT_NO_THROW(m.plan(decode, DType::fp16, {5, 9}, {0, 1, 2}, 0, 4));  // 16 heads x 1 token
  EXPECT_EQ(m.block(), ch11::MlaBlock::key_halves);
  EXPECT_EQ(m.row_groups(), 2);
  EXPECT_TRUE(error_contains([&] { m.plan(good(), DType::fp16, {5, 9}, {0, 1, 3}, 0, 4); },
                             "sequence 1's tiles have 32 rows: the 8-warp thread block on key halves takes at most 16"));
  m.set_block(static_cast<ch11::MlaBlock>(7));
  EXPECT_TRUE(error_contains([&] { m.plan(decode, DType::fp16, {5, 9}, {0, 1, 2}, 0, 4); },
                             "MlaDecode: unknown MlaBlock 7"));
}

TEST(MlaErrors, TooManyChunksForTheTicket) {
  // The split merge's ticket counts a tile's chunks in 16 bits: a hand plan past that is refused.
  ch10::Plan plan = ch10::make_plan(ch11::planning_shape(good()), {5, 9}, {0, 1, 3}, 1, 0);
  for (auto& w : plan.items) w.num_splits = 1 << 16;
  ch11::MlaDecode m;
  EXPECT_TRUE(error_contains([&] { m.use_plan(good(), DType::fp16, plan); },
                             "MlaDecode: a tile cut into 65536 chunks; the split merge takes at most 65535"));
}

TEST(MlaErrors, BlockSize) {
  auto s = good();
  s.block_size = 8;
  EXPECT_TRUE(error_contains([&] { plan(s, {5, 9}, {0, 1, 3}); }, "block_size 8 is not supported (16, 32 or 64)"));
  s.block_size = 128;
  EXPECT_TRUE(error_contains([&] { plan(s, {5, 9}, {0, 1, 3}); }, "block_size 128 is not supported (16, 32 or 64)"));
}

TEST(MlaErrors, TooManyNewTokens) {
  auto s = good();
  s.num_tokens = 7;
  EXPECT_TRUE(error_contains([&] { plan(s, {5, 9}, {0, 2, 7}); },
                             "sequence 1 has 5 new tokens; the MLA decode kernel takes 0 to 4"));
  s.num_tokens = 6;  // 4 is the most, and allowed
  EXPECT_NO_THROW(plan(s, {5, 9}, {0, 2, 6}));
}

TEST(MlaErrors, QueryStartLocMustMatch) {
  auto s = good();
  EXPECT_TRUE(error_contains([&] { plan(s, {5, 9}, {0, 1, 4}); }, "query_start_loc ends at 4, but num_tokens is 3"));
  EXPECT_TRUE(error_contains([&] { plan(s, {5, 9}, {0, 1}); }, "query_start_loc has 2 entries, want num_seqs + 1 = 3"));
  EXPECT_TRUE(error_contains([&] { plan(s, {5, 300}, {0, 1, 3}); }, "beyond the table's capacity"));
}

TEST(MlaErrors, DtypeAndOrder) {
  ch11::MlaDecode m;
  EXPECT_TRUE(error_contains([&] { m.plan(good(), DType::fp32, {5, 9}, {0, 1, 3}); }, "half or bf16"));
  DeviceBuffer<half> buf(16);
  EXPECT_TRUE(error_contains([&] { m.run<half>(buf.get(), buf.get(), buf.get(), nullptr, nullptr, nullptr, 1.f); },
                             "run() before plan()"));
}

// The planning shape is chapter 10's, honestly: one KV head, head size 576; chapter 10's
// own check of sizes would refuse it, this chapter's accepts it.
TEST(MlaPlan, PlansWithChapter10sPlanner) {
  const auto v = ch11::planning_shape(good());
  EXPECT_EQ(v.num_kv_heads, 1);
  EXPECT_EQ(v.head_size, 576);
  EXPECT_NO_THROW(ch10::check_shape(v));
  auto plain = v;
  plain.check_sizes = nullptr;
  EXPECT_TRUE(error_contains([&] { ch10::check_shape(plain); }, "head_size 576 is not supported"));
  // 16 heads x 2 new tokens = 32 rows: one tile; 128 heads x 3 tokens = 384 rows: six.
  auto s = good();
  const ch10::Plan p = ch10::make_plan(ch11::planning_shape(s), {5, 9}, {0, 1, 3}, 4);
  EXPECT_EQ(p.items.size(), 2u);
  s.num_q_heads = 128;
  s.num_tokens = 4;
  const ch10::Plan p2 = ch10::make_plan(ch11::planning_shape(s), {5, 9}, {0, 1, 4}, 4);
  EXPECT_EQ(p2.items.size(), 2u + 6u);
}

}  // namespace
}  // namespace pa::test
