// Checked mode (cmake -DPA_EMU_CHECK=ON, `make check-chapter-N`): kernel code is built
// with ThreadSanitizer, and the emulator tells it what a GPU guarantees. Each CUDA thread
// is a TSan fiber; the scheduler switches fibers *without* synchronising them, so only
// the CUDA primitives order memory:
//   __syncthreads      every thread releases the block's barrier token, then acquires it
//   shuffles, votes,   every lane of the group releases its warp's token, then acquires it
//   __syncwarp
//   atomics, fences    instrumented directly (they are inline in kernel code)
// A plain load or store that no such edge orders against another thread's store is a data
// race, and TSan reports it; race_report.cpp turns that report into the course's words.
//
// Emulator code itself is not instrumented (only kernels and tests are), so its own
// bookkeeping never shows up. In a plain build every function here is a no-op.
#pragma once

#include <string>

namespace emu::race {

#if defined(PA_EMU_CHECK)
constexpr bool kEnabled = true;
void* current_fiber();
void* create_fiber();
void destroy_fiber(void* fiber);
void set_fiber_name(void* fiber, const char* name);
void switch_to(void* fiber);  // right before the real stack switch, never synchronising
void acquire(const void* token);
void release(const void* token);
// Emulator code that runs on a fiber (barriers, shuffles) holds one of these: TSan still
// sees the heap and memcpy calls of uninstrumented code, and they are not the kernel's.
struct Quiet {
  Quiet();
  ~Quiet();
};
#else
constexpr bool kEnabled = false;
struct Quiet {};
inline void* current_fiber() { return nullptr; }
inline void* create_fiber() { return nullptr; }
inline void destroy_fiber(void*) {}
inline void set_fiber_name(void*, const char*) {}
inline void switch_to(void*) {}
inline void acquire(const void*) {}
inline void release(const void*) {}
#endif

// Sends TSan's reports to our file (once per process; the first launch calls it).
void start_reporting();

// After a launch: the races found while it ran, in the course's words ("" if none).
// Also used by the tests of the emulator.
std::string take_report(const void* kernel);
// The same from a piece of ThreadSanitizer's log (`live`: pair it with the barrier
// intervals recorded while the launch ran; tests of the wording pass false).
std::string report_from_log(const std::string& tsan_log, const std::string& kernel, bool live);

}  // namespace emu::race
