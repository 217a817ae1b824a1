// GPU benchmark of chapters 4 and 5: paged attention v1 and v2 on the standard shapes
// (fp16, D = 128, block_size 16, physical blocks randomly permuted), and the version the
// chapter-5 heuristic picks, against the read ceiling measured in the same run.
//   usage: bench_ch04 [--csv FILE] [--md FILE]
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench_common.h"
#include "pa/ch05_paged_attention_v2.h"
#include "pa/dtype.h"

int main(int argc, char** argv) {
  const auto outputs = pa::bench::parse_outputs(argc, argv);
  try {
    cudaDeviceProp prop;
    PA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const auto ceil = pa::bench::measure_ceilings();
    const int bs = 16, D = 128;
    std::vector<pa::bench::Row> rows;
    pa::ch05::Workspace ws;
    for (const pa::bench::Shape& sh : pa::bench::standard_shapes()) {
      const int M = sh.l / bs;
      const pa::ch04::PagedAttentionShape s{sh.b, sh.hq, sh.hkv, D, bs, sh.b * M, M};
      const size_t pool = size_t(s.num_blocks) * sh.hkv * D * bs;
      const size_t qn = size_t(sh.b) * sh.hq * D;
      const double bytes = 2.0 * (2.0 * double(pool) + 2.0 * double(qn));  // K, V once; q; out
      const int copies = pa::bench::rotation_count(size_t(bytes));
      std::vector<pa::DeviceBuffer<pa::half>> k, v;
      for (int c = 0; c < copies; ++c) {
        k.emplace_back(pool);
        v.emplace_back(pool);
        pa::bench::fill_random_half(k.back().get(), pool, 17 + c, false);
        pa::bench::fill_random_half(v.back().get(), pool, 61 + c, false);
      }
      const std::vector<int> table = pa::bench::permuted_blocks(s.num_blocks, 3);  // scattered blocks
      pa::DeviceBuffer<int> d_table(table), lens(std::vector<int>(sh.b, sh.l));
      pa::DeviceBuffer<pa::half> q(qn), out(qn);
      pa::bench::fill_random_half(q.get(), qn, 2, false);
      const float scale = 1.f / std::sqrt(float(D));
      const std::string shape = sh.name();
      auto add = [&](const std::string& name, double ms) {
        const double tbps = bytes / (ms * 1e-3) / 1e12;
        rows.push_back({name, shape, ms * 1e3, bytes, tbps, 100.0 * tbps / ceil.read_tbps, "read"});
      };
      add("ch04 paged attention v1", pa::bench::median_ms([&](int i) {
            const int c = i % copies;
            pa::ch04::paged_attention_v1<pa::half>(s, out.get(), q.get(), k[c].get(), v[c].get(),
                                                   d_table.get(), lens.get(), scale);
          }));
      add("ch05 paged attention v2", pa::bench::median_ms([&](int i) {
            const int c = i % copies;
            pa::ch05::paged_attention_v2<pa::half>(s, out.get(), q.get(), k[c].get(), v[c].get(),
                                                   d_table.get(), lens.get(), sh.l, scale, ws);
          }));
      const auto pick = pa::ch05::choose_version(s, sh.l, prop.multiProcessorCount);
      std::printf("%s: the heuristic picks %s\n", shape.c_str(),
                  pick == pa::ch05::Version::v1 ? "v1" : "v2");
    }
    pa::bench::report(rows, ceil, prop.name, outputs.csv, outputs.md);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
