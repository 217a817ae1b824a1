// One warp-wide tensor-core product, D = A * B + D, behind one interface that the CPU
// emulator also implements: mma.sync.m16n8k16 with fp16 or bf16 inputs and fp32
// accumulation (sm_80 and later).
//
// A is 16 x 16, B is 16 x 8, D is 16 x 8; each is spread over the 32 lanes of the warp.
// With g = lane / 4 and t = lane % 4, a lane holds
//   a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]
//   a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]     (two 16-bit values each)
//   b[0] = B[2t, 2t+1][g]      b[1] = B[2t+8, 2t+9][g]
//   d[0], d[1] = D[g][2t, 2t+1]          d[2], d[3] = D[g+8][2t, 2t+1]
// (the lower 16 bits hold the first of each pair). Every lane of the warp must call it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "pa/dtype.h"

namespace pa {

// E: half or bf16, the type of A's and B's elements.
template <typename E>
__device__ inline void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(PA_BACKEND_CPU)
  // The emulator: every lane publishes its fragments, then computes its four outputs. Each
  // lane converts its own 12 values to float once (converting each element where it is used
  // took 128 conversions a lane, about a third of chapter 11's engine tests' time). Two
  // buffers in turn (emu::detail::next_turn): one __syncwarp a call.
  static_assert(sizeof(E) == 2, "E must be a 16-bit type");
  __shared__ float frag_buffers[2][32][32][12];  // [turn][warp][lane][a0 lo, a0 hi, .. a3 hi, b0 lo, .. b1 hi]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  auto& frags = frag_buffers[::emu::detail::next_turn()];
  auto publish = [&](int at, uint32_t word) {
    const uint16_t lo = uint16_t(word & 0xffffu), hi = uint16_t(word >> 16);
    E e;
    std::memcpy(&e, &lo, 2);
    frags[warp][lane][at] = to_float(e);
    std::memcpy(&e, &hi, 2);
    frags[warp][lane][at + 1] = to_float(e);
  };
  for (int i = 0; i < 4; ++i) publish(2 * i, a[i]);
  publish(8, b[0]);
  publish(10, b[1]);
  __syncwarp();
  // A[row][k] is a[row / 8 + 2 (k / 8)] of lane (row % 8) * 4 + (k % 8) / 2, B[k][col] is
  // b[k / 8] of lane col * 4 + (k % 8) / 2; the lower half holds the even k.
  const int g = lane / 4, t = lane % 4;
  float rows[2][16], cols[2][16];  // A's rows g and g + 8, B's columns 2t and 2t + 1
  for (int k = 0; k < 16; ++k) {
    const float(*from)[12] = frags[warp] + (k % 8) / 2;  // lane (k % 8) / 2; + 4 a row of A, a column of B
    rows[0][k] = from[4 * g][4 * (k / 8) + k % 2];
    rows[1][k] = from[4 * g][4 * (k / 8) + 2 + k % 2];
    cols[0][k] = from[8 * t][8 + 2 * (k / 8) + k % 2];
    cols[1][k] = from[8 * t + 4][8 + 2 * (k / 8) + k % 2];
  }
  for (int i = 0; i < 4; ++i) {
    float sum = 0.f;
    for (int k = 0; k < 16; ++k) sum += rows[i / 2][k] * cols[i % 2][k];
    d[i] += sum;
  }
#else
  if constexpr (std::is_same<E, half>::value) {
    asm(  // no side effects: the compiler may schedule it freely
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

// ldmatrix: four 8 x 8 matrices of 16-bit values from shared memory, straight into the
// registers of mma fragments. Each lane passes the address of one matrix row (8 values,
// 16 bytes, 16-byte aligned): lanes 8m .. 8m + 7 give rows 0 .. 7 of matrix m. Then r[m] is
//   ldmatrix_x4:        row lane / 4, values 2 (lane % 4) and 2 (lane % 4) + 1 of matrix m
//   ldmatrix_x4_trans:  value lane / 4 of rows 2 (lane % 4) and 2 (lane % 4) + 1 (the
//                       transposed matrix's row: a B operand stored row by row, like V)
// (the first of each pair in the lower 16 bits), exactly the layout of a[], b[] above: one
// instruction instead of four or eight 16/32-bit loads. Every lane of the warp must call it.
// A shared-memory address for ldmatrix: on the GPU the 32-bit address in the shared window
// (an add of a constant to it folds into the instruction), on the emulator a pointer. Add
// bytes to it with +.
#if defined(PA_BACKEND_CPU)
using SmemAddr = const unsigned char*;
__device__ inline SmemAddr smem_addr(const void* p) { return static_cast<const unsigned char*>(p); }
#else
using SmemAddr = uint32_t;
__device__ inline SmemAddr smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
#endif

template <bool Trans>
__device__ inline void ldmatrix_x4_impl(uint32_t (&r)[4], SmemAddr row) {
#if defined(PA_BACKEND_CPU)
  // The emulator: every lane publishes its row's address, then reads its values itself (two
  // buffers in turn, as mma_16x8x16's).
  __shared__ const unsigned char* row_buffers[2][32][32];  // [turn][warp][lane]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  auto& rows = row_buffers[::emu::detail::next_turn()];
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    std::fprintf(stderr, "ldmatrix: lane %d of warp %d passed the row address %p, not 16-byte "
                 "aligned (on a GPU: misaligned address)\n", lane, warp, static_cast<const void*>(row));
    std::abort();
  }
  rows[warp][lane] = row;
  __syncwarp();
  for (int m = 0; m < 4; ++m) {
    uint16_t lo, hi;
    if (Trans) {
      std::memcpy(&lo, rows[warp][8 * m + 2 * (lane % 4)] + 2 * (lane / 4), 2);
      std::memcpy(&hi, rows[warp][8 * m + 2 * (lane % 4) + 1] + 2 * (lane / 4), 2);
    } else {
      std::memcpy(&lo, rows[warp][8 * m + lane / 4] + 4 * (lane % 4), 2);
      std::memcpy(&hi, rows[warp][8 * m + lane / 4] + 4 * (lane % 4) + 2, 2);
    }
    r[m] = uint32_t(lo) | (uint32_t(hi) << 16);
  }
#else
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
  }
#endif
}
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], SmemAddr row) { ldmatrix_x4_impl<false>(r, row); }
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], SmemAddr row) { ldmatrix_x4_impl<true>(r, row); }
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix_x4_impl<false>(r, smem_addr(row)); }
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  ldmatrix_x4_impl<true>(r, smem_addr(row));
}

// Two floats as one register of two E values (the lower first): an A or B fragment's pair.
template <typename E>
__device__ inline uint32_t pack2(float lo, float hi) {
  const E l = from_float<E>(lo), h = from_float<E>(hi);
  uint16_t a, b;
  std::memcpy(&a, &l, 2);
  std::memcpy(&b, &h, 2);
  return uint32_t(a) | (uint32_t(b) << 16);
}

}  // namespace pa
