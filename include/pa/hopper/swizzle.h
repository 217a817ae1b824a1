// The swizzle of Hopper's shared-memory tiles, in one function: TMA writes (and wgmma's
// descriptors read) the byte that a dense, row-major box would put at shared address `a`
// at swizzle_address(a, mode) instead.
//
// The PTX ISA defines the modes on the shared address itself. Think of shared memory as rows
// of 128 bytes, each of eight 16-byte chunks. A swizzle of S bytes (32, 64 or 128) XORs the
// chunk index's low log2(S / 16) bits (address bits 4 and up) with as many bits of the row
// index (address bits 7 and up):
//   128B: chunk bits [4,7) ^= bits [7,10): the pattern repeats every 1,024 bytes (8 rows)
//    64B: chunk bits [4,6) ^= bits [7,9):  every 512 bytes
//    32B: chunk bit 4      ^= bit 7:       every 256 bytes
// It moves whole 16-byte chunks, within one S-byte span of a row, never across rows. Because
// it reads the address's bits, a tile that does not start on an atom boundary (1,024 bytes
// for 128B) is swizzled from the middle of the pattern: that is why Hopper tiles are aligned.
// No dependencies: the emulator (emu/src/tma.cpp), host code and device code include it.
#pragma once

#include <cstdint>

namespace pa {

#if defined(__CUDACC__)
#define PA_SWIZZLE_HD_ __host__ __device__
#else
#define PA_SWIZZLE_HD_
#endif

// swizzle_bytes: 0 (none), 32, 64 or 128. Its own inverse.
PA_SWIZZLE_HD_ constexpr uint32_t swizzle_address(uint32_t address, uint32_t swizzle_bytes) {
  const uint32_t bits = swizzle_bytes == 128 ? 7u : swizzle_bytes == 64 ? 3u : swizzle_bytes == 32 ? 1u : 0u;
  return address ^ (((address >> 7) & bits) << 4);
}

#undef PA_SWIZZLE_HD_

}  // namespace pa
