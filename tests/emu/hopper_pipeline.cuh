// A small, correct Hopper pipeline: the host of chapter 13's planted bugs (tests/mutants/13-*).
// Each mutant edits one line of this file; the emulator's test (test_hopper_pipeline.cu) and
// the GPU driver (hopper_hazard_driver.cu, run under compute-sanitizer by
// tools/gpu_hazards.sh) run the same kernel and check its output exactly.
//
//   C (64 x 32, fp32) = scale[n] * (A (64 x K) * B (32 x K)^T),  K = 224, fp16 inputs
//
// Warp specialisation in one block of 160 threads:
//   warps 0-3 (warpgroup 0)  consumers: wait for a stage, wgmma over its four k16 steps, keep
//                            one k-block's wgmmas in flight, release the stage before it
//   warp 4, thread 128       producer: the column scales (bulk_load), then the k-blocks by TMA
//                            into a 2-stage ring, each stage guarded by a full and an empty
//                            mbarrier
// The epilogue scales the accumulators, writes them to a shared staging buffer of half the
// tile (32 rows) with ordinary stores, and thread 0 stores each half by TMA: the buffer is
// written again only after bulk_wait_group_read says the first store has read it.
//
// K = 224 is 3.5 k-blocks of 64: the last box reaches past the tensor and TMA fills the
// missing columns with zeros, which is why each map gives the tensor's true extent. The
// inputs are small integers and the scales powers of two, so every product and sum is exact
// in fp32 and the output can be compared bit for bit on both backends.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "pa/device_buffer.h"
#include "pa/dtype.h"
#include "pa/hopper.h"
#include "pa/launch.h"

namespace pa::hopper_pipeline {

constexpr int kM = 64, kN = 32, kK = 224;
constexpr int kKBlock = 64;                               // one 128-byte swizzled row of fp16
constexpr int kKBlocks = (kK + kKBlock - 1) / kKBlock;    // 4: the producer wraps the ring twice
constexpr int kStages = 2;
constexpr int kConsumers = 128, kConsumerWarps = 4, kThreads = kConsumers + 32;
constexpr uint32_t kABytes = kM * kKBlock * 2, kBBytes = kN * kKBlock * 2;  // 8 KB, 4 KB
constexpr uint32_t kStageBytes = kABytes + kBBytes;
constexpr uint32_t kHalfRows = kM / 2, kStagingBytes = kHalfRows * kN * 4;  // 4 KB
constexpr uint32_t kScaleBytes = kN * 4;

struct Barriers {
  uint64_t full[kStages];   // the producer's loads of a stage have landed (1 arrival + bytes)
  uint64_t empty[kStages];  // the consumers are done with a stage (one arrival per warp)
  uint64_t scale;           // the column scales have landed
};

// The shared memory, carved from the 1,024-byte aligned dynamic buffer: the ring's stages
// (A then B, each a 128B-swizzled TMA box), the staging buffer, the scales, the barriers.
struct Shared {
  unsigned char* stage;
  float* staging;
  float* scale;
  Barriers* bars;
  __device__ half* a(int st) const { return reinterpret_cast<half*>(stage + st * kStageBytes); }
  __device__ half* b(int st) const {
    return reinterpret_cast<half*>(stage + st * kStageBytes + kABytes);
  }
};
constexpr uint32_t kStagingOffset = kStages * kStageBytes;
constexpr uint32_t kScaleOffset = kStagingOffset + kStagingBytes;
constexpr uint32_t kBarrierOffset = kScaleOffset + kScaleBytes;
constexpr size_t kSharedBytes = kBarrierOffset + sizeof(Barriers) + 1024;  // room to align

__device__ inline Shared carve(unsigned char* raw) {
  unsigned char* s = pa::smem_align(raw, 1024);
  return {s, reinterpret_cast<float*>(s + kStagingOffset), reinterpret_cast<float*>(s + kScaleOffset),
          reinterpret_cast<Barriers*>(s + kBarrierOffset)};
}

// The descriptor of k16 step `step` of a K-major tile of 128-byte swizzled rows: the start
// moves 32 bytes along the row; SBO is 8 rows (1,024 bytes), LBO unused.
__device__ inline uint64_t step_desc(const half* tile, int step) {
  return pa::wgmma_descriptor(tile + 16 * step, 16, 1024, pa::WgmmaSwizzle::B128);
}

__device__ inline void produce(const Shared& s, const pa::TensorMap& map_a,
                               const pa::TensorMap& map_b, const float* scale) {
  Barriers* b = s.bars;
  pa::mbarrier_arrive_expect_tx(&b->scale, kScaleBytes);
  pa::bulk_load(s.scale, scale, kScaleBytes, &b->scale);
  for (int kb = 0; kb < kKBlocks; ++kb) {
    const int st = kb % kStages;
    // Round r of the ring waits for the consumers' release of round r - 1: parity 1 first,
    // the phase "before" phase 0, which counts as complete.
    pa::mbarrier_wait_parity(&b->empty[st], ((kb / kStages) & 1) ^ 1);
    pa::mbarrier_arrive_expect_tx(&b->full[st], kStageBytes);
    pa::tma_load_2d(s.a(st), map_a, kb * kKBlock, 0, &b->full[st]);
    pa::tma_load_2d(s.b(st), map_b, kb * kKBlock, 0, &b->full[st]);
  }
}

// One arrival per consumer warp, once the warp's lanes are all done with the stage.
__device__ inline void release(Barriers* b, int st) {
  __syncwarp();
  if (threadIdx.x % 32 == 0) pa::mbarrier_arrive(&b->empty[st]);
}

__device__ inline void consume(const Shared& s, const pa::TensorMap& map_c) {
  Barriers* b = s.bars;
  const int t = threadIdx.x;
  pa::WgmmaAcc<kN> acc;
  for (int i = 0; i < kN / 2; ++i) acc.d[i] = 0.f;
  for (int kb = 0; kb < kKBlocks; ++kb) {
    const int st = kb % kStages;
    pa::mbarrier_wait_parity(&b->full[st], (kb / kStages) & 1);  // stage st holds k-block kb
    pa::wgmma_fence();
    for (int step = 0; step < kKBlock / 16; ++step)
      pa::wgmma_mma_async<half>(acc, step_desc(s.a(st), step), step_desc(s.b(st), step));
    pa::wgmma_commit_group();
    pa::wgmma_wait_group<1>();  // k-block kb - 1's wgmmas are done: its stage may be refilled
    if (kb > 0) release(b, (kb - 1) % kStages);
  }
  pa::wgmma_wait_group<0>(acc);
  pa::mbarrier_wait_parity(&b->scale, 0);
  for (int i = 0; i < kN / 2; ++i) acc.d[i] *= s.scale[acc.col(i, t)];

  // The epilogue: warps 2h and 2h + 1 hold rows 32h to 32h + 31 of the tile.
  for (int h = 0; h < 2; ++h) {
    if (t / 64 == h)
      for (int i = 0; i < kN / 2; ++i)
        s.staging[(acc.row(i, t) - kHalfRows * h) * kN + acc.col(i, t)] = acc.d[i];
    pa::fence_proxy_async();  // ordinary stores, read next by the TMA store (the async proxy)
    pa::named_barrier_sync(1, kConsumers);
    if (t == 0) {
      pa::tma_store_2d(map_c, s.staging, 0, int(kHalfRows) * h);
      pa::bulk_commit();
      pa::bulk_wait_group_read<0>();  // the store has read the staging buffer
    }
    pa::named_barrier_sync(1, kConsumers);  // so it may be written again
  }
  if (t == 0) pa::bulk_wait_group<0>();
}

__global__ void __launch_bounds__(kThreads) pipeline_kernel(const __grid_constant__ pa::TensorMap map_a,
                                                            const __grid_constant__ pa::TensorMap map_b,
                                                            const __grid_constant__ pa::TensorMap map_c,
                                                            const float* scale) {
  PA_DYNAMIC_SHARED(unsigned char, raw);
  const Shared s = carve(raw);
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) {
      pa::mbarrier_init(&s.bars->full[st], 1);
      pa::mbarrier_init(&s.bars->empty[st], kConsumerWarps);
    }
    pa::mbarrier_init(&s.bars->scale, 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x >= kConsumers) {
    if (threadIdx.x == kConsumers) produce(s, map_a, map_b, scale);
    return;
  }
  consume(s, map_c);
}

// ---- The host side: inputs, the maps, the expected output, one run. -------------------------

// A (64 x K) and B (32 x K) row-major, entries -2..2; scale[n] in {0.25, 0.5, 1, 2}.
struct Inputs {
  std::vector<half> a, b;
  std::vector<float> scale;
};

inline Inputs make_inputs() {
  Inputs in;
  for (int i = 0; i < kM * kK; ++i) in.a.push_back(pa::from_float<half>(float((i * 7 + i / kK) % 5 - 2)));
  for (int i = 0; i < kN * kK; ++i) in.b.push_back(pa::from_float<half>(float((i * 3 + i / kK) % 5 - 2)));
  for (int n = 0; n < kN; ++n) in.scale.push_back(0.25f * float(1 << (n % 4)));
  return in;
}

inline std::vector<float> expected(const Inputs& in) {
  std::vector<float> c(size_t(kM) * kN);
  for (int m = 0; m < kM; ++m)
    for (int n = 0; n < kN; ++n) {
      float sum = 0.f;
      for (int k = 0; k < kK; ++k)
        sum += pa::to_float(in.a[size_t(m) * kK + k]) * pa::to_float(in.b[size_t(n) * kK + k]);
      c[size_t(m) * kN + n] = in.scale[size_t(n)] * sum;
    }
  return c;
}

// A K-major operand: `rows` rows of K fp16, read in boxes of 64 x rows, 128B-swizzled.
inline pa::TensorMap operand_map(const half* g, int rows) {
  pa::TensorMapSpec s;
  s.dtype = pa::TmaDtype::F16;
  s.global = g;
  s.dims[0] = kK, s.dims[1] = uint64_t(rows);
  s.strides[0] = kK * sizeof(half);
  s.box[0] = kKBlock, s.box[1] = uint32_t(rows);
  s.swizzle = pa::TmaSwizzle::B128;
  return pa::encode_tensor_map(s);
}

// C (64 x 32 fp32), stored half a tile (32 rows) at a time.
inline pa::TensorMap output_map(const float* g) {
  pa::TensorMapSpec s;
  s.dtype = pa::TmaDtype::F32;
  s.global = g;
  s.dims[0] = kN, s.dims[1] = kM;
  s.strides[0] = kN * sizeof(float);
  s.box[0] = kN, s.box[1] = kHalfRows;
  return pa::encode_tensor_map(s);
}

// Runs the kernel once (the output poisoned first) and returns C.
inline std::vector<float> run(const Inputs& in) {
  pa::DeviceBuffer<half> a(in.a), b(in.b);
  pa::DeviceBuffer<float> scale(in.scale), c(size_t(kM) * kN);
  c.fill_bytes(0xFF);
  const pa::TensorMap map_a = operand_map(a.get(), kM), map_b = operand_map(b.get(), kN);
  const pa::TensorMap map_c = output_map(c.get());
  pa::launch(pipeline_kernel, dim3(1), dim3(kThreads), kSharedBytes, nullptr, map_a, map_b, map_c,
             static_cast<const float*>(scale.get()));
  PA_CUDA_CHECK(cudaDeviceSynchronize());
  return c.download();
}

// "" when got is want bit for bit, else the first difference and how many differ.
inline std::string first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  size_t bad = 0, first = want.size();
  for (size_t i = 0; i < want.size(); ++i)
    if (!(got[i] == want[i]) && bad++ == 0) first = i;
  if (!bad) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, "C[%d][%d] is %g, want %g (%zu of %zu elements differ)",
                int(first / kN), int(first % kN), double(got[first]), double(want[first]), bad,
                want.size());
  return buf;
}

}  // namespace pa::hopper_pipeline
