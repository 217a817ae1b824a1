// GPU benchmark of chapter 8's cascade attention: decoding sequences that share a long
// prefix, against chapter 5's paged_attention on the same full block tables, and the read
// ceiling measured in the same run. fp16, Hq/Hkv = 32/8, D = 128, block_size 16, physical
// blocks randomly permuted, pools rotated so that the working set is at least 10x the L2
// cache; every call timed on the GPU alone, queued behind a spin (median_ms_queued).
//
// Cases: 64 sequences, each a 4096-token prefix and a suffix of 1..128 tokens (seeded):
//   1x64 shared   one group: all 64 tables start with the same 256 blocks
//   4x16 shared   four groups of 16, each with its own prefix
//   64 distinct   the control: the same lengths, no block shared (the planner finds no
//                 group; cascade is then its suffix pass alone, chapter 5's v2)
// Rows: time; "unique" bytes, those that must be read (each distinct block's used K and V
// once per KV head, plus q and out); effective TB/s = unique bytes / time, and that as a
// % of the read ceiling (chapter 5 re-reads a shared prefix per sequence, so it moves far
// more than it is credited with: the % says how close a step comes to reading only what
// it must). The outputs of both kernels are compared before timing; a mismatch prints
// MISMATCH and makes the exit status 1. plan_cascade + upload is timed on the host.
//   usage: bench_cascade [--csv FILE] [--md FILE]   (default --csv bench/results/ch08-cascade.csv,
//          written when that folder exists: run it from the repository root)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "pa/ch05_paged_attention_v2.h"
#include "pa/ch08_cascade.h"
#include "pa/dtype.h"

namespace {

constexpr int kSeqs = 64, kHq = 32, kHkv = 8, kD = 128, kBS = 16, kPrefix = 4096;

struct Case {
  std::string name;
  int groups;  // 0: no sharing
};

// Block tables of one case: group g's members (sequences g, g + groups, ...: the members
// of a group are not neighbours in the batch) share kPrefix / kBS blocks.
struct Tables {
  std::vector<int> table, lens;
  int max_blocks, num_blocks;
  double unique_tokens = 0, total_tokens = 0;  // distinct tokens; tokens summed over sequences
};

Tables make_tables(const Case& c, const std::vector<int>& suffix) {
  Tables t;
  const int prefix_blocks = kPrefix / kBS;
  t.max_blocks = prefix_blocks + (128 + kBS - 1) / kBS;
  int needed = 0;
  for (int b = 0; b < kSeqs; ++b) needed += (suffix[size_t(b)] + kBS - 1) / kBS;
  needed += (c.groups ? c.groups : kSeqs) * prefix_blocks;
  t.num_blocks = needed;
  const std::vector<int> ids = pa::bench::permuted_blocks(needed, 3);
  int next = 0;
  std::vector<std::vector<int>> prefix(size_t(c.groups ? c.groups : kSeqs));
  for (auto& p : prefix)
    for (int j = 0; j < prefix_blocks; ++j) p.push_back(ids[size_t(next++)]);
  t.table.assign(size_t(kSeqs) * t.max_blocks, 0);
  for (int b = 0; b < kSeqs; ++b) {
    const auto& p = prefix[size_t(c.groups ? b % c.groups : b)];
    int* row = t.table.data() + size_t(b) * t.max_blocks;
    std::copy(p.begin(), p.end(), row);
    for (int j = prefix_blocks; j < prefix_blocks + (suffix[size_t(b)] + kBS - 1) / kBS; ++j)
      row[j] = ids[size_t(next++)];
    t.lens.push_back(kPrefix + suffix[size_t(b)]);
    t.unique_tokens += suffix[size_t(b)];
    t.total_tokens += kPrefix + suffix[size_t(b)];
  }
  t.unique_tokens += double(c.groups ? c.groups : kSeqs) * kPrefix;
  return t;
}

double kv_bytes(double tokens) { return tokens * kHkv * kD * 2.0 /* K and V */ * 2.0 /* fp16 */; }

double max_rel_diff(const std::vector<half>& a, const std::vector<half>& b) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = pa::to_float(a[i]), y = pa::to_float(b[i]);
    err = std::max(err, std::isnan(x) || std::isnan(y) ? INFINITY : std::fabs(x - y));
    ref = std::max(ref, std::fabs(y));
  }
  return err / std::max(ref, 1e-30);
}

}  // namespace

int main(int argc, char** argv) {
  auto outputs = pa::bench::parse_outputs(argc, argv);
  if (outputs.csv.empty() && std::filesystem::is_directory("bench/results"))
    outputs.csv = "bench/results/ch08-cascade.csv";
  bool failed = false;
  try {
    cudaDeviceProp prop;
    PA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const auto ceil = pa::bench::measure_ceilings();
    std::vector<pa::bench::Row> rows;
    std::vector<std::string> lines;
    std::mt19937 rng(7);
    std::vector<int> suffix(kSeqs);
    for (int& n : suffix) n = std::uniform_int_distribution<int>(1, 128)(rng);
    pa::ch05::Workspace ws05, ws08;
    const float scale = 1.f / std::sqrt(float(kD));
    pa::DeviceBuffer<half> q(size_t(kSeqs) * kHq * kD), out(q.size());
    pa::bench::fill_random_half(q.get(), q.size(), 2, false);
    const double qo_bytes = 2.0 * double(q.size()) * 2.0;

    for (const Case& c : {Case{"1x64 shared", 1}, Case{"4x16 shared", 4}, Case{"64 distinct", 0}}) {
      const Tables t = make_tables(c, suffix);
      const pa::ch04::PagedAttentionShape s{kSeqs, kHq, kHkv, kD, kBS, t.num_blocks, t.max_blocks};
      const int max_len = *std::max_element(t.lens.begin(), t.lens.end());
      pa::DeviceBuffer<int> table(t.table), lens(t.lens);

      // The host's part, once per step: plan and upload.
      pa::ch08::CascadeDevicePlan plan;
      std::vector<double> host_us;
      for (int i = 0; i < 21; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        plan.upload(pa::ch08::plan_cascade(t.table, t.lens, kSeqs, t.max_blocks, kBS));
        host_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(host_us.begin(), host_us.end());

      const double unique = kv_bytes(t.unique_tokens) + qo_bytes;
      const double per_seq = kv_bytes(t.total_tokens) + qo_bytes;
      const auto pools = pa::bench::random_half_pools(size_t(t.num_blocks) * kHkv * kD * kBS, unique);
      const int copies = pools.copies();
      const auto &k = pools.k, &v = pools.v;
      auto run05 = [&](int i) {
        const int cp = i % copies;
        pa::ch05::paged_attention<half>(s, out.get(), q.get(), k[cp].get(), v[cp].get(), table.get(),
                                        lens.get(), max_len, scale, ws05);
      };
      auto run08 = [&](int i) {
        const int cp = i % copies;
        pa::ch08::cascade_attention<half>(s, out.get(), q.get(), k[cp].get(), v[cp].get(),
                                          table.get(), lens.get(), max_len, plan, scale, ws08);
      };

      run05(0);
      PA_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<half> want = out.download();
      run08(0);
      PA_CUDA_CHECK(cudaDeviceSynchronize());
      const double err = max_rel_diff(out.download(), want);
      std::printf("%s: %d groups, %.1f MB unique (chapter 5 reads %.1f MB), plan + upload %.1f us "
                  "(host, median of 21); cascade vs chapter 5: error %.1e of max |out|\n",
                  c.name.c_str(), plan.num_groups(), unique / 1e6, per_seq / 1e6, host_us[10], err);
      if (!(err < 1e-2)) {
        std::fprintf(stderr, "MISMATCH: %s: cascade disagrees with chapter 5 (error %.3g)\n",
                     c.name.c_str(), err);
        failed = true;
        continue;
      }
      auto add = [&](const std::string& kernel, double ms) {
        const double tbps = unique / (ms * 1e-3) / 1e12;
        rows.push_back({kernel, c.name, ms * 1e3, unique, tbps, 100.0 * tbps / ceil.read_tbps, "read"});
        return ms;
      };
      const double ms05 = add("ch05 paged_attention", pa::bench::median_ms_queued(run05));
      const double ms08 = add("ch08 cascade_attention", pa::bench::median_ms_queued(run08));
      char line[256];
      std::snprintf(line, sizeof line, "%s: cascade %.1f us, chapter 5 %.1f us: %.2fx", c.name.c_str(),
                    ms08 * 1e3, ms05 * 1e3, ms05 / ms08);
      lines.push_back(line);
    }
    pa::bench::report(rows, ceil, prop.name, outputs.csv, outputs.md);
    std::printf("\nspeed-up of cascade over chapter 5 (unique bytes as MB above)\n");
    for (const std::string& l : lines) std::printf("  %s\n", l.c_str());
    if (!outputs.csv.empty()) std::printf("CSV: %s\n", outputs.csv.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
  return failed ? 1 : 0;
}
