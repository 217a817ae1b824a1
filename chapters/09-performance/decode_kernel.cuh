// Your exercise file. (Generated from solutions/09-performance/decode_kernel.cuh; instructors regenerate with tools/make_skeletons.py.)
// Chapter 9, exercise 1 (the core exercise: the cp.async ring below): the decode kernel. One thread block per (sequence, group of
// GQ query heads sharing a KV head, partition); its four warps take the partition's KV
// blocks in turn. kStages = 0 reads each block straight from global memory (versions gqa
// and split); otherwise each warp copies blocks into a ring of kStages shared-memory
// slots with cp.async, kStages - 1 blocks ahead of the one it computes on. Math is how a warp attends over a block: on the CUDA cores (CudaCoreMath,
// gqa_block.cuh) or on the tensor cores (TensorCoreMath, tc_block.cuh).
#pragma once

#include <cmath>
#include <cstdint>

#include "gqa_block.cuh"
#include "tc_block.cuh"
#include "reduce_partitions.cuh"  // chapter 5: partition_index and the reduce kernel
#include "pa/async_copy.h"
#include "pa/ch09_fast_decode.h"

namespace pa::ch09 {

// Everything a launch passes to the kernel. C is the cache element (T, or uint8_t: e4m3).
template <typename T, typename C>
struct DecodeArgs {
  T* out;
  float *max_logits, *exp_sums, *partial_out;  // chapter 5's workspace, when splits > 1
  int* counters;                               // finished partitions per (sequence, group)
  const T* q;
  const C *k_pool, *v_pool;
  const int *block_table, *context_lens;
  const float *k_scale, *v_scale;  // fp8 only (device pointers); nullptr means 1
  float scale;
  int partition_blocks;  // KV blocks per partition
  PagedAttentionShape s;
};

// The dynamic shared memory of one thread block: the Math's own (queries, each warp's
// scratch; in floats), then a region that holds each warp's ring of KV slots while the loop
// runs (pipelined) and the warps' states for the final merge afterwards.
template <class Math, typename C, int D, int BS, int GQ>
__host__ __device__ constexpr size_t smem_bytes(int stages) {
  const size_t merge = 4 * size_t(kWarps) * GQ * (D + 2);
  const size_t ring = size_t(kWarps) * stages * 2 * D * BS * sizeof(C);
  return 4 * (Math::kBlockFloats + size_t(kWarps) * Math::kWarpFloats) + (ring > merge ? ring : merge);
}

// ANCHOR: math_cuda_cores
// The CUDA-core math: queries in shared memory (fp32, scaled), attend_block_gqa per block.
template <typename T, typename C, int D, int BS, int GQ>
struct CudaCoreMath {
  using State = GroupState<GQ, D>;
  static constexpr size_t kBlockFloats = size_t(GQ) * D;  // q_s
  static constexpr size_t kWarpFloats = size_t(GQ) * BS;  // scores, then probabilities
  float* q_s;
  float* s_s;
  float k_scale;

  __device__ void init(const DecodeArgs<T, C>& a, int seq, int head0, float* block_smem,
                       float* warp_smem, State& st) {
    q_s = block_smem;
    s_s = warp_smem;
    k_scale = a.k_scale ? *a.k_scale : 1.f;
    for (int i = threadIdx.x; i < GQ * D; i += blockDim.x)
      q_s[i] = to_float(a.q[(int64_t(seq) * a.s.num_q_heads + head0) * D + i]) * a.scale;
    __syncthreads();
    st.m = -INFINITY;
    st.l = 0.f;
    for (int h = 0; h < GQ; ++h)
      for (int r = 0; r < State::kRows; ++r) st.acc[h][r] = 0.f;
  }
  __device__ void attend(const C* k_blk, const C* v_blk, int valid, State& st) {
    attend_block_gqa<C, D, BS, GQ>(k_blk, v_blk, valid, k_scale, q_s, s_s, st);
  }
  // The warp's state into the merge layout: m, l [GQ] and acc [GQ][D].
  __device__ void store(const State& st, float* s_acc, float* s_m, float* s_l) {
    constexpr int LH = 32 / GQ;
    const int lane = threadIdx.x % 32;
    if (lane % LH == 0) {
      s_m[lane / LH] = st.m;
      s_l[lane / LH] = st.l;
    }
    for (int h = 0; h < GQ; ++h)
      for (int r = 0; r < State::kRows; ++r)
        if (lane + 32 * r < D) s_acc[h * D + lane + 32 * r] = st.acc[h][r];
  }
};
// ANCHOR_END: math_cuda_cores

// ANCHOR: math_tensor_cores
// The tensor-core math (BS = 16 or 32, GQ <= 8): queries in registers, attend_tile_tc per
// 16 tokens.
template <typename T, typename C, int D, int BS, int GQ>
struct TensorCoreMath {
  static_assert(BS % 16 == 0 && D % 16 == 0 && GQ <= 8, "tensor-core tiles are 16 x 16 x 8");
  using State = TcState<D>;
  using E = typename MmaType<C>::type;
  static constexpr int x = CacheElem<C>::x;
  static constexpr int kQRegs = (D / x + 3) / 4 * (x / 2);
  static constexpr size_t kBlockFloats = 0;
  static constexpr size_t kWarpFloats = 8 * 16 / 2;  // P: [8 heads][16 tokens] of E
  uint32_t q_frag[kQRegs];
  uint16_t* p_s;
  float score_scale;

  __device__ void init(const DecodeArgs<T, C>& a, int seq, int head0, float* block_smem,
                       float* warp_smem, State& st) {
    (void)block_smem;
    const int g = threadIdx.x % 32 / 4;
    setup(a.q + (int64_t(seq) * a.s.num_q_heads + head0 + g) * D, g < GQ,
          a.scale * (a.k_scale ? *a.k_scale : 1.f), warp_smem, st);
  }
  // The same from this lane's query row (head g; ok false: no such head) and the scores'
  // scale: chapter 10's decode items start here.
  __device__ void setup(const T* q, bool ok, float scale, float* warp_smem, State& st) {
    p_s = reinterpret_cast<uint16_t*>(warp_smem);
    score_scale = scale;
    const int t = threadIdx.x % 4;
    constexpr int kPerLoad = 8;  // q values per 16-byte load (T is 16-bit)
    for (int m = 0; m < kQRegs / (x / 2); ++m)
      for (int part = 0; part < x / kPerLoad; ++part) {
        const int d0 = (4 * m + t) * x + part * kPerLoad;  // chunk 4m + t
        uint32_t* dst = q_frag + m * (x / 2) + part * (kPerLoad / 2);
        if (ok && d0 < D) {
          const uint4 raw = *reinterpret_cast<const uint4*>(q + d0);
          const T* e = reinterpret_cast<const T*>(&raw);
          for (int p = 0; p < kPerLoad / 2; ++p)
            dst[p] = pack2<E>(to_float(e[2 * p]), to_float(e[2 * p + 1]));
        } else {
          for (int p = 0; p < kPerLoad / 2; ++p) dst[p] = 0u;
        }
      }
    for (int j = 0; j < 2; ++j) {
      st.m[j] = -INFINITY;
      st.l[j] = 0.f;
    }
    for (int M = 0; M < D / 16; ++M)
      for (int i = 0; i < 4; ++i) st.o[M][i] = 0.f;
  }
  __device__ void attend(const C* k_blk, const C* v_blk, int valid, State& st) {
    for (int t0 = 0; t0 < BS && t0 < valid; t0 += 16)
      attend_tile_tc<C, D, BS>(k_blk, v_blk, t0, valid, score_scale, q_frag, p_s, st);
  }
  // The same with the tokens before `low` hidden as well (chapter 12's sliding window).
  __device__ void attend_from(const C* k_blk, const C* v_blk, int valid, int low, State& st) {
    for (int t0 = 0; t0 < BS && t0 < valid; t0 += 16)
      attend_tile_tc<C, D, BS, true>(k_blk, v_blk, t0, valid, score_scale, q_frag, p_s, st, low);
  }
  // stride: floats from one head's acc to the next (chapter 10 pads its rows).
  __device__ void store(const State& st, float* s_acc, float* s_m, float* s_l, int stride = D) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int j = 0; j < 2; ++j)
      if (g == 0 && 2 * t + j < GQ) {
        s_m[2 * t + j] = st.m[j];
        s_l[2 * t + j] = st.l[j];
      }
    for (int M = 0; M < D / 16; ++M)
      for (int i = 0; i < 4; ++i) {
        const int head = 2 * t + i % 2;
        if (head < GQ) s_acc[head * stride + 16 * M + g + 8 * (i / 2)] = st.o[M][i];
      }
  }
};
// ANCHOR_END: math_tensor_cores

// ANCHOR: merge_and_write
// After the loop: merges the four warps' states (chapter 4's rescaling) for each of the
// GQ heads and writes either the output (one partition) or this partition's max logit,
// exp-sum and normalised partial output (chapter 5's workspace layout); the last
// partition of the sequence to get there then merges all of them into the output.
template <class Math, typename T, typename C, int D, int GQ>
__device__ void merge_and_write(const DecodeArgs<T, C>& a, Math& math,
                                const typename Math::State& st, float* smem, int seq, int head0,
                                int part, int parts) {
  float* s_acc = smem;                  // [kWarps][GQ][D]
  float* s_m = smem + kWarps * GQ * D;  // [kWarps][GQ]
  float* s_l = s_m + kWarps * GQ;       // [kWarps][GQ]
  const int warp = threadIdx.x / 32;
  __syncthreads();  // the region may be another warp's ring, still being read
  math.store(st, s_acc + warp * GQ * D, s_m + warp * GQ, s_l + warp * GQ);
  __syncthreads();
  const float v_scale = a.v_scale ? *a.v_scale : 1.f;
  const int Hq = a.s.num_q_heads;
  for (int i = threadIdx.x; i < GQ * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, s_m[w * GQ + h]);
    float L = 0.f, total = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      const float weight = s_m[w * GQ + h] == -INFINITY ? 0.f : expf(s_m[w * GQ + h] - M);
      L += s_l[w * GQ + h] * weight;
      total += s_acc[(w * GQ + h) * D + d] * weight;
    }
    const float value = L == 0.f ? 0.f : total / L * v_scale;  // a NaN L stays NaN
    if (gridDim.z == 1) {
      a.out[(int64_t(seq) * Hq + head0 + h) * D + d] = from_float<T>(value);
    } else {
      const int64_t at = ch05::partition_index(seq, head0 + h, part, Hq, gridDim.z);
      a.partial_out[at * D + d] = value;
      if (d == 0) {
        a.max_logits[at] = M;
        a.exp_sums[at] = L;
      }
    }
  }
  if (gridDim.z == 1) return;
  // Count this partition as done; the last of the sequence's `parts` merges them. The
  // fence makes this block's partial results visible to the whole GPU before the count.
  // (__syncthreads_or passes the answer around: a __shared__ variable here, static shared
  // memory beside the dynamic ring, cost 5-7% on the H100; NOTES.md.)
  __threadfence();
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    int* counter = a.counters + int64_t(seq) * gridDim.x + blockIdx.x;
    last = atomicAdd(counter, 1) == parts - 1;
    if (last) *counter = 0;  // every partition has counted: ready for the next launch
  }
  if (!__syncthreads_or(last)) return;
  __threadfence();
  for (int i = threadIdx.x; i < GQ * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    const int64_t first = ch05::partition_index(seq, head0 + h, 0, Hq, gridDim.z);
    a.out[(int64_t(seq) * Hq + head0 + h) * D + d] = from_float<T>(
        ch05::merge_partitions(a.max_logits, a.exp_sums, a.partial_out, first, parts, D, d));
  }
}
// ANCHOR_END: merge_and_write

// Grid (KV-head group, sequence, partition); kWarps * 32 threads.
template <class Math, typename T, typename C, int D, int BS, int GQ, int kStages>
__global__ void __launch_bounds__(kWarps * 32) decode_kernel(DecodeArgs<T, C> a) {
  const PagedAttentionShape& s = a.s;
  const int group_size = s.num_q_heads / s.num_kv_heads;
  const int kv_head = blockIdx.x / (group_size / GQ);
  const int head0 = kv_head * group_size + blockIdx.x % (group_size / GQ) * GQ;
  const int seq = blockIdx.y, part = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first = part * a.partition_blocks;
  const int* table = a.block_table + int64_t(seq) * s.max_blocks_per_seq;
  // This warp's blocks are first + warp + i * kWarps. Lane j fetches the table entry of
  // its warp's block j now, in parallel with context_lens (entries past the sequence's
  // end are read but never used).
  const int window = min(first + a.partition_blocks, s.max_blocks_per_seq);
  int ids = first + warp + lane * kWarps < window ? table[first + warp + lane * kWarps] : 0;
  const int len = a.context_lens[seq];
  const int num_blocks = (len + BS - 1) / BS;
  const int last = min(num_blocks, first + a.partition_blocks);
  if (len == 0) {  // no tokens at all: zeros, written by the first partition
    if (part == 0)
      for (int i = threadIdx.x; i < GQ * D; i += blockDim.x)
        a.out[(int64_t(seq) * s.num_q_heads + head0) * D + i] = from_float<T>(0.f);
    return;
  }
  if (first >= last) return;  // no tokens of this sequence in this partition

  PA_DYNAMIC_SHARED(float, smem);
  float* warp_smem = smem + Math::kBlockFloats + warp * Math::kWarpFloats;
  float* region = smem + Math::kBlockFloats + kWarps * Math::kWarpFloats;  // ring, then merge
  Math math;
  typename Math::State st;
  math.init(a, seq, head0, smem, warp_smem, st);
  const int64_t block_elems = int64_t(s.num_kv_heads) * D * BS;
  const int64_t head_offset = int64_t(kv_head) * D * BS;
  // This warp walks its blocks i = 0 .. count - 1.
  const int count = max(0, (last - first - warp + kWarps - 1) / kWarps);

  if constexpr (kStages == 0) {
    for (int i = 0; i < count; ++i) {
      const int b = first + warp + i * kWarps;
      const int id = i < 32 ? __shfl_sync(kFullMask, ids, i) : table[b];
      const int64_t at = int64_t(id) * block_elems + head_offset;
      math.attend(a.k_pool + at, a.v_pool + at, min(BS, len - b * BS), st);
    }
  } else {
    // ANCHOR: pipeline
    constexpr int kSlot = 2 * D * BS;                       // K then V of one block
    constexpr int kPieces = D * BS * int(sizeof(C)) / 16;  // 16-byte copies for K (and for V)
    constexpr int kPerPiece = 16 / int(sizeof(C));
    constexpr int stages = kStages;
    C* ring = reinterpret_cast<C*>(region) + warp * stages * kSlot;
    // ids, lane j: the physical block of this warp's block 32 * w + j (w = i / 32)
    // TODO(ch09): the same result as the kStages == 0 branch above: this warp attends its
    //   blocks i = 0 .. count - 1 (logical block first + warp + i * kWarps) in order with
    //   math.attend, but reads each block's K and V from its ring of `stages` slots in shared
    //   memory (`ring`, kSlot elements a slot: K, then V), filled with cp.async so that while
    //   it attends block i the copies of blocks i + 1 .. i + stages - 1 (those below count)
    //   are in flight. A lane reads a slot only once every lane's copies into it have landed,
    //   a slot is never overwritten while it is read, and no copy is in flight when the
    //   branch ends. Tests: the core suites (Ch09/DecodeGolden.*, Decode.*, Ch09/Fp8Golden.*),
    //   with the tensor-core math of tc_block.cuh (given).
    // (your code here)
    // ANCHOR_END: pipeline
  }
  const int parts = (num_blocks + a.partition_blocks - 1) / a.partition_blocks;
  merge_and_write<Math, T, C, D, GQ>(a, math, st, region, seq, head0, part, parts);
}

}  // namespace pa::ch09
