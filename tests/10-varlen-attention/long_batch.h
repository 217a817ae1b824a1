// Chapter 10's long batches, built in the test rather than shipped as golden files: N(0,1)
// fp16 values over permuted blocks, a NaN-filled block behind every table's padding, and a
// run under any forced chunk with the workspace and the output poisoned. test_long.cpp (GPU
// only) and test_many_chunks.cpp (the emulator too) use it.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "varlen_case.h"

namespace pa::test {

// A batch of sequences over permuted blocks of N(0,1) fp16 values.
struct LongBatch {
  LongBatch(int hq, int hkv, int d, int bs, const std::vector<int>& lens,
            const std::vector<int>& new_lens, unsigned seed) : seq_lens(lens) {
    qsl = {0};
    for (int n : new_lens) qsl.push_back(qsl.back() + n);
    const int longest = *std::max_element(lens.begin(), lens.end());
    const int width = (longest + bs - 1) / bs;
    int needed = 0;
    for (int n : lens) needed += (n + bs - 1) / bs;
    shape = ch10::VarlenShape{int(lens.size()), qsl.back(), hq, hkv, d, bs, needed + 17, width};
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    const size_t per_block = size_t(hkv) * d * bs;
    k.resize(per_block * size_t(shape.num_blocks));
    v.resize(k.size());
    q.resize(size_t(shape.num_tokens) * hq * d);
    for (auto& e : k) e = from_float<half>(normal(rng));
    for (auto& e : v) e = from_float<half>(normal(rng));
    for (auto& e : q) e = from_float<half>(normal(rng));
    std::vector<int> ids(size_t(shape.num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    // Padding points at a block nobody owns, all NaN: reading it shows.
    table.assign(size_t(shape.num_seqs) * width, ids.back());
    std::fill_n(k.begin() + ids.back() * per_block, per_block, from_float<half>(NAN));
    std::fill_n(v.begin() + ids.back() * per_block, per_block, from_float<half>(NAN));
    size_t next = 0;
    for (size_t b = 0; b < lens.size(); ++b)
      for (int j = 0; j < (lens[b] + bs - 1) / bs; ++j) table[b * width + size_t(j)] = ids[next++];
    scale = 1.f / std::sqrt(float(d));
  }

  // The planner's plan at chunk_tokens (0: its own chunks), or a plan made by hand.
  std::vector<half> run(int chunk_tokens = 0) {
    ch10::check_metadata(shape, table, seq_lens, qsl);
    attn.plan(shape, DType::fp16, ch10::CacheType::model_dtype, seq_lens, qsl, chunk_tokens);
    return launch();
  }
  std::vector<half> run_plan(const ch10::Plan& plan) {
    ch10::check_metadata(shape, table, seq_lens, qsl);
    attn.use_plan(shape, DType::fp16, ch10::CacheType::model_dtype, plan);
    return launch();
  }
  std::vector<half> launch() {
    DeviceBuffer<half> dk(k), dv(v), dq(q), out(q.size());
    DeviceBuffer<int> dt(table), dl(seq_lens), dqsl(qsl);
    attn.poison_workspace();
    pa::test::poison(out);
    attn.run<half>(out.get(), dq.get(), dk.get(), dv.get(), dt.get(), dl.get(), dqsl.get(), scale);
    return out.download();
  }

  ch10::VarlenShape shape;
  std::vector<int> seq_lens, qsl, table;
  std::vector<half> q, k, v;
  float scale;
  ch10::VarlenAttention attn;
};

}  // namespace pa::test
