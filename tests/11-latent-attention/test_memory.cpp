// Chapter 11: what the latent cache costs against chapter 1's K/V cache, exactly.
#include <gtest/gtest.h>

#include "compare.h"
#include "pa/ch03_block_table.h"
#include "pa/ch11_mla.h"

namespace pa::test {
namespace {

// The chapter's table, per token and layer (reference/pa_ref/mla.py's byte counts).
TEST(LatentMemory, BytesPerTokenAndLayer) {
  EXPECT_EQ(ch11::latent_bytes_per_token_layer(2), 1152);
  const auto rep = ch11::mla_memory_report(synthetic_trace(), 64, int64_t(80) << 30);
  EXPECT_EQ(rep.mla.bytes_per_token_layer, 1152) << "one row of c_kv 512 + k_rope 64, in bf16, for all heads";
  EXPECT_EQ(rep.gqa.bytes_per_token_layer, 4096) << "K and V of 8 heads of 128";
  EXPECT_EQ(rep.mha.bytes_per_token_layer, 65536) << "K and V of 128 heads of 128";
  EXPECT_EQ(rep.mla.bytes_per_token, 61 * 1152);
}

// Hand-worked: 2 layers, bf16, blocks of 16. Requests of 16 and 1 tokens hold 1 + 1
// blocks; a block of every layer is 16 x 2 x 1,152 = 36,864 bytes.
TEST(LatentMemory, HandWorkedSmallTrace) {
  const std::vector<Request> trace{{10, 6}, {1, 0}};
  const ch11::CacheCost c = ch11::latent_cache_cost(trace, 2, 16, 2, 1'000'000);
  EXPECT_EQ(c.bytes_per_token_layer, 1152);
  EXPECT_EQ(c.bytes_per_token, 2304);
  EXPECT_EQ(c.blocks_in_budget, 27) << "1,000,000 / 36,864 = 27.1, rounded down";
  EXPECT_EQ(c.seqs_in_budget, 27) << "(1,000,000 x 2) / (2 blocks x 36,864) = 27.1, rounded down";
  // 17 tokens: two blocks, not one and a bit.
  const ch11::CacheCost d = ch11::latent_cache_cost({{17, 0}}, 1, 16, 2, 100'000);
  EXPECT_EQ(d.seqs_in_budget, 2) << "100,000 / (2 blocks x 16 x 1,152 = 36,864) = 2.7";
  EXPECT_EQ(d.blocks_in_budget, 5) << "100,000 / (16 x 1,152 = 18,432) = 5.4";
  // One byte short of 6 blocks is 5; exactly 6 is 6.
  EXPECT_EQ(ch11::latent_cache_cost({{16, 0}}, 1, 16, 2, 6 * 18432 - 1).blocks_in_budget, 5);
  EXPECT_EQ(ch11::latent_cache_cost({{16, 0}}, 1, 16, 2, 6 * 18432).seqs_in_budget, 6);
  // fp8-sized elements: half the bytes.
  EXPECT_EQ(ch11::latent_cache_cost({{16, 0}}, 1, 16, 1, 6 * 18432).seqs_in_budget, 12);
}

// seqs_in_budget is one division of exact products: rounding anything first loses (or
// invents) sequences. 1 layer, bf16, blocks of 16: a block is 16 x 1,152 = 18,432 bytes.
TEST(LatentMemory, SeqsInBudgetRoundsOnlyAtTheEnd) {
  // 3 requests holding 1 + 1 + 2 = 4 blocks, and a budget of 1.5 blocks (27,648 bytes):
  // 27,648 x 3 / (4 x 18,432) = 1.125 -> 1. Whole blocks first (1 block in budget) gives
  // 1 x 3 / 4 = 0.
  const ch11::CacheCost c = ch11::latent_cache_cost({{16, 0}, {10, 6}, {20, 12}}, 1, 16, 2, 27648);
  EXPECT_EQ(c.seqs_in_budget, 1)
      << "3 requests hold 4 blocks of 18,432 bytes; the budget is 27,648 bytes (1.5 blocks): "
         "27,648 x 3 / (4 x 18,432) = 1.125, rounded down once, at the end. (0 means the budget "
         "was rounded to whole blocks before the division: blocks_in_budget x n / blocks.)";
  // 5 requests holding 6 blocks (110,592 bytes, a mean of 22,118.4 per request) and a budget
  // of 22,118 bytes: 22,118 x 5 / 110,592 = 0.99998 -> 0. Dividing by the mean rounded down
  // first (110,592 / 5 = 22,118) gives 1: a sequence that does not fit.
  const ch11::CacheCost d = ch11::latent_cache_cost({{16, 0}, {1, 0}, {8, 8}, {3, 2}, {17, 15}}, 1, 16, 2, 22118);
  EXPECT_EQ(d.seqs_in_budget, 0)
      << "5 requests hold 6 blocks (110,592 bytes); the budget is 22,118 bytes: 22,118 x 5 / "
         "110,592 = 0.99998, rounded down: 0. (1 means the budget was divided by the mean "
         "request rounded down first: 110,592 / 5 = 22,118, which overestimates.)";
}

// The same bill as chapter 3's paged_memory_report gives a cache of the same bytes per
// token, on the course's trace, and no overflow at a huge budget.
TEST(LatentMemory, AgreesWithChapter3AndDoesNotOverflow) {
  const auto trace = synthetic_trace();
  KVConfig same;  // 2 * layers * heads * head_size * 2 = 61 * 1152 with one head of 288
  same.num_layers = 61;
  same.num_kv_heads = 1;
  same.head_size = 288;
  same.dtype_bytes = 2;
  for (int bs : {16, 32, 64}) {
    const int64_t budget = int64_t(80) << 30;
    const auto c = ch11::latent_cache_cost(trace, 61, bs, 2, budget);
    EXPECT_EQ(c.seqs_in_budget, ch03::paged_memory_report(trace, same, bs, budget).paged_seqs_in_budget)
        << "block_size " << bs;
    const int64_t huge = int64_t(1) << 62;
    const auto h = ch11::latent_cache_cost(trace, 61, bs, 2, huge);
    EXPECT_EQ(h.seqs_in_budget, ch03::paged_memory_report(trace, same, bs, huge).paged_seqs_in_budget)
        << "block_size " << bs << ", budget 2^62: the sequences that fit, as chapter 3 counts them"
        << " (at this budget, budget * n must not overflow either)";
    EXPECT_EQ(h.blocks_in_budget, huge / (int64_t(bs) * 61 * 1152));
  }
  // MLA fits 3.6x the sequences of GQA-8 and 57x those of MHA: the point of the chapter.
  const auto rep = ch11::mla_memory_report(trace, 64, int64_t(80) << 30);
  EXPECT_GT(rep.mla.seqs_in_budget, 3 * rep.gqa.seqs_in_budget);
  EXPECT_GT(rep.mla.seqs_in_budget, 50 * rep.mha.seqs_in_budget);
}

// DeepSeek Sparse Attention (chapter 14): the indexer's 128 e4m3 bytes and float32 scale
// join the latent row of every token and layer (reference/pa_ref/dsa.py's 132 bytes).
TEST(LatentMemory, DsaAddsTheIndexersBytes) {
  EXPECT_EQ(ch11::dsa_bytes_per_token_layer(ch11::LatentFormat::fp8_e4m3), 788)
      << "DeepSeek-V3.2: the 656-byte fp8 latent row + the indexer's 128 + 4";
  EXPECT_EQ(ch11::dsa_bytes_per_token_layer(ch11::LatentFormat::bits16, 2), 1152 + 132);
  // Hand-worked: 2 layers, blocks of 16; the requests of 16 and 1 tokens hold 1 + 1 blocks,
  // a block of every layer is 16 x 2 x 788 = 25,216 bytes.
  const ch11::CacheCost c =
      ch11::dsa_cache_cost({{10, 6}, {1, 0}}, 2, 16, ch11::LatentFormat::fp8_e4m3, 1'000'000);
  EXPECT_EQ(c.bytes_per_token_layer, 788);
  EXPECT_EQ(c.bytes_per_token, 1576);
  EXPECT_EQ(c.blocks_in_budget, 39) << "1,000,000 / 25,216 = 39.7, rounded down";
  EXPECT_EQ(c.seqs_in_budget, 39) << "(1,000,000 x 2) / (2 blocks x 25,216) = 39.7, rounded down";
  // DeepSeek-V3.2's 61 layers, 80 GiB, blocks of 64, on the course's trace: what the indexer
  // costs against the fp8 latent cache alone (656 of the 788 bytes).
  const auto trace = synthetic_trace();
  const int64_t budget = int64_t(80) << 30;
  const auto dsa = ch11::dsa_cache_cost(trace, 61, 64, ch11::LatentFormat::fp8_e4m3, budget);
  EXPECT_EQ(dsa.bytes_per_token, 61 * 788);
  EXPECT_EQ(dsa.blocks_in_budget, budget / (64 * 61 * 788));
  KVConfig same;  // chapter 3's bill for the same bytes: one head of 394 bytes, K and V
  same.num_layers = 61;
  same.num_kv_heads = 1;
  same.head_size = 394;
  same.dtype_bytes = 1;
  EXPECT_EQ(dsa.seqs_in_budget, ch03::paged_memory_report(trace, same, 64, budget).paged_seqs_in_budget);
  // Chapter 8's DSA model in 16 bits costs what this bill says a token costs.
  ch08::ModelConfig mc;
  mc.attention = ch08::AttentionKind::mla;
  mc.kv_dtype = DType::bf16;
  mc.dsa = true;
  EXPECT_EQ(mc.kv_bytes_per_token(), mc.num_layers * ch11::dsa_bytes_per_token_layer(ch11::LatentFormat::bits16, 2));
  EXPECT_TRUE(error_contains(
      [] { ch11::dsa_cache_cost({}, 61, 64, ch11::LatentFormat::fp8_e4m3, 1000); }, "dsa_cache_cost: the trace is empty"));
  EXPECT_TRUE(error_contains([] { ch11::dsa_cache_cost({{1, 1}}, 61, 64, ch11::LatentFormat::fp8_e4m3, 1000, 4); },
                             "dtype_bytes 2"));
}

TEST(LatentMemory, Errors) {
  EXPECT_TRUE(error_contains([] { ch11::latent_cache_cost({}, 61, 64, 2, 1000); }, "the trace is empty"));
  EXPECT_TRUE(error_contains([] { ch11::latent_cache_cost({{1, 1}}, 61, 0, 2, 1000); }, "block_size must be positive"));
  EXPECT_TRUE(error_contains([] { ch11::latent_cache_cost({{1, 1}}, 61, 64, 2, 0); }, "budget_bytes must be positive"));
}

}  // namespace
}  // namespace pa::test
