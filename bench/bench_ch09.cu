// GPU benchmark of chapter 9: the ladder of decode versions on the standard shapes (fp16
// activations, D = 128, block_size 16, physical blocks randomly permuted), with chapter
// 5's kernels as the starting point and the fp8 cache on the tensor-core path, against the
// read ceiling measured in the same run. Every call is timed on the GPU alone, queued
// behind a spin (median_ms_queued), as bench_torch.py times PyTorch.
// Also prints, per shape, the tensor_core kernel's time for forced partition counts next to
// the planner's choice.
//   usage: bench_ch09 [--csv FILE] [--md FILE]
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench_common.h"
#include "pa/ch09_fast_decode.h"
#include "pa/dtype.h"
#include "pa/launch.h"


int main(int argc, char** argv) {
  using pa::ch09::Version;
  const auto outputs = pa::bench::parse_outputs(argc, argv);
  try {
    cudaDeviceProp prop;
    PA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const auto ceil = pa::bench::measure_ceilings();
    std::vector<pa::bench::Row> rows;
    pa::ch09::Workspace ws;
    for (const pa::bench::Shape& sh : pa::bench::standard_shapes()) {
      pa::bench::DecodeCase dc(sh);  // the shape, table, lengths, q and out
      const pa::ch04::PagedAttentionShape& s = dc.s;
      auto &q = dc.q, &out = dc.out;
      auto &d_table = dc.table, &lens = dc.lens;
      const std::string shape = sh.name();
      const float scale = dc.scale;
      auto add = [&](const std::string& name, double bytes, double ms) {
        const double tbps = bytes / (ms * 1e-3) / 1e12;
        rows.push_back({name, shape, ms * 1e3, bytes, tbps, 100.0 * tbps / ceil.read_tbps, "read"});
        return ms;
      };
      double best16 = 1e30;
      {  // fp16 cache
        const double bytes = dc.fp16_bytes();
        const auto pools = pa::bench::random_half_pools(dc.pool, bytes);
        const int copies = pools.copies();
        const auto &k = pools.k, &v = pools.v;
        add("ch05 paged_attention (v1/v2)", bytes, pa::bench::median_ms_queued([&](int i) {
              const int c = i % copies;
              pa::ch05::paged_attention<pa::half>(s, out.get(), q.get(), k[c].get(), v[c].get(),
                                                  d_table.get(), lens.get(), sh.l, scale, ws);
            }));
        for (Version ver : {Version::gqa, Version::split, Version::pipelined, Version::tensor_core}) {
          const double ms = add(std::string("ch09 ") + pa::ch09::name_of(ver), bytes,
                                pa::bench::median_ms_queued([&](int i) {
                                  const int c = i % copies;
                                  pa::ch09::decode<pa::half>(ver, s, out.get(), q.get(), k[c].get(),
                                                             v[c].get(), d_table.get(), lens.get(),
                                                             sh.l, scale, ws);
                                }));
          best16 = std::min(best16, ms);
          if (ver == Version::tensor_core)  // the other way to time it, for comparison
            std::printf("%s tensor_core: %.1f us timed alone, %.1f us per call back to back\n",
                        shape.c_str(), ms * 1e3, 1e3 * pa::bench::per_call_back_to_back_ms([&](int i) {
                          const int c = i % copies;
                          pa::ch09::decode<pa::half>(ver, s, out.get(), q.get(), k[c].get(),
                                                     v[c].get(), d_table.get(), lens.get(), sh.l,
                                                     scale, ws);
                        }));
        }
        // The planner's choice against forced partition counts.
        std::printf("%s partitions sweep (tensor_core, us):", shape.c_str());
        for (int splits : {1, 2, 3, 4, 6, 8, 12, 16, 32}) {
          const int blocks = s.max_blocks_per_seq, per = (blocks + splits - 1) / splits;
          const pa::ch09::SplitPlan plan{(blocks + per - 1) / per, per * s.block_size};
          if (plan.splits != splits) continue;
          const double ms = pa::bench::median_ms_queued([&](int i) {
            const int c = i % copies;
            pa::ch09::decode_with_plan<pa::half>(Version::tensor_core, plan, s, out.get(), q.get(),
                                                 k[c].get(), v[c].get(), d_table.get(), lens.get(),
                                                 sh.l, scale, ws);
          });
          std::printf(" %d:%.1f", splits, ms * 1e3);
        }
        std::printf("\n");
      }
      {  // fp8 cache on the tensor-core path
        const double bytes = dc.fp8_bytes();
        const auto pools = pa::bench::random_e4m3_pools(dc.pool, bytes);
        const int copies = pools.copies();
        const auto &k = pools.k, &v = pools.v;
        pa::DeviceBuffer<float> k_scale(std::vector<float>{0.05f}), v_scale(std::vector<float>{0.03f});
        const double ms = add("ch09 fp8 (tensor_core)", bytes, pa::bench::median_ms_queued([&](int i) {
          const int c = i % copies;
          pa::ch09::decode_fp8<pa::half>(s, out.get(), q.get(), k[c].get(), v[c].get(),
                                         d_table.get(), lens.get(), sh.l, k_scale.get(),
                                         v_scale.get(), scale, ws);
        }));
        std::printf("%s: fp8 over the best fp16 version %.2fx\n", shape.c_str(), best16 / ms);
      }
    }
    pa::bench::report(rows, ceil, prop.name, outputs.csv, outputs.md);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
