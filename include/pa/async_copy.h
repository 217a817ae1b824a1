// Asynchronous global -> shared copies (cp.async, sm_80 and later), behind one interface
// that the CPU emulator also implements.
//
// A thread starts 16-byte copies with cp_async16, closes them into a *group* with
// cp_async_commit, and later waits with cp_async_wait<N>() until at most N of its newest
// groups are still in flight. The copies complete in the background while the thread
// computes; that is how a kernel keeps several blocks of KV in flight per warp.
// After the wait, a barrier (__syncwarp / __syncthreads) makes one thread's copies
// visible to the others.
#pragma once

#include "pa/backend.h"

namespace pa {

__device__ inline void cp_async16(void* smem_dst, const void* global_src) {
#if defined(PA_BACKEND_CPU)
  // The emulator copies at once: a completed copy is a legal schedule of an async one.
  *reinterpret_cast<uint4*>(smem_dst) = *reinterpret_cast<const uint4*>(global_src);
#else
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src) : "memory");
#endif
}

__device__ inline void cp_async_commit() {
#if !defined(PA_BACKEND_CPU)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N>
__device__ inline void cp_async_wait() {
#if !defined(PA_BACKEND_CPU)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

}  // namespace pa
