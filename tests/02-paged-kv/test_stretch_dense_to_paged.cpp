// Chapter 2, stretch exercise: dense_to_paged, gather_kv's inverse. Every element of both
// pools is checked bit for bit: the slots of the sequences' tokens hold the dense values,
// everything else keeps the pools' NaN poison. The dense slots past each sequence's end
// hold 777, so a write past the end shows as 777 in a pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compare.h"
#include "pa/ch02_paged.h"
#include "pa/dtype.h"

namespace {

using pa::ch02::PoolShape;

struct Case {
  PoolShape s;
  int max_blocks, max_seq_len;
  std::vector<int> lens;
  std::string note;
};

template <typename T>
uint32_t bits(T v) {
  uint32_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

template <typename T>
void check(const Case& c) {
  const PoolShape& s = c.s;
  const int B = int(c.lens.size()), H = s.num_kv_heads, D = s.head_size, bs = s.block_size;
  const int x = pa::ch02::pack_x<T>();
  std::mt19937 rng(20 + D + bs);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  // Dense caches: the tokens of each sequence random, the slots past its end 777.
  const size_t dense_elems = size_t(B) * c.max_seq_len * H * D;
  std::vector<T> kd(dense_elems), vd(dense_elems);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < c.max_seq_len; ++t)
      for (int e = 0; e < H * D; ++e) {
        const size_t i = (size_t(b) * c.max_seq_len + t) * H * D + e;
        kd[i] = pa::from_float<T>(t < c.lens[size_t(b)] ? u(rng) : 777.f);
        vd[i] = pa::from_float<T>(t < c.lens[size_t(b)] ? u(rng) : 777.f);
      }
  // The tables: the pool's blocks shuffled, -1 past each sequence's last block.
  std::vector<int> ids(size_t(s.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int> table(size_t(B) * c.max_blocks, -1);
  size_t next = 0;
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < (c.lens[size_t(b)] + bs - 1) / bs; ++j) table[size_t(b) * c.max_blocks + j] = ids[next++];

  pa::ch02::KVPool<T> pool(s);  // every byte 0xFF
  pa::DeviceBuffer<T> dk(kd), dv(vd);
  pa::DeviceBuffer<int> dtable(table), dlens(c.lens);
  pa::ch02::dense_to_paged<T>(s, dk.get(), dv.get(), B, c.max_seq_len, dtable.get(), c.max_blocks, dlens.get(),
                              pool.k.get(), pool.v.get());
  const std::vector<T> got_k = pool.k.download(), got_v = pool.v.download();

  // What each pool element must hold, and whose value it is.
  const T poison = [] { T p; std::memset(&p, 0xFF, sizeof(T)); return p; }();
  std::vector<T> want_k(got_k.size(), poison), want_v(got_v.size(), poison);
  std::vector<std::string> whose_k(got_k.size()), whose_v(got_v.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < c.lens[size_t(b)]; ++t) {
      const int64_t blk = table[size_t(b) * c.max_blocks + t / bs], o = t % bs;
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          const size_t src = (size_t(b) * c.max_seq_len + t) * H * D + size_t(h) * D + d;
          const int64_t region = (blk * H + h) * int64_t(D) * bs;
          const size_t ki = size_t(region + int64_t(d / x) * bs * x + o * x + d % x);
          const size_t vi = size_t(region + int64_t(d) * bs + o);
          std::ostringstream w;
          w << "sequence " << b << ", token " << t << " (block " << blk << ", offset " << o << "), head " << h
            << ", d " << d;
          want_k[ki] = kd[src];
          whose_k[ki] = w.str();
          want_v[vi] = vd[src];
          whose_v[vi] = w.str();
        }
    }
  // Whose value a wrong element holds (the first dense element with those bits).
  auto source_of = [&](const std::vector<T>& dense, T v) -> std::string {
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < c.lens[size_t(b)]; ++t)
        for (int e = 0; e < H * D; ++e)
          if (bits(dense[(size_t(b) * c.max_seq_len + t) * H * D + e]) == bits(v))
            return " (the value of sequence " + std::to_string(b) + ", token " + std::to_string(t) + ", head " +
                   std::to_string(e / D) + ", d " + std::to_string(e % D) + ")";
    return "";
  };
  auto compare = [&](const char* name, const std::vector<T>& got, const std::vector<T>& want,
                     const std::vector<std::string>& whose) {
    int bad = 0;
    size_t first = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (bits(got[i]) != bits(want[i]) && bad++ == 0) first = i;
    if (bad == 0) return ::testing::AssertionSuccess();
    const int64_t region_elems = int64_t(D) * bs;
    const int64_t blk = int64_t(first) / (int64_t(H) * region_elems), h = int64_t(first) / region_elems % H;
    auto r = ::testing::AssertionFailure();
    r << c.note << ": " << bad << " wrong elements of the " << name << " pool; the first at index " << first
      << " (block " << blk << ", head " << h << ", element " << int64_t(first) % region_elems
      << " of its region): got " << pa::to_float(got[first])
      << source_of(name[0] == 'K' ? kd : vd, got[first]);
    if (whose[first].empty())
      r << ", want the poison (no token's slot: it must not be written)"
        << (pa::to_float(got[first]) == 777.f ? "; 777 is a dense slot past a sequence's end" : "");
    else
      r << ", want " << pa::to_float(want[first]) << ", the value of " << whose[first];
    return r;
  };
  EXPECT_TRUE(compare("K", got_k, want_k, whose_k)) << "\n  (the K pool: [num_blocks, H, D / x, block_size, x], x = " << x << ")";
  EXPECT_TRUE(compare("V", got_v, want_v, whose_v)) << "\n  (the V pool: [num_blocks, H, D, block_size])";
}

// Lengths: two blocks and a partial third, one partial block, empty, exactly two blocks.
TEST(StretchDenseToPaged, Fp32) {
  check<float>({{16, 8, 2, 64}, 3, 26, {19, 5, 0, 16}, "fp32, block_size 8, 2 KV heads, D 64 (x = 4)"});
}

TEST(StretchDenseToPaged, Fp16ThreeHeads) {
  check<pa::half>({{12, 16, 3, 80}, 3, 50, {40, 16, 1}, "fp16, block_size 16, 3 KV heads, D 80 (x = 8)"});
}

TEST(StretchDenseToPaged, Bf16LongBlocks) {
  check<pa::bf16>({{8, 32, 1, 128}, 2, 64, {33, 64, 7}, "bf16, block_size 32, 1 KV head, D 128 (x = 8)"});
}

}  // namespace
