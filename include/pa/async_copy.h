// Asynchronous global -> shared copies (cp.async, sm_80 and later), behind one interface
// that the CPU emulator also implements.
//
// A thread starts 16-byte copies with cp_async16, closes them into a *group* with
// cp_async_commit, and later waits with cp_async_wait<N>() until at most N of its newest
// groups are still in flight. The copies complete in the background while the thread
// computes; that is how a kernel keeps several blocks of KV in flight per warp.
// After the wait, a barrier (__syncwarp / __syncthreads) makes one thread's copies
// visible to the others.
//
// The emulator behaves as the GPU may: a copy's destination holds garbage (0xFF bytes,
// NaN in every float type) from its issue until the wait that covers its group, where its
// bytes land. A wait one group short reads garbage on every schedule; checked mode names
// the read, the group and the wait.
#pragma once

#include "pa/backend.h"

// On the emulator each call also passes where it is, for checked mode's reports.
#if defined(PA_BACKEND_CPU)
#include <source_location>
#define PA_CALL_SITE_ std::source_location at = std::source_location::current()
#define PA_AND_CALL_SITE_ , PA_CALL_SITE_
#else
#define PA_CALL_SITE_
#define PA_AND_CALL_SITE_
#endif

namespace pa {

__device__ inline void cp_async16(void* smem_dst, const void* global_src PA_AND_CALL_SITE_) {
#if defined(PA_BACKEND_CPU)
  if ((reinterpret_cast<uintptr_t>(smem_dst) | reinterpret_cast<uintptr_t>(global_src)) & 15)
    ::emu::detail::cp_async_misaligned(smem_dst, global_src, at.file_name(), int(at.line()));
  // The source may be read any time after the issue: now. The destination is garbage until
  // the copy lands.
  const uint4 data = *static_cast<const uint4*>(global_src);
  ::emu::detail::cp_async_issue(smem_dst, data, at.file_name(), int(at.line()));
  *static_cast<uint4*>(smem_dst) = ::emu::detail::kInFlight;
#else
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src) : "memory");
#endif
}

__device__ inline void cp_async_commit(PA_CALL_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::detail::cp_async_commit(at.file_name(), int(at.line()));
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N>
__device__ inline void cp_async_wait(PA_CALL_SITE_) {
#if defined(PA_BACKEND_CPU)
  size_t n = 0;
  const ::emu::detail::LandedCopy* landed = ::emu::detail::cp_async_wait(N, at.file_name(), int(at.line()), &n);
  for (size_t i = 0; i < n; ++i) *static_cast<uint4*>(landed[i].dst) = landed[i].data;
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

}  // namespace pa

#undef PA_CALL_SITE_
#undef PA_AND_CALL_SITE_
