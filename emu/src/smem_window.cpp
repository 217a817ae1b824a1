// The shared-memory window: the 32-bit shared addresses that __cvta_generic_to_shared gives
// on a GPU. Hopper's asynchronous units (TMA, mbarrier, wgmma's descriptors) take these
// addresses, and TMA's swizzle and wgmma's descriptors are defined on their bits, so the
// emulator gives each block's dynamic shared memory real, aligned ones: it starts at
// 0x400 (Hopper reserves a block's first 1 KB), on a 1,024-byte boundary in host memory
// too, so that a pointer's low ten bits are its shared address's. Static __shared__ arrays
// live in each worker's thread-local storage and have no address in the window: a Hopper
// wrapper that is given one says so.
#include <cstdio>
#include <cstring>
#include <vector>
#include <string>

#include "block.h"
#include "crash_report.h"
#include "hopper.h"
#include "memory_map.h"
#include "race_check.h"

namespace emu {
namespace {
thread_local SharedWindow tl_window;
thread_local std::vector<char> tl_view;  // the async proxy's view (empty: not made yet)

char* view_of(const char* p) {
  if (tl_view.size() != tl_window.bytes) tl_view.assign(tl_window.bytes, char(0xFF));
  return tl_view.data() + (p - tl_window.lo);
}
}  // namespace

SharedWindow& shared_window() { return tl_window; }
void set_shared_window(void* dynamic, size_t bytes) {
  tl_window.lo = static_cast<char*>(dynamic);
  tl_window.bytes = bytes;
  tl_view.clear();
}

void async_view_fence() {
  if (tl_window.bytes) std::memcpy(view_of(tl_window.lo), tl_window.lo, tl_window.bytes);
}
void async_view_landed(const char* p, size_t n) { std::memcpy(view_of(p), p, n); }
void async_view_poison(const char* p, size_t n) { std::memset(view_of(p), 0xFF, n); }

void async_read(const char* p, const char* at_issue, size_t n, char* out) {
  const char* v = view_of(p);
  for (size_t i = 0; i < n; ++i) out[i] = p[i] != at_issue[i] ? p[i] : v[i];
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
