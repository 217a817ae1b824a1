// wgmma: Hopper's asynchronous warpgroup matrix multiply (PTX ISA, "Asynchronous
// Warpgroup Level Matrix Multiply-Accumulate Instructions"), sm_90a only.
//
// A warpgroup is 4 consecutive warps, 128 threads, starting at a warp index divisible by 4
// (threads 128 w .. 128 w + 127). Together they issue
//   D (64 x N, fp32) = A (64 x K) * B (K x N) + D
// with K = 16 for fp16/bf16 inputs (32 for fp8 e4m3), N from 8 to 256 in steps of 8:
//   wgmma_mma_async<E>(acc, desc_a, desc_b)      A and B in shared memory, each described by a
//                                                  matrix descriptor (below)
//   wgmma_mma_async_rs<E>(acc, a, desc_b)         A from registers (a fragment per thread, as
//                                                  mma.sync's: pa/mma.h), B in shared memory
// Every thread of the warpgroup calls it, the same call with the same descriptors.
//
// It is asynchronous: it returns before the product exists, and the accumulator registers
// belong to it until a wait covers it:
//   wgmma_fence()           before the first wgmma, and between ordinary code's access of the
//                           accumulators (or of A's registers) and the wgmma that uses them
//   wgmma_commit_group()    closes the thread's wgmmas issued since the last commit into a group
//   wgmma_wait_group<N>(acc...)  returns once at most N of the thread's newest groups are
//                           pending: the older groups' accumulators hold their results, and
//                           their shared-memory operands may be overwritten. Pass the
//                           accumulators it hands back, so that the compiler does not read them
//                           before the wait; not those still in flight (ptxas would take that as
//                           a use and wait for them too: its info C7517).
// Consecutive wgmmas of one shape on the same accumulators need no wait between them: the
// hardware orders them (several k-steps accumulate in one group, or in several).
//
// Shared-memory operands are tiles in one of PTX's canonical layouts: K-major (the default;
// imm-trans 0: A stored as M rows of K, B as N rows of K) or MN-major (the transposed form,
// fp16/bf16 only), each with a swizzle of none, 32, 64 or 128 bytes, the same swizzle a TMA
// load writes (pa/hopper/swizzle.h). With T the elements of 16 bytes and W the swizzle's
// bytes, element (r, k) of a K-major tile (r an M or N index) sits at, before the swizzle,
//   no swizzle:  start + (r % 8) * 16 + (r / 8) * SBO + (k / T) * LBO + (k % T) * size
//   swizzled:    start + (r % 8) * W  + (r / 8) * SBO + k * size      (LBO unused)
// and element (r, k) of an MN-major tile at
//   no swizzle:  start + (r % T) * size + (r / T) * SBO + (k % 8) * 16 + (k / 8) * LBO
//   swizzled:    start + (r % (W / size)) * size + (r / (W / size)) * LBO + (k % 8) * W
//                + (k / 8) * SBO
// (LBO: the leading dimension byte offset, SBO: the stride dimension byte offset). The swizzle
// is applied to that shared address, so a swizzled tile starts on its atom (8 W bytes). The
// descriptor holds those: wgmma_descriptor(tile, lbo, sbo, swizzle) below.
//
// The accumulators: WgmmaAcc<N> holds a thread's N / 2 floats, plain registers on the GPU.
// Thread t of the warpgroup (warp w = t / 32, g = (t % 32) / 4, q = t % 4) holds in d[i]
//   D[16 w + g + 8 ((i / 2) % 2)][8 (i / 4) + 2 q + i % 2]      (row(i, t), col(i, t))
// and A's fragment for wgmma_mma_async_rs (fp16/bf16, two per register, the lower first) is
//   a[0] = A[16 w + g][2q, 2q+1]     a[1] = A[16 w + g + 8][2q, 2q+1]
//   a[2] = A[16 w + g][2q+8, 2q+9]   a[3] = A[16 w + g + 8][2q+8, 2q+9]
// (fp8: four per register, a[j] holds A[16 w + g + 8 (j % 2)][4 q + 16 (j / 2) .. + 3]).
//
// On the emulator a wgmma behaves as in flight until the wait that covers it: its operands
// are read from the shared window through the descriptors at that wait (the latest point
// the hardware allows), its accumulators hold NaN in between, and the 128 threads meet at
// each call (a warpgroup whose threads disagree is named). Checked mode names accumulators
// touched in flight, a stage overwritten while a wgmma still reads it, an ordinary store that
// a wgmma reads without fence_proxy_async, and a missing wgmma_fence.
#pragma once

#include <cstdint>
#include <type_traits>

#include "pa/dtype.h"
#include "pa/hopper/smem_window.h"

#if defined(PA_BACKEND_CPU)
#define PA_WG_SITE_ARG_ , at
#else
#define PA_WG_SITE_ARG_
#endif

#if defined(__CUDACC__)
#define PA_WGMMA_HD_ __host__ __device__
#else
#define PA_WGMMA_HD_
#endif

namespace pa {

enum class WgmmaSwizzle : uint32_t { None = 0, B32 = 32, B64 = 64, B128 = 128 };
enum class WgmmaMajor { K, MN };

// ---- The matrix descriptor (PTX ISA, "Matrix Descriptor Format"): given code. ---------------
//   bits  0-13  the tile's start address, (address & 0x3FFFF) >> 4
//   bits 16-29  the leading dimension byte offset >> 4
//   bits 32-45  the stride dimension byte offset >> 4
//   bits 49-51  the base offset: 0 when the swizzle pattern starts on its boundary (1,024
//               bytes for 128B, 512 for 64B, 256 for 32B), as every tile here does
//   bits 62-63  the swizzle: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
PA_WGMMA_HD_ constexpr uint64_t wgmma_descriptor_bits(uint32_t address, uint32_t leading_bytes,
                                                      uint32_t stride_bytes, WgmmaSwizzle swizzle,
                                                      uint32_t base_offset = 0) {
  const uint64_t mode = swizzle == WgmmaSwizzle::B128  ? 1
                        : swizzle == WgmmaSwizzle::B64 ? 2
                        : swizzle == WgmmaSwizzle::B32 ? 3
                                                       : 0;
  return uint64_t((address & 0x3FFFFu) >> 4) | (uint64_t((leading_bytes & 0x3FFFFu) >> 4) << 16) |
         (uint64_t((stride_bytes & 0x3FFFFu) >> 4) << 32) | (uint64_t(base_offset & 7u) << 49) |
         (mode << 62);
}

// The descriptor of the tile at `tile` (16-byte aligned dynamic shared memory).
__device__ inline uint64_t wgmma_descriptor(const void* tile, uint32_t leading_bytes,
                                            uint32_t stride_bytes,
                                            WgmmaSwizzle swizzle PA_HOPPER_AND_SITE_) {
  return wgmma_descriptor_bits(smem_address(tile PA_WG_SITE_ARG_), leading_bytes, stride_bytes,
                               swizzle);
}

// The same descriptor for a tile `bytes` further on (a multiple of 16): the next k-step
// inside a swizzled row (32 bytes of fp16 further), or the next tile of a stage.
PA_WGMMA_HD_ constexpr uint64_t wgmma_descriptor_advance(uint64_t desc, uint32_t bytes) {
  return (desc & ~uint64_t(0x3FFF)) | ((desc + (bytes >> 4)) & 0x3FFF);
}

// ---- The accumulators -------------------------------------------------------------------------
template <int N>
struct WgmmaAcc {
  static_assert(N >= 8 && N <= 256 && N % 8 == 0, "wgmma: N is 8 to 256 in steps of 8");
  static constexpr int kRegs = N / 2;
  float d[N / 2];
  // Where d[i] of thread t (0-127, its index in the warpgroup) sits in the 64 x N tile.
  PA_WGMMA_HD_ static constexpr int row(int i, int t) {
    return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
  }
  PA_WGMMA_HD_ static constexpr int col(int i, int t) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }
};

namespace detail {
template <typename E>
PA_WGMMA_HD_ constexpr int wgmma_type() {
  if constexpr (std::is_same<E, half>::value) return 0;
  else if constexpr (std::is_same<E, bf16>::value) return 1;
  else {
    static_assert(std::is_same<E, __nv_fp8_e4m3>::value,
                  "wgmma: E is pa::half, pa::bf16 or __nv_fp8_e4m3");
    return 2;
  }
}
}  // namespace detail
}  // namespace pa

#if !defined(PA_BACKEND_CPU)
#include "pa/hopper/wgmma_ptx.h"
#endif

namespace pa {

// Keeps the compiler from moving ordinary reads or writes of acc across this point (the
// registers pass through an empty asm statement). wgmma_wait_group(acc...) calls it.
template <int N>
__device__ inline void wgmma_fence_operand(WgmmaAcc<N>& acc) {
#if !defined(PA_BACKEND_CPU)
#pragma unroll
  for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(acc.d[i])::"memory");
#else
  (void)acc;
#endif
}

// D = A * B (+ D when accumulate), A and B in shared memory. E: pa::half, pa::bf16 or
// __nv_fp8_e4m3 (then K is 32 and both tiles are K-major).
template <typename E, WgmmaMajor MajorA = WgmmaMajor::K, WgmmaMajor MajorB = WgmmaMajor::K, int N>
__device__ inline void wgmma_mma_async(WgmmaAcc<N>& acc, uint64_t desc_a, uint64_t desc_b,
                                       bool accumulate = true PA_HOPPER_AND_SITE_) {
  constexpr int type = detail::wgmma_type<E>();
  static_assert(type != 2 || (MajorA == WgmmaMajor::K && MajorB == WgmmaMajor::K),
                "wgmma: fp8 tiles are K-major (the transpose exists for fp16/bf16 only)");
  constexpr int ta = MajorA == WgmmaMajor::MN, tb = MajorB == WgmmaMajor::MN;
#if defined(PA_BACKEND_CPU)
  const ::emu::hopper::WgmmaCall call{type, N, desc_a, desc_b, nullptr, ta, tb, accumulate};
  ::emu::hopper::wgmma_mma_async(call, acc.d, PA_HOPPER_AT_);
#elif PA_HOPPER_PTX_90A
  detail::WgmmaPtx<N>::template ss<type, ta, tb>(acc.d, desc_a, desc_b, accumulate ? 1 : 0);
#else
  (void)acc, (void)desc_a, (void)desc_b, (void)accumulate, (void)ta, (void)tb;
  __trap();
#endif
}

// D = A * B (+ D), A from registers (the fragment above), B in shared memory.
template <typename E, WgmmaMajor MajorB = WgmmaMajor::K, int N>
__device__ inline void wgmma_mma_async_rs(WgmmaAcc<N>& acc, const uint32_t (&a)[4], uint64_t desc_b,
                                          bool accumulate = true PA_HOPPER_AND_SITE_) {
  constexpr int type = detail::wgmma_type<E>();
  static_assert(type != 2 || MajorB == WgmmaMajor::K, "wgmma: fp8 tiles are K-major");
  constexpr int tb = MajorB == WgmmaMajor::MN;
#if defined(PA_BACKEND_CPU)
  const ::emu::hopper::WgmmaCall call{type, N, 0, desc_b, a, 0, tb, accumulate};
  ::emu::hopper::wgmma_mma_async(call, acc.d, PA_HOPPER_AT_);
#elif PA_HOPPER_PTX_90A
  detail::WgmmaPtx<N>::template rs<type, tb>(acc.d, a, desc_b, accumulate ? 1 : 0);
#else
  (void)acc, (void)a, (void)desc_b, (void)accumulate, (void)tb;
  __trap();
#endif
}

__device__ inline void wgmma_fence(PA_HOPPER_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::wgmma_fence(PA_HOPPER_AT_);
#elif PA_HOPPER_PTX_90A
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

__device__ inline void wgmma_commit_group(PA_HOPPER_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::wgmma_commit(PA_HOPPER_AT_);
#elif PA_HOPPER_PTX_90A
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

#if !defined(PA_BACKEND_CPU)
namespace detail {
template <int Pending>
__device__ inline void wgmma_wait_ptx() {
  static_assert(Pending >= 0 && Pending <= 7, "wgmma_wait_group<N>: N is 0 to 7");
#if PA_HOPPER_PTX_90A
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
#else
  __trap();
#endif
}
}  // namespace detail
#endif

#if defined(PA_BACKEND_CPU)
#define PA_WG_WAIT_                                                                   \
  static_assert(Pending >= 0 && Pending <= 7, "wgmma_wait_group<N>: N is 0 to 7"); \
  ::emu::hopper::wgmma_wait(Pending, PA_HOPPER_AT_)
#else
#define PA_WG_WAIT_ detail::wgmma_wait_ptx<Pending>()
#endif
// (Overloads rather than a parameter pack: on the emulator the call site comes last.)
template <int Pending>
__device__ inline void wgmma_wait_group(PA_HOPPER_SITE_) {
  PA_WG_WAIT_;
}
template <int Pending, int N1>
__device__ inline void wgmma_wait_group(WgmmaAcc<N1>& a1 PA_HOPPER_AND_SITE_) {
  PA_WG_WAIT_;
  wgmma_fence_operand(a1);
}
template <int Pending, int N1, int N2>
__device__ inline void wgmma_wait_group(WgmmaAcc<N1>& a1, WgmmaAcc<N2>& a2 PA_HOPPER_AND_SITE_) {
  PA_WG_WAIT_;
  wgmma_fence_operand(a1);
  wgmma_fence_operand(a2);
}
template <int Pending, int N1, int N2, int N3>
__device__ inline void wgmma_wait_group(WgmmaAcc<N1>& a1, WgmmaAcc<N2>& a2,
                                        WgmmaAcc<N3>& a3 PA_HOPPER_AND_SITE_) {
  PA_WG_WAIT_;
  wgmma_fence_operand(a1);
  wgmma_fence_operand(a2);
  wgmma_fence_operand(a3);
}
#undef PA_WG_WAIT_

}  // namespace pa

#undef PA_WG_SITE_ARG_
#undef PA_WGMMA_HD_
