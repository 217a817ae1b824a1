// Device memory and dynamic shared memory on the CPU, with the bookkeeping that lets the
// emulator say which buffer an address belongs to.
#include "memory_map.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

namespace emu {
namespace {

#if defined(PA_EMU_CHECK)
constexpr bool kGuarded = true;
#else
constexpr bool kGuarded = false;
#endif

struct Allocation {
  size_t bytes;
  char* mapping;  // checked mode: the whole mapping, guard page included
  size_t mapping_bytes;
};
std::mutex g_mutex;
std::map<uintptr_t, Allocation> g_allocs;  // start -> allocation
struct Range {
  uintptr_t start;
  size_t bytes;
};
std::vector<Range> g_shared;  // every worker's dynamic shared memory buffer

size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A buffer of `bytes` (rounded up to 16, the widest access) that ends exactly where an
// inaccessible page begins.
char* guarded_map(size_t bytes, char** mapping, size_t* mapping_bytes) {
  const size_t page = page_size();
  const size_t data = round_up(round_up(bytes ? bytes : 16, 16), page);
  void* m = mmap(nullptr, data + page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  char* base = static_cast<char*>(m);
  mprotect(base + data, page, PROT_NONE);
  *mapping = base;
  *mapping_bytes = data + page;
  return base + data - round_up(bytes ? bytes : 16, 16);
}

const std::pair<const uintptr_t, Allocation>* find_near(uintptr_t a) {
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  return &*it;
}

}  // namespace

void* device_alloc(size_t bytes) {
  Allocation a{bytes, nullptr, 0};
  char* p;
  if (kGuarded) {
    p = guarded_map(bytes, &a.mapping, &a.mapping_bytes);
  } else {
    p = static_cast<char*>(std::aligned_alloc(256, round_up(bytes ? bytes : 256, 256)));
  }
  if (!p) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_allocs[uintptr_t(p)] = a;
  return p;
}

bool device_free(void* p) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_allocs.find(uintptr_t(p));
    if (it == g_allocs.end()) return false;
    a = it->second;
    g_allocs.erase(it);
  }
  if (a.mapping) munmap(a.mapping, a.mapping_bytes);
  else std::free(p);
  return true;
}

std::string check_device_range(const void* p, size_t n, const char* role) {
  const uintptr_t c = uintptr_t(p);
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto* near = find_near(c);
  if (!near) return std::string(role) + " is not device memory";
  const size_t offset = size_t(c - near->first), size = near->second.bytes;
  if (offset >= size && !(offset == size && n == 0))
    return std::string(role) + " is not device memory";
  if (offset + n > size)
    return std::string(role) + " range of " + std::to_string(n) + " bytes at offset " +
           std::to_string(offset) + " overruns its allocation of " + std::to_string(size) +
           " bytes";
  return "";
}

void* dynamic_shared_buffer(size_t bytes) {
  // One buffer per worker, grown when a launch asks for more; real shared memory starts as
  // garbage, so it is poisoned with 0xFF (NaN in every float type) for each block.
  thread_local char* buffer = nullptr;
  thread_local size_t capacity = 0;
  thread_local std::vector<char> plain;
  thread_local char* mapping = nullptr;
  thread_local size_t mapping_bytes = 0;
  if (!kGuarded) {
    plain.assign(bytes, char(0xFF));
    return plain.data();
  }
  if (bytes != capacity || !buffer) {
    if (mapping) {
      munmap(mapping, mapping_bytes);
      std::lock_guard<std::mutex> lock(g_mutex);
      for (Range& r : g_shared)
        if (r.start == uintptr_t(buffer)) r = g_shared.back(), g_shared.pop_back();
    }
    buffer = guarded_map(bytes, &mapping, &mapping_bytes);
    capacity = bytes;
    std::lock_guard<std::mutex> lock(g_mutex);
    g_shared.push_back(Range{uintptr_t(buffer), bytes});
  }
  std::fill(buffer, buffer + round_up(bytes ? bytes : 16, 16), char(0xFF));
  return buffer;
}

std::string describe_address(uintptr_t a, const std::string& tsan_location) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (const auto* near = find_near(a); near && a - near->first < near->second.bytes)
      return "global memory (byte " + std::to_string(a - near->first) + " of a " +
             std::to_string(near->second.bytes) + "-byte device allocation)";
    for (const Range& r : g_shared)
      if (a >= r.start && a - r.start < r.bytes)
        return "dynamic shared memory (byte " + std::to_string(a - r.start) + " of " +
               std::to_string(r.bytes) + ")";
  }
  if (tsan_location.find("TLS") != std::string::npos)
    return "__shared__ memory (a static __shared__ array of the block)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "memory at %#lx", static_cast<unsigned long>(a));
  return buf;
}

std::string describe_fault(uintptr_t a) {
  // No lock: the process is dying, and the faulting thread may hold it.
  for (const Range& r : g_shared)
    if (a >= r.start + r.bytes && a < r.start + round_up(r.bytes, page_size()) + page_size())
      return "dynamic shared memory: byte " + std::to_string(a - r.start) +
             " of a block's " + std::to_string(r.bytes) + " bytes, " +
             std::to_string(a - r.start - r.bytes) + " bytes past the end";
  if (const auto* near = find_near(a)) {
    const uintptr_t end = near->first + near->second.bytes;
    if (a >= end && a < end + page_size() + 16)
      return "global memory: " + std::to_string(a - end) + " bytes past the end of a " +
             std::to_string(near->second.bytes) + "-byte device allocation (cudaMalloc)";
  }
  return "";
}

}  // namespace emu
