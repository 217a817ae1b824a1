// Hopper's other synchronisation: the proxy fence, named barriers and setmaxnreg.
//
// fence_proxy_async(): shared memory written with ordinary stores (the generic proxy) and
//   then read by TMA or wgmma (the async proxy) needs this fence in each writing thread,
//   before the barrier that hands the data over. The emulator's TMA stores and wgmmas read
//   shared memory as it was at the last fence (copies that landed since included): without one
//   they read the block's starting poison. Checked mode names the store or wgmma that reads
//   bytes whose writer did not fence.
// named_barrier_sync(id, count) / named_barrier_arrive(id, count): bar.sync / bar.arrive on
//   barrier id (1-15; 0 is __syncthreads'), for `count` threads (a multiple of 32, whole
//   warps). How two consumer warpgroups take turns, or a producer warp signals without
//   waiting.
// setmaxnreg_inc<N>() / setmaxnreg_dec<N>(): a warpgroup asks for N registers per thread (a
//   multiple of 8 from 24 to 256), every thread of the warpgroup alike: producers give theirs
//   up so consumers can take more. Only on sm_90a; nothing to do on the emulator, which
//   checks the rules.
#pragma once

#include "pa/hopper/smem_window.h"

namespace pa {

__device__ inline void fence_proxy_async(PA_HOPPER_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::fence_proxy_async(PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

__device__ inline void named_barrier_sync(unsigned id, unsigned count PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::named_barrier(id, count, false, PA_HOPPER_AT_);
#else
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#endif
}

__device__ inline void named_barrier_arrive(unsigned id, unsigned count PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::named_barrier(id, count, true, PA_HOPPER_AT_);
#else
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#endif
}

template <unsigned N>
__device__ inline void setmaxnreg_inc(PA_HOPPER_SITE_) {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256,
                "setmaxnreg: a multiple of 8 from 24 to 256 registers");
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::setmaxnreg(true, N, PA_HOPPER_AT_);
#elif PA_HOPPER_PTX_90A
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#else
  __trap();
#endif
}

template <unsigned N>
__device__ inline void setmaxnreg_dec(PA_HOPPER_SITE_) {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256,
                "setmaxnreg: a multiple of 8 from 24 to 256 registers");
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::setmaxnreg(false, N, PA_HOPPER_AT_);
#elif PA_HOPPER_PTX_90A
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#else
  __trap();
#endif
}

}  // namespace pa
