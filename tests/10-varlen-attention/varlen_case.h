// A chapter 10 golden case on the device (the cache in the queries' dtype or in e4m3), and
// a float64 host reference of varlen causal attention for the GPU-only tests, whose
// inputs are too large to ship as golden files.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "compare.h"
#include "golden.h"
#include "paged_case.h"
#include "pa/ch10_varlen.h"

namespace pa::test {

// q and out: [num_tokens, Hq, D], the new tokens of every sequence one after another.
inline Dims varlen_out_dims(int num_tokens, int num_q_heads, int head_size) {
  return {{"query token", num_tokens}, {"head", num_q_heads}, {"d", head_size}};
}
inline Dims varlen_out_dims(const ch10::VarlenShape& s) {
  return varlen_out_dims(s.num_tokens, s.num_q_heads, s.head_size);
}

// Moves physical block b to perm[b] in both pools and rewrites the table to match: the
// same logical cache, stored elsewhere.
template <typename E>
void permute_pool_blocks(std::vector<E>& k, std::vector<E>& v, std::vector<int>& table,
                         int num_blocks, unsigned seed) {
  const size_t per_k = k.size() / size_t(num_blocks), per_v = v.size() / size_t(num_blocks);
  std::vector<int> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  std::vector<E> k2(k.size()), v2(v.size());
  for (int b = 0; b < num_blocks; ++b) {
    std::copy_n(k.begin() + b * per_k, per_k, k2.begin() + perm[size_t(b)] * per_k);
    std::copy_n(v.begin() + b * per_v, per_v, v2.begin() + perm[size_t(b)] * per_v);
  }
  k.swap(k2);
  v.swap(v2);
  for (int& id : table) id = perm[size_t(id)];
}

// A varlen_ (or varlen_fp8_) golden case, uploaded: padding entries of the table point at
// the case's all-NaN block, so a kernel that follows one leaks NaN into its output.
template <typename T>
struct VarlenCase {
  explicit VarlenCase(const GoldenCase& c, unsigned permutation_seed = 0) : name(c.name()) {
    const auto qs = c.shape("q"), ks = c.shape("k_pool"), ts = c.shape("block_table");
    shape = ch10::VarlenShape{int(ts[0]), int(qs[0]), int(qs[1]), int(ks[1]), int(qs[2]),
                              int(ks[3]), int(ks[0]), int(ts[1])};
    fp8 = c.param_int("fp8") != 0;
    table = table_with_poisoned_padding(c);
    if (fp8) {
      std::vector<uint8_t> k = c.get<uint8_t>("k_pool"), v = c.get<uint8_t>("v_pool");
      if (permutation_seed) permute_pool_blocks(k, v, table, shape.num_blocks, permutation_seed);
      k8_host = k;
      v8_host = v;
      k8 = DeviceBuffer<uint8_t>(k);
      v8 = DeviceBuffer<uint8_t>(v);
      k_scale = DeviceBuffer<float>(c.get<float>("k_scale"));
      v_scale = DeviceBuffer<float>(c.get<float>("v_scale"));
      unquantized = c.get<double>("expected_unquantized");
      fp8_atol = c.param_double("fp8_atol");
      fp8_rtol = c.param_double("fp8_rtol");
    } else {
      std::vector<float> k = c.get<float>("k_pool"), v = c.get<float>("v_pool");
      if (permutation_seed) permute_pool_blocks(k, v, table, shape.num_blocks, permutation_seed);
      k_host = to_dtype<T>(k);
      v_host = to_dtype<T>(v);
      k_pool = DeviceBuffer<T>(k_host);
      v_pool = DeviceBuffer<T>(v_host);
    }
    seq_lens = c.get<int>("seq_lens");
    qsl = c.get<int>("query_start_loc");
    expected = c.get<double>("expected");
    scale = float(c.get<double>("scale")[0]);
    atol = c.param_double("atol");
    rtol = c.param_double("rtol");
    q = DeviceBuffer<T>(to_dtype<T>(c.get<float>("q")));
    d_table = DeviceBuffer<int>(table);
    d_lens = DeviceBuffer<int>(seq_lens);
    d_qsl = DeviceBuffer<int>(qsl);
    out = DeviceBuffer<T>(expected.size());
  }

  ch10::CacheType cache() const {
    return fp8 ? ch10::CacheType::fp8_e4m3 : ch10::CacheType::model_dtype;
  }

  // Plans (chunk_tokens and grid 0: the planner's choice), poisons the output and the
  // workspace, runs and returns the output.
  std::vector<T> run(ch10::VarlenAttention& attn, int chunk_tokens = 0, int grid = 0) {
    ch10::check_metadata(shape, table, seq_lens, qsl);
    attn.plan(shape, dtype_of<T>(), cache(), seq_lens, qsl, chunk_tokens, grid);
    attn.poison_workspace();  // a merge that reads a partial no item wrote shows NaN
    return launch(attn);
  }

  // The same run with finite values in every NaN-poisoned input slot, then the poison put
  // back: a NanProbe's rerun. The pools' padding holds 0; the workspace the byte 0x3F (every
  // float 0.747: a partial no item wrote then has an exp-sum that is not 0, no 0/0).
  std::vector<T> run_finite(ch10::VarlenAttention& attn, int chunk_tokens = 0, int grid = 0) {
    if (fp8) {
      k8.upload(nan_to_zero(k8_host));
      v8.upload(nan_to_zero(v8_host));
    } else {
      k_pool.upload(nan_to_zero(k_host));
      v_pool.upload(nan_to_zero(v_host));
    }
    attn.plan(shape, dtype_of<T>(), cache(), seq_lens, qsl, chunk_tokens, grid);
    attn.poison_workspace(0x3f);
    std::vector<T> result = launch(attn);
    if (fp8) {
      k8.upload(k8_host);
      v8.upload(v8_host);
    } else {
      k_pool.upload(k_host);
      v_pool.upload(v_host);
    }
    return result;
  }

  // A probe that reruns this case as run(attn, chunk_tokens, grid) did, with finite padding.
  NanRerun nan_rerun(ch10::VarlenAttention& attn, int chunk_tokens = 0, int grid = 0) {
    return [this, &attn, chunk_tokens, grid](int64_t i) {
      return std::isnan(to_float(run_finite(attn, chunk_tokens, grid)[size_t(i)]));
    };
  }

  std::vector<T> launch(ch10::VarlenAttention& attn) {
    poison(out);              // a row the kernel never writes keeps this NaN
    if (fp8)
      attn.run_fp8<T>(out.get(), q.get(), k8.get(), v8.get(), d_table.get(), d_lens.get(),
                      d_qsl.get(), k_scale.get(), v_scale.get(), scale);
    else
      attn.run<T>(out.get(), q.get(), k_pool.get(), v_pool.get(), d_table.get(), d_lens.get(),
                  d_qsl.get(), scale);
    return out.download();
  }

  std::string name;
  ch10::VarlenShape shape;
  bool fp8 = false;
  std::vector<int> table, seq_lens, qsl;
  std::vector<double> expected, unquantized;
  float scale;
  double atol, rtol, fp8_atol = 0, fp8_rtol = 0;
  std::vector<T> k_host, v_host;        // the pools as the case has them, poison included
  std::vector<uint8_t> k8_host, v8_host;
  DeviceBuffer<T> q, k_pool, v_pool, out;
  DeviceBuffer<uint8_t> k8, v8;
  DeviceBuffer<float> k_scale, v_scale;
  DeviceBuffer<int> d_table, d_lens, d_qsl;
};

// float64 varlen causal attention on the host, straight from the pool layouts (K chunks of
// x = 16 / sizeof(T)), for the listed query tokens only (rows [token][Hq][D] of the result;
// the other rows are left at 0). New token i of sequence b sees positions 0 ..
// seq_lens[b] - n_b + i.
template <typename T>
std::vector<double> host_varlen_attention(const ch10::VarlenShape& s, const std::vector<T>& q,
                                          const std::vector<T>& k_pool,
                                          const std::vector<T>& v_pool,
                                          const std::vector<int>& table,
                                          const std::vector<int>& seq_lens,
                                          const std::vector<int>& qsl, double scale,
                                          const std::vector<int>& tokens) {
  const int D = s.head_size, bs = s.block_size, x = 16 / int(sizeof(T));
  const int group = s.num_q_heads / s.num_kv_heads;
  std::vector<double> out(size_t(s.num_tokens) * s.num_q_heads * D, 0.0);
  for (int token : tokens) {
    const int b = int(std::upper_bound(qsl.begin(), qsl.end(), token) - qsl.begin()) - 1;
    const int n = qsl[size_t(b) + 1] - qsl[size_t(b)];
    const int visible = seq_lens[size_t(b)] - n + (token - qsl[size_t(b)]) + 1;
    for (int h = 0; h < s.num_q_heads; ++h) {
      const int g = h / group;
      auto base = [&](int t) {
        return (int64_t(table[size_t(b) * s.max_blocks_per_seq + t / bs]) * s.num_kv_heads + g) *
               int64_t(D) * bs;
      };
      const size_t row = (size_t(token) * s.num_q_heads + h) * D;
      std::vector<double> score(size_t(visible), 0.0);
      double mx = -1e300, sum = 0;
      for (int t = 0; t < visible; ++t) {
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += double(to_float(q[row + d])) *
                 to_float(k_pool[base(t) + (int64_t(d / x) * bs + t % bs) * x + d % x]);
        mx = std::max(mx, score[size_t(t)] = dot * scale);
      }
      for (double& e : score) sum += (e = std::exp(e - mx));
      for (int d = 0; d < D; ++d) {
        double o = 0;
        for (int t = 0; t < visible; ++t)
          o += score[size_t(t)] * to_float(v_pool[base(t) + int64_t(d) * bs + t % bs]);
        out[row + d] = o / sum;
      }
    }
  }
  return out;
}

// A plan by hand: every (tile, KV head) of the batch cut by `cut_tile(kv_needed)` into
// [begin, end) chunks (one: a whole item; more: a split tile with a counter and partial
// rows), the items dealt round-robin to `grid` thread blocks.
template <typename Cut>
ch10::Plan hand_plan(const ch10::VarlenShape& s, const std::vector<int>& seq_lens,
               const std::vector<int>& qsl, int grid, Cut cut_tile) {
  const int G = s.num_q_heads / s.num_kv_heads;
  std::vector<ch10::WorkItem> items;
  ch10::Plan p;
  p.grid = grid;
  for (int b = 0; b < s.num_seqs; ++b) {
    const int n = qsl[size_t(b) + 1] - qsl[size_t(b)];
    for (int row0 = 0; row0 < n * G; row0 += ch10::tile_size(n, G)) {
      const int rows = ch10::tile_rows(n, G, row0);
      const int kv_needed = seq_lens[size_t(b)] - n + (row0 + rows - 1) / G + 1;
      const std::vector<std::pair<int, int>> chunks = cut_tile(kv_needed);
      const int splits = int(chunks.size());
      for (int h = 0; h < s.num_kv_heads; ++h) {
        const int counter = splits > 1 ? p.num_counters++ : -1;
        const int base = int(p.partial_rows);
        if (splits > 1) p.partial_rows += int64_t(ch10::kTileRows) * splits;
        for (int k = 0; k < splits; ++k)
          items.push_back({b, h, row0, chunks[size_t(k)].first, chunks[size_t(k)].second, k, splits,
                           splits > 1 ? base : 0, counter, 0});
      }
    }
  }
  p.cta_start.assign(size_t(grid) + 1, 0);
  for (int c = 0; c < grid; ++c) {
    for (size_t i = size_t(c); i < items.size(); i += size_t(grid)) p.items.push_back(items[i]);
    p.cta_start[size_t(c) + 1] = int(p.items.size());
  }
  return p;
}

}  // namespace pa::test
