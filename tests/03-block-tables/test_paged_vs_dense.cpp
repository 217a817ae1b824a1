// Chapters 1-3 together: the same tokens written through a dense cache and through the
// paged path (block manager -> build_batch -> reshape_and_cache) must give back the same
// logical KV order (via gather) and the same attention output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "compare.h"
#include "pa/ch01_dense.h"
#include "pa/ch02_paged.h"
#include "pa/ch03_block_table.h"

namespace {

using pa::half;

void run_trace(int bs) {
  const int B = 5, Hq = 8, Hkv = 2, D = 64, decode_steps = 2 * bs + 3;
  const std::vector<int> prompts = {0, 1, bs - 1, bs, bs + 1};
  const int max_len = bs + 1 + decode_steps;
  const size_t row = size_t(Hkv) * D;
  const pa::ch02::PoolShape ps{48, bs, Hkv, D};
  pa::ch02::KVPool<half> pool(ps);
  pa::ch03::BlockManager manager(ps.num_blocks, bs);
  pa::ch01::DenseKVCache<half> dense({B, max_len, Hq, Hkv, D});
  std::mt19937 rng(bs);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<int> ids(B);
  for (int b = 0; b < B; ++b) manager.add_sequence(ids[b] = 10 + b);

  pa::ch03::BatchMetadata md;
  // One step: n[b] new tokens per sequence, written both ways.
  auto step = [&](const std::vector<int>& n) {
    md = pa::ch03::build_batch(manager, ids, n);
    md.validate(ps.num_blocks, bs);
    const int tokens = int(md.slot_mapping.size());
    std::vector<half> k(tokens * row), v(tokens * row);
    for (auto& e : k) e = pa::from_float<half>(normal(rng));
    for (auto& e : v) e = pa::from_float<half>(normal(rng));
    if (tokens > 0) {
      pa::DeviceBuffer<half> dk(k), dv(v);
      pa::DeviceBuffer<int64_t> slots(md.slot_mapping);
      pa::ch02::reshape_and_cache<half>(ps, dk.get(), dv.get(), tokens, pool.k.get(), pool.v.get(),
                                        slots.get());
    }
    // The dense cache takes one token per sequence per append.
    std::vector<int> first(B, 0);
    for (int b = 1; b < B; ++b) first[b] = first[b - 1] + n[b - 1];
    for (int t = 0; t < *std::max_element(n.begin(), n.end()); ++t) {
      std::vector<bool> active(B);
      std::vector<half> dk_rows(B * row), dv_rows(B * row);
      for (int b = 0; b < B; ++b) {
        active[b] = t < n[b];
        if (!active[b]) continue;
        std::copy_n(k.begin() + (first[b] + t) * row, row, dk_rows.begin() + b * row);
        std::copy_n(v.begin() + (first[b] + t) * row, row, dv_rows.begin() + b * row);
      }
      pa::DeviceBuffer<half> dk(dk_rows), dv(dv_rows);
      dense.append(dk.get(), dv.get(), active);
    }
  };
  step(prompts);
  for (int s = 0; s < decode_steps; ++s) step(std::vector<int>(B, 1));
  ASSERT_EQ(std::vector<int>(md.context_lens.begin(), md.context_lens.end()), dense.lengths());

  // Padding entries of the table point at a block nobody owns (all NaN): never read.
  int unowned = -1;
  for (int blk = ps.num_blocks - 1; blk >= 0 && unowned < 0; --blk)
    if (!manager.allocator().is_allocated(blk)) unowned = blk;
  ASSERT_GE(unowned, 0);
  std::vector<int> table(md.block_table.begin(), md.block_table.end());
  for (int& e : table)
    if (e == pa::ch03::kPaddingBlock) e = unowned;

  const int M = md.max_blocks_per_seq, L = M * bs;
  pa::DeviceBuffer<int> d_table(table), d_lens(std::vector<int>(md.context_lens.begin(), md.context_lens.end()));
  pa::DeviceBuffer<half> gk(size_t(B) * L * row), gv(size_t(B) * L * row);
  pa::test::poison(gk);
  pa::test::poison(gv);
  pa::ch02::gather_kv<half>(ps, pool.k.get(), pool.v.get(), d_table.get(), M, d_lens.get(), B, L,
                            gk.get(), gv.get());

  // Same logical KV order as the dense baseline, position by position.
  const size_t dense_elems = size_t(B) * max_len * row;
  std::vector<half> dk(dense_elems), dv(dense_elems);
  PA_CUDA_CHECK(cudaMemcpy(dk.data(), dense.k_cache(), dense_elems * 2, cudaMemcpyDeviceToHost));
  PA_CUDA_CHECK(cudaMemcpy(dv.data(), dense.v_cache(), dense_elems * 2, cudaMemcpyDeviceToHost));
  // The dense cache's rows, re-strided to L slots per sequence; past each sequence's end
  // the gather must leave its output untouched (still the poison).
  const half untouched = pa::test::output_poison<half>();
  std::vector<half> want_k(size_t(B) * L * row, untouched), want_v(want_k.size(), untouched);
  for (int b = 0; b < B; ++b) {
    const size_t n = size_t(dense.lengths()[b]) * row;
    std::copy_n(dk.begin() + size_t(b) * max_len * row, n, want_k.begin() + size_t(b) * L * row);
    std::copy_n(dv.begin() + size_t(b) * max_len * row, n, want_v.begin() + size_t(b) * L * row);
  }
  const auto gathered = pa::test::dense_cache_dims(B, L, Hkv, D);
  EXPECT_TRUE(pa::test::exactly_equal(gk.download(), want_k, gathered, untouched)) << "K: gathered vs dense";
  EXPECT_TRUE(pa::test::exactly_equal(gv.download(), want_v, gathered, untouched)) << "V: gathered vs dense";

  // Chapter 1's kernel on the gathered cache gives the dense answer, bit for bit.
  std::vector<half> q(size_t(B) * Hq * D);
  for (auto& e : q) e = pa::from_float<half>(normal(rng));
  pa::DeviceBuffer<half> dq(q), out_dense(q.size()), out_paged(q.size());
  const float scale = 0.125f;
  dense.decode(out_dense.get(), dq.get(), scale);
  pa::ch01::decode_attention<half>({B, L, Hq, Hkv, D}, out_paged.get(), dq.get(), gk.get(), gv.get(),
                                   d_lens.get(), scale);
  const auto a = out_dense.download(), p = out_paged.download();
  EXPECT_TRUE(std::none_of(a.begin(), a.end(), [](half e) { return std::isnan(pa::to_float(e)); }))
      << "NaN in the dense path's output";
  EXPECT_TRUE(pa::test::exactly_equal(p, a, pa::test::decode_out_dims(B, Hq, D)))
      << "attention on the gathered cache vs on the dense cache";

  for (int id : ids) manager.release(id);
  EXPECT_EQ(manager.allocator().num_free(), ps.num_blocks) << "blocks leaked";
}

TEST(PagedVsDense, SameKvOrderAndSameAttentionBlockSize8) { run_trace(8); }
TEST(PagedVsDense, SameKvOrderAndSameAttentionBlockSize16) { run_trace(16); }
TEST(PagedVsDense, SameKvOrderAndSameAttentionBlockSize32) { run_trace(32); }

}  // namespace
