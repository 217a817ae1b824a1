// GPU benchmark of chapter 1's dense decode kernel on the course's standard shapes
// (fp16, D = 128), against the read ceiling measured in the same run.
//   usage: bench_ch01 [--csv FILE] [--md FILE]
#include <cmath>
#include <string>
#include <vector>

#include "bench_common.h"
#include "pa/ch01_dense.h"
#include "pa/device_buffer.h"
#include "pa/dtype.h"

int main(int argc, char** argv) {
  const auto outputs = pa::bench::parse_outputs(argc, argv);
  try {
    cudaDeviceProp prop;
    PA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const auto ceil = pa::bench::measure_ceilings();
    std::vector<pa::bench::Row> rows;
    for (const pa::bench::Shape& sh : pa::bench::standard_shapes()) {
      const pa::ch01::DenseShape s{sh.b, sh.l, sh.hq, sh.hkv, 128};
      const size_t kv = size_t(s.num_seqs) * s.max_seq_len * s.num_kv_heads * s.head_size;
      const size_t qn = size_t(s.num_seqs) * s.num_q_heads * s.head_size;
      // K and V read once each, q read, out written: the fewest bytes decode must move.
      const double bytes = 2.0 * (2.0 * kv + 2.0 * qn);
      const int copies = pa::bench::rotation_count(size_t(bytes));
      std::vector<pa::DeviceBuffer<pa::half>> k, v;
      for (int c = 0; c < copies; ++c) {
        k.emplace_back(kv);
        v.emplace_back(kv);
        pa::bench::fill_random_half(k.back().get(), kv, 11 + c, false);
        pa::bench::fill_random_half(v.back().get(), kv, 97 + c, false);
      }
      pa::DeviceBuffer<pa::half> q(qn), out(qn);
      pa::bench::fill_random_half(q.get(), qn, 5, false);
      pa::DeviceBuffer<int> lens(std::vector<int>(s.num_seqs, s.max_seq_len));
      const float scale = 1.f / std::sqrt(128.f);
      const double ms = pa::bench::median_ms([&](int i) {
        const int c = i % copies;
        pa::ch01::decode_attention<pa::half>(s, out.get(), q.get(), k[c].get(), v[c].get(),
                                             lens.get(), scale);
      });
      const double tbps = bytes / (ms * 1e-3) / 1e12;
      rows.push_back({"ch01 dense decode", sh.name(),
                      ms * 1e3, bytes, tbps, 100.0 * tbps / ceil.read_tbps, "read"});
    }
    pa::bench::report(rows, ceil, prop.name, outputs.csv, outputs.md);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
