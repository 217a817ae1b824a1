// mbarrier: Hopper's transaction barrier in shared memory (PTX ISA, "Parallel Synchronization
// and Communication Instructions: mbarrier").
//
// An mbarrier counts, in its current *phase*, the arrivals it still waits for and the
// transaction bytes still to come. When both reach zero the phase completes: its parity bit
// flips and the next phase starts with the arrival count it was initialised with. A copy that
// completes on the barrier (tma_load, bulk_load) adds its bytes as they land; expect_tx tells
// the barrier how many bytes to wait for, before or after they land.
//
// A thread waits for a phase by its parity: mbarrier_wait_parity(bar, p) returns once the
// phase with parity p has completed. A consumer waiting for phase k passes k & 1; a producer
// waiting for a stage to be released starts with parity 1 (the phase "before" phase 0 counts
// as complete), and flips it each time round the ring.
//
// The emulator lands a copy's bytes only when a waiter polls the barrier after the phase's
// arrivals are in, the latest point the hardware allows: read a destination before its
// phase completes and you read garbage (0xFF), on every schedule. A deadlock names each
// barrier, its phase, the arrivals missing and the bytes expected and arrived.
#pragma once

#include "pa/hopper/smem_window.h"

namespace pa {

// One thread initialises each barrier: `count` arrivals complete a phase (1 to 2^20 - 1).
// Then fence_mbarrier_init() and a __syncthreads() before any other thread uses it.
__device__ inline void mbarrier_init(uint64_t* bar, unsigned count PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::mbarrier_init(bar, count, PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count)
               : "memory");
#else
  __trap();
#endif
}

// Makes the initialisations visible to the other threads (and to the async proxy, which the
// copies completing on the barrier use).
__device__ inline void fence_mbarrier_init(PA_HOPPER_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::fence_mbarrier_init(PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

// An arrival (count of them) on the current phase. Returns the phase's state token.
__device__ inline uint64_t mbarrier_arrive(uint64_t* bar, unsigned count = 1 PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  return ::emu::hopper::mbarrier_arrive(bar, count, 0, false, "mbarrier_arrive", PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  uint64_t state;
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 %0, [%1], %2;\n"
               : "=l"(state) : "r"(smem_address(bar)), "r"(count) : "memory");
  return state;
#else
  __trap();
  return 0;
#endif
}

// expect_tx(bytes), then one arrival: a producer announces the bytes its copies will bring.
__device__ inline uint64_t mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  return ::emu::hopper::mbarrier_arrive(bar, 1, bytes, false, "mbarrier_arrive_expect_tx",
                                        PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  uint64_t state;
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 %0, [%1], %2;\n"
               : "=l"(state) : "r"(smem_address(bar)), "r"(bytes) : "memory");
  return state;
#else
  __trap();
  return 0;
#endif
}

// Adds bytes to the current phase's expected transactions, without arriving.
__device__ inline void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::mbarrier_expect_tx(bar, bytes, PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n"
               ::"r"(smem_address(bar)), "r"(bytes) : "memory");
#else
  __trap();
#endif
}

// An arrival on the current phase, and one fewer expected in every later phase: how a thread
// that leaves early (exits, or stops taking part) drops out of the barrier.
__device__ inline uint64_t mbarrier_arrive_drop(uint64_t* bar PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  return ::emu::hopper::mbarrier_arrive(bar, 1, 0, true, "mbarrier_arrive_drop", PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  uint64_t state;
  asm volatile("mbarrier.arrive_drop.release.cta.shared::cta.b64 %0, [%1];\n"
               : "=l"(state) : "r"(smem_address(bar)) : "memory");
  return state;
#else
  __trap();
  return 0;
#endif
}

// Has the phase with this parity completed? May block for a while first (try_wait), and may
// return false even so: call it in a loop, or use mbarrier_wait_parity.
__device__ inline bool mbarrier_try_wait_parity(uint64_t* bar, unsigned parity PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  return ::emu::hopper::mbarrier_wait(bar, parity, false, PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done) : "r"(smem_address(bar)), "r"(parity) : "memory");
  return done != 0;
#else
  __trap();
  return false;
#endif
}

// Returns once the phase with this parity has completed; what the phase's arrivals wrote
// before arriving, and the bytes its copies brought, are visible after it.
__device__ inline void mbarrier_wait_parity(uint64_t* bar, unsigned parity PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::mbarrier_wait(bar, parity, true, PA_HOPPER_AT_);
#else
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
#endif
}

}  // namespace pa
