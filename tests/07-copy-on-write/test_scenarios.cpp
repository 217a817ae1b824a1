// Chapter 7: parallel sampling, beam search and prefix sharing, each replayed twice with
// real K/V data: with shared blocks (copy-on-write) and with every sequence owning a
// private copy (chapter 3's manager). Same attention outputs, fewer blocks.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "compare.h"
#include "golden.h"
#include "pa/ch03_block_table.h"
#include "pa/ch04_paged_attention.h"
#include "pa/ch07_cow.h"

namespace {

using pa::half;
using pa::test::GoldenCase;

constexpr int kHkv = 2, kHq = 4, kD = 64;
constexpr size_t kRow = size_t(kHkv) * kD;

// One layer of paged KV: a pool plus a way to write rows at slots.
struct Store {
  Store(int blocks, int bs) : shape{blocks, bs, kHkv, kD}, pool(shape) {}
  void write(const std::vector<int64_t>& slots, const std::vector<half>& rows) {
    if (slots.empty()) return;
    pa::DeviceBuffer<half> k(rows), v(rows.size());
    std::vector<half> neg(rows.size());  // V differs from K: its negation
    for (size_t i = 0; i < rows.size(); ++i) neg[i] = pa::from_float<half>(-pa::to_float(rows[i]));
    v.upload(neg);
    pa::DeviceBuffer<int64_t> s(slots);
    pa::ch02::reshape_and_cache<half>(shape, k.get(), v.get(), int(slots.size()), pool.k.get(),
                                      pool.v.get(), s.get());
  }
  pa::ch02::PoolShape shape;
  pa::ch02::KVPool<half> pool;
};

// v1 attention of every sequence in `ids` with the given block lists.
std::vector<half> attend(Store& st, const std::vector<std::vector<int>>& lists,
                         const std::vector<int>& lens, const std::vector<half>& q) {
  size_t width = 1;
  for (const auto& l : lists) width = std::max(width, l.size());
  std::vector<int> table(lists.size() * width, 0);
  for (size_t b = 0; b < lists.size(); ++b)
    std::copy(lists[b].begin(), lists[b].end(), table.begin() + b * width);
  const pa::ch04::PagedAttentionShape s{int(lists.size()), kHq, kHkv, kD, st.shape.block_size,
                                        st.shape.num_blocks, int(width)};
  pa::DeviceBuffer<half> dq(q), out(q.size());
  pa::DeviceBuffer<int> t(table), l(lens);
  pa::test::poison(out);
  pa::ch04::paged_attention_v1<half>(s, out.get(), dq.get(), st.pool.k.get(), st.pool.v.get(), t.get(),
                                     l.get(), 0.125f);
  return out.download();
}

class Scenario : public ::testing::TestWithParam<std::string> {};

TEST_P(Scenario, SharedEqualsUnsharedWithFewerBlocks) {
  const GoldenCase c(pa::test::golden_dir("ch07") + "/" + GetParam());
  const int bs = int(c.param_int("block_size")), blocks = int(c.param_int("num_blocks"));
  const auto kind = c.get<int>("op_kind"), seq = c.get<int>("op_seq"), n = c.get<int>("op_n"),
             parent = c.get<int>("op_parent");
  pa::ch07::SharedBlockManager shared(blocks, bs);
  pa::ch03::BlockManager unshared(4096, bs);
  Store shared_kv(blocks, bs), unshared_kv(4096, bs);
  std::map<int, std::vector<half>> rows;  // every sequence's K rows, by position
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  int unshared_peak = 0;
  for (size_t i = 0; i < kind.size(); ++i) {
    SCOPED_TRACE("operation " + std::to_string(i));
    if (kind[i] == 0) {
      shared.add_sequence(seq[i]);
      unshared.add_sequence(seq[i]);
      rows[seq[i]] = {};
    } else if (kind[i] == 3) {  // fork: shared blocks vs a private copy of the parent's K/V
      shared.fork(parent[i], seq[i]);
      unshared.add_sequence(seq[i]);
      rows[seq[i]] = rows[parent[i]];
      unshared_kv.write(unshared.append_slots(seq[i], unshared.length(parent[i])), rows[seq[i]]);
    } else if (kind[i] == 2) {
      shared.release(seq[i]);
      unshared.release(seq[i]);
      rows.erase(seq[i]);
    } else {
      std::vector<half> fresh(size_t(n[i]) * kRow);
      for (auto& e : fresh) e = pa::from_float<half>(normal(rng));
      const auto slots = shared.append_slots(seq[i], n[i]);
      const auto copies = shared.take_copies();  // copy-on-write, before the write
      pa::ch07::copy_blocks<half>({shared_kv.pool.k.get()}, {shared_kv.pool.v.get()}, shared_kv.shape,
                                  copies);
      for (int64_t s : slots) ASSERT_EQ(shared.refcount(int(s / bs)), 1) << "a write into a shared block";
      shared_kv.write(slots, fresh);
      unshared_kv.write(unshared.append_slots(seq[i], n[i]), fresh);
      rows[seq[i]].insert(rows[seq[i]].end(), fresh.begin(), fresh.end());
    }
    unshared_peak = std::max(unshared_peak, unshared.allocator().num_used());
  }
  // Every live sequence attends to the same K/V either way: bit-identical outputs.
  std::vector<std::vector<int>> sl, ul;
  std::vector<int> lens;
  for (const auto& [id, r] : rows) {
    sl.push_back(shared.block_list(id));
    ul.push_back(unshared.block_list(id));
    lens.push_back(shared.length(id));
    ASSERT_EQ(shared.length(id), int(r.size() / kRow));
  }
  ASSERT_FALSE(lens.empty());
  std::vector<half> q(lens.size() * kHq * kD);
  for (auto& e : q) e = pa::from_float<half>(normal(rng));
  const auto a = attend(shared_kv, sl, lens, q), b = attend(unshared_kv, ul, lens, q);
  EXPECT_TRUE(pa::test::exactly_equal(a, b, pa::test::decode_out_dims(int(lens.size()), kHq, kD)))
      << "shared blocks (got) vs private copies (want); sequence i is the i-th live sequence by id";
  // Fewer blocks, by exactly what the reference model says.
  EXPECT_EQ(shared.allocator().high_water(), c.get<int64_t>("shared_blocks_used")[0]);
  EXPECT_EQ(unshared_peak, c.get<int64_t>("unshared_blocks_used")[0]);
  EXPECT_LT(shared.allocator().high_water(), unshared_peak);
  for (const auto& [id, r] : rows) shared.release(id);
  EXPECT_EQ(shared.allocator().num_free(), blocks) << "blocks leaked";
}

INSTANTIATE_TEST_SUITE_P(Ch07, Scenario, ::testing::ValuesIn(pa::test::golden_case_names("ch07", "scenario_")),
                         [](const auto& info) { return info.param; });

}  // namespace
