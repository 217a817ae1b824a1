// Chapter 9: every decode version against the reference (chapter 4's golden cases), with
// the planner's split and with forced odd splits, on permuted blocks; long contexts on
// the GPU against a float64 host reference.
//
// Core and stretch (make test-chapter-9 counts them apart). The core exercise is the
// cp.async ring (decode_kernel.cuh): the core tests run it with the tensor-core math
// (given code, block sizes 16 and 32) on plans given to it, so they never run the stretch
// exercises' code: attend_block_gqa (gqa_block.cuh: the CUDA-core math of versions gqa,
// split and pipelined, and of every version at block size 8) and plan_splits
// (split_plan.cpp: decode() without a plan). Those are tested by the Stretch* suites.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "paged_case.h"
#include "pa/ch09_fast_decode.h"

namespace {

using pa::ch04::PagedAttentionShape;
using pa::ch09::SplitPlan;
using pa::ch09::Version;
using pa::test::GoldenCase;
using pa::test::PagedCase;

const Version kVersions[] = {Version::gqa, Version::split, Version::pipelined,
                             Version::tensor_core};

// The golden cases of `chapter` whose names start with `prefix`, with half or bf16 queries,
// whose block size is (or, with `bs8` false, is not) 8.
std::vector<std::string> cases(const char* chapter, const char* prefix, bool bs8) {
  std::vector<std::string> out;
  for (const std::string& name : pa::test::golden_case_names(chapter, prefix))
    if (name.find("_fp32_") == std::string::npos && (name.find("_bs8_") != std::string::npos) == bs8)
      out.push_back(name);
  return out;
}

// A plan of `splits` partitions (whole blocks) covering max_len tokens.
SplitPlan forced_plan(int splits, int max_len, int bs) {
  const int blocks = std::max(1, (max_len + bs - 1) / bs);
  const int per = (blocks + splits - 1) / splits;
  return {(blocks + per - 1) / per, per * bs};
}

// `planned`: these versions through decode() (Version::gqa's 512-token partitions, the
// others plan_splits's); `forced`: these through decode_with_plan, with one partition and
// with odd numbers of them, so partition edges fall inside sequences.
template <typename T>
void check_case(const GoldenCase& g, std::initializer_list<Version> planned,
                std::initializer_list<Version> forced) {
  for (unsigned seed : {0u, 7u}) {  // as stored, and with the physical blocks permuted
    PagedCase<T> c(g, seed);
    const auto dims = pa::test::decode_out_dims(c.shape);
    pa::ch09::Workspace ws;
    ws.reserve(c.shape.num_seqs, c.shape.num_q_heads, 64, c.shape.head_size);
    for (Version v : planned) {
      ws.poison();  // a reduce that reads a partition no kernel wrote shows NaN
      pa::test::poison(c.out);
      pa::ch09::decode<T>(v, c.shape, c.out.get(), c.q.get(), c.k_pool.get(), c.v_pool.get(),
                          c.d_table.get(), c.d_lens.get(), c.max_context_len, c.scale, ws);
      EXPECT_TRUE(pa::test::all_close(c.out.download(), c.expected, dims, c.atol, c.rtol))
          << pa::ch09::name_of(v) << ", block permutation seed " << seed << ", " << c.name << ": "
          << g.param("note");
    }
    for (int splits : {1, 2, 3, 5}) {
      if (forced.size() == 0) break;
      const SplitPlan plan = forced_plan(splits, c.max_context_len, c.shape.block_size);
      for (Version v : forced) {
        ws.poison();
        pa::test::poison(c.out);
        pa::ch09::decode_with_plan<T>(v, plan, c.shape, c.out.get(), c.q.get(), c.k_pool.get(),
                                      c.v_pool.get(), c.d_table.get(), c.d_lens.get(),
                                      c.max_context_len, c.scale, ws);
        EXPECT_TRUE(pa::test::all_close(c.out.download(), c.expected, dims, c.atol, c.rtol))
            << pa::ch09::name_of(v) << " with " << plan.splits << " partitions of "
            << plan.partition_size << " tokens, seed " << seed << ", " << c.name;
      }
    }
  }
}

void check_golden(const std::string& name, std::initializer_list<Version> planned,
                  std::initializer_list<Version> forced) {
  const GoldenCase g(pa::test::golden_dir("ch04") + "/" + name);
  if (pa::parse_dtype(g.param("dtype")) == pa::DType::bf16)
    check_case<pa::bf16>(g, planned, forced);
  else
    check_case<pa::half>(g, planned, forced);
}

// Core: the ring (the tensor-core math: block sizes 16 and 32) on given plans.
class DecodeGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeGolden, TheRingMatchesTheReference) {
  check_golden(GetParam(), {}, {Version::tensor_core});
}

INSTANTIATE_TEST_SUITE_P(Ch09, DecodeGolden, ::testing::ValuesIn(cases("ch04", "decode_", false)),
                         [](const auto& info) { return info.param; });

TEST(Decode, FloatIsRefused) {  // not a serving dtype here: a clear refusal
  const GoldenCase g(pa::test::golden_dir("ch04") + "/decode_fp32_d128_bs16_g2_part513");
  PagedCase<float> c(g);
  pa::ch09::Workspace ws;
  const std::string msg = pa::test::error_of([&] {
    pa::ch09::decode_with_plan<float>(Version::tensor_core, forced_plan(1, c.max_context_len, 16),
                                      c.shape, c.out.get(), c.q.get(), c.k_pool.get(),
                                      c.v_pool.get(), c.d_table.get(), c.d_lens.get(),
                                      c.max_context_len, c.scale, ws);
  });
  EXPECT_NE(msg.find("half or bf16"), std::string::npos) << msg;
}

// Stretch exercise: attend_block_gqa. The CUDA-core versions (gqa, split, pipelined) on
// every case, block size 8 included (the ring at block size 8 runs this math too).
class StretchGqa : public ::testing::TestWithParam<std::string> {};

TEST_P(StretchGqa, EveryCudaCoreVersionMatchesTheReference) {
  check_golden(GetParam(), {Version::gqa}, {Version::split, Version::pipelined});
}

std::vector<std::string> all_cases() {
  std::vector<std::string> all = cases("ch04", "decode_", false), bs8 = cases("ch04", "decode_", true);
  all.insert(all.end(), bs8.begin(), bs8.end());
  return all;
}

INSTANTIATE_TEST_SUITE_P(Ch09, StretchGqa, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param; });

// Stretch exercise: plan_splits. decode() plans the split itself (the tensor-core math).
class StretchSplitPlanDecode : public ::testing::TestWithParam<std::string> {};

TEST_P(StretchSplitPlanDecode, ThePlannersSplitMatchesTheReference) {
  check_golden(GetParam(), {Version::tensor_core}, {});
}

INSTANTIATE_TEST_SUITE_P(Ch09, StretchSplitPlanDecode,
                         ::testing::ValuesIn(cases("ch04", "decode_", false)),
                         [](const auto& info) { return info.param; });

TEST(StretchSplitPlan, FillsAboutOneWave) {
  // 256 (sequence, KV head) units, 132 SMs x 3 resident blocks: one wave holds 396.
  // Exact values, worked by hand from the contract in split_plan.cpp's TODO.
  const SplitPlan a = pa::ch09::plan_splits(256, 4096, 16, 132, 3);
  EXPECT_EQ(a.splits, 1);  // 396 / 256 = 1 (rounded down: 2 would be more than a wave)
  EXPECT_EQ(a.partition_size, 4096);
  const SplitPlan b = pa::ch09::plan_splits(64, 32768, 16, 132, 3);  // B=8, Hkv=8, 32K
  EXPECT_EQ(b.splits, 6);  // 396 / 64; 2048 blocks: ceil(2048 / 6) = 342 blocks each
  EXPECT_EQ(b.partition_size, 342 * 16);
  EXPECT_LE(64 * b.splits, 132 * 3);
  EXPECT_GE(int64_t(b.splits) * b.partition_size, 32768);
  EXPECT_EQ(b.partition_size % 16, 0);
  // Many units already fill the GPU: no split, no reduce.
  EXPECT_EQ(pa::ch09::plan_splits(1024, 4096, 16, 132, 3).splits, 1);
  // Short contexts are not cut below 8 blocks per partition.
  const SplitPlan c = pa::ch09::plan_splits(8, 200, 16, 132, 4);  // 13 blocks
  EXPECT_EQ(c.splits, 1);
  EXPECT_EQ(c.partition_size, 208);
  const SplitPlan d = pa::ch09::plan_splits(1, 1000, 8, 132, 4);  // 125 blocks
  EXPECT_EQ(d.splits, 14);  // 15 partitions of 9 blocks would leave the last one empty
  EXPECT_EQ(d.partition_size, 9 * 8);
  EXPECT_GE(int64_t(d.splits) * d.partition_size, 1000);
  EXPECT_LT(int64_t(d.splits - 1) * d.partition_size, 1000);  // no empty partition
  EXPECT_EQ(pa::ch09::plan_splits(4, 0, 16, 132, 4).splits, 1);  // empty contexts
}

TEST(Decode, HeadsPerBlock) {
  auto gq = [](int hq, int hkv) {
    return pa::ch09::heads_per_block(PagedAttentionShape{1, hq, hkv, 128, 16, 1, 1});
  };
  EXPECT_EQ(gq(32, 32), 1);
  EXPECT_EQ(gq(32, 16), 2);
  EXPECT_EQ(gq(32, 8), 4);
  EXPECT_EQ(gq(32, 4), 8);
  EXPECT_EQ(gq(32, 1), 8);  // 32 heads per KV head: four thread blocks of 8
  EXPECT_EQ(gq(12, 2), 2);  // 6 per KV head: three of 2
  EXPECT_EQ(gq(3, 1), 1);
}

TEST(Decode, BadInputIsRefused) {
  pa::DeviceBuffer<pa::half> buf(1024);
  pa::DeviceBuffer<int> ints(16);
  pa::ch09::Workspace ws;
  const PagedAttentionShape s{1, 4, 4, 64, 16, 4, 2};
  std::string msg = pa::test::error_of([&] {
    pa::ch09::decode<pa::half>(Version::split, s, buf.get(), buf.get(), buf.get(), buf.get(),
                               ints.get(), ints.get(), 33, 1.f, ws);
  });
  EXPECT_NE(msg.find("beyond the table's capacity"), std::string::npos) << msg;
  msg = pa::test::error_of([&] {
    pa::ch09::decode<pa::half>(Version::gqa, {1, 6, 4, 64, 16, 4, 2}, buf.get(), buf.get(),
                               buf.get(), buf.get(), ints.get(), ints.get(), 8, 1.f, ws);
  });
  EXPECT_NE(msg.find("multiple of num_kv_heads"), std::string::npos) << msg;
  msg = pa::test::error_of([&] {
    pa::ch09::decode_with_plan<pa::half>(Version::split, {1, 16}, s, buf.get(), buf.get(),
                                         buf.get(), buf.get(), ints.get(), ints.get(), 32, 1.f, ws);
  });
  EXPECT_NE(msg.find("split plan covers 16 tokens"), std::string::npos) << msg;
  msg = pa::test::error_of([&] {
    pa::ch09::decode_with_plan<pa::half>(Version::split, {2, 12}, s, buf.get(), buf.get(),
                                         buf.get(), buf.get(), ints.get(), ints.get(), 20, 1.f, ws);
  });
  EXPECT_NE(msg.find("bad split plan"), std::string::npos) << msg;
}

// Host-built cases for paths the golden cases do not reach: one partition long enough
// that each warp walks more than 32 blocks (its block ids are refetched every 32), and
// head size 256 with blocks of 32, where no ring fits and the tensor-core math reads
// global memory directly. `versions`: the tensor-core one (core), or the CUDA-core ones
// (stretch: attend_block_gqa).
void long_partitions(std::initializer_list<Version> versions) {
  struct Case {
    int hq, hkv, d, bs, len;
  };
  for (const Case& k : {Case{4, 1, 64, 16, 2200}, Case{4, 2, 256, 32, 75}}) {
    const int blocks = (k.len + k.bs - 1) / k.bs;
    const PagedAttentionShape s{2, k.hq, k.hkv, k.d, k.bs, 2 * blocks + 3, blocks};
    const size_t per_block = size_t(s.num_kv_heads) * s.head_size * k.bs;
    std::mt19937 rng(k.d);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<pa::half> kc(per_block * s.num_blocks), vc(kc.size()),
        q(size_t(s.num_seqs) * s.num_q_heads * s.head_size);
    for (auto& e : kc) e = pa::from_float<pa::half>(normal(rng));
    for (auto& e : vc) e = pa::from_float<pa::half>(normal(rng));
    for (auto& e : q) e = pa::from_float<pa::half>(normal(rng));
    std::vector<int> ids(s.num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int> table(ids.begin(), ids.begin() + 2 * blocks), lens = {k.len, k.len / 3};
    pa::DeviceBuffer<pa::half> dk(kc), dv(vc), dq(q), out(q.size());
    pa::DeviceBuffer<int> dt(table), dl(lens);
    pa::ch09::Workspace ws;
    const float scale = 1.f / std::sqrt(float(k.d));
    const auto want = pa::test::host_paged_decode(s, q, kc, vc, table, lens, scale);
    const SplitPlan one{1, blocks * k.bs};
    for (Version v : versions) {
      pa::test::poison(out);
      pa::ch09::decode_with_plan<pa::half>(v, one, s, out.get(), dq.get(), dk.get(), dv.get(),
                                           dt.get(), dl.get(), k.len, scale, ws);
      EXPECT_TRUE(pa::test::all_close(out.download(), want, pa::test::decode_out_dims(s), 2e-3, 2e-3))
          << pa::ch09::name_of(v) << ", head size " << k.d << ", block size " << k.bs;
    }
  }
}

TEST(Decode, LongPartitionsAndDirectTensorCores) { long_partitions({Version::tensor_core}); }

TEST(StretchGqaLong, LongPartitionsOnTheCudaCores) {
  long_partitions({Version::split, Version::pipelined});
}

// GPU only: 32K-token contexts (and one much shorter sequence beside them) against a
// float64 host reference, GQA 4 and 8: the ring on given plans (core), every version with
// the planner's split (stretch: both exercises).
void thirty_two_thousand_tokens(bool core) {
  const int len = 32768, bs = 16, blocks = len / bs;
  for (int hkv : {2, 1}) {
    const PagedAttentionShape s{2, 8, hkv, 128, bs, 2 * blocks + 7, blocks};
    const size_t per_block = size_t(s.num_kv_heads) * s.head_size * bs;
    std::mt19937 rng(9 + hkv);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<pa::half> k(per_block * s.num_blocks), v(k.size()),
        q(size_t(s.num_seqs) * s.num_q_heads * s.head_size);
    for (auto& e : k) e = pa::from_float<pa::half>(normal(rng));
    for (auto& e : v) e = pa::from_float<pa::half>(normal(rng));
    for (auto& e : q) e = pa::from_float<pa::half>(normal(rng));
    std::vector<int> ids(s.num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int> table(ids.begin(), ids.begin() + 2 * blocks), lens = {len, 777};
    pa::DeviceBuffer<pa::half> dk(k), dv(v), dq(q), out(q.size());
    pa::DeviceBuffer<int> dt(table), dl(lens);
    pa::ch09::Workspace ws;
    const float scale = 0.0883883f;
    const auto want = pa::test::host_paged_decode(s, q, k, v, table, lens, scale);
    for (int splits : {1, 6}) {
      if (!core) break;
      pa::test::poison(out);
      pa::ch09::decode_with_plan<pa::half>(Version::tensor_core, forced_plan(splits, len, bs), s,
                                           out.get(), dq.get(), dk.get(), dv.get(), dt.get(),
                                           dl.get(), len, scale, ws);
      EXPECT_TRUE(pa::test::all_close(out.download(), want, pa::test::decode_out_dims(s), 2e-3, 2e-3))
          << "tensor_core, " << splits << " partitions, Hkv " << hkv;
    }
    for (Version ver : kVersions) {
      if (core) break;
      pa::test::poison(out);
      pa::ch09::decode<pa::half>(ver, s, out.get(), dq.get(), dk.get(), dv.get(), dt.get(),
                                 dl.get(), len, scale, ws);
      EXPECT_TRUE(pa::test::all_close(out.download(), want, pa::test::decode_out_dims(s), 2e-3, 2e-3))
          << pa::ch09::name_of(ver) << ", Hkv " << hkv;
    }
  }
}

TEST(DecodeLong, ThirtyTwoThousandTokens) {
  if (std::string(PA_BACKEND_NAME) != "cuda") GTEST_SKIP() << "long contexts run on the GPU";
  thirty_two_thousand_tokens(true);
}

TEST(StretchDecodeLong, ThirtyTwoThousandTokens) {
  if (std::string(PA_BACKEND_NAME) != "cuda") GTEST_SKIP() << "long contexts run on the GPU";
  thirty_two_thousand_tokens(false);
}

}  // namespace
