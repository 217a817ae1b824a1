// GPU benchmark of chapter 2's paged -> dense gather: what "a paged KV cache without paged
// attention" costs. For each standard shape (fp16, D = 128, block_size 16, physical blocks
// randomly permuted) it times the gather (bytes read from the pool + written to the dense
// buffer, against the copy ceiling) and chapter 1's decode on the result, so the gather's
// overhead on a decode step is visible.   usage: bench_ch02 [--csv FILE] [--md FILE]
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench_common.h"
#include "pa/ch01_dense.h"
#include "pa/ch02_paged.h"
#include "pa/device_buffer.h"
#include "pa/dtype.h"

int main(int argc, char** argv) {
  const auto outputs = pa::bench::parse_outputs(argc, argv);
  try {
    cudaDeviceProp prop;
    PA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const auto ceil = pa::bench::measure_ceilings();
    const int bs = 16, D = 128;
    std::vector<pa::bench::Row> rows;
    for (const pa::bench::Shape& sh : pa::bench::standard_shapes()) {
      const int M = sh.l / bs;
      const pa::ch02::PoolShape ps{sh.b * M, bs, sh.hkv, D};
      const size_t kv = size_t(pa::ch02::pool_elems(ps));
      const double kv_bytes = 2.0 * 2.0 * double(kv);  // K and V, 2 bytes each
      const int copies = pa::bench::rotation_count(size_t(2 * kv_bytes));
      std::vector<pa::DeviceBuffer<pa::half>> kp, vp;
      for (int c = 0; c < copies; ++c) {
        kp.emplace_back(kv);
        vp.emplace_back(kv);
        pa::bench::fill_random_half(kp.back().get(), kv, 31 + c, false);
        pa::bench::fill_random_half(vp.back().get(), kv, 71 + c, false);
      }
      const std::vector<int> table = pa::bench::permuted_blocks(sh.b * M, 5);  // scattered blocks
      pa::DeviceBuffer<int> d_table(table), lens(std::vector<int>(sh.b, sh.l));
      pa::DeviceBuffer<pa::half> kd(kv), vd(kv);
      const std::string shape = sh.name();
      const double gather_ms = pa::bench::median_ms([&](int i) {
        const int c = i % copies;
        pa::ch02::gather_kv<pa::half>(ps, kp[c].get(), vp[c].get(), d_table.get(), M, lens.get(),
                                      sh.b, sh.l, kd.get(), vd.get());
      });
      const double gather_bytes = 2.0 * kv_bytes;  // read the pool, write the dense copy
      const double gtb = gather_bytes / (gather_ms * 1e-3) / 1e12;
      rows.push_back({"ch02 gather paged->dense", shape, gather_ms * 1e3, gather_bytes, gtb,
                      100.0 * gtb / ceil.copy_tbps, "copy"});
      const size_t qn = size_t(sh.b) * sh.hq * D;
      pa::DeviceBuffer<pa::half> q(qn), out(qn);
      pa::bench::fill_random_half(q.get(), qn, 3, false);
      const pa::ch01::DenseShape ds{sh.b, sh.l, sh.hq, sh.hkv, D};
      const double decode_ms = pa::bench::median_ms([&](int) {
        pa::ch01::decode_attention<pa::half>(ds, out.get(), q.get(), kd.get(), vd.get(), lens.get(),
                                             1.f / std::sqrt(float(D)));
      });
      const double dbytes = kv_bytes + 4.0 * double(qn);
      const double dtb = dbytes / (decode_ms * 1e-3) / 1e12;
      rows.push_back({"ch01 decode on the gathered copy", shape, decode_ms * 1e3, dbytes, dtb,
                      100.0 * dtb / ceil.read_tbps, "read"});
      const double total_ms = gather_ms + decode_ms, tb = dbytes / (total_ms * 1e-3) / 1e12;
      rows.push_back({"gather + decode (one step)", shape, total_ms * 1e3, dbytes, tb,
                      100.0 * tb / ceil.read_tbps, "read"});
    }
    pa::bench::report(rows, ceil, prop.name, outputs.csv, outputs.md);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
