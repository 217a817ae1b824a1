// GPU benchmark of chapter 12's window kernel (chapter 10's varlen kernel with the window
// policy), against the read ceiling measured in the same run. fp16, D 128, block_size 16,
// physical blocks randomly permuted, pools rotated past the L2 cache, every call timed on the
// GPU alone (median_ms_queued).
//
// Cases (B 32, Hq 32 / Hkv 8 unless named):
//   decode, full 1K context        chapter 10's kernel (no window): the target's yardstick
//   decode, 32K context, window 1024, sinks off / on
//   decode, 32K context, full      chapter 10's kernel
//   decode, 32K context, window 128, sinks off / on
//   prefill chunk of 2048 over a 32K context, window 1024 (one sequence)
// Bytes: the blocks the step's windows touch (K and V, every KV head), plus q and out: what
// the kernel must read. A window's table names the null block (block 0, never read) for the
// blocks left of every window, as chapter 12's manager leaves them; the pool holds only the
// blocks a window touches (and the null block). Before timing each result is checked
// against a float reference on the host for sample rows; a mismatch prints MISMATCH and
// makes the exit status 1.
// Each decode case also times the streaming read kernel over the same bytes alone in a
// launch, timed the same way (kernel "read kernel (floor)", same case name): what any
// kernel that reads that much pays in one launch, its start and end included, at these sizes
// a few microseconds of the case.
//   usage: bench_ch12 [--csv FILE] [--md FILE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.h"
#include "pa/ch10_varlen.h"
#include "pa/ch12_window.h"
#include "pa/dtype.h"

namespace {

using pa::half;
constexpr int kBlock = 16, kD = 128;

struct Case {
  std::string name;
  int b, hq, hkv, len, n_new;
  int window;  // 0: full (chapter 10's kernel)
  bool sinks;
  int first_key() const { return window ? std::max(0, len - n_new - window + 1) : 0; }
  int first_block() const { return first_key() / kBlock; }
  int blocks() const { return (len + kBlock - 1) / kBlock; }
  int live_blocks() const { return blocks() - first_block(); }
  double bytes() const {
    return 2.0 * 2.0 * double(b) * live_blocks() * kBlock * hkv * kD + 2.0 * 2.0 * double(b) * n_new * hq * kD;
  }
};

std::vector<Case> cases() {
  return {
      {"32/8/32 ctx 1024 full", 32, 32, 8, 1024, 1, 0, false},
      {"32/8/32 ctx 32768 window 1024", 32, 32, 8, 32768, 1, 1024, false},
      {"32/8/32 ctx 32768 window 1024 sinks", 32, 32, 8, 32768, 1, 1024, true},
      {"32/8/32 ctx 32768 full", 32, 32, 8, 32768, 1, 0, false},
      {"32/8/32 ctx 32768 window 128", 32, 32, 8, 32768, 1, 128, false},
      {"32/8/32 ctx 32768 window 128 sinks", 32, 32, 8, 32768, 1, 128, true},
      {"32/8 chunk 2048 ctx 32768 window 1024", 1, 32, 8, 32768 + 2048, 2048, 1024, false},
      {"32/8 chunk 2048 ctx 32768 window 1024 sinks", 1, 32, 8, 32768 + 2048, 2048, 1024, true},
  };
}

std::vector<float> to_floats(const std::vector<half>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = pa::to_float(h[i]);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const auto outputs = pa::bench::parse_outputs(argc, argv);
  bool failed = false;
  try {
    cudaDeviceProp prop;
    PA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const auto ceil = pa::bench::measure_ceilings();
    std::vector<pa::bench::Row> rows;
    pa::ch10::VarlenAttention full;
    pa::ch12::WindowAttention win;
    for (const Case& c : cases()) {
      const auto t0 = std::chrono::steady_clock::now();
      // Sequence b's live blocks: the next live_blocks() of a permutation of 1 .. N; the
      // entries left of every window are the null block 0.
      const int width = c.blocks(), live = c.live_blocks(), num_blocks = c.b * live + 1;
      const std::vector<int> perm = pa::bench::permuted_blocks(num_blocks - 1, 5);
      std::vector<int> table(size_t(c.b) * width, 0), lens(size_t(c.b), c.len), qsl;
      for (int b = 0, next = 0; b < c.b; ++b)
        for (int j = c.first_block(); j < width; ++j) table[size_t(b) * width + j] = 1 + perm[size_t(next++)];
      for (int b = 0; b <= c.b; ++b) qsl.push_back(b * c.n_new);
      const int tokens = c.b * c.n_new;
      const pa::ch10::VarlenShape s{c.b, tokens, c.hq, c.hkv, kD, kBlock, num_blocks, width};
      const size_t pool = size_t(num_blocks) * c.hkv * kD * kBlock, qn = size_t(tokens) * c.hq * kD;
      pa::DeviceBuffer<int> d_table(table), d_lens(lens), d_qsl(qsl);
      pa::DeviceBuffer<half> q(qn), out(qn);
      pa::bench::fill_random_half(q.get(), qn, 2, false);
      const float scale = 1.f / std::sqrt(float(kD));
      pa::ch12::WindowOptions opt;
      opt.window = c.window;
      if (c.sinks)
        for (int h = 0; h < c.hq; ++h) opt.sinks.push_back(0.5f + 0.1f * float(h % 7));
      if (c.window)
        win.plan(s, pa::DType::fp16, table, lens, qsl, opt);
      else
        full.plan(s, pa::DType::fp16, pa::ch10::CacheType::model_dtype, lens, qsl);
      const pa::ch10::Plan& plan = c.window ? win.host_plan() : full.host_plan();
      int64_t kv = 0;
      for (const auto& w : plan.items) kv += w.kv_end - w.kv_begin;
      std::printf("%s: %zu items on %d blocks, %d split tiles, %lld KV tokens planned, %.1f MB\n",
                  c.name.c_str(), plan.items.size(), plan.grid, plan.num_counters, (long long)kv,
                  c.bytes() / 1e6);
      const auto pools = pa::bench::random_half_pools(pool, c.bytes());
      const int copies = pools.copies();
      auto run = [&](int i) {
        const int cp = i % copies;
        if (c.window)
          win.run<half>(out.get(), q.get(), pools.k[cp].get(), pools.v[cp].get(), d_table.get(), d_lens.get(),
                        d_qsl.get(), scale);
        else
          full.run<half>(out.get(), q.get(), pools.k[cp].get(), pools.v[cp].get(), d_table.get(), d_lens.get(),
                         d_qsl.get(), scale);
      };
      run(0);
      PA_CUDA_CHECK(cudaDeviceSynchronize());
      {  // the host reference on sample rows: first and last sequence, first and last new token
        const std::vector<float> k = to_floats(pools.k[0].download()), v = to_floats(pools.v[0].download());
        const std::vector<float> qh = to_floats(q.download()), o = to_floats(out.download());
        double num = 0, den = 0;
        const int g = c.hq / c.hkv, x = 8;
        for (int b : {0, c.b - 1})
          for (int i : {0, c.n_new - 1}) {
            const int pos = c.len - c.n_new + i, lo = c.window ? std::max(0, pos - c.window + 1) : 0;
            const int row = qsl[size_t(b)] + i;
            for (int h = 0; h < c.hq; ++h) {
              const float* qr = &qh[(size_t(row) * c.hq + h) * kD];
              std::vector<double> p;
              double m = c.sinks ? opt.sinks[size_t(h)] : -INFINITY;
              auto base = [&](int t) {
                return (size_t(table[size_t(b) * width + t / kBlock]) * c.hkv + h / g) * kD * kBlock;
              };
              for (int t = lo; t <= pos; ++t) {
                double dot = 0;
                for (int e = 0; e < kD; ++e) dot += qr[e] * k[base(t) + (size_t(e / x) * kBlock + t % kBlock) * x + e % x];
                p.push_back(dot * scale);
                m = std::max(m, p.back());
              }
              double sum = c.sinks ? std::exp(opt.sinks[size_t(h)] - m) : 0.0;
              for (double& w : p) sum += (w = std::exp(w - m));
              for (int e = 0; e < kD; ++e) {
                double acc = 0;
                for (int t = lo; t <= pos; ++t) acc += p[size_t(t - lo)] * v[base(t) + size_t(e) * kBlock + t % kBlock];
                const double want = acc / sum, got = o[(size_t(row) * c.hq + h) * kD + e];
                num = std::max(num, std::fabs(got - want));
                den = std::max(den, std::fabs(want));
              }
            }
          }
        const double err = den > 0 ? num / den : num;
        std::printf("  vs the host reference: error %.1e of max |ref|\n", err);
        if (!(err < 2e-2)) {
          std::fprintf(stderr, "MISMATCH: %s (error %g)\n", c.name.c_str(), err);
          failed = true;
        }
      }
      const double ms = pa::bench::median_ms_queued(run);
      const double tbps = c.bytes() / (ms * 1e-3) / 1e12;
      rows.push_back({c.window ? "ch12 window" : "ch10 varlen", c.name, ms * 1e3, c.bytes(), tbps,
                      100.0 * tbps / ceil.read_tbps, "read"});
      std::printf("  %.1f us, %.0f%% of the read ceiling on the bytes the windows touch (%.1f s)\n", ms * 1e3,
                  100.0 * tbps / ceil.read_tbps,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (c.n_new == 1) {  // a decode step: the floor of one launch that reads these bytes
        const double floor_us = pa::bench::read_floor_us(size_t(c.bytes()));
        const double floor_tbps = c.bytes() / (floor_us * 1e-6) / 1e12;
        rows.push_back({"read kernel (floor)", c.name, floor_us, c.bytes(), floor_tbps,
                        100.0 * floor_tbps / ceil.read_tbps, "read"});
        std::printf("  the read kernel over the same %.1f MB alone in a launch: %.1f us (ours: %.0f%% of its speed)\n",
                    c.bytes() / 1e6, floor_us, 100.0 * floor_us / (ms * 1e3));
      }
    }
    pa::bench::report(rows, ceil, prop.name, outputs.csv, outputs.md);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
  return failed ? 1 : 0;
}
