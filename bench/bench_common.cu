#include "bench_common.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>

#include "pa/check.h"
#include "pa/launch.h"

namespace pa::bench {

std::string Shape::name() const {
  return std::to_string(hq) + "/" + std::to_string(hkv) + "/" + std::to_string(b) + "/" + std::to_string(l);
}

const std::vector<Shape>& standard_shapes() {
  static const std::vector<Shape> shapes = {
      {32, 8, 32, 4096}, {32, 8, 8, 32768}, {32, 8, 128, 1024}, {32, 32, 32, 4096}, {32, 8, 64, 32}};
  return shapes;
}

std::vector<int> permuted_blocks(int n, unsigned seed) {
  std::vector<int> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  return ids;
}

Outputs parse_outputs(int argc, char** argv) {
  Outputs out;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--csv") out.csv = argv[i + 1];
    if (std::string(argv[i]) == "--md") out.md = argv[i + 1];
  }
  return out;
}

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

namespace {

// The median of `reps` timed runs; spin_cycles > 0 queues a GPU spin before each start
// event (median_ms_queued).
double median_of_runs(const std::function<void(int)>& fn, int warmup, int reps,
                      long long spin_cycles) {
  for (int i = 0; i < warmup; ++i) fn(i);
  PA_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  PA_CUDA_CHECK(cudaEventCreate(&a));
  PA_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    if (spin_cycles > 0) launch(spin_kernel, dim3(1), dim3(1), 0, nullptr, spin_cycles);
    PA_CUDA_CHECK(cudaEventRecord(a));
    fn(warmup + i);
    PA_CUDA_CHECK(cudaEventRecord(b));
    PA_CUDA_CHECK(cudaEventSynchronize(b));
    PA_CUDA_CHECK(cudaEventElapsedTime(&ms[i], a, b));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

}  // namespace

double median_ms(const std::function<void(int)>& fn, int warmup, int reps) {
  return median_of_runs(fn, warmup, reps, 0);
}

double median_ms_queued(const std::function<void(int)>& fn, int warmup, int reps) {
  int khz = 0;
  PA_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  return median_of_runs(fn, warmup, reps, 100LL * khz / 1000);  // about 100 us
}

double per_call_back_to_back_ms(const std::function<void(int)>& fn, int calls) {
  return median_ms([&](int i) {
           for (int j = 0; j < calls; ++j) fn(calls * i + j);
         }) / calls;
}

// Four independent 16-byte loads in flight per thread per iteration; the XOR keeps the
// loads from being optimised away and is written only in the impossible case.
__global__ void read_kernel(const uint4* __restrict__ p, size_t n, uint4* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t x = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    x ^= a.x ^ b.y ^ c.z ^ d.w ^ a.w ^ b.x ^ c.y ^ d.z;
  }
  for (; i < n; i += stride) x ^= p[i].x ^ p[i].w;
  if (x == 0x9e3779b9u) sink[0] = make_uint4(x, x, x, x);
}

__global__ void fill_kernel(uint16_t* p, size_t n, uint32_t seed, bool bf16) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12; h *= 0x297A2D39u; h ^= h >> 15;
    // Sum of four uniforms, centred: roughly N(0, 1), and never exactly zero in practice.
    float u = ((h & 0xff) + ((h >> 8) & 0xff) + ((h >> 16) & 0xff) + (h >> 24)) / 255.f;
    float v = (u - 2.f) * 1.7320508f + 1e-3f;
    p[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
  }
}

void fill_random_half(void* ptr, size_t n, uint32_t seed, bool bf16) {
  launch(fill_kernel, dim3(1024), dim3(256), 0, nullptr, static_cast<uint16_t*>(ptr), n, seed, bf16);
}

__global__ void fill_e4m3_kernel(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 13;
    p[i] = uint8_t((h & 0x80u) | ((4u + (h >> 8) % 7u) << 3) | ((h >> 16) & 7u));
  }
}

void fill_random_e4m3(uint8_t* ptr, size_t n, uint32_t seed) {
  launch(fill_e4m3_kernel, dim3(1024), dim3(256), 0, nullptr, ptr, n, seed);
}

DecodeCase::DecodeCase(const Shape& shape)
    : sh(shape),
      s{sh.b, sh.hq, sh.hkv, 128, 16, sh.b * (sh.l / 16), sh.l / 16},
      pool(size_t(s.num_blocks) * sh.hkv * 128 * 16),
      qn(size_t(sh.b) * sh.hq * 128),
      scale(1.f / std::sqrt(128.f)),
      table(permuted_blocks(s.num_blocks, 3)),  // scattered blocks
      lens(std::vector<int>(sh.b, sh.l)),
      q(qn),
      out(qn) {
  fill_random_half(q.get(), qn, 2, false);
}

RotatedPools<half> random_half_pools(size_t n, double bytes) {
  RotatedPools<half> p;
  for (int c = 0; c < rotation_count(size_t(bytes)); ++c) {
    p.k.emplace_back(n);
    p.v.emplace_back(n);
    fill_random_half(p.k.back().get(), n, 17 + c, false);
    fill_random_half(p.v.back().get(), n, 61 + c, false);
  }
  return p;
}

RotatedPools<uint8_t> random_e4m3_pools(size_t n, double bytes) {
  RotatedPools<uint8_t> p;
  for (int c = 0; c < rotation_count(size_t(bytes)); ++c) {
    p.k.emplace_back(n);
    p.v.emplace_back(n);
    fill_random_e4m3(p.k.back().get(), n, 5u + c);
    fill_random_e4m3(p.v.back().get(), n, 9u + c);
  }
  return p;
}

int rotation_count(size_t bytes) {
  int l2 = 0;
  PA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  const size_t want = size_t(10) * size_t(l2);
  return int(std::max<size_t>(1, (want + bytes - 1) / bytes));
}

Ceilings measure_ceilings(size_t bytes) {
  void *a = nullptr, *b = nullptr, *sink = nullptr;
  PA_CUDA_CHECK(cudaMalloc(&a, bytes));
  PA_CUDA_CHECK(cudaMalloc(&b, bytes));
  PA_CUDA_CHECK(cudaMalloc(&sink, 16));
  fill_random_half(a, bytes / 2, 1, false);
  int sms = 0;
  PA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t n = bytes / 16;
  const double read_ms = median_ms([&](int) {
    launch(read_kernel, dim3(sms * 8), dim3(512), 0, nullptr, static_cast<const uint4*>(a), n,
           static_cast<uint4*>(sink));
  });
  const double copy_ms = median_ms([&](int) {
    PA_CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  });
  cudaFree(a);
  cudaFree(b);
  cudaFree(sink);
  return Ceilings{double(bytes) / (read_ms * 1e-3) / 1e12, 2.0 * double(bytes) / (copy_ms * 1e-3) / 1e12};
}

double read_floor_us(size_t bytes) {
  const size_t n = (bytes + 15) / 16, copies = size_t(rotation_count(bytes));
  uint4 *a = nullptr, *sink = nullptr;
  PA_CUDA_CHECK(cudaMalloc(&a, copies * n * 16));
  PA_CUDA_CHECK(cudaMalloc(&sink, 16));
  PA_CUDA_CHECK(cudaMemset(a, 0x3c, copies * n * 16));
  int sms = 0;
  PA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double ms = median_ms_queued([&](int i) {
    launch(read_kernel, dim3(sms * 8), dim3(512), 0, nullptr,
           static_cast<const uint4*>(a + size_t(i) % copies * n), n, sink);
  });
  cudaFree(a);
  cudaFree(sink);
  return ms * 1e3;
}

void report(const std::vector<Row>& rows, const Ceilings& c, const std::string& device,
            const std::string& csv_path, const std::string& md_path) {
  char line[512];
  std::string md;
  md += "Measured on " + device + ". Ceilings in the same run: read " +
        std::to_string(c.read_tbps).substr(0, 4) + " TB/s, device-to-device copy " +
        std::to_string(c.copy_tbps).substr(0, 4) + " TB/s (read + write).\n\n";
  md += "| kernel | shape (Hq/Hkv/B/L) | time (us) | MB moved | TB/s | % of ceiling |\n";
  md += "|---|---|---:|---:|---:|---:|\n";
  std::printf("\n%-30s %-18s %10s %10s %8s %14s\n", "kernel", "Hq/Hkv/B/L", "us", "MB",
              "TB/s", "% of ceiling");
  for (const Row& r : rows) {
    std::printf("%-30s %-18s %10.1f %10.1f %8.2f %7.1f%% %s\n", r.kernel.c_str(),
                r.shape.c_str(), r.us, r.bytes / 1e6, r.tbps, r.pct, r.ceiling.c_str());
    std::snprintf(line, sizeof line, "| %s | %s | %.1f | %.1f | %.2f | %.1f%% of %s |\n",
                  r.kernel.c_str(), r.shape.c_str(), r.us, r.bytes / 1e6, r.tbps, r.pct,
                  r.ceiling.c_str());
    md += line;
  }
  std::printf("read ceiling %.2f TB/s, copy ceiling %.2f TB/s (%s)\n", c.read_tbps, c.copy_tbps,
              device.c_str());
  if (!csv_path.empty()) {
    std::ofstream csv(csv_path);
    csv << "kernel,shape,us,bytes,tbps,pct,ceiling,read_ceiling_tbps,copy_ceiling_tbps,device\n";
    for (const Row& r : rows)
      csv << r.kernel << "," << r.shape << "," << r.us << "," << r.bytes << "," << r.tbps << ","
          << r.pct << "," << r.ceiling << "," << c.read_tbps << "," << c.copy_tbps << ","
          << device << "\n";
  }
  if (!md_path.empty()) std::ofstream(md_path) << md;
}

}  // namespace pa::bench
