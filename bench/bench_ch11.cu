// GPU benchmark of chapter 11: the absorbed MLA decode over the paged latent cache, against
// the read ceiling measured in the same run, and as TFLOP/s (the kernel turns compute-bound
// near h_q * s_q = 170 on an H100). bf16, one pool [blocks, block_size, 576] of random
// rows, physical blocks randomly permuted, pools rotated so that the working set is at
// least 10x the L2 cache; every call timed on the GPU alone, queued behind a spin.
//
// The cases are bench/bench_flashinfer_mla.py's, by the same names (keep the lists in step):
// h_q 16 (a DeepSeek-V3 shard under 8-way tensor parallelism), 128 (data-parallel attention),
// 64 with 2 new tokens (Kimi K2 with multi-token prediction), 16 with 4 (speculative
// verification), a ragged batch, and block size 16 beside FlashMLA's 64.
// Bytes: every sequence's whole latent context once (1,152 bytes a token) plus q and out.
// FLOPs: 2 * (576 + 512) * h_q per (query row, key it attends), causal, exact.
//   usage: bench_ch11 [--csv FILE] [--md FILE]
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.h"
#include "pa/ch11_mla.h"
#include "pa/dtype.h"

namespace {

using pa::bf16;
namespace m = pa::ch11;

struct Case {
  std::string name;
  int hq, s_q;
  std::vector<int> lens;  // cache lengths, new tokens included
  int block;
};

// n lengths log-uniform in [lo, hi], from bench_flashinfer_mla.py's fixed hash.
std::vector<int> ragged_lengths(int n, int lo, int hi, int seed) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    const double h = double((uint64_t(i + 1) * 2654435761ull + uint64_t(seed) * 40503ull) % (1ull << 32)) /
                     double(1ull << 32);
    out.push_back(int(std::lround(std::exp(std::log(lo) + h * (std::log(hi) - std::log(lo))))));
  }
  return out;
}

std::vector<Case> cases() {
  return {
      {"tp8 shard: Hq 16, B 64, L 4096", 16, 1, std::vector<int>(64, 4096), 64},
      {"Hq 128, B 64, L 4096", 128, 1, std::vector<int>(64, 4096), 64},
      {"Hq 128, B 128, L 1024", 128, 1, std::vector<int>(128, 1024), 64},
      {"Kimi K2 MTP: Hq 64, s_q 2, B 64, L 4096", 64, 2, std::vector<int>(64, 4096), 64},
      {"spec: Hq 16, s_q 4, B 64, L 4096", 16, 4, std::vector<int>(64, 4096), 64},
      {"ragged: Hq 128, 128 lengths 64..8192", 128, 1, ragged_lengths(128, 64, 8192, 7), 64},
      {"Hq 128, B 64, L 4096, page 16", 128, 1, std::vector<int>(64, 4096), 16},
  };
}

// max |out - ref| / max |ref| over every 8th head of the first and the longest sequence's
// rows, the reference in double on the host from copy 0 of the pool and q.
double check_rows(const Case& c, const std::vector<int>& table, int max_blocks,
                  const std::vector<int>& qsl, const std::vector<bf16>& pool,
                  const std::vector<bf16>& q, const std::vector<bf16>& out, float scale) {
  const int W = m::kRowWidth, V = m::kLatentDim;
  int longest = 0;
  for (int b = 0; b < int(c.lens.size()); ++b) if (c.lens[b] > c.lens[longest]) longest = b;
  double worst = 0, top = 0;
  for (int b : {0, longest}) {
    const int L = c.lens[b];
    for (int i = 0; i < c.s_q; ++i)
      for (int h = 0; h < c.hq; h += 8) {
        const size_t row = size_t(qsl[b] + i) * c.hq + h;
        const int seen = L - c.s_q + i + 1;
        std::vector<double> sc(seen), acc(V, 0.0);
        double mx = -1e300, sum = 0;
        for (int t = 0; t < seen; ++t) {
          const size_t at = (size_t(table[size_t(b) * max_blocks + t / c.block]) * c.block + t % c.block) * W;
          double d = 0;
          for (int j = 0; j < W; ++j) d += double(pa::to_float(q[row * W + j])) * pa::to_float(pool[at + j]);
          sc[t] = d * scale;
          mx = std::max(mx, sc[t]);
        }
        for (int t = 0; t < seen; ++t) {
          const size_t at = (size_t(table[size_t(b) * max_blocks + t / c.block]) * c.block + t % c.block) * W;
          const double p = std::exp(sc[t] - mx);
          sum += p;
          for (int j = 0; j < V; ++j) acc[j] += p * pa::to_float(pool[at + j]);
        }
        for (int j = 0; j < V; ++j) {
          const double ref = acc[j] / sum;
          worst = std::max(worst, std::fabs(double(pa::to_float(out[row * V + j])) - ref));
          top = std::max(top, std::fabs(ref));
        }
      }
  }
  return worst / std::max(top, 1e-30);
}

}  // namespace

int main(int argc, char** argv) {
  const auto outputs = pa::bench::parse_outputs(argc, argv);
  cudaDeviceProp prop{};
  PA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const auto ceil = pa::bench::measure_ceilings();
  std::vector<pa::bench::Row> rows;
  std::printf("%-44s %10s %9s %8s %10s\n", "case", "us", "TB/s", "% read", "TFLOP/s");
  for (const Case& c : cases()) {
    const int B = int(c.lens.size());
    std::vector<int> qsl(B + 1, 0), table;
    int max_blocks = 0, num_blocks = 0;
    double tokens = 0, keys = 0;
    for (int b = 0; b < B; ++b) {
      qsl[b + 1] = qsl[b] + c.s_q;
      const int nb = (c.lens[b] + c.block - 1) / c.block;
      max_blocks = std::max(max_blocks, nb);
      num_blocks += nb;
      tokens += c.lens[b];
      for (int i = 0; i < c.s_q; ++i) keys += c.lens[b] - c.s_q + i + 1;
    }
    const auto perm = pa::bench::permuted_blocks(num_blocks, 17);
    table.assign(size_t(B) * max_blocks, 0);
    for (int b = 0, next = 0; b < B; ++b)
      for (int j = 0; j < (c.lens[b] + c.block - 1) / c.block; ++j) table[size_t(b) * max_blocks + j] = perm[next++];
    const m::MlaShape s{B, qsl[B], c.hq, c.block, num_blocks, max_blocks};
    const size_t pool_n = size_t(num_blocks) * c.block * m::kRowWidth;
    const size_t q_n = size_t(qsl[B]) * c.hq * m::kRowWidth, o_n = size_t(qsl[B]) * c.hq * m::kLatentDim;
    const double bytes = 2.0 * (tokens * m::kRowWidth + double(q_n) + double(o_n));
    const double flops = 2.0 * (m::kRowWidth + m::kLatentDim) * c.hq * keys;
    const int copies = pa::bench::rotation_count(size_t(bytes));
    std::vector<pa::DeviceBuffer<bf16>> pools, qs;
    for (int k = 0; k < copies; ++k) {
      pools.emplace_back(pool_n);
      pa::bench::fill_random_half(pools.back().get(), pool_n, 100 + k, true);
      qs.emplace_back(q_n);
      pa::bench::fill_random_half(qs.back().get(), q_n, 200 + k, true);
    }
    pa::DeviceBuffer<bf16> out(o_n);
    pa::DeviceBuffer<int> d_table(table.size()), d_lens(B), d_qsl(B + 1);
    d_table.upload(table);
    d_lens.upload(c.lens);
    d_qsl.upload(qsl);
    m::MlaDecode dec;
    dec.plan(s, pa::DType::bf16, c.lens, qsl);
    const float scale = 1.0f / std::sqrt(192.0f);
    auto run = [&](int i) {
      const int k = i % copies;
      dec.run(out.get(), qs[k].get(), pools[k].get(), d_table.get(), d_lens.get(), d_qsl.get(), scale);
    };
    run(0);
    PA_CUDA_CHECK(cudaDeviceSynchronize());
    const double err = check_rows(c, table, max_blocks, qsl, pools[0].download(), qs[0].download(),
                                  out.download(), scale);
    if (!(err < 2e-2)) {
      std::printf("MISMATCH %s: max |out - ref| / max |ref| = %.2e\n", c.name.c_str(), err);
      return 1;
    }
    const double us = pa::bench::median_ms_queued(run) * 1e3;
    const double tbps = bytes / us / 1e6;
    std::printf("%-44s %10.1f %9.2f %7.1f%% %10.1f\n", c.name.c_str(), us, tbps,
                100.0 * tbps / ceil.read_tbps, flops / us / 1e6);
    rows.push_back({"ch11 mla decode", c.name, us, bytes, tbps, 100.0 * tbps / ceil.read_tbps, "read"});
  }
  pa::bench::report(rows, ceil, prop.name, outputs.csv, outputs.md);
  return 0;
}
