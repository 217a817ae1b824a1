// Shared addresses: the 32-bit offsets in a block's shared-memory window that Hopper's
// asynchronous instructions take (TMA destinations, mbarriers, wgmma descriptors). On the GPU
// these are what __cvta_generic_to_shared gives. On the emulator, a block's dynamic shared
// memory (PA_DYNAMIC_SHARED) sits at shared address 0x400, 1,024-byte aligned, as on Hopper;
// a static __shared__ array has no shared address there, and a wrapper given one fails the
// block with a message that says so. Carve Hopper buffers and barriers from dynamic shared
// memory.
#pragma once

#include <cstdint>

#include "pa/backend.h"

#if defined(PA_BACKEND_CPU)
#include <source_location>

#include "emu/hopper_emu.h"
// On the emulator each wrapper also takes where it was called from, for the reports.
#define PA_HOPPER_SITE_ std::source_location at = std::source_location::current()
#define PA_HOPPER_AND_SITE_ , PA_HOPPER_SITE_
#define PA_HOPPER_AT_ at.file_name(), int(at.line())
#else
#define PA_HOPPER_SITE_
#define PA_HOPPER_AND_SITE_
#endif

// The sm_90 instructions (mbarrier transactions, bulk copies, fence.proxy.async) exist from
// compute capability 9.0; setmaxnreg (and wgmma) only on the sm_90a target. Elsewhere the
// wrappers compile to a trap, so that a file holding them still builds for older GPUs.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PA_HOPPER_PTX 1
#else
#define PA_HOPPER_PTX 0
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(__CUDA_ARCH_FEAT_SM100_ALL)
#define PA_HOPPER_PTX_90A 1
#else
#define PA_HOPPER_PTX_90A 0
#endif

namespace pa {

// The shared address of p (which must point into the block's dynamic shared memory).
__device__ inline uint32_t smem_address(const void* p PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  return ::emu::hopper::shared_address(p, "smem_address", PA_HOPPER_AT_);
#else
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
}

// The pointer to shared address a.
template <typename T>
__device__ inline T* smem_pointer(uint32_t a PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  return static_cast<T*>(::emu::hopper::shared_pointer(a, "smem_pointer", PA_HOPPER_AT_));
#else
  return static_cast<T*>(__cvta_shared_to_generic(a));
#endif
}

// p rounded up to the next `align`-byte boundary of the shared window (a power of two):
// 1,024 for a 128-byte swizzle's atoms. On the GPU the dynamic buffer's start need not be so
// aligned; on the emulator it is, and this leaves p as it is. Size the launch's shared memory
// with room for the rounding (align - 16 bytes).
template <typename T>
__device__ inline T* smem_align(T* p, uint32_t align PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  const uint32_t a = ::emu::hopper::shared_address(p, "smem_align", PA_HOPPER_AT_);
#else
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
  const uint32_t up = ((a + align - 1) & ~(align - 1)) - a;
  return reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(p) + up);
}

}  // namespace pa
