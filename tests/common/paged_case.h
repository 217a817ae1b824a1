// A chapter 4/5 golden case on the device: the pools, the block table (its padding
// entries pointing at an all-NaN block, so a kernel that reads one leaks NaN), and the
// expected output. Also a float64 host reference for the GPU-only long tests, whose
// inputs are too large to ship as golden files.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "compare.h"
#include "golden.h"
#include "pa/ch04_paged_attention.h"

namespace pa::test {

// The attention shape of a paged golden case (q [B,Hq,D], k_pool [NB,Hkv,.,BS,.]).
inline ch04::PagedAttentionShape paged_shape_of(const GoldenCase& c) {
  const auto qs = c.shape("q"), ks = c.shape("k_pool"), ts = c.shape("block_table");
  return ch04::PagedAttentionShape{int(qs[0]), int(qs[1]), int(ks[1]), int(qs[2]),
                                   int(ks[3]), int(ks[0]), int(ts[1])};
}

// Decode attention's out (and q): [sequence, head, d].
inline Dims decode_out_dims(const ch04::PagedAttentionShape& s) {
  return decode_out_dims(s.num_seqs, s.num_q_heads, s.head_size);
}

// What a difference after moving the physical blocks means.
inline constexpr const char* kBlockPlacement =
    "the same logical cache stored in other physical blocks (pools permuted, block table "
    "rewritten to match) changed the output (got: permuted, want: as stored). The output "
    "may depend only on the logical cache: a difference means a read outside the blocks "
    "the table names: a wrong block-table index or stride, a wrong offset or stride inside "
    "a block, or a head index past the pool's KV heads (a query head used as a KV head: with "
    "GQA, query heads from num_kv_heads on read into the next physical block)";

// The case's block table with every padding entry pointing at its all-NaN block, so a
// kernel that reads padding leaks NaN into its output.
inline std::vector<int> table_with_poisoned_padding(const GoldenCase& c) {
  std::vector<int> table = c.get<int>("block_table");
  const int unowned = c.get<int>("unowned_block")[0];
  for (int& id : table)
    if (id < 0) id = unowned;
  return table;
}

template <typename T>
struct PagedCase {
  explicit PagedCase(const GoldenCase& c, unsigned permutation_seed = 0) : name(c.name()) {
    shape = paged_shape_of(c);
    std::vector<float> k = c.get<float>("k_pool"), v = c.get<float>("v_pool");
    table = table_with_poisoned_padding(c);
    if (permutation_seed) permute_blocks(k, v, permutation_seed);
    context_lens = c.get<int>("context_lens");
    max_context_len = *std::max_element(context_lens.begin(), context_lens.end());
    expected = c.get<double>("expected");
    scale = float(c.get<double>("scale")[0]);
    atol = c.param_double("atol");
    rtol = c.param_double("rtol");
    q = DeviceBuffer<T>(to_dtype<T>(c.get<float>("q")));
    k_host = to_dtype<T>(k);
    v_host = to_dtype<T>(v);
    k_pool = DeviceBuffer<T>(k_host);
    v_pool = DeviceBuffer<T>(v_host);
    d_table = DeviceBuffer<int>(table);
    d_lens = DeviceBuffer<int>(context_lens);
    out = DeviceBuffer<T>(expected.size());
  }

  // Moves physical block b to perm[b] in both pools and rewrites the table to match:
  // the same logical cache, stored elsewhere. The attention output must not change.
  void permute_blocks(std::vector<float>& k, std::vector<float>& v, unsigned seed) {
    const int n = shape.num_blocks;
    const size_t per_block = k.size() / size_t(n);
    std::vector<int> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    std::vector<float> k2(k.size()), v2(v.size());
    for (int b = 0; b < n; ++b) {
      std::copy_n(k.begin() + b * per_block, per_block, k2.begin() + perm[b] * per_block);
      std::copy_n(v.begin() + b * per_block, per_block, v2.begin() + perm[b] * per_block);
    }
    k.swap(k2);
    v.swap(v2);
    for (int& id : table) id = perm[id];
  }

  // Runs `run` with 0 in every NaN-poisoned slot of the pools, then puts the poison back:
  // a NanProbe's rerun (a NaN that stays was computed, not read).
  template <typename Run>
  auto with_finite_padding(Run run) {
    k_pool.upload(nan_to_zero(k_host));
    v_pool.upload(nan_to_zero(v_host));
    auto result = run();
    k_pool.upload(k_host);
    v_pool.upload(v_host);
    return result;
  }

  std::string name;
  ch04::PagedAttentionShape shape;
  std::vector<int> table, context_lens;
  int max_context_len;
  std::vector<double> expected;
  float scale;
  double atol, rtol;
  std::vector<T> k_host, v_host;  // the pools as the case has them, poison included
  DeviceBuffer<T> q, k_pool, v_pool, out;
  DeviceBuffer<int> d_table, d_lens;
};

// float64 paged decode attention on the host, straight from the pool layouts.
template <typename T>
std::vector<double> host_paged_decode(const ch04::PagedAttentionShape& s, const std::vector<T>& q,
                                      const std::vector<T>& k_pool, const std::vector<T>& v_pool,
                                      const std::vector<int>& table, const std::vector<int>& lens,
                                      double scale) {
  const int D = s.head_size, bs = s.block_size, x = 16 / int(sizeof(T));
  const int group = s.num_q_heads / s.num_kv_heads;
  std::vector<double> out(size_t(s.num_seqs) * s.num_q_heads * D, 0.0);
  for (int b = 0; b < s.num_seqs; ++b)
    for (int h = 0; h < s.num_q_heads; ++h) {
      const int g = h / group, len = lens[b];
      if (len == 0) continue;
      std::vector<double> score(len);
      double mx = -1e300, sum = 0;
      auto base = [&](int t) {
        return (int64_t(table[size_t(b) * s.max_blocks_per_seq + t / bs]) * s.num_kv_heads + g) *
               int64_t(D) * bs;
      };
      for (int t = 0; t < len; ++t) {
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += double(to_float(q[(size_t(b) * s.num_q_heads + h) * D + d])) *
                 to_float(k_pool[base(t) + (int64_t(d / x) * bs + t % bs) * x + d % x]);
        mx = std::max(mx, score[t] = dot * scale);
      }
      for (double& e : score) sum += (e = std::exp(e - mx));
      for (int d = 0; d < D; ++d) {
        double o = 0;
        for (int t = 0; t < len; ++t) o += score[t] * to_float(v_pool[base(t) + int64_t(d) * bs + t % bs]);
        out[(size_t(b) * s.num_q_heads + h) * D + d] = o / sum;
      }
    }
  return out;
}

}  // namespace pa::test
