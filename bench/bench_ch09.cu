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
    const int bs = 16, D = 128;
    std::vector<pa::bench::Row> rows;
    pa::ch09::Workspace ws;
    for (const pa::bench::Shape& sh : pa::bench::standard_shapes()) {
      const int M = sh.l / bs;
      const pa::ch04::PagedAttentionShape s{sh.b, sh.hq, sh.hkv, D, bs, sh.b * M, M};
      const size_t pool = size_t(s.num_blocks) * sh.hkv * D * bs;
      const size_t qn = size_t(sh.b) * sh.hq * D;
      const std::string shape = sh.name();
      const std::vector<int> table = pa::bench::permuted_blocks(s.num_blocks, 3);
      pa::DeviceBuffer<int> d_table(table), lens(std::vector<int>(sh.b, sh.l));
      pa::DeviceBuffer<pa::half> q(qn), out(qn);
      pa::bench::fill_random_half(q.get(), qn, 2, false);
      const float scale = 1.f / std::sqrt(float(D));
      auto add = [&](const std::string& name, double bytes, double ms) {
        const double tbps = bytes / (ms * 1e-3) / 1e12;
        rows.push_back({name, shape, ms * 1e3, bytes, tbps, 100.0 * tbps / ceil.read_tbps, "read"});
        return ms;
      };
      double best16 = 1e30;
      {  // fp16 cache
        const double bytes = 2.0 * (2.0 * double(pool) + 2.0 * double(qn));
        const int copies = pa::bench::rotation_count(size_t(bytes));
        std::vector<pa::DeviceBuffer<pa::half>> k, v;
        for (int c = 0; c < copies; ++c) {
          k.emplace_back(pool);
          v.emplace_back(pool);
          pa::bench::fill_random_half(k.back().get(), pool, 17 + c, false);
          pa::bench::fill_random_half(v.back().get(), pool, 61 + c, false);
        }
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
                        shape.c_str(), ms * 1e3, 1e3 * pa::bench::median_ms([&](int i) {
                          for (int j = 0; j < 20; ++j) {
                            const int c = (20 * i + j) % copies;
                            pa::ch09::decode<pa::half>(ver, s, out.get(), q.get(), k[c].get(),
                                                       v[c].get(), d_table.get(), lens.get(),
                                                       sh.l, scale, ws);
                          }
                        }) / 20);
        }
        // The planner's choice against forced partition counts.
        std::printf("%s partitions sweep (tensor_core, us):", shape.c_str());
        for (int splits : {1, 2, 3, 4, 6, 8, 12, 16, 32}) {
          const int blocks = M, per = (blocks + splits - 1) / splits;
          const pa::ch09::SplitPlan plan{(blocks + per - 1) / per, per * bs};
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
        const double bytes = 2.0 * double(pool) + 4.0 * double(qn);
        const int copies = pa::bench::rotation_count(size_t(bytes));
        std::vector<pa::DeviceBuffer<uint8_t>> k, v;
        for (int c = 0; c < copies; ++c) {
          k.emplace_back(pool);
          v.emplace_back(pool);
          pa::bench::fill_random_e4m3(k.back().get(), pool, 5u + c);
          pa::bench::fill_random_e4m3(v.back().get(), pool, 9u + c);
        }
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
