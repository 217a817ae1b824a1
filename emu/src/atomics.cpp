// Checked mode's atomics and fences. On a GPU an atomic orders only its own word; what a
// block wrote before it reaches another block through fences: a __threadfence between the
// writes and the atomic in the writer (a release), and one between the atomic and the reads
// in the reader (an acquire). So here the atomic instructions run where ThreadSanitizer does
// not see them (this file is not instrumented), and the fences do the ordering, through one
// synchronisation object that every fence of the launch shares:
//   - every __threadfence releases into it what its thread has done so far;
//   - a __threadfence acquires from it when an atomic of its block came since the thread's
//     last fence (the atomic that saw the count, then the fence: the reader's side). Thread
//     0 takes the ticket, __syncthreads, every thread fences: each of them acquires.
// A writer that skips its fence never hands its writes over; a reader that skips its fence
// never takes them: either way the reads race with the writes, and the race report names
// both lines. (The model is coarse: an acquire orders after every fence before it, whichever
// atomic the reader saw. What it cannot miss is a missing fence.)
#include "emu/cuda_emu.h"

#if defined(PA_EMU_CHECK)
#include "block.h"
#include "race_check.h"

namespace emu::detail {
namespace {
char g_fence;  // the one object every __threadfence releases and acquires
}

uint64_t atomic_load_bits(const void* p, int bytes) {
  return bytes == 4 ? __atomic_load_n(static_cast<const uint32_t*>(p), __ATOMIC_RELAXED)
                    : __atomic_load_n(static_cast<const uint64_t*>(p), __ATOMIC_RELAXED);
}

bool atomic_cas_bits(void* p, uint64_t* expected, uint64_t desired, int bytes) {
  if (Block* b = current_block()) b->note_atomic();
  if (bytes == 8)
    return __atomic_compare_exchange_n(static_cast<uint64_t*>(p), expected, desired, false,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  uint32_t e = uint32_t(*expected);
  const bool ok = __atomic_compare_exchange_n(static_cast<uint32_t*>(p), &e, uint32_t(desired),
                                              false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  *expected = e;
  return ok;
}

void threadfence() {
  race::release(&g_fence);
  Block* b = current_block();
  if (!b || b->atomic_since_fence()) race::acquire(&g_fence);
}

void threadfence_block() {  // orders the threads of one block: the block's own object
  Block* b = current_block();
  const void* token = b ? b->fence_token() : &g_fence;
  race::release(token);
  race::acquire(token);
}

}  // namespace emu::detail
#endif
