// The shared-memory window: the 32-bit shared addresses that __cvta_generic_to_shared gives
// on a GPU. Hopper's asynchronous units (TMA, mbarrier, wgmma's descriptors) take these
// addresses, and TMA's swizzle and wgmma's descriptors are defined on their bits, so the
// emulator gives each block's dynamic shared memory real, aligned ones: it starts at
// 0x400 (Hopper reserves a block's first 1 KB), on a 1,024-byte boundary in host memory
// too, so that a pointer's low ten bits are its shared address's. Static __shared__ arrays
// live in each worker's thread-local storage and have no address in the window: a Hopper
// wrapper that is given one says so.
#include <cstdio>
#include <string>

#include "block.h"
#include "crash_report.h"
#include "hopper.h"
#include "memory_map.h"
#include "race_check.h"

namespace emu {
namespace {
thread_local SharedWindow tl_window;
}

SharedWindow& shared_window() { return tl_window; }
void set_shared_window(void* dynamic, size_t bytes) {
  tl_window.lo = static_cast<char*>(dynamic);
  tl_window.bytes = bytes;
}

std::string place(const Site& s) {
  return course_path(s.file ? s.file : "?") + ":" + std::to_string(s.line);
}

std::string hex_address(uint32_t a) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%04x", a);
  return buf;
}

namespace hopper {

uint32_t shared_address(const void* p, const char* what, const char* file, int line) {
  const char* c = static_cast<const char*>(p);
  if (c >= tl_window.lo && c <= tl_window.lo + tl_window.bytes && tl_window.lo)
    return kDynamicSharedBase + uint32_t(c - tl_window.lo);
  race::Quiet quiet;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%p", p);
  current_block()->fail_here(
      std::string(what) + " at " + place(Site{file, line}) + " was given " + buf +
      ", which is not in the block's dynamic shared memory (" + std::to_string(tl_window.bytes) +
      " bytes): on the emulator, Hopper's copies, barriers and descriptors take shared "
      "addresses only there. A static __shared__ array has none: carve the buffer, and its "
      "mbarriers, from PA_DYNAMIC_SHARED.");
}

void* shared_pointer(uint32_t a, const char* what, const char* file, int line) {
  if (a >= kDynamicSharedBase && a - kDynamicSharedBase <= tl_window.bytes && tl_window.lo)
    return tl_window.lo + (a - kDynamicSharedBase);
  race::Quiet quiet;
  current_block()->fail_here(std::string(what) + " at " + place(Site{file, line}) +
                             ": shared address " + hex_address(a) +
                             " is outside the block's dynamic shared memory (" +
                             hex_address(kDynamicSharedBase) + " to " +
                             hex_address(uint32_t(kDynamicSharedBase + tl_window.bytes)) + ")");
}

}  // namespace hopper
}  // namespace emu

namespace pa::detail {
// pa/hopper/tma.h: the encoder's "extent larger than its allocation" check on the emulator.
size_t allocation_bytes_after(const void* p) { return emu::device_bytes_after(p); }
}  // namespace pa::detail
