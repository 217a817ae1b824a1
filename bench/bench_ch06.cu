// GPU benchmark of chapter 6: paged attention on an fp8 cache against the same kernels on
// an fp16 cache (fp16 activations, D = 128, block_size 16, permuted blocks), both
// versions, on the standard shapes. The fp8 cache moves half the bytes.
//   usage: bench_ch06 [--csv FILE] [--md FILE]
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench_common.h"
#include "pa/ch06_fp8.h"
#include "pa/dtype.h"
#include "pa/launch.h"


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
      const std::string shape = sh.name();
      pa::DeviceBuffer<float> k_scale(std::vector<float>{0.05f}), v_scale(std::vector<float>{0.03f});
      const float scale = dc.scale;
      const bool v2 = pa::ch05::choose_version(s, sh.l, prop.multiProcessorCount) == pa::ch05::Version::v2;
      const std::string version = v2 ? " (v2)" : " (v1)";
      double fp16_ms = 0;
      {  // the fp16 cache, the version the chapter-5 heuristic picks
        const double bytes = dc.fp16_bytes();
        const auto pools = pa::bench::random_half_pools(dc.pool, bytes);
        const int copies = pools.copies();
        const auto &k = pools.k, &v = pools.v;
        fp16_ms = pa::bench::median_ms([&](int i) {
          const int c = i % copies;
          pa::ch05::paged_attention<pa::half>(s, out.get(), q.get(), k[c].get(), v[c].get(),
                                              d_table.get(), lens.get(), sh.l, scale, ws);
        });
        const double tb = bytes / (fp16_ms * 1e-3) / 1e12;
        rows.push_back({"fp16 cache" + version, shape, fp16_ms * 1e3, bytes, tb, 100 * tb / ceil.read_tbps, "read"});
      }
      {  // the fp8 cache, same version
        const double bytes = dc.fp8_bytes();
        const auto pools = pa::bench::random_e4m3_pools(dc.pool, bytes);
        const int copies = pools.copies();
        const auto &k = pools.k, &v = pools.v;
        const double ms = pa::bench::median_ms([&](int i) {
          const int c = i % copies;
          if (v2)
            pa::ch06::paged_attention_v2_fp8<pa::half>(s, out.get(), q.get(), k[c].get(), v[c].get(),
                                                       d_table.get(), lens.get(), sh.l, k_scale.get(),
                                                       v_scale.get(), scale, ws);
          else
            pa::ch06::paged_attention_v1_fp8<pa::half>(s, out.get(), q.get(), k[c].get(), v[c].get(),
                                                       d_table.get(), lens.get(), k_scale.get(),
                                                       v_scale.get(), scale);
        });
        const double tb = bytes / (ms * 1e-3) / 1e12;
        rows.push_back({"fp8 cache" + version, shape, ms * 1e3, bytes, tb, 100 * tb / ceil.read_tbps, "read"});
        std::printf("%s: fp8 over fp16 speed-up %.2fx\n", shape.c_str(), fp16_ms / ms);
      }
    }
    pa::bench::report(rows, ceil, prop.name, outputs.csv, outputs.md);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
