// Shared pieces of the GPU benchmarks: the bandwidth ceilings measured in the same run,
// event timing (median of many runs), rotated inputs, and the result table.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "pa/backend.h"
#include "pa/ch04_paged_attention.h"
#include "pa/device_buffer.h"
#include "pa/dtype.h"

namespace pa::bench {

// Median milliseconds of `reps` runs of fn(i) after `warmup` runs, timed with CUDA events.
// fn receives the run index so the caller can rotate among input copies.
double median_ms(const std::function<void(int)>& fn, int warmup = 5, int reps = 30);

// The same, but each sample's start event is queued behind a ~100 us spin on the GPU, so
// the call is already waiting when the GPU reaches it: the time is the GPU's alone, not
// the host's launch latency (which would dominate a kernel of a few us). This is how a
// serving loop or a CUDA graph sees a kernel; bench_torch.py times PyTorch the same way.
double median_ms_queued(const std::function<void(int)>& fn, int warmup = 5, int reps = 30);

// Milliseconds per call of `calls` calls fn(i) queued back to back (median_ms of the batch,
// / calls): as a model's layers call a kernel, each launch placed behind the last.
double per_call_back_to_back_ms(const std::function<void(int)>& fn, int calls = 20);

// The course's standard decode shapes (fp16, D = 128): query heads, KV heads, batch,
// context length. Four long ones and the short-context case.
struct Shape {
  int hq, hkv, b, l;
  std::string name() const;  // "Hq/Hkv/B/L"
};
const std::vector<Shape>& standard_shapes();

// 0 .. n-1 shuffled: a block table whose physical blocks are scattered over the pool.
std::vector<int> permuted_blocks(int n, unsigned seed);

// One standard shape set up for a decode benchmark: fp16 activations, D = 128, blocks of
// 16 tokens, every sequence of length L, a randomly permuted block table, a random q.
struct DecodeCase {
  explicit DecodeCase(const Shape& sh);
  Shape sh;
  ch04::PagedAttentionShape s;
  size_t pool;  // elements of one K (or V) pool
  size_t qn;    // elements of q (and of out)
  float scale;
  DeviceBuffer<int> table, lens;
  DeviceBuffer<half> q, out;
  // Bytes a decode step must move: K and V once, q and out.
  double fp16_bytes() const { return 2.0 * (2.0 * double(pool) + 2.0 * double(qn)); }
  double fp8_bytes() const { return 2.0 * double(pool) + 4.0 * double(qn); }
};

// K and V pools of random values, as many copies as rotation_count asks for a step that
// moves `bytes`: fp16 (N(0,1)-like) or e4m3 bytes (fill_random_e4m3).
template <typename T>
struct RotatedPools {
  std::vector<DeviceBuffer<T>> k, v;
  int copies() const { return int(k.size()); }
};
RotatedPools<half> random_half_pools(size_t n, double bytes);
RotatedPools<uint8_t> random_e4m3_pools(size_t n, double bytes);

// --csv FILE and --md FILE, the outputs every benchmark takes.
struct Outputs {
  std::string csv, md;
};
Outputs parse_outputs(int argc, char** argv);

struct Ceilings {
  double read_tbps;  // a streaming read kernel: bytes read / time
  double copy_tbps;  // cudaMemcpy device to device: (bytes read + bytes written) / time
};
Ceilings measure_ceilings(size_t bytes = size_t(2) << 30);

// Microseconds the streaming read kernel takes over `bytes` alone (copies rotated past the
// L2 cache, queued like a case): the floor of a launch that reads that little.
double read_floor_us(size_t bytes);

// Fills a device buffer of n 16-bit values with N(0,1)-like fp16 or bf16 values (never
// zeros: timing on zeros flatters some kernels).
void fill_random_half(void* ptr, size_t n, uint32_t seed, bool bf16);

// Fills a device buffer of n bytes with e4m3 values of moderate size (sign, exponent
// 4..10, any mantissa: never NaN, never zero).
void fill_random_e4m3(uint8_t* ptr, size_t n, uint32_t seed);

// How many copies of an input of `bytes` to rotate through so that the working set is at
// least ten times the L2 cache: each timed run then reads from DRAM, not from L2.
int rotation_count(size_t bytes);

struct Row {
  std::string kernel, shape;
  double us, bytes, tbps;
  double pct;           // tbps as a percentage of the ceiling named next
  std::string ceiling;  // "read" for kernels that mostly read, "copy" for read+write ones
};
// Prints the table, and writes it as CSV and as a Markdown table when paths are given.
void report(const std::vector<Row>& rows, const Ceilings& c, const std::string& device,
            const std::string& csv_path, const std::string& md_path);

}  // namespace pa::bench
