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
    std::vector<pa::bench::Row> rows;
    pa::ch05::Workspace ws;
    for (const pa::bench::Shape& sh : pa::bench::standard_shapes()) {
      pa::bench::DecodeCase dc(sh);  // the shape, table, lengths, q and out
      const pa::ch04::PagedAttentionShape& s = dc.s;
      auto &q = dc.q, &out = dc.out;
      auto &d_table = dc.table, &lens = dc.lens;
      const double bytes = dc.fp16_bytes();  // K, V once; q; out
      const auto pools = pa::bench::random_half_pools(dc.pool, bytes);
      const int copies = pools.copies();
      const auto &k = pools.k, &v = pools.v;
      const float scale = dc.scale;
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
