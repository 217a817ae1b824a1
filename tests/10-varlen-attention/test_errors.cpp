// Chapter 10: bad batches, shapes and calls get an error that names the problem, before
// anything reaches the GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compare.h"
#include "pa/ch10_varlen.h"

namespace {

using pa::ch10::CacheType;
using pa::ch10::VarlenAttention;
using pa::ch10::VarlenShape;
using pa::test::error_of;

#define EXPECT_ERROR(msg, text) \
  EXPECT_NE((msg).find(text), std::string::npos) << "want an error containing \"" << (text) << "\", got: " << (msg)

// Two sequences, 5 new tokens (3 + 2), tables of 2 blocks of 16 tokens from a pool of 8.
const VarlenShape kShape{2, 5, 4, 2, 64, 16, 8, 2};
const std::vector<int> kTable = {0, 1, 2, 3};

std::string meta(std::vector<int> lens, std::vector<int> qsl, std::vector<int> table = kTable,
                 VarlenShape s = kShape) {
  return error_of([&] { pa::ch10::check_metadata(s, table, lens, qsl); });
}

TEST(VarlenErrors, BadMetadataIsRefused) {
  EXPECT_EQ(meta({20, 3}, {0, 3, 5}), "(no error)");
  EXPECT_EQ(meta({20, 2}, {0, 3, 5}, {}), "(no error)") << "an empty table is not checked";
  EXPECT_ERROR(meta({20, 3}, {0, 4, 3}, kTable, {2, 3, 4, 2, 64, 16, 8, 2}),
               "query_start_loc decreases at sequence 1");
  EXPECT_ERROR(meta({20, 3}, {1, 3, 5}), "query_start_loc[0] must be 0");
  EXPECT_ERROR(meta({20, 3}, {0, 3, 4}), "but num_tokens is 5");
  EXPECT_ERROR(meta({20, 3}, {0, 3, 5, 5}), "query_start_loc has 4 entries");
  EXPECT_ERROR(meta({20}, {0, 3, 5}), "seq_lens has 1 entries");
  EXPECT_ERROR(meta({20, 1}, {0, 3, 5}), "sequence 1 has 2 new tokens but seq_len 1");
  EXPECT_ERROR(meta({33, 3}, {0, 3, 5}), "beyond the table's capacity");
  EXPECT_ERROR(meta({20, 3}, {0, 3, 5}, {0, 9, 2, 3}), "block_table[0][1] = 9 is not a block");
  EXPECT_ERROR(meta({20, 3}, {0, 3, 5}, {0, 1, -1, 3}), "block_table[1][0] = -1 is not a block");
  // An entry past a sequence's last block is padding: never read, never checked.
  EXPECT_EQ(meta({16, 3}, {0, 3, 5}, {0, -1, 2, -1}), "(no error)");
  // The planner checks the lengths too.
  EXPECT_ERROR(error_of([] { pa::ch10::make_plan(kShape, {20, 1}, {0, 3, 5}, 4); }),
               "new tokens but seq_len");
  EXPECT_ERROR(error_of([] { pa::ch10::make_plan(kShape, {20, 3}, {0, 3, 5}, 0); }),
               "grid must be at least 1");
}

TEST(VarlenErrors, BadShapesAreRefused) {
  auto shape = [](VarlenShape s) { return error_of([&] { pa::ch10::check_shape(s); }); };
  EXPECT_EQ(shape(kShape), "(no error)");
  EXPECT_ERROR(shape({1, 1, 4, 4, 100, 16, 4, 2}), "head_size 100 is not supported");
  EXPECT_ERROR(shape({1, 1, 4, 4, 64, 12, 4, 2}), "block_size 12 is not supported");
  EXPECT_ERROR(shape({1, 1, 6, 4, 64, 16, 4, 2}), "must be a multiple of num_kv_heads");
  EXPECT_ERROR(shape({1, -1, 4, 4, 64, 16, 4, 2}), "num_tokens must be >= 0");
  // plan() checks the shape before anything else.
  VarlenAttention attn;
  EXPECT_ERROR(error_of([&] {
                 attn.plan({1, 1, 4, 4, 100, 16, 4, 2}, pa::DType::fp16, CacheType::model_dtype,
                           {1}, {0, 1});
               }),
               "head_size 100 is not supported");
}

TEST(VarlenErrors, MisusedRunnerIsRefused) {
  pa::DeviceBuffer<pa::half> h(4096);
  pa::DeviceBuffer<pa::bf16> b(4096);
  pa::DeviceBuffer<uint8_t> bytes(4096);
  pa::DeviceBuffer<int> ints(16);
  pa::DeviceBuffer<float> one(std::vector<float>{1.f});
  const std::vector<int> lens = {20, 3}, qsl = {0, 3, 5};
  auto run_half = [&](VarlenAttention& a) {
    return error_of([&] {
      a.run<pa::half>(h.get(), h.get(), h.get(), h.get(), ints.get(), ints.get(), ints.get(), 1.f);
    });
  };

  VarlenAttention attn;
  EXPECT_ERROR(run_half(attn), "run() before plan()");

  // Planned for fp16, run with bf16.
  attn.plan(kShape, pa::DType::fp16, CacheType::model_dtype, lens, qsl, 0, 4);
  EXPECT_ERROR(error_of([&] {
                 attn.run<pa::bf16>(b.get(), b.get(), b.get(), b.get(), ints.get(), ints.get(),
                                    ints.get(), 1.f);
               }),
               "planned for fp16 queries, run with bf16");
  // Planned for the model dtype's cache, run on an e4m3 one (and the other way round).
  EXPECT_ERROR(error_of([&] {
                 attn.run_fp8<pa::half>(h.get(), h.get(), bytes.get(), bytes.get(), ints.get(),
                                        ints.get(), ints.get(), one.get(), one.get(), 1.f);
               }),
               "run with run_fp8");
  attn.plan(kShape, pa::DType::fp16, CacheType::fp8_e4m3, lens, qsl, 0, 4);
  EXPECT_ERROR(run_half(attn), "run with run");
  EXPECT_ERROR(error_of([&] {
                 attn.run_fp8<pa::half>(h.get(), h.get(), bytes.get(), bytes.get(), ints.get(),
                                        ints.get(), ints.get(), nullptr, nullptr, 1.f);
               }),
               "k_scale and v_scale");

  // An e4m3 cache with 8-token blocks is refused; and a failed plan leaves nothing to run.
  VarlenShape bs8 = kShape;
  bs8.block_size = 8;
  bs8.max_blocks_per_seq = 4;
  EXPECT_ERROR(error_of([&] {
                 attn.plan(bs8, pa::DType::fp16, CacheType::fp8_e4m3, lens, qsl, 0, 4);
               }),
               "an e4m3 cache needs block_size 16 or 32");
  EXPECT_ERROR(run_half(attn), "run() before plan()");

  // Bad lengths at plan time.
  EXPECT_ERROR(error_of([&] {
                 attn.plan(kShape, pa::DType::fp16, CacheType::model_dtype, {20, 1}, qsl, 0, 4);
               }),
               "new tokens but seq_len");
  // float queries: the kernel serves half and bf16 (refused with the planner's grid and
  // with a given one alike).
  EXPECT_ERROR(error_of([&] {
                 attn.plan(kShape, pa::DType::fp32, CacheType::model_dtype, lens, qsl);
               }),
               "half or bf16");
  EXPECT_ERROR(error_of([&] {
                 attn.plan(kShape, pa::DType::fp32, CacheType::model_dtype, lens, qsl,
                           /*chunk_tokens=*/0, /*grid=*/4);
               }),
               "half or bf16");
}

}  // namespace
